//! Per-rule HTTP counters: which counter slot each HTTP rule counts in, kept across
//! reloads, and the rows `sluice ctl stats` shows (requests routed to the rule, and the
//! responses that answered them by status class).
//!
//! Each worker counts into its own fixed array of slots ([`RuleCounters`], allocated
//! when the worker starts and shared with the control thread); a rule's slot is in its
//! compiled entry (`HttpRule::counter`). [`RuleRegistry`] lives with the
//! [`Reloader`](crate::reload::Reloader) on the control thread and gives the slots, by
//! rule name, before a generation is published:
//!
//! - a rule keeps the slot of its name (`HTTPRoute ns/name rules[i]`,
//!   `VirtualService ns/name http[i]`, with the rule's own name if it has one) for as
//!   long as each generation has it, so its counts go on across reloads; rules of one
//!   name in several routes (an HTTPRoute on two hostnames or listeners) share it;
//! - a name new to the registry takes a never-used slot; once none is left, the slot
//!   that a rule gone in an earlier reload freed longest ago, and the slot's counts at
//!   that moment become the baseline its rows subtract. Never a slot freed by the same
//!   reload: responses to a removed rule's last requests (in flight across the reload)
//!   still land in its old slot and vanish in the baseline, unless they come after the
//!   next reload reused it;
//! - when every slot is in use, the remaining rules count together in
//!   [`OVERFLOW_SLOT`] (the row [`OVERFLOW_RULE`]) and the reload warns; they get
//!   slots of their own at a later reload once some are free.
//!
//! The rows ([`RuleSlots::rows`]) are the rules of the serving generation, summed over
//! the workers: a rule that a reload removed is no longer shown.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{json, Value};
use sluice_dataplane::stats::{RuleCounters, RuleCounts, OVERFLOW_SLOT};
use sluice_dataplane::tables::snapshot::Snapshot as Tables;

/// The row of the rules without a slot of their own (every slot in use).
pub const OVERFLOW_RULE: &str = "(overflow)";

/// One rule's counts, summed over the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRow {
    /// The rule's name (`HTTPRoute ns/name rules[i]`, ...), or [`OVERFLOW_RULE`].
    pub rule: String,
    /// Requests routed to it and responses by status class.
    pub counts: RuleCounts,
}

impl RuleRow {
    /// `{rule, requests, responses_1xx, ..., responses_5xx}`, as `sluice ctl stats`
    /// prints it under `http_rules`.
    pub fn to_json(&self) -> Value {
        let [r1, r2, r3, r4, r5] = self.counts.responses;
        json!({
            "rule": self.rule,
            "requests": self.counts.requests,
            "responses_1xx": r1,
            "responses_2xx": r2,
            "responses_3xx": r3,
            "responses_4xx": r4,
            "responses_5xx": r5,
        })
    }
}

/// The slots of the serving generation's rules, sorted by name: what the admin thread
/// needs to read the rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSlots {
    /// (name, slot, the slot's counts when the name took it).
    rules: Vec<(Box<str>, u32, RuleCounts)>,
}

impl RuleSlots {
    /// The slot of rule `name`, if it has one.
    pub fn slot(&self, name: &str) -> Option<u32> {
        self.rules
            .binary_search_by(|(n, _, _)| (**n).cmp(name))
            .ok()
            .and_then(|i| self.rules.get(i))
            .map(|&(_, s, _)| s)
    }

    /// Number of rules with a slot.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule has a slot.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every rule's counts summed over `workers` (each worker's counters), by name; then
    /// [`OVERFLOW_RULE`] if anything was counted there.
    pub fn rows(&self, workers: &[Arc<RuleCounters>]) -> Vec<RuleRow> {
        let mut rows: Vec<RuleRow> = self
            .rules
            .iter()
            .map(|(name, slot, base)| RuleRow {
                rule: name.to_string(),
                counts: sum(workers, *slot).since(base),
            })
            .collect();
        let overflow = sum(workers, OVERFLOW_SLOT);
        if overflow != RuleCounts::default() {
            rows.push(RuleRow {
                rule: OVERFLOW_RULE.to_string(),
                counts: overflow,
            });
        }
        rows
    }
}

/// The counts of `slot` over every worker now.
fn sum(workers: &[Arc<RuleCounters>], slot: u32) -> RuleCounts {
    let mut total = RuleCounts::default();
    for w in workers {
        total.add(&w.get(slot));
    }
    total
}

