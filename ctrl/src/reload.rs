//! Reloads (DESIGN.md §4): re-load, validate and compile the configuration, build the
//! tables, and publish them as a new generation — or keep the running tables.
//!
//! [`Reloader`] owns the [`Publisher`] of the running instance and lives on the control
//! thread; workers only ever see the published pointer, so nothing here can block them.
//! Each attempt ([`Reloader::reload`]) ends in one [`ReloadOutcome`]:
//!
//! - the configuration fails to load, validate, compile or build (a table over its cap):
//!   rejected whole, every error reported with `file:line`; the running generation stays;
//! - the Appliance changed in a part that is fixed at start ([`fixed_changes`]: ports,
//!   cores, routes, virtual addresses, EAL arguments, the flow-table size, the admin
//!   socket): refused, with a message that a restart is needed; the running generation
//!   stays;
//! - otherwise the new tables are published (a new generation, even when nothing
//!   changed: an explicit reload always takes effect, and flows re-check their policy
//!   against it). Gateway listener addresses served on a port's network
//!   ([`crate::compile::addresses`]) are in the tables, so adding or removing one is
//!   live: the first worker announces the new ones. Old generations are freed on the control thread once every worker has
//!   moved past them ([`Reloader::reclaim`]).
//!
//! Before a generation is published, its HTTP rules get their counter slots from the
//! [`RuleRegistry`] the reloader keeps (a rule keeps its slot, and so its counts, for
//! as long as its name stays: [`crate::rule_counters`]).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use sluice_dataplane::rcu::{Publisher, Reader};
use sluice_dataplane::stats::{RuleCounters, RULE_SLOTS};
use sluice_dataplane::tables::snapshot::Snapshot as Tables;

use crate::compile::addresses::ServedAddress;
use crate::compile::{build_paths, Built};
use crate::model::appliance::ApplianceSpec;
use crate::rule_counters::{Assigned, RuleRegistry, RuleSlots};
use crate::sources::Trigger;

/// Loads `paths` and [`crate::compile::build()`]s them; errors are printable lines
/// (`file:line:col: Kind ns/name: field.path: message` where a place is known).
pub fn prepare(paths: &[PathBuf]) -> Result<Built, Vec<String>> {
    build_paths(paths).map_err(|d| d.error_lines())
}

/// The parts of an Appliance that cannot change while sluice runs, as `spec.*` field
/// names, that differ between `old` and `new` (an Appliance added or removed counts as
/// every part changing). `maglevTableSize` and the table caps in `limits` (other than
/// `flowsPerWorker` and the per-source limits, which the workers take at start) only
/// shape the tables, so they may change live.
pub fn fixed_changes(
    old: Option<&ApplianceSpec>,
    new: Option<&ApplianceSpec>,
) -> Vec<&'static str> {
    match (old, new) {
        (None, None) => Vec::new(),
        (Some(_), None) | (None, Some(_)) => vec!["the whole Appliance"],
        (Some(a), Some(b)) => {
            let mut v = Vec::new();
            let mut check = |differs: bool, name| {
                if differs {
                    v.push(name);
                }
            };
            check(a.ports != b.ports, "spec.ports");
            check(a.cores != b.cores, "spec.cores");
            check(a.routes != b.routes, "spec.routes");
            check(
                a.virtual_addresses != b.virtual_addresses,
                "spec.virtualAddresses",
            );
            check(a.eal != b.eal, "spec.eal");
            check(
                a.limits.flows_per_worker != b.limits.flows_per_worker,
                "spec.limits.flowsPerWorker",
            );
            check(
                a.limits.new_connections_per_second_per_source
                    != b.limits.new_connections_per_second_per_source,
                "spec.limits.newConnectionsPerSecondPerSource",
            );
            check(
                a.limits.embryos_per_source != b.limits.embryos_per_source,
                "spec.limits.embryosPerSource",
            );
            check(a.admin != b.admin, "spec.admin");
            check(a.conntrack != b.conntrack, "spec.conntrack");
            check(
                a.delayed_binding != b.delayed_binding,
                "spec.delayedBinding",
            );
            v
        }
    }
}

