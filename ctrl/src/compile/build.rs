//! Loaded manifests -> everything a run needs, in one pass ([`build`]): validation, the
//! IR, NetworkPolicy compiled once, the tables snapshot the workers read, and the
//! Appliance's run plan. `sluice run`, reloads, `check`, `tables`, `explain` and the test
//! helpers all go through it, so none of them can disagree with what the dataplane runs.

use std::collections::HashMap;
use std::path::PathBuf;

use sluice_dataplane::tables::snapshot::Snapshot;

use super::ir::{Ir, ListenerKind, L4};
use super::policy::{self, PolicyCompileError, PolicyInfo, PolicyStats};
use crate::diag::{Diagnostic, Diagnostics, Severity};
use crate::load::{self, Item, Loaded};
use crate::machine::Machine;
use crate::model::Kind;
use crate::plan::RunPlan;
use crate::validate;

/// A configuration compiled and built: what `sluice run` serves.
#[derive(Debug)]
pub struct Built {
    /// Documents read.
    pub documents: usize,
    /// Objects decoded (identical duplicates kept once).
    pub items: Vec<Item>,
    /// The resolved IR.
    pub ir: Ir,
    /// What the NetworkPolicy compiler reports besides its tables.
    pub policy: PolicyReport,
    /// The tables the workers read.
    pub snapshot: Snapshot,
    /// The listener addresses served on a port's network (also in `snapshot`).
    pub addresses: Vec<super::addresses::ServedAddress>,
    /// The Appliance's run plan (or the embedded default's).
    pub plan: RunPlan,
    /// The warnings (a built configuration has no errors).
    pub diagnostics: Vec<Diagnostic>,
}

/// The NetworkPolicy compiler's report: table sizes and what explain and exports read.
#[derive(Debug)]
pub struct PolicyReport {
    /// Table sizes.
    pub stats: PolicyStats,
    /// Identities, classes and groups, by name.
    pub info: PolicyInfo,
}

impl Built {
    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter()
    }
}

/// Loads `paths` (files, directories, `-` for stdin) and [`build`]s them.
pub fn build_paths(paths: &[PathBuf]) -> Result<Built, Diagnostics> {
    build(load::load_paths(paths))
}

/// Validates, compiles and builds what was loaded; on any error, every diagnostic found
/// (errors located at their field, warnings too).
pub fn build(mut loaded: Loaded) -> Result<Built, Diagnostics> {
    drop_identical_duplicates(&mut loaded);
    validate::validate(&mut loaded);
    let mut out = std::mem::take(&mut loaded.diagnostics);
    let reject = |list| {
        Err(Diagnostics {
            documents: loaded.documents,
            list,
        })
    };
    if out.iter().any(Diagnostic::is_error) {
        return reject(out);
    }
    let ir = super::to_ir::build_ir(&loaded.items, &mut out);
    listener_conflicts(&ir, &loaded.items, &mut out);
    if out.iter().any(Diagnostic::is_error) {
        return reject(out);
    }
    let Some(policy) = compile_policy(&ir, &loaded.items, &mut out) else {
        return reject(out);
    };
    let mut snapshot = match super::snapshot::build(&ir, policy.tables) {
        Ok(s) => s,
        Err(e) => {
            out.push(Diagnostics::config_level(Severity::Error, e.to_string()));
            return reject(out);
        }
    };
    let Some(plan) = run_plan(&ir, &loaded.items, &mut out) else {
        return reject(out);
    };
    let addresses = super::addresses::check(&loaded.items, &plan, &mut out);
    if out.iter().any(Diagnostic::is_error) {
        return reject(out);
    }
    snapshot.addresses = super::addresses::table(&addresses);
    Ok(Built {
        documents: loaded.documents,
        items: loaded.items,
        ir,
        policy: PolicyReport {
            stats: policy.stats,
            info: policy.info,
        },
        snapshot,
        addresses,
        plan,
        diagnostics: out,
    })
}

