//! One entry point for the whole control-plane pipeline: load -> validate -> IR, with
//! every diagnostic collected; a summary for `sluice check`; JSON for `sluice tables`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::{json, Value};
use sluice_dataplane::tables::maglev::Pick;

use crate::compile::build_ir;
use crate::compile::ir::{BackendTarget, Ir, ListenerKind, L4};
use crate::diag::{Diagnostic, Severity};
use crate::load::{self, Item, Loaded};
use crate::model::Kind;
use crate::validate;

/// The outcome of compiling a configuration.
#[derive(Debug)]
pub struct Compiled {
    /// Documents read.
    pub documents: usize,
    /// Objects decoded.
    pub items: Vec<Item>,
    /// Every error and warning, in the order found.
    pub diagnostics: Vec<Diagnostic>,
    /// The IR, when there were no errors.
    pub ir: Option<Ir>,
    /// The compiled NetworkPolicy tables, when there were no errors.
    pub policy: Option<crate::compile::policy::CompiledPolicy>,
}

impl Compiled {
    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// The human summary printed by `sluice check`.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
        for it in &self.items {
            *counts.entry(it.object.kind()).or_default() += 1;
        }
        let _ = writeln!(
            s,
            "configuration OK: {} document(s), {} object(s)",
            self.documents,
            self.items.len()
        );
        let kinds: Vec<String> = Kind::ALL
            .iter()
            .filter_map(|k| counts.get(k).map(|n| format!("{} {n}", k.as_str())))
            .collect();
        let _ = writeln!(s, "objects: {}", kinds.join(", "));
        if let Some(ir) = &self.ir {
            let _ = writeln!(s, "listeners: {}", ir.listeners.len());
            for l in &ir.listeners {
                let addrs = if l.addresses.is_empty() {
                    "*".to_string()
                } else {
                    l.addresses
                        .iter()
                        .map(IpAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let hosts: Vec<String> = l
                    .bindings
                    .iter()
                    .map(|b| format!("{} -> {}", b.host, ir.routes[b.route].name))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {addrs}:{}/{} {} {}{}",
                    l.port,
                    serde_json::to_value(l.protocol)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    serde_json::to_value(l.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    l.name,
                    if hosts.is_empty() {
                        String::new()
                    } else {
                        format!("\n    {}", hosts.join("\n    "))
                    }
                );
            }
            let backends: Vec<_> = ir
                .routes
                .iter()
                .flat_map(|r| {
                    r.backends
                        .iter()
                        .chain(r.http.iter().flat_map(|h| h.backends.iter()))
                })
                .collect();
            let invalid = backends
                .iter()
                .filter(|b| matches!(b.target, BackendTarget::Invalid(_)))
                .count();
            let _ = writeln!(
                s,
                "routes: {}, backends: {} ({} invalid), workloads: {}, policies: {}",
                ir.routes.len(),
                backends.len(),
                invalid,
                ir.workloads.len(),
                ir.policies.len()
            );
        }
        if let Some(p) = &self.policy {
            let st = &p.stats;
            let _ = writeln!(
                s,
                "policy: {} identities ({} workload groups, {} address classes), {} prefixes, {} ingress / {} egress entries, {} KiB",
                st.identities,
                st.workload_groups,
                st.address_classes,
                st.prefixes,
                st.ingress_entries,
                st.egress_entries,
                st.memory_bytes / 1024
            );
        }
        let _ = writeln!(
            s,
            "warnings: {} (sluice check -v lists them)",
            self.warnings().count()
        );
        s
    }
}

/// Loads, validates and compiles the given sources.
pub fn compile_paths(paths: &[PathBuf]) -> Compiled {
    compile_loaded(load::load_paths(paths))
}

/// Validates and compiles what was loaded.
pub fn compile_loaded(mut loaded: Loaded) -> Compiled {
    drop_identical_duplicates(&mut loaded);
    validate::validate(&mut loaded);
    let mut diagnostics = std::mem::take(&mut loaded.diagnostics);
    let ir = if diagnostics.iter().any(Diagnostic::is_error) {
        None
    } else {
        let ir = build_ir(&loaded.items, &mut diagnostics);
        listener_conflicts(&ir, &loaded.items, &mut diagnostics);
        (!diagnostics.iter().any(Diagnostic::is_error)).then_some(ir)
    };
    let policy = ir
        .as_ref()
        .and_then(|ir| compile_policy(ir, &loaded.items, &mut diagnostics));
    let ir = ir.filter(|_| policy.is_some());
    Compiled {
        documents: loaded.documents,
        items: loaded.items,
        diagnostics,
        ir,
        policy,
    }
}

/// Compiles NetworkPolicy into tables; a cap overflow is an error located at the
/// Appliance's `spec.limits.<cap>` (or at the configuration when there is none).
fn compile_policy(
    ir: &Ir,
    items: &[Item],
    out: &mut Vec<Diagnostic>,
) -> Option<crate::compile::policy::CompiledPolicy> {
    use crate::compile::policy::{self, PolicyCompileError};
    let appliance = items.iter().find(|it| it.object.kind() == Kind::Appliance);
    let config_level = |severity: Severity, message: String| Diagnostic {
        severity,
        file: "<config>".into(),
        pos: Default::default(),
        object: None,
        path: None,
        message,
    };
    match policy::compile(ir) {
        Ok(c) => {
            for w in &c.warnings {
                out.push(config_level(Severity::Warning, format!("policy: {w}")));
            }
            Some(c)
        }
        Err(errors) => {
            for e in errors {
                match (&e, appliance) {
                    (PolicyCompileError::OverCap { cap, .. }, Some(it)) => it
                        .reporter(out)
                        .error(&it.path(&format!("spec.limits.{cap}")), e.to_string()),
                    _ => out.push(config_level(Severity::Error, e.to_string())),
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
            if !overlap {
                continue;
            }
            let message = if a.kind != b.kind {
                let kind = |k: ListenerKind| {
                    serde_json::to_value(k)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                };
                Some(format!(
                    "conflicting listeners on port {}: {} ({}) and {} ({}) share an address",
                    a.port,
                    a.name,
                    kind(a.kind),
                    b.name,
                    kind(b.kind)
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
            };
            if let Some(message) = message {
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
                    None => out.push(Diagnostic {
                        severity: Severity::Error,
                        file: "<config>".into(),
                        pos: Default::default(),
                        object: None,
                        path: None,
                        message,
                    }),
                }
            }
        }
        earlier.push(i);
    }
}

/// JSON for `sluice tables`: listeners and routes; with a route name, that route's
/// Maglev table as a list of `ip:port` or `"reject"` (for an HTTP route, one list per
/// rule).
pub fn tables_json(ir: &Ir, route: Option<&str>) -> Option<Value> {
    match route {
        Some(name) => {
            let r = ir.routes.iter().find(|r| r.name == name)?;
            let table = |backends: &[crate::compile::ir::Backend]| -> Value {
                match crate::compile::backends::maglev_table(backends, r.maglev_table_size) {
                    Ok(t) => Value::Array(
                        t.slots()
                            .map(|p| match p {
                                Pick::Backend(a) => Value::String(a.to_string()),
                                Pick::Reject => Value::String("reject".into()),
                            })
                            .collect(),
                    ),
                    Err(e) => json!({ "error": e.to_string() }),
                }
            };
            if r.kind == crate::compile::ir::RouteKind::Http {
                Some(Value::Array(
                    r.http.iter().map(|h| table(&h.backends)).collect(),
                ))
            } else {
                Some(table(&r.backends))
            }
        }
        None => Some(json!({
            "listeners": ir.listeners,
            "routes": ir.routes,
            "workloads": ir.workloads,
            "nodes": ir.nodes,
            "namespaces": ir.namespaces,
        })),
    }
}