/// The result of one reload attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// What asked for it.
    pub trigger: Trigger,
    /// When it finished.
    pub at: SystemTime,
    /// How long it took (load, validate, compile, build, publish).
    pub took: Duration,
    /// Whether new tables were published.
    pub ok: bool,
    /// The generation serving after the attempt (the new one, or the unchanged one).
    pub generation: u64,
    /// Why the configuration was rejected (empty when `ok`).
    pub errors: Vec<String>,
    /// What the published configuration leaves out, and why (empty when not `ok`).
    pub not_served: Vec<String>,
}

impl ReloadOutcome {
    /// The JSON `sluice ctl reload` prints, and `last_reload` of `sluice ctl status`.
    pub fn to_json(&self) -> Value {
        let unix = self
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        json!({
            "ok": self.ok,
            "generation": self.generation,
            "errors": self.errors,
            "not_served": self.not_served,
            "trigger": self.trigger.name(),
            "time": rfc3339(unix),
            "unix_time": unix.as_secs_f64(),
            "took_ms": self.took.as_secs_f64() * 1e3,
        })
    }
}

/// What `sluice ctl status` reports about reloads, copied out of the [`Reloader`] for the
/// admin thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// The generation serving.
    pub generation: u64,
    /// The configuration paths.
    pub paths: Vec<PathBuf>,
    /// Retired generations not yet freed (a worker may still hold them).
    pub pending: usize,
    /// The last attempt, if any.
    pub last: Option<ReloadOutcome>,
    /// Attempts that published new tables.
    pub succeeded: u64,
    /// Attempts that were rejected.
    pub failed: u64,
    /// What the serving configuration leaves out, and why.
    pub not_served: Vec<String>,
    /// The Gateway API status of the serving configuration's Gateways and routes.
    pub objects: Value,
    /// The listener addresses the serving generation answers ARP/ND for.
    pub addresses: Vec<ServedAddress>,
    /// The counter slots of the serving generation's HTTP rules.
    pub rules: std::sync::Arc<RuleSlots>,
}

/// Reloads the configuration and publishes its tables; see the module docs.
#[derive(Debug)]
pub struct Reloader {
    paths: Vec<PathBuf>,
    appliance: Option<ApplianceSpec>,
    publisher: Publisher<Tables>,
    /// The serving generation's served listener addresses, with their owners.
    addresses: Vec<ServedAddress>,
    last: Option<ReloadOutcome>,
    succeeded: u64,
    failed: u64,
    not_served: Vec<String>,
    status: Value,
    /// HTTP rule name -> counter slot, across reloads.
    rules: RuleRegistry,
}

impl Reloader {
    /// Starts serving `first` (generation 1), with room for `readers` workers; later
    /// reloads read `paths` again.
    pub fn new(paths: Vec<PathBuf>, mut first: Built, readers: usize) -> Reloader {
        let mut rules = RuleRegistry::new(RULE_SLOTS);
        warn_rules("start", rules.assign(&mut first.snapshot));
        Reloader {
            rules,
            paths,
            not_served: first.not_served().map(ToString::to_string).collect(),
            status: first.status_json(),
            appliance: first.ir.appliance,
            addresses: first.addresses,
            publisher: Publisher::new(first.snapshot, readers),
            last: None,
            succeeded: 0,
            failed: 0,
        }
    }

    /// A reader for one worker; `None` when every slot is taken.
    pub fn reader(&self) -> Option<Reader<Tables>> {
        self.publisher.reader()
    }

    /// The generation serving.
    pub fn generation(&self) -> u64 {
        self.publisher.generation()
    }

    /// The tables serving.
    pub fn current(&self) -> &Tables {
        self.publisher.current()
    }

    /// Reads the workers' HTTP rule counters (one per worker, [`RULE_SLOTS`] slots
    /// each) when a reload reuses a slot that a removed rule left.
    pub fn count_rules_with(&mut self, workers: Vec<std::sync::Arc<RuleCounters>>) {
        self.rules.count_with(workers);
    }

    /// The last attempt, if any.
    pub fn last(&self) -> Option<&ReloadOutcome> {
        self.last.as_ref()
    }

    /// Frees the retired generations no worker can still hold; returns how many wait.
    pub fn reclaim(&mut self) -> usize {
        self.publisher.reclaim()
    }

