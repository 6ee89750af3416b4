//! Loaded manifests -> everything a run needs, in one pass ([`build`]): validation, the
//! IR, NetworkPolicy compiled once, the tables snapshot the workers read, and the
//! Appliance's run plan. `sluice run`, reloads, `check`, `tables`, `explain` and the test
//! helpers all go through it, so none of them can disagree with what the dataplane runs.

use std::collections::HashMap;
use std::path::PathBuf;

use sluice_dataplane::tables::snapshot::Snapshot;

use super::ir::{BackendTarget, Ir, ListenerKind};
use super::policy::{self, PolicyCompileError, PolicyInfo, PolicyStats};
use super::served::Exclusions;
use crate::diag::{Diagnostic, Diagnostics, Severity};
use crate::load::{self, Item, Loaded};
use crate::machine::Machine;
use crate::model::appliance::ApplianceSpec;
use crate::model::{Kind, Object};
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
    /// What is not served and the warnings (a built configuration has no errors).
    pub diagnostics: Vec<Diagnostic>,
    /// The objects and gateway listeners left out of the tables.
    pub excluded: Exclusions,
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
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// The Gateway API status of every Gateway and route ([`super::status`]).
    pub fn status_json(&self) -> serde_json::Value {
        super::status::StatusInput {
            items: &self.items,
            diags: &self.diagnostics,
            excluded: &self.excluded,
            attachment: &self.ir.attachment,
        }
        .json()
    }

    /// [`Built::status_json`] as lines for people.
    pub fn status_text(&self) -> String {
        super::status::text(&self.status_json())
    }

    /// What is left out of the tables, each with its reason.
    pub fn not_served(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_not_served())
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
    // Precedence order (oldest creationTimestamp, then namespace/name): wherever objects
    // compete, the earlier wins, whatever the order of files and documents.
    loaded
        .items
        .sort_by_cached_key(|it| (it.object.meta().precedence(), it.object.kind()));
    validate::validate(&mut loaded);
    let mut out = std::mem::take(&mut loaded.diagnostics);
    let reject = |mut list: Vec<Diagnostic>| {
        in_file_order(&mut list);
        Err(Diagnostics {
            documents: loaded.documents,
            list,
        })
    };
    if out.iter().any(Diagnostic::is_error) {
        return reject(out);
    }
    let appliance = loaded.items.iter().find_map(|it| match &it.object {
        Object::Appliance(a) => Some(&a.spec),
        _ => None,
    });
    // The run plan's errors are reported after the tables' (as `run` meets them).
    let mut plan_diags = Vec::new();
    let plan = run_plan(appliance, &loaded.items, &mut plan_diags);
    // Gateway addresses sluice cannot answer for leave their Gateway (or Istio server)
    // out, before the tables are built.
    let excluded = Exclusions::from_diagnostics(&loaded.items, &out);
    let addresses = match &plan {
        Some(plan) => super::addresses::check(&loaded.items, plan, &excluded, &mut out),
        None => Vec::new(),
    };
    let excluded = Exclusions::from_diagnostics(&loaded.items, &out);
    // Certificates of the terminating listeners still served: a bad one leaves its
    // listener out too.
    let certs = super::certs::load(&loaded.items, &excluded, &mut out);
    let mut excluded = Exclusions::from_diagnostics(&loaded.items, &out);
    let (mut ir, _) = super::to_ir::build_ir_with_stats(&loaded.items, &excluded, &mut out);
    certs.attach(&mut ir);
    super::merge::merge_listeners(&mut ir, &loaded.items, &mut excluded, &mut out);
    warn_unready_backends(&ir, &loaded.items, &mut out);
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
    out.extend(plan_diags);
    let Some(plan) = plan else {
        return reject(out);
    };
    snapshot.addresses = super::addresses::table(&addresses);
    in_file_order(&mut out);
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
        excluded,
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
fn run_plan(
    appliance: Option<&ApplianceSpec>,
    items: &[Item],
    out: &mut Vec<Diagnostic>,
) -> Option<RunPlan> {
    let plan = match appliance {
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

/// A warning for each weighted backend of a served route whose Service has no ready
/// endpoint: its share of connections is rejected (seed 004) until one is ready.
fn warn_unready_backends(ir: &Ir, items: &[Item], out: &mut Vec<Diagnostic>) {
    let by_label: HashMap<String, &Item> = items.iter().map(|it| (it.object.label(), it)).collect();
    let mut seen = std::collections::HashSet::new();
    for r in &ir.routes {
        let backends = r
            .backends
            .iter()
            .chain(r.http.iter().flat_map(|h| h.backends()));
        for b in backends {
            let BackendTarget::Invalid(why) = &b.target else {
                continue;
            };
            if b.weight == 0 || !why.contains("no ready endpoints") {
                continue;
            }
            // `Kind ns/name` of the route's object is how its name starts.
            let owner = by_label
                .iter()
                .filter(|(label, _)| r.name == **label || r.name.starts_with(&format!("{label} ")))
                .map(|(_, it)| *it)
                .next();
            let Some(it) = owner else { continue };
            if !seen.insert((it.object.label(), b.name.clone())) {
                continue;
            }
            it.reporter(out).warn(
                &it.path("spec"),
                format!(
                    "backend {} (weight {}): {why}; its share of connections is rejected \
                     until an endpoint is ready",
                    b.name, b.weight
                ),
            );
        }
    }
}

/// Sorts diagnostics by file, line and column (stable: what one place says keeps its
/// order), so that they read in the order of the sources.
fn in_file_order(list: &mut [Diagnostic]) {
    list.sort_by(|a, b| (&*a.file, a.pos).cmp(&(&*b.file, b.pos)));
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