/// Checks the built run plan against `machine` ([`crate::machine::check`]): `sluice
/// check` and `sluice run` (before it starts anything) call it after [`build`]; each
/// error is located at the Appliance field it is about (`spec.cores[1]`).
pub fn check_machine(built: &Built, machine: &Machine) -> Result<(), Diagnostics> {
    let errors = crate::machine::check(&built.plan, machine);
    if errors.is_empty() {
        return Ok(());
    }
    let mut list = Vec::new();
    let appliance = built
        .items
        .iter()
        .find(|it| it.object.kind() == Kind::Appliance);
    for e in errors {
        match appliance {
            Some(it) => it
                .reporter(&mut list)
                .error(&it.path(&e.field()), e.to_string()),
            None => list.push(Diagnostics::config_level(
                Severity::Error,
                format!("embedded default Appliance: {e}"),
            )),
        }
    }
    Err(Diagnostics {
        documents: built.documents,
        list,
    })
}

/// The run plan of the configuration's Appliance (or of the embedded default); an
/// error is located at the Appliance field it is about.
fn run_plan(ir: &Ir, items: &[Item], out: &mut Vec<Diagnostic>) -> Option<RunPlan> {
    let plan = match &ir.appliance {
        Some(spec) => RunPlan::from_appliance(spec, false),
        None => RunPlan::embedded_default(),
    };
    match plan {
        Ok(p) => Some(p),
        Err(e) => {
            match items.iter().find(|it| it.object.kind() == Kind::Appliance) {
                Some(it) => it.reporter(out).error(&it.path(&e.field()), e.to_string()),
                None => out.push(Diagnostics::config_level(Severity::Error, e.to_string())),
            }
            None
        }
    }
}

/// Compiles NetworkPolicy into tables; a cap overflow is an error located at the
/// Appliance's `spec.limits.<cap>` (or at the configuration when there is none).
fn compile_policy(
    ir: &Ir,
    items: &[Item],
    out: &mut Vec<Diagnostic>,
) -> Option<policy::CompiledPolicy> {
    let appliance = items.iter().find(|it| it.object.kind() == Kind::Appliance);
    match policy::compile(ir) {
        Ok(c) => {
            for w in &c.warnings {
                out.push(Diagnostics::config_level(
                    Severity::Warning,
                    format!("policy: {w}"),
                ));
            }
            Some(c)
        }
        Err(errors) => {
            for e in errors {
                match (&e, appliance) {
                    (PolicyCompileError::OverCap { cap, .. }, Some(it)) => it
                        .reporter(out)
                        .error(&it.path(&format!("spec.limits.{cap}")), e.to_string()),
                    _ => out.push(Diagnostics::config_level(Severity::Error, e.to_string())),
                }
            }
            None
        }
    }
}

/// The same object given twice with identical content (a Namespace that two example
/// sets both declare, a manifest applied twice) is kept once, with a warning, as
/// `kubectl apply` would; a differing duplicate stays and is an error in validation.
fn drop_identical_duplicates(loaded: &mut Loaded) {
    let mut kept: Vec<Item> = Vec::with_capacity(loaded.items.len());
    // Kept items (indices into `kept`, in order) by kind, namespace and name: comparing
    // each item with every kept one would make loading n objects quadratic.
    let mut by_key: HashMap<(Kind, String, String), Vec<usize>> = HashMap::new();
    for it in std::mem::take(&mut loaded.items) {
        let m = it.object.meta();
        let key = (it.object.kind(), m.namespace().to_string(), m.name.clone());
        let same = by_key
            .get(&key)
            .into_iter()
            .flatten()
            .map(|&k| &kept[k])
            .find(|k| k.object == it.object);
        match same {
            Some(first) => {
                let p = first.origin.locate(&first.base);
                let msg = format!(
                    "identical to {}:{}:{}; kept once",
                    first.origin.file, p.line, p.col
                );
                it.reporter(&mut loaded.diagnostics)
                    .warn(&it.path("metadata.name"), msg);
            }
            None => {
                by_key.entry(key).or_default().push(kept.len());
                kept.push(it);
            }
        }
    }
    loaded.items = kept;
}

