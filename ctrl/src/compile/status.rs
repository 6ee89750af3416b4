//! Gateway API status: the conditions the Gateway API defines for each Gateway, listener
//! and route parent (`Accepted`, `ResolvedRefs`, `Programmed`, `Conflicted`, with their
//! reasons), computed from what the build attached and what it left out. `sluice check
//! -v`, `sluice status` and `sluice ctl status` print them; `--output json` gives them in
//! the shape of the upstream `status` stanza, so a controller could write them back.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::diag::{Diagnostic, FieldPath, Seg};
use crate::load::Item;
use crate::model::gateway_api as gw;
use crate::model::{Kind, Object};
use crate::validate::Index;

use super::served::Exclusions;

/// The controller name sluice writes into route parent statuses.
pub const CONTROLLER_NAME: &str = "sluice.dev/gateway-controller";

/// Why a route that selects a listener does not attach to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The listener's `allowedRoutes` do not admit the route's namespace or kind.
    NotAllowedByListeners,
    /// No hostname of the route intersects the listener's.
    NoMatchingListenerHostname,
}

impl Refusal {
    /// The Gateway API reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotAllowedByListeners => "NotAllowedByListeners",
            Refusal::NoMatchingListenerHostname => "NoMatchingListenerHostname",
        }
    }
}

/// What became of one parentRef on one listener it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attach {
    /// Refused, for this reason.
    Refused(Refusal),
    /// Attached.
    Attached,
}

/// What the build attached: per (route item, parentRef index) the best outcome over the
/// listeners the parentRef selects, and per (Gateway item, listener index) how many
/// routes attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    /// (route item, parentRef index) -> best outcome (attached beats a hostname
    /// mismatch beats not allowed).
    pub parents: BTreeMap<(usize, usize), Attach>,
    /// (Gateway item, listener index) -> routes attached.
    pub listeners: HashMap<(usize, usize), usize>,
}

impl Attachment {
    /// Records one outcome, keeping the best per parentRef.
    pub fn record(&mut self, item: usize, parent: usize, a: Attach) {
        let e = self.parents.entry((item, parent)).or_insert(a);
        *e = (*e).max(a);
    }

    /// A not-served diagnostic for every parentRef that selected listeners but attached
    /// to none of them.
    pub fn report_refusals(&self, items: &[Item], diags: &mut Vec<Diagnostic>) {
        for (&(item, pi), &a) in &self.parents {
            let Attach::Refused(why) = a else { continue };
            let it = &items[item];
            let message = match why {
                Refusal::NotAllowedByListeners => {
                    "not attached: the allowedRoutes of the listeners this parentRef selects \
                     do not admit this route (its namespace or kind)"
                }
                Refusal::NoMatchingListenerHostname => {
                    "not attached: no hostname of this route intersects the hostname of a \
                     listener this parentRef selects"
                }
            };
            it.reporter(diags).not_served_because(
                &it.path(&format!("spec.parentRefs[{pi}]")),
                why.as_str(),
                message,
            );
        }
    }
}

fn condition(kind: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// The not-served diagnostics of item `i` whose path (relative to the item) starts with
/// `prefix`.
fn diags_under<'d>(
    items: &[Item],
    diags: &'d [Diagnostic],
    i: usize,
    prefix: &[Seg],
) -> Vec<&'d Diagnostic> {
    let it = &items[i];
    let label = it.object.label();
    diags
        .iter()
        .filter(|d| d.is_not_served() && d.object.as_deref() == Some(&label))
        .filter(|d| *d.file == *it.origin.file)
        .filter(|d| {
            let full = FieldPath::parse(d.path.as_deref().unwrap_or(""));
            let rel = full.0.strip_prefix(&it.base.0[..]).unwrap_or(&full.0);
            rel.starts_with(prefix)
        })
        .collect()
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

/// Everything the status computation reads.
pub struct StatusInput<'a> {
    /// The objects.
    pub items: &'a [Item],
    /// Every diagnostic of the build.
    pub diags: &'a [Diagnostic],
    /// What was left out.
    pub excluded: &'a Exclusions,
    /// What attached.
    pub attachment: &'a Attachment,
}