/// What one [`RuleRegistry::assign`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Assigned {
    /// Distinct rule names in the tables.
    pub rules: usize,
    /// Of those, how many count in [`OVERFLOW_SLOT`] (no slot was free).
    pub overflow: usize,
    /// Slots the registry has, [`OVERFLOW_SLOT`] included.
    pub slots: usize,
}

impl Assigned {
    /// The warning a reload prints when some rules have no slot of their own.
    pub fn warning(&self) -> Option<String> {
        (self.overflow > 0).then(|| {
            format!(
                "{} of {} HTTP rules have no counter slot of their own (all {} are in use): \
                 they count together as {OVERFLOW_RULE:?} until a reload frees slots",
                self.overflow,
                self.rules,
                self.slots.saturating_sub(1)
            )
        })
    }
}

/// Rule name -> counter slot, kept by the control thread across reloads (see the module
/// docs).
#[derive(Debug)]
pub struct RuleRegistry {
    /// Slots per worker, [`OVERFLOW_SLOT`] included.
    slots: u32,
    by_name: HashMap<Box<str>, u32>,
    /// Per slot: its counts when its current rule took it.
    baselines: Vec<RuleCounts>,
    /// The next never-used slot.
    fresh: u32,
    /// Slots freed by earlier reloads, the oldest first.
    free: VecDeque<u32>,
    /// The workers' counters (for baselines); none until the workers start.
    workers: Vec<Arc<RuleCounters>>,
    /// The serving generation's slots.
    view: Arc<RuleSlots>,
}

impl RuleRegistry {
    /// A registry of `slots` slots per worker ([`OVERFLOW_SLOT`] among them): the
    /// workers' [`RuleCounters`] have as many.
    pub fn new(slots: usize) -> RuleRegistry {
        let slots = u32::try_from(slots).unwrap_or(u32::MAX).max(1);
        RuleRegistry {
            slots,
            by_name: HashMap::new(),
            baselines: vec![RuleCounts::default(); slots as usize],
            fresh: OVERFLOW_SLOT + 1,
            free: VecDeque::new(),
            workers: Vec::new(),
            view: Arc::default(),
        }
    }

    /// The workers' counters, once they run (a reused slot's baseline is read there).
    pub fn count_with(&mut self, workers: Vec<Arc<RuleCounters>>) {
        self.workers = workers;
    }

    /// The workers' counters given to [`RuleRegistry::count_with`].
    pub fn workers(&self) -> &[Arc<RuleCounters>] {
        &self.workers
    }

    /// Gives every HTTP rule of `tables` (about to be published) its slot: its name's
    /// slot, a free one, or [`OVERFLOW_SLOT`]; forgets the names the tables no longer
    /// have (their slots are free from the next call on).
    pub fn assign(&mut self, tables: &mut Tables) -> Assigned {
        // The tables' rule names, each once, in table order (a stable slot order).
        let mut names: Vec<Box<str>> = Vec::new();
        {
            let mut seen = HashSet::new();
            for rule in tables
                .listeners
                .routes()
                .iter()
                .flat_map(|r| r.http.rules.iter())
            {
                if seen.insert(&*rule.name) {
                    names.push(rule.name.clone());
                }
            }
        }
        let mut overflow = 0;
        for name in &names {
            if self.by_name.contains_key(name) {
                continue;
            }
            match self.take_slot() {
                Some(slot) => {
                    self.by_name.insert(name.clone(), slot);
                }
                None => overflow += 1,
            }
        }
        let present: HashSet<&str> = names.iter().map(|n| &**n).collect();
        let mut gone: Vec<(u32, Box<str>)> = self
            .by_name
            .iter()
            .filter(|(n, _)| !present.contains(&***n))
            .map(|(n, &s)| (s, n.clone()))
            .collect();
        gone.sort();
        for (slot, name) in gone {
            self.by_name.remove(&name);
            self.free.push_back(slot);
        }
        let by_name = &self.by_name;
        tables
            .listeners
            .set_rule_counters(|name| by_name.get(name).copied().unwrap_or(OVERFLOW_SLOT));
        let mut rules: Vec<(Box<str>, u32, RuleCounts)> = self
            .by_name
            .iter()
            .map(|(n, &s)| {
                let base = self.baselines.get(s as usize).copied().unwrap_or_default();
                (n.clone(), s, base)
            })
            .collect();
        rules.sort_by(|a, b| a.0.cmp(&b.0));
        self.view = Arc::new(RuleSlots { rules });
        Assigned {
            rules: names.len(),
            overflow,
            slots: self.slots as usize,
        }
    }