    /// What `sluice ctl status` shows.
    pub fn status(&self) -> ReloadStatus {
        ReloadStatus {
            generation: self.publisher.generation(),
            paths: self.paths.clone(),
            pending: self.publisher.pending(),
            last: self.last.clone(),
            succeeded: self.succeeded,
            failed: self.failed,
            not_served: self.not_served.clone(),
            objects: self.status.clone(),
            addresses: self.addresses.clone(),
            rules: self.rules.slots(),
        }
    }

    /// One attempt: load, validate, compile, build; publish on success, keep the running
    /// tables otherwise. Errors are also printed to stderr.
    pub fn reload(&mut self, trigger: Trigger) -> ReloadOutcome {
        let t = Instant::now();
        let result = self.attempt();
        let ok = result.is_ok();
        let mut not_served = Vec::new();
        let errors = match result {
            Ok(mut next) => {
                not_served = next.not_served().map(ToString::to_string).collect();
                self.not_served = not_served.clone();
                self.status = next.status_json();
                self.appliance = next.ir.appliance;
                // Served addresses carry the epoch since which each is served, so the
                // first worker announces exactly the new ones.
                next.snapshot
                    .addresses
                    .follow(&self.publisher.current().addresses);
                self.addresses = next.addresses;
                warn_rules(
                    &format!("reload ({trigger})"),
                    self.rules.assign(&mut next.snapshot),
                );
                self.publisher.publish(next.snapshot);
                self.succeeded += 1;
                Vec::new()
            }
            Err(errors) => {
                self.failed += 1;
                errors
            }
        };
        let outcome = ReloadOutcome {
            trigger,
            at: SystemTime::now(),
            took: t.elapsed(),
            ok,
            generation: self.publisher.generation(),
            errors,
            not_served,
        };
        for n in &outcome.not_served {
            eprintln!("sluice: reload ({trigger}): {n}");
        }
        if !ok {
            eprintln!(
                "sluice: reload ({trigger}) rejected; generation {} keeps serving:",
                outcome.generation
            );
            for e in &outcome.errors {
                eprintln!("  {e}");
            }
        }
        self.last = Some(outcome.clone());
        outcome
    }

    fn attempt(&self) -> Result<Built, Vec<String>> {
        if self.paths.iter().any(|p| p.as_os_str() == "-") {
            return Err(vec![
                "the configuration was read from stdin (`-`), which cannot be read again; \
                 give files or directories with -c to reload, or restart sluice"
                    .into(),
            ]);
        }
        let next = prepare(&self.paths)?;
        let changed = fixed_changes(self.appliance.as_ref(), next.ir.appliance.as_ref());
        if !changed.is_empty() {
            return Err(vec![format!(
                "Appliance: {} changed, which cannot be applied while sluice runs (ports, \
                 cores, routes, virtual addresses, EAL arguments, limits.flowsPerWorker, the \
                 per-source limits, conntrack, delayedBinding and the admin socket are fixed \
                 at start); restart sluice to apply it — the \
                 running tables keep serving",
                changed.join(", ")
            )]);
        }
        Ok(next)
    }
}

/// Prints the warning of an assignment of rule counter slots, if it has one.
fn warn_rules(what: &str, assigned: Assigned) {
    if let Some(w) = assigned.warning() {
        eprintln!("sluice: {what}: {w}");
    }
}