impl StatusInput<'_> {
    /// Every Gateway API Gateway and route with its `status`, in the upstream shape:
    /// `[{apiVersion, kind, metadata: {namespace, name}, status}]`.
    pub fn json(&self) -> Value {
        let index = Index::new(self.items);
        let mut out = Vec::new();
        for (i, it) in self.items.iter().enumerate() {
            let status = match &it.object {
                Object::Gateway(g) => self.gateway(i, &g.spec),
                Object::TlsRoute(r) => {
                    self.route(i, &r.spec.parent_refs, &r.spec.rules, "TLSRoute", &index)
                }
                Object::TcpRoute(r) if it.object.format() == crate::model::Format::Kubernetes => {
                    self.route(i, &r.spec.parent_refs, &r.spec.rules, "TCPRoute", &index)
                }
                Object::UdpRoute(r) => {
                    self.route(i, &r.spec.parent_refs, &r.spec.rules, "UDPRoute", &index)
                }
                Object::HttpRoute(r) => {
                    // ResolvedRefs reads the backendRefs (mirrors' included).
                    let rules: Vec<gw::RouteRule> = r
                        .spec
                        .rules
                        .iter()
                        .map(|rule| gw::RouteRule {
                            name: None,
                            backend_refs: rule
                                .backend_refs
                                .iter()
                                .map(gw::HttpBackendRef::plain)
                                .chain(
                                    rule.filters
                                        .iter()
                                        .filter_map(|f| f.request_mirror.as_ref())
                                        .map(|m| m.backend_ref.clone()),
                                )
                                .collect(),
                        })
                        .collect();
                    self.route(i, &r.spec.parent_refs, &rules, "HTTPRoute", &index)
                }
                _ => continue,
            };
            let m = it.object.meta();
            out.push(json!({
                "apiVersion": it.object.api_version(),
                "kind": it.object.kind().as_str(),
                "metadata": {"namespace": m.namespace(), "name": m.name},
                "status": status,
            }));
        }
        Value::Array(out)
    }

    fn gateway(&self, i: usize, spec: &gw::GatewaySpec) -> Value {
        let addr_problems =
            diags_under(self.items, self.diags, i, &[key("spec"), key("addresses")]);
        let listeners: Vec<Value> = spec
            .listeners
            .iter()
            .enumerate()
            .map(|(li, l)| self.listener(i, li, l))
            .collect();
        let mut conditions = vec![condition("Accepted", true, "Accepted", "")];
        match addr_problems.first() {
            Some(d) => conditions.push(condition(
                "Programmed",
                false,
                d.reason.unwrap_or("AddressNotUsable"),
                &d.message,
            )),
            None => conditions.push(condition("Programmed", true, "Programmed", "")),
        }
        json!({
            "addresses": spec.addresses.iter().map(|a| json!({"type": a.kind.as_deref().unwrap_or("IPAddress"), "value": a.value})).collect::<Vec<_>>(),
            "conditions": conditions,
            "listeners": listeners,
        })
    }

    fn listener(&self, i: usize, li: usize, l: &gw::Listener) -> Value {
        let under = diags_under(
            self.items,
            self.diags,
            i,
            &[key("spec"), key("listeners"), Seg::Index(li)],
        );
        let kinds_bad = under.iter().any(|d| d.reason == Some("InvalidRouteKinds"));
        let served = crate::validate::route_kinds_of(l);
        let supported: Vec<&str> = match &l.allowed_routes {
            Some(ar) if !ar.kinds.is_empty() => served
                .iter()
                .copied()
                .filter(|k| ar.kinds.iter().any(|x| x.kind == *k))
                .collect(),
            _ => served.to_vec(),
        };
        let mut conditions = Vec::new();
        let blocking = under
            .iter()
            .find(|d| d.reason != Some("InvalidRouteKinds"))
            .copied();
        let conflicted =
            blocking.filter(|d| matches!(d.reason, Some("HostnameConflict" | "ProtocolConflict")));
        // A certificateRef that does not resolve: the listener is valid but not
        // programmed, and `ResolvedRefs` says why.
        let bad_ref = under
            .iter()
            .find(|d| {
                matches!(
                    d.reason,
                    Some(
                        super::certs::INVALID_CERTIFICATE_REF
                            | super::certs::REF_NOT_PERMITTED
                            | super::certs::INVALID_CA_CERTIFICATE_REF
                            | super::certs::INVALID_CA_CERTIFICATE_KIND
                    )
                )
            })
            .copied();
        match (self.excluded.listener(i, li), blocking) {
            (true, Some(d)) if conflicted.is_none() && bad_ref.is_some() => {
                conditions.push(condition("Accepted", true, "Accepted", ""));
                conditions.push(condition("Programmed", false, "Invalid", &d.message));
            }
            (true, Some(d)) if conflicted.is_none() => {
                conditions.push(condition(
                    "Accepted",
                    false,
                    d.reason.unwrap_or("UnsupportedValue"),
                    &d.message,
                ));
                conditions.push(condition("Programmed", false, "Invalid", &d.message));
            }
            (true, _) => {
                conditions.push(condition("Accepted", true, "Accepted", ""));
                conditions.push(condition("Programmed", false, "Invalid", "not served"));
            }
            (false, _) => {
                conditions.push(condition("Accepted", true, "Accepted", ""));
                conditions.push(condition("Programmed", true, "Programmed", ""));
            }
        }
        match conflicted {
            Some(d) => conditions.push(json!({
                "type": "Conflicted", "status": "True",
                "reason": d.reason.unwrap_or("HostnameConflict"), "message": d.message,
            })),
            None => conditions.push(condition("Conflicted", false, "NoConflicts", "")),
        }
        if let Some(d) = bad_ref {
            conditions.push(condition(
                "ResolvedRefs",
                false,
                d.reason.unwrap_or(super::certs::INVALID_CERTIFICATE_REF),
                &d.message,
            ));
        } else if kinds_bad || supported.is_empty() {
            let msg = if served.is_empty() {
                format!(
                    "sluice serves no route kind on a {} listener yet",
                    l.protocol
                )
            } else {
                "allowedRoutes.kinds names a kind this listener cannot take".to_string()
            };
            conditions.push(condition("ResolvedRefs", false, "InvalidRouteKinds", &msg));
        } else {
            conditions.push(condition("ResolvedRefs", true, "ResolvedRefs", ""));
        }
        json!({
            "name": l.name,
            "supportedKinds": supported.iter().map(|k| json!({"group": "gateway.networking.k8s.io", "kind": k})).collect::<Vec<_>>(),
            "attachedRoutes": self.attachment.listeners.get(&(i, li)).copied().unwrap_or(0),
            "conditions": conditions,
        })
    }

    fn route(
        &self,
        i: usize,
        parents: &[gw::ParentReference],
        rules: &[gw::RouteRule],
        kind: &str,
        index: &Index,
    ) -> Value {
        let it = &self.items[i];
        let rns = it.object.meta().namespace();
        let object_problem = diags_under(self.items, self.diags, i, &[])
            .into_iter()
            .find(|d| {
                let full = FieldPath::parse(d.path.as_deref().unwrap_or(""));
                let rel = full.0.strip_prefix(&it.base.0[..]).unwrap_or(&full.0);
                !rel.starts_with(&[key("spec"), key("parentRefs")])
            });
        let resolved = resolved_refs(rules, rns, kind, index);
        let list: Vec<Value> = parents
            .iter()
            .enumerate()
            .map(|(pi, p)| {
                let at = [key("spec"), key("parentRefs"), Seg::Index(pi)];
                let refused = diags_under(self.items, self.diags, i, &at)
                    .into_iter()
                    .next();
                let accepted = match (
                    object_problem,
                    refused,
                    self.attachment.parents.get(&(i, pi)),
                ) {
                    (Some(d), _, _) => condition(
                        "Accepted",
                        false,
                        d.reason.unwrap_or("UnsupportedValue"),
                        &d.message,
                    ),
                    (None, Some(d), _) => condition(
                        "Accepted",
                        false,
                        d.reason.unwrap_or("NoMatchingParent"),
                        &d.message,
                    ),
                    (None, None, Some(Attach::Attached)) => {
                        condition("Accepted", true, "Accepted", "")
                    }
                    (None, None, Some(Attach::Refused(r))) => {
                        condition("Accepted", false, r.as_str(), "")
                    }
                    (None, None, None) => condition(
                        "Accepted",
                        false,
                        "NoMatchingParent",
                        "no served listener of the parent takes this route",
                    ),
                };
                let mut parent_ref = json!({
                    "group": p.group.as_deref().unwrap_or("gateway.networking.k8s.io"),
                    "kind": p.kind.as_deref().unwrap_or("Gateway"),
                    "namespace": p.namespace.as_deref().unwrap_or(rns),
                    "name": p.name,
                });
                if let Some(s) = &p.section_name {
                    parent_ref["sectionName"] = json!(s);
                }
                if let Some(port) = p.port {
                    parent_ref["port"] = json!(port);
                }
                json!({
                    "parentRef": parent_ref,
                    "controllerName": CONTROLLER_NAME,
                    "conditions": [accepted, resolved.clone()],
                })
            })
            .collect();
        json!({ "parents": list })
    }
}