/// The name serde gives a listener kind (`tls-passthrough`, ...).
pub(crate) fn kind_name(k: ListenerKind) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Why listeners `a` (later) and `b` (earlier) on one port and protocol cannot share an
/// address, if they cannot.
fn conflict(a: &super::ir::Listener, b: &super::ir::Listener) -> Option<String> {
    if a.kind != b.kind {
        Some(format!(
            "conflicting listeners on port {}: {} ({}) and {} ({}) share an address",
            a.port,
            a.name,
            kind_name(a.kind),
            b.name,
            kind_name(b.kind)
        ))
    } else if a.kind.inspects() {
        a.bindings
            .iter()
            .find(|x| b.bindings.iter().any(|y| y.host == x.host))
            .map(|x| {
                format!(
                    "conflicting listeners on port {}: host `{}` is bound by both {} and {}",
                    a.port, x.host, a.name, b.name
                )
            })
    } else {
        Some(format!(
            "conflicting listeners on port {}: {} and {} both take every connection on a shared address",
            a.port, a.name, b.name
        ))
    }
}

/// Listeners of different gateways that share an address and port must agree: same
/// kind, and for by-name kinds distinct host patterns; two catch-all TCP listeners on one
/// address:port cannot be told apart.
fn listener_conflicts(ir: &Ir, items: &[Item], out: &mut Vec<Diagnostic>) {
    // Earlier listeners (indices, in order) by port and protocol: only those can
    // conflict, and comparing every pair would make n listeners quadratic.
    let mut by_port: HashMap<(u16, L4), Vec<usize>> = HashMap::new();
    for (i, a) in ir.listeners.iter().enumerate() {
        let earlier = by_port.entry((a.port, a.protocol)).or_default();
        for b in earlier.iter().map(|&j| &ir.listeners[j]) {
            let overlap = a.addresses.is_empty()
                || b.addresses.is_empty()
                || a.addresses.iter().any(|x| b.addresses.contains(x));
            let Some(message) = conflict(a, b).filter(|_| overlap) else {
                continue;
            };
            // Report at the later gateway's object.
            let gw = items.iter().find(|it| {
                a.name.contains(&format!(
                    "{}/{}",
                    it.object.meta().namespace(),
                    it.object.meta().name
                )) && matches!(it.object.kind(), Kind::Gateway | Kind::IstioGateway)
            });
            match gw {
                Some(it) => it.reporter(out).error(&it.path("spec"), message),
                None => out.push(Diagnostics::config_level(Severity::Error, message)),
            }
        }
        earlier.push(i);
    }
}

/// Every diagnostic of a build: the warnings of a built configuration, or everything
/// found in a rejected one.
pub fn diagnostics(r: &Result<Built, Diagnostics>) -> &[Diagnostic] {
    match r {
        Ok(b) => &b.diagnostics,
        Err(d) => &d.list,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build_text(text: &str) -> Result<Built, Diagnostics> {
        let mut loaded = Loaded::default();
        load::load_str("a.yaml", text, &mut loaded);
        build(loaded)
    }

    const APPLIANCE: &str = "apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  cores: [0, 1]
  ports:
  - name: p
    tap: {name: t0}
    addresses: [10.1.0.2/24]
    queues: QUEUES
  routes: [{to: 0.0.0.0/0, via: VIA}]
";

    /// What `run` would refuse, `check` refuses too, at the Appliance field: a queue
    /// count that is not one per core, a next hop no port reaches.
    #[test]
    fn run_plan_errors_are_located_at_the_appliance() {
        let ok = APPLIANCE.replace("QUEUES", "2").replace("VIA", "10.1.0.1");
        let b = build_text(&ok).expect("builds");
        assert_eq!(b.plan.cores, vec![0, 1]);
        assert!(!b.plan.is_default);
        let bad = APPLIANCE.replace("QUEUES", "3").replace("VIA", "10.1.0.1");
        let e = build_text(&bad).expect_err("rejected").error_lines();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("a.yaml:10:"), "{e:?}");
        assert!(e[0].contains("spec.ports[0].queues"), "{e:?}");
        let bad = APPLIANCE.replace("QUEUES", "2").replace("VIA", "10.9.0.1");
        let e = build_text(&bad).expect_err("rejected").error_lines();
        assert!(e[0].contains("spec.routes"), "{e:?}");
        assert!(
            e[0].contains("the next hop is in no port's network"),
            "{e:?}"
        );
    }

    /// Without an Appliance the plan is the embedded default's.
    #[test]
    fn no_appliance_plans_the_embedded_default() {
        let b = build_text("").expect("an empty configuration builds");
        assert!(b.plan.is_default);
        assert_eq!(b.plan.ports[0].name, "sl0");
    }
}