/// `2024-05-01T12:34:56.789Z` for a time since the Unix epoch (UTC).
pub fn rfc3339(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::testing::Scratch;
    use sluice_dataplane::tables::listeners::proto;
    use std::path::Path;

    /// The demo configuration copied into a scratch directory, so tests can edit it.
    fn demo_copy() -> Scratch {
        let d = Scratch::new("reload");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo");
        for e in std::fs::read_dir(src).expect("configs/demo") {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name");
            std::fs::copy(&p, d.0.join(name)).expect("copy");
        }
        d
    }

    fn reloader(d: &Scratch) -> Reloader {
        let paths = vec![d.0.clone()];
        let first = prepare(&paths).expect("the demo compiles");
        Reloader::new(paths, first, 2)
    }

    fn edit(d: &Scratch, file: &str, from: &str, to: &str) {
        let p = d.0.join(file);
        let text = std::fs::read_to_string(&p).expect("read");
        assert!(text.contains(from), "{file} contains {from:?}");
        std::fs::write(&p, text.replacen(from, to, 1)).expect("write");
    }

    fn has_listener(t: &Tables, port: u16) -> bool {
        t.listeners
            .lookup("10.77.0.10".parse().expect("ip"), port, proto::TCP)
            .is_some()
    }

    #[test]
    fn a_good_change_publishes_a_new_generation() {
        let d = demo_copy();
        let mut r = reloader(&d);
        let mut worker = r.reader().expect("reader");
        assert_eq!(worker.read().0, 1);
        assert!(has_listener(r.current(), 7000));
        assert!(!has_listener(r.current(), 7001));
        edit(&d, "gateways.yaml", "port: 7000", "port: 7001");

        let o = r.reload(Trigger::File);
        assert!(o.ok, "{:?}", o.errors);
        assert_eq!((o.generation, o.trigger), (2, Trigger::File));
        assert!(o.errors.is_empty());
        let (g, t) = worker.read();
        assert_eq!(g, 2, "the worker sees the new generation at its next read");
        assert!(has_listener(t, 7001));
        assert!(!has_listener(t, 7000));
        assert_eq!(
            r.reclaim(),
            0,
            "generation 1 freed once the worker moved on"
        );

        // An explicit reload of an unchanged configuration still publishes.
        assert_eq!(r.reload(Trigger::Sighup).generation, 3);
        let s = r.status();
        assert_eq!((s.generation, s.succeeded, s.failed), (3, 2, 0));
        assert_eq!(s.pending, 1, "the worker has not read generation 3 yet");
        assert_eq!(s.last.map(|l| l.trigger), Some(Trigger::Sighup));
        worker.read();
        assert_eq!(r.reclaim(), 0);
    }

    #[test]
    fn a_broken_config_is_rejected_and_the_old_generation_stays() {
        let d = demo_copy();
        let mut r = reloader(&d);
        let mut worker = r.reader().expect("reader");
        worker.read();
        edit(&d, "gateways.yaml", "port: 7000", "port: 70000");

        let o = r.reload(Trigger::Ctl);
        assert!(!o.ok);
        assert_eq!(o.generation, 1, "the running generation stays");
        assert_eq!(r.generation(), 1);
        assert!(!o.errors.is_empty());
        let file = d.0.join("gateways.yaml").display().to_string();
        assert!(
            o.errors
                .iter()
                .any(|e| e.starts_with(&format!("{file}:")) && e.contains("70000")),
            "errors name the file and line: {:?}",
            o.errors
        );
        assert!(
            has_listener(r.current(), 7000),
            "the old tables still serve"
        );
        assert_eq!(worker.read().0, 1);
        assert_eq!(r.status().failed, 1);
        assert_eq!(r.last(), Some(&o));

        // YAML that does not parse is rejected the same way.
        std::fs::write(d.0.join("gateways.yaml"), "kind: [unclosed\n").expect("write");
        let o = r.reload(Trigger::File);
        assert!(!o.ok && o.generation == 1, "{o:?}");
        assert!(o.errors.iter().any(|e| e.starts_with(&format!("{file}:"))));

        // Fixing it publishes generation 2.
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo/gateways.yaml"),
            d.0.join("gateways.yaml"),
        )
        .expect("copy");
        let o = r.reload(Trigger::File);
        assert!(o.ok, "{:?}", o.errors);
        assert_eq!(o.generation, 2);
    }

    #[test]
    fn an_appliance_change_is_refused_until_restart() {
        let d = demo_copy();
        let mut r = reloader(&d);
        edit(&d, "appliance.yaml", "cores: [0, 1]", "cores: [0]");
        edit(&d, "appliance.yaml", "tap: {name: sl0}", "tap: {name: sl9}");
        let o = r.reload(Trigger::Sighup);
        assert!(!o.ok);
        assert_eq!(o.generation, 1);
        assert_eq!(o.errors.len(), 1, "{:?}", o.errors);
        let e = &o.errors[0];
        assert!(
            e.contains("spec.ports, spec.cores") && e.contains("restart sluice"),
            "{e}"
        );

        // Back to the running Appliance, with a table-only change (Maglev size): applied.
        edit(&d, "appliance.yaml", "cores: [0]", "cores: [0, 1]");
        edit(&d, "appliance.yaml", "tap: {name: sl9}", "tap: {name: sl0}");
        edit(
            &d,
            "appliance.yaml",
            "maglevTableSize: 65537",
            "maglevTableSize: 251",
        );
        let o = r.reload(Trigger::Sighup);
        assert!(o.ok, "{:?}", o.errors);
        assert_eq!(o.generation, 2);

        // Removing the Appliance is a change too.
        std::fs::remove_file(d.0.join("appliance.yaml")).expect("rm");
        let o = r.reload(Trigger::File);
        assert!(!o.ok);
        assert!(
            o.errors[0].contains("the whole Appliance"),
            "{:?}",
            o.errors
        );
    }

    /// A Gateway's addresses are in the tables: adding, moving and removing one is a
    /// live reload (with the epoch since which each is served carried over, for the
    /// workers' announcements); one no port can serve is rejected at its field.
    #[test]
    fn gateway_addresses_change_live() {
        let d = demo_copy();
        let mut r = reloader(&d);
        assert!(
            r.current().addresses.is_empty(),
            "the demo uses virtualAddresses"
        );
        let gateway = |addrs: &str| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: served, namespace: demo}}