/// The `ResolvedRefs` condition of a route's backendRefs: the first that is not a core
/// Service (`InvalidKind`), is not permitted by a ReferenceGrant (`RefNotPermitted`) or
/// names no Service (`BackendNotFound`).
fn resolved_refs(rules: &[gw::RouteRule], rns: &str, route_kind: &str, index: &Index) -> Value {
    for b in rules.iter().flat_map(|r| r.backend_refs.iter()) {
        let bns = b.namespace.as_deref().unwrap_or(rns);
        let kind = b.kind.as_deref().unwrap_or("Service");
        if kind != "Service" || !b.group.as_deref().unwrap_or("").is_empty() {
            return condition(
                "ResolvedRefs",
                false,
                "InvalidKind",
                &format!("backendRef {}: kind {kind} is not supported", b.name),
            );
        }
        if !index.grant_allows(
            ("gateway.networking.k8s.io", route_kind, rns),
            ("", "Service", bns, &b.name),
        ) {
            return condition(
                "ResolvedRefs",
                false,
                "RefNotPermitted",
                &format!("backendRef {bns}/{}: no ReferenceGrant permits it", b.name),
            );
        }
        if index.get(Kind::Service, bns, &b.name).is_none() {
            return condition(
                "ResolvedRefs",
                false,
                "BackendNotFound",
                &format!("Service {bns}/{} not found", b.name),
            );
        }
    }
    condition("ResolvedRefs", true, "ResolvedRefs", "")
}