    /// A never-used slot, else the one freed longest ago (its counts now its baseline).
    fn take_slot(&mut self) -> Option<u32> {
        let slot = if self.fresh < self.slots {
            self.fresh += 1;
            self.fresh - 1
        } else {
            self.free.pop_front()?
        };
        let base = sum(&self.workers, slot);
        if let Some(b) = self.baselines.get_mut(slot as usize) {
            *b = base;
        }
        Some(slot)
    }

    /// The serving generation's slots (for [`RuleSlots::rows`]).
    pub fn slots(&self) -> Arc<RuleSlots> {
        self.view.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::build;
    use crate::load::{load_str, Loaded};

    /// The tables of an HTTPRoute `name` on a Gateway listener, with `rules` rules (each a
    /// direct response).
    fn tables(routes: &[(&str, usize)]) -> Tables {
        let mut text = String::from(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: t}
spec:
  gatewayClassName: sluice
  listeners: [{name: web, port: 8000, protocol: HTTP}]
",
        );
        for (name, n) in routes {
            text.push_str(&format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: t}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{name}.example.test]
  rules:
"
            ));
            for i in 0..*n {
                text.push_str(&format!(
                    "  - matches: [{{path: {{type: PathPrefix, value: /r{i}}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{hostname: x{i}.example.test}}}}]
"
                ));
            }
        }
        let mut loaded = Loaded::default();
        load_str("t.yaml", &text, &mut loaded);
        build(loaded)
            .unwrap_or_else(|d| panic!("rejected: {:#?}", d.error_lines()))
            .snapshot
    }

    fn counters_of(t: &Tables) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = t
            .listeners
            .routes()
            .iter()
            .flat_map(|r| r.http.rules.iter())
            .map(|r| (r.name.to_string(), r.counter))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Kept names keep their slots and counts across an assignment; a removed name's row
    /// goes; a new name takes a never-used slot while there is one.
    #[test]
    fn names_keep_their_slots_across_reloads() {
        let worker = Arc::new(RuleCounters::new(8));
        let mut reg = RuleRegistry::new(8);
        reg.count_with(vec![worker.clone()]);
        let mut t = tables(&[("a", 2), ("b", 1)]);
        let got = reg.assign(&mut t);
        assert_eq!(
            got,
            Assigned {
                rules: 3,
                overflow: 0,
                slots: 8
            }
        );
        assert_eq!(got.warning(), None);
        let slots = counters_of(&t);
        assert_eq!(
            slots,
            [
                ("HTTPRoute t/a rules[0]".to_string(), 1),
                ("HTTPRoute t/a rules[1]".to_string(), 2),
                ("HTTPRoute t/b rules[0]".to_string(), 3),
            ]
        );
        let view = reg.slots();
        assert_eq!(view.len(), 3);
        assert_eq!(view.slot("HTTPRoute t/a rules[1]"), Some(2));
        assert_eq!(view.slot("HTTPRoute t/c rules[0]"), None);
        worker.request(1);
        worker.response(1, 301);
        worker.request(3);
        worker.response(3, 404);
        let rows = view.rows(std::slice::from_ref(&worker));
        assert_eq!(rows.len(), 3, "every rule, counted or not: {rows:?}");
        assert_eq!(rows[0].counts.requests, 1);
        assert_eq!(rows[0].counts.responses, [0, 0, 1, 0, 0]);
        assert_eq!(rows[1].counts, RuleCounts::default());
        assert_eq!(
            rows[0].to_json(),
            json!({"rule": "HTTPRoute t/a rules[0]", "requests": 1, "responses_1xx": 0,
                   "responses_2xx": 0, "responses_3xx": 1, "responses_4xx": 0,
                   "responses_5xx": 0})
        );

        // b goes, c comes: a keeps slots 1 and 2 and its counts, c takes slot 4 (never
        // used) rather than b's.
        let mut t = tables(&[("a", 2), ("c", 1)]);
        reg.assign(&mut t);
        assert_eq!(
            counters_of(&t),
            [
                ("HTTPRoute t/a rules[0]".to_string(), 1),
                ("HTTPRoute t/a rules[1]".to_string(), 2),
                ("HTTPRoute t/c rules[0]".to_string(), 4),
            ]
        );
        worker.request(1);
        let rows = reg.slots().rows(std::slice::from_ref(&worker));
        let names: Vec<&str> = rows.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(
            names,
            [
                "HTTPRoute t/a rules[0]",
                "HTTPRoute t/a rules[1]",
                "HTTPRoute t/c rules[0]"
            ]
        );
        assert_eq!(rows[0].counts.requests, 2, "counted on across the reload");
        assert_eq!(rows[2].counts, RuleCounts::default());
    }

    /// With every slot taken, new rules count in the overflow slot (and the reload
    /// warns); a slot freed by a reload is reused from the next one on, its old counts
    /// subtracted.
    #[test]
    fn full_registries_overflow_and_reuse_freed_slots_from_their_baseline() {
        let worker = Arc::new(RuleCounters::new(4));
        let mut reg = RuleRegistry::new(4);
        reg.count_with(vec![worker.clone()]);
        let mut t = tables(&[("a", 3), ("b", 1)]);
        let got = reg.assign(&mut t);
        assert_eq!((got.rules, got.overflow), (4, 1));
        let warning = got.warning().expect("a warning");
        assert!(
            warning.starts_with("1 of 4 HTTP rules have no counter slot of their own (all 3"),
            "{warning}"
        );
        assert_eq!(
            counters_of(&t),
            [
                ("HTTPRoute t/a rules[0]".to_string(), 1),
                ("HTTPRoute t/a rules[1]".to_string(), 2),
                ("HTTPRoute t/a rules[2]".to_string(), 3),
                ("HTTPRoute t/b rules[0]".to_string(), OVERFLOW_SLOT),
            ]
        );
        for _ in 0..5 {
            worker.request(3);
            worker.response(3, 200);
        }
        worker.request(OVERFLOW_SLOT);
        let rows = reg.slots().rows(std::slice::from_ref(&worker));
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[3].rule, OVERFLOW_RULE);
        assert_eq!(rows[3].counts.requests, 1);

        // a loses rules[2]: its slot is free, but not for this reload; b still overflows.
        let mut t = tables(&[("a", 2), ("b", 1)]);
        let got = reg.assign(&mut t);
        assert_eq!(got.overflow, 1);
        // A late response to a request of the removed rule still counts in its slot.
        worker.response(3, 200);
        // The next reload gives b the freed slot, from its counts then.
        let got = reg.assign(&mut t);
        assert_eq!(got.overflow, 0);
        assert_eq!(reg.slots().slot("HTTPRoute t/b rules[0]"), Some(3));
        assert_eq!(
            counters_of(&t)[2],
            ("HTTPRoute t/b rules[0]".to_string(), 3)
        );
        worker.request(3);
        worker.response(3, 503);
        let rows = reg.slots().rows(std::slice::from_ref(&worker));
        let b = rows
            .iter()
            .find(|r| r.rule == "HTTPRoute t/b rules[0]")
            .expect("b");
        assert_eq!(
            b.counts,
            RuleCounts {
                requests: 1,
                responses: [0, 0, 0, 0, 1]
            },
            "only what b counted"
        );
    }

    /// Counts of every worker add up; a registry without workers still gives slots.
    #[test]
    fn rows_sum_the_workers() {
        let w: Vec<Arc<RuleCounters>> = (0..3).map(|_| Arc::new(RuleCounters::new(4))).collect();
        let mut reg = RuleRegistry::new(4);
        let mut t = tables(&[("a", 1)]);
        reg.assign(&mut t);
        for (i, c) in w.iter().enumerate() {
            for _ in 0..=i {
                c.request(1);
                c.response(1, 204);
            }
        }
        let rows = reg.slots().rows(&w);
        assert_eq!(
            rows,
            [RuleRow {
                rule: "HTTPRoute t/a rules[0]".into(),
                counts: RuleCounts {
                    requests: 6,
                    responses: [0, 6, 0, 0, 0]
                }
            }]
        );
        assert!(reg.workers().is_empty());
    }
}