spec:
  gatewayClassName: sluice
  addresses: [{addrs}]
  listeners: [{{name: tcp, port: 9000, protocol: TCP}}]
"
            )
        };
        let served = d.0.join("served.yaml");
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        std::fs::write(&served, gateway("{value: 10.77.0.40}")).expect("write");
        let o = r.reload(Trigger::File);
        assert!(o.ok, "{:?}", o.errors);
        let t = &r.current().addresses;
        assert!(t.on(0, ip("10.77.0.40")), "on port outside");
        assert_eq!((t.epoch(), t.entries()[0].since), (2, 2));
        let s = r.status();
        assert_eq!(s.addresses.len(), 1);
        assert_eq!(s.addresses[0].port, "outside");
        assert_eq!(s.addresses[0].owners, ["Gateway demo/served"]);

        std::fs::write(&served, gateway("{value: 10.77.0.40}, {value: 10.78.0.41}"))
            .expect("write");
        let o = r.reload(Trigger::Ctl);
        assert!(o.ok, "{:?}", o.errors);
        let t = &r.current().addresses;
        let since: Vec<(std::net::IpAddr, u16, u64)> = t
            .entries()
            .iter()
            .map(|e| (e.addr, e.port, e.since))
            .collect();
        assert_eq!(
            since,
            [(ip("10.77.0.40"), 0, 2), (ip("10.78.0.41"), 1, 3)],
            "the kept one keeps its epoch, the new one is new"
        );

        // An address sluice cannot answer for: that Gateway is left out (reported), the
        // rest is published, and its address is no longer served.
        std::fs::write(&served, gateway("{value: 203.0.113.9}")).expect("write");
        let o = r.reload(Trigger::Ctl);
        assert!(o.ok, "{:?}", o.errors);
        assert_eq!(o.generation, 4);
        assert!(
            o.not_served[0].contains("not served (AddressNotUsable): ")
                && o.not_served[0].contains("served.yaml:6:")
                && o.not_served[0].contains("spec.addresses[0].value"),
            "{:?}",
            o.not_served
        );
        assert!(r.current().addresses.is_empty());

        std::fs::remove_file(&served).expect("rm");
        let o = r.reload(Trigger::File);
        assert!(o.ok, "{:?}", o.errors);
        assert!(r.current().addresses.is_empty() && r.status().addresses.is_empty());
    }

    /// HTTP rules keep their counter slots, and so their counts, across reloads by name;
    /// a removed rule leaves the rows; a rejected reload changes nothing.
    #[test]
    fn http_rules_keep_their_counters_across_reloads() {
        let d = demo_copy();
        let extra = |rules: &str| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: extra, namespace: demo}}