/// The status JSON as lines for people: one per Gateway, listener and route parent.
pub fn text(status: &Value) -> String {
    let mut s = String::new();
    let cond = |c: &Value| -> String {
        format!(
            "{}={} ({})",
            c["type"].as_str().unwrap_or(""),
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or("")
        )
    };
    let conds = |v: &Value| -> String {
        v.as_array()
            .into_iter()
            .flatten()
            .map(cond)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for o in status.as_array().into_iter().flatten() {
        let name = format!(
            "{} {}/{}",
            o["kind"].as_str().unwrap_or(""),
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            o["metadata"]["name"].as_str().unwrap_or("")
        );
        let st = &o["status"];
        if st.get("listeners").is_some() {
            let _ = writeln!(s, "{name}: {}", conds(&st["conditions"]));
            for l in st["listeners"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    s,
                    "  listener {}: {} route(s); {}",
                    l["name"].as_str().unwrap_or(""),
                    l["attachedRoutes"],
                    conds(&l["conditions"])
                );
            }
        } else {
            for p in st["parents"].as_array().into_iter().flatten() {
                let pr = &p["parentRef"];
                let _ = writeln!(
                    s,
                    "{name} -> Gateway {}/{}{}: {}",
                    pr["namespace"].as_str().unwrap_or(""),
                    pr["name"].as_str().unwrap_or(""),
                    pr["sectionName"]
                        .as_str()
                        .map(|x| format!(" ({x})"))
                        .unwrap_or_default(),
                    conds(&p["conditions"])
                );
            }
        }
    }
    s
}
