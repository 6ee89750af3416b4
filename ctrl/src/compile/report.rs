//! What a [`Built`] configuration says about itself: the summary `sluice check` prints
//! and the JSON `sluice tables` prints, read from the built tables themselves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use serde_json::{json, Value};
use sluice_dataplane::tables::listeners::RouteEntry;
use sluice_dataplane::tables::maglev::{MaglevTable, Pick};

use super::build::{kind_name, Built};
use super::ir::{BackendTarget, Ir};
use crate::model::Kind;

impl Built {
    /// The human summary printed by `sluice check`.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
        for it in &self.items {
            *counts.entry(it.object.kind()).or_default() += 1;
        }
        let not_served = self.not_served().count();
        if not_served == 0 {
            let _ = writeln!(
                s,
                "configuration OK: {} document(s), {} object(s)",
                self.documents,
                self.items.len()
            );
        } else {
            let _ = writeln!(
                s,
                "configuration served in part: {} document(s), {} object(s); {not_served} \
                 not served (listed above; their traffic gets no route)",
                self.documents,
                self.items.len()
            );
        }
        let kinds: Vec<String> = Kind::ALL
            .iter()
            .filter_map(|k| counts.get(k).map(|n| format!("{} {n}", k.as_str())))
            .collect();
        let _ = writeln!(s, "objects: {}", kinds.join(", "));
        listeners_summary(&self.ir, &mut s);
        if !self.addresses.is_empty() {
            let served: Vec<String> = self
                .addresses
                .iter()
                .map(|a| format!("{} on {}", a.address, a.port))
                .collect();
            let _ = writeln!(s, "served addresses: {}", served.join(", "));
        }
        let st = &self.policy.stats;
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
        gateway_api_summary(&self.status_json(), &mut s);
        let _ = writeln!(
            s,
            "warnings: {} (sluice check -v lists them)",
            self.warnings().count()
        );
        s
    }

    /// JSON for `sluice tables`: the served listener addresses (address, port, owners),
    /// listeners and routes; with a route name, that route's
    /// Maglev table as the workers hold it, a list of `ip:port` or `"reject"` per slot
    /// (`{"ipv4": [...], "ipv6": [...]}` for a route with backends of both families; for
    /// an HTTP route, one per rule). `None` when no route has that name.
    pub fn tables_json(&self, route: Option<&str>) -> Option<Value> {
        let ir = &self.ir;
        match route {
            Some(name) => {
                let r = self
                    .snapshot
                    .listeners
                    .routes()
                    .iter()
                    .find(|r| &*r.name == name)?;
                Some(route_json(r))
            }
            None => Some(json!({
                "addresses": self.addresses,
                "listeners": ir.listeners,
                "routes": ir.routes,
                "workloads": ir.workloads,
                "nodes": ir.nodes,
                "namespaces": ir.namespaces,
            })),
        }
    }
}

/// A route's Maglev table(s), slot by slot.
fn route_json(r: &RouteEntry) -> Value {
    if r.http.is_empty() {
        tables(&r.table, r.table_v6.as_ref())
    } else {
        use sluice_dataplane::tables::http::HttpAction;
        Value::Array(
            r.http
                .rules
                .iter()
                .map(|h| match &h.action {
                    HttpAction::Forward {
                        table, table_v6, ..
                    } => tables(table, table_v6.as_ref()),
                    HttpAction::Redirect(x) => json!({ "redirect": x.code }),
                    HttpAction::Direct { status, .. } => json!({ "direct": status }),
                })
                .collect(),
        )
    }
}

/// One table as a list, or the two of a dual-stack backend set.
fn tables(v4: &MaglevTable, v6: Option<&MaglevTable>) -> Value {
    match v6 {
        None => slots(v4),
        Some(v6) => json!({ "ipv4": slots(v4), "ipv6": slots(v6) }),
    }
}

fn slots(t: &MaglevTable) -> Value {
    Value::Array(
        t.slots()
            .map(|p| match p {
                Pick::Backend(a) => Value::String(a.to_string()),
                Pick::Reject => Value::String("reject".into()),
            })
            .collect(),
    )
}

/// The listener and route lines of the summary.
fn listeners_summary(ir: &Ir, s: &mut String) {
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
            .map(|b| match ir.routes.get(b.route) {
                Some(r) => format!("{} -> {}", b.host, r.name),
                None => format!("{} -> no route (a listener of its own)", b.host),
            })
            .collect();
        let protocol = serde_json::to_value(l.protocol)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {addrs}:{}/{protocol} {} {}{}",
            l.port,
            kind_name(l.kind),
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
                .chain(r.http.iter().flat_map(|h| h.backends()))
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

/// One line on the Gateway API objects: listeners and route parents accepted of all (the
/// conditions themselves: `sluice check -v`, `sluice status`).
fn gateway_api_summary(status: &Value, s: &mut String) {
    let accepted = |conds: &Value| {
        conds
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Accepted" && c["status"] == "True")
    };
    let (mut listeners, mut listeners_ok, mut parents, mut parents_ok) = (0, 0, 0, 0);
    for o in status.as_array().into_iter().flatten() {
        for l in o["status"]["listeners"].as_array().into_iter().flatten() {
            listeners += 1;
            listeners_ok += usize::from(accepted(&l["conditions"]));
        }
        for p in o["status"]["parents"].as_array().into_iter().flatten() {
            parents += 1;
            parents_ok += usize::from(accepted(&p["conditions"]));
        }
    }
    if listeners + parents > 0 {
        let _ = writeln!(
            s,
            "gateway api: {listeners_ok}/{listeners} listeners accepted, {parents_ok}/{parents} \
             route parents accepted (sluice check -v or sluice status -c ... for every condition)"
        );
    }
}