spec:
  gatewayClassName: sluice
  listeners: [{{name: web, port: 9080, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: extra, namespace: demo}}
spec:
  parentRefs: [{{name: extra}}]
  rules:
{rules}"
            )
        };
        let api = "  - matches: [{path: {type: PathPrefix, value: /api}}]\n    backendRefs: [{name: web, port: 80}]\n";
        let old =
            "  - filters: [{type: RequestRedirect, requestRedirect: {hostname: new.example}}]\n";
        let file = d.0.join("extra.yaml");
        std::fs::write(&file, extra(&format!("{api}{old}"))).expect("write");
        let mut r = reloader(&d);
        let worker = std::sync::Arc::new(RuleCounters::new(RULE_SLOTS));
        r.count_rules_with(vec![worker.clone()]);
        let (a_name, b_name) = (
            "HTTPRoute demo/extra rules[0]",
            "HTTPRoute demo/extra rules[1]",
        );
        let slots = r.status().rules;
        let a = slots.slot(a_name).expect("rules[0] has a slot");
        let b = slots.slot(b_name).expect("rules[1] has a slot");
        assert!(a != b && a != 0 && b != 0);
        assert!(slots.slot("VirtualService demo/web http[1]").is_some());
        let counter_of = |t: &Tables, name: &str| {
            t.listeners
                .routes()
                .iter()
                .flat_map(|r| r.http.rules.iter())
                .find(|r| &*r.name == name)
                .map(|r| r.counter)
        };
        assert_eq!(counter_of(r.current(), a_name), Some(a));
        assert_eq!(counter_of(r.current(), b_name), Some(b));
        worker.request(a);
        worker.response(a, 200);
        worker.request(b);
        worker.response(b, 302);

        // rules[1] removed: rules[0] keeps its slot and counts, rules[1] leaves the rows.
        std::fs::write(&file, extra(api)).expect("write");
        let o = r.reload(Trigger::File);
        assert!(o.ok, "{:?}", o.errors);
        assert_eq!(counter_of(r.current(), a_name), Some(a));
        assert_eq!(counter_of(r.current(), b_name), None);
        worker.request(a);
        worker.response(a, 504);
        let rows = r.status().rules.rows(std::slice::from_ref(&worker));
        let row = rows
            .iter()
            .find(|w| w.rule == a_name)
            .expect("rules[0] row");
        assert_eq!(row.counts.requests, 2);
        assert_eq!(row.counts.responses, [0, 1, 0, 0, 1]);
        assert!(rows.iter().all(|w| w.rule != b_name), "{rows:?}");

        // A rejected reload keeps the slots.
        let before = r.status().rules;
        std::fs::write(&file, "kind: [unclosed\n").expect("write");
        assert!(!r.reload(Trigger::Ctl).ok);
        assert_eq!(r.status().rules, before);
    }

    #[test]
    fn fixed_parts_of_the_appliance() {
        let a = ApplianceSpec::default();
        let mut b = a.clone();
        b.maglev_table_size = Some(251);
        b.limits.listeners = Some(10);
        assert!(fixed_changes(Some(&a), Some(&b)).is_empty());
        b.limits.flows_per_worker = Some(1000);
        b.virtual_addresses = vec!["10.0.0.1".into()];
        assert_eq!(
            fixed_changes(Some(&a), Some(&b)),
            ["spec.virtualAddresses", "spec.limits.flowsPerWorker"]
        );
        assert!(fixed_changes(None, None).is_empty());
        assert_eq!(fixed_changes(None, Some(&a)), ["the whole Appliance"]);
    }

    #[test]
    fn stdin_cannot_be_reloaded() {
        let first = prepare(&[]).expect("an empty configuration");
        let mut r = Reloader::new(vec![PathBuf::from("-")], first, 1);
        let o = r.reload(Trigger::Ctl);
        assert!(!o.ok);
        assert!(o.errors[0].contains("stdin"));
    }

    #[test]
    fn outcome_json_and_time() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(1_709_251_199_250)),
            "2024-02-29T23:59:59.250Z"
        );
        let o = ReloadOutcome {
            trigger: Trigger::Ctl,
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(86_400),
            took: Duration::from_millis(3),
            ok: false,
            generation: 4,
            errors: vec!["a.yaml:3:1: bad".into()],
            not_served: Vec::new(),
        };
        let v = o.to_json();
        assert_eq!(v["ok"], false);
        assert_eq!(v["generation"], 4);
        assert_eq!(v["errors"][0], "a.yaml:3:1: bad");
        assert_eq!(v["trigger"], "ctl");
        assert_eq!(v["time"], "1970-01-02T00:00:00.000Z");
    }
}
