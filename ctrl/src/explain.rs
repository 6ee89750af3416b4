//! `sluice explain`: trace one hypothetical connection through the compiled
//! configuration and say what would happen to it, as JSON.
//!
//! Output keys: `verdict` (`forward`, `drop` or `reject`), `listener`, `route`,
//! `backend` (`ip:port` or null: the Maglev pick for this 5-tuple, with the same flow
//! hash and table the dataplane uses), `backends` (the route's weighted candidates with
//! their share), `policy` (NetworkPolicy's word on client -> destination, or client ->
//! the picked backend: `{"verdict": "allow"|"deny", "egress", "ingress", "reason"}`
//! naming the policy and rule that allowed each direction or the direction that denied),
//! `inspect` (what the first bytes said) and `reason`.

use std::net::{IpAddr, SocketAddr};

use serde_json::{json, Value};
use sluice_dataplane::inspect::{self, Inspected};

use sluice_dataplane::tables::hosts::HostMatcher;
use sluice_dataplane::tables::maglev::{flow_hash, Pick};

use crate::compile::backends::table_for;
use crate::compile::ir::{
    BackendTarget, Binding, Ir, Listener, ListenerKind, Route, RouteKind, L4,
};

/// One hypothetical connection.
#[derive(Debug, Clone)]
pub struct Query {
    /// Transport.
    pub proto: L4,
    /// Client address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// SNI the client sends (TLS listeners).
    pub sni: Option<String>,
    /// Host header the client sends (HTTP listeners).
    pub http_host: Option<String>,
    /// The first bytes the client sends, parsed as the dataplane parses them.
    pub payload: Option<Vec<u8>>,
}

/// What the first bytes said, in a form the JSON and the router use.
#[derive(Debug, Default)]
struct Parsed {
    json: Option<Value>,
    sni: Option<String>,
    http_host: Option<String>,
    path: Option<String>,
}

fn inspect_payload(q: &Query) -> Parsed {
    let mut p = Parsed {
        sni: q.sni.as_ref().map(|s| s.to_ascii_lowercase()),
        http_host: q.http_host.as_ref().map(|s| s.to_ascii_lowercase()),
        ..Parsed::default()
    };
    if let Some(bytes) = &q.payload {
        let json = match inspect::classify(bytes) {
            Inspected::NeedMore { at_least } => {
                json!({"result": "need-more", "at_least": at_least, "have": bytes.len()})
            }
            Inspected::Tls(hello) => {
                let sni = hello.routing_name().map(|n| n.to_string());
                p.sni = sni.clone().or(p.sni);
                json!({
                    "result": "hello",
                    "sni": sni,
                    "server_name": format!("{:?}", hello.server_name),
                    "alpn": hello.alpn.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>(),
                    "supported_versions": hello.supported_versions.as_slice().iter().map(|v| format!("0x{v:04x}")).collect::<Vec<_>>(),
                    "ech": hello.ech,
                    "http_host": Value::Null,
                })
            }
            Inspected::TlsMalformed(m) => json!({"result": "malformed", "why": m.to_string()}),
            Inspected::Http(head) => {
                let host = head.host.map(|h| h.to_string());
                p.http_host = host.clone().or(p.http_host);
                p.path = Some(head.path.to_string());
                json!({"result": "http", "sni": Value::Null, "alpn": [], "http_host": host,
                       "method": head.method, "path": head.path})
            }
            Inspected::H2Preface => {
                json!({"result": "http", "h2_preface": true, "http_host": Value::Null})
            }
            Inspected::HttpMalformed(m) => json!({"result": "malformed", "why": format!("{m:?}")}),
            Inspected::Unknown => json!({"result": "not-tls"}),
        };
        p.json = Some(json);
    } else if p.sni.is_some() || p.http_host.is_some() {
        p.json = Some(json!({
            "result": if p.sni.is_some() { "hello" } else { "http" },
            "sni": p.sni, "alpn": [], "http_host": p.http_host, "from": "flags",
        }));
    }
    p
}

fn listener_json(l: &Listener) -> Value {
    json!({
        "name": l.name,
        "kind": l.kind,
        "port": l.port,
        "protocol": l.protocol,
        "addresses": l.addresses,
    })
}

/// The most specific binding of a listener for a name (exact, then the longest wildcard
/// suffix, then `*`), found with the dataplane's own compiled host matcher.
pub fn pick_binding<'a>(l: &'a Listener, name: Option<&str>) -> Option<&'a Binding> {
    // Each pattern's value is its binding's position.
    let patterns = l
        .bindings
        .iter()
        .zip(0..)
        .map(|(b, i)| (b.host.as_str(), i));
    let matcher = HostMatcher::from_strs(patterns).ok()?;
    let at = matcher.lookup(name.unwrap_or("").as_bytes())?;
    l.bindings.get(at as usize)
}

fn backends_json(backends: &[crate::compile::ir::Backend]) -> Value {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    Value::Array(
        backends
            .iter()
            .map(|b| {
                let share = if total == 0 {
                    0.0
                } else {
                    f64::from(b.weight) / total as f64
                };
                match &b.target {
                    BackendTarget::Endpoints(e) => {
                        json!({"name": b.name, "weight": b.weight, "share": share,
                        "endpoints": e.iter().map(|a| a.to_string()).collect::<Vec<_>>()})
                    }
                    BackendTarget::Invalid(why) => {
                        json!({"name": b.name, "weight": b.weight, "share": share,
                        "invalid": why})
                    }
                }
            })
            .collect(),
    )
}

/// Traces the connection and returns the JSON answer.
pub fn explain(ir: &Ir, q: &Query) -> Value {
    let parsed = inspect_payload(q);
    let mut out = json!({
        "connection": {
            "proto": q.proto, "src": q.src.to_string(), "dst": q.dst.to_string(),
        },
        "verdict": "drop",
        "listener": Value::Null,
        "route": Value::Null,
        "backend": Value::Null,
        "backends": [],
        "policy": Value::Null,
        "inspect": parsed.json.clone().unwrap_or(Value::Null),
        "reason": "",
    });
    let set = |out: &mut Value, k: &str, v: Value| out[k] = v;
    let dst_ip: IpAddr = q.dst.ip();
    let listener = ir.listeners.iter().find(|l| {
        l.port == q.dst.port()
            && l.protocol == q.proto
            && (l.addresses.is_empty() || l.addresses.contains(&dst_ip))
    });
    let compiled_policy = crate::compile::policy::compile(ir);
    let policy_of = |src: IpAddr, dst: SocketAddr| -> Value {
        match &compiled_policy {
            Ok(c) => crate::compile::policy::explain::explain_connection(
                ir,
                c,
                src,
                dst.ip(),
                proto_number(q.proto),
                dst.port(),
            ),
            Err(e) => json!({"verdict": Value::Null, "error":
                e.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("; ")}),
        }
    };
    let Some(l) = listener else {
        let workload = ir.workloads.iter().find(|w| w.ip == dst_ip);
        let src_workload = ir.workloads.iter().find(|w| w.ip == q.src.ip());
        let policy = policy_of(q.src.ip(), q.dst);
        let allowed = policy["verdict"] == "allow";
        let reason = match (workload, src_workload) {
            (None, None) => format!(
                "no listener on {}/{} and neither end is a workload",
                q.dst,
                proto_str(q.proto)
            ),
            (w, _) => {
                let what = match w {
                    Some(w) => format!("destination is workload {}/{}", w.namespace, w.pod),
                    None => "source is a workload".to_string(),
                };
                set(
                    &mut out,
                    "verdict",
                    json!(if allowed { "forward" } else { "drop" }),
                );
                format!(
                    "no listener on {}/{}; {what}: routed traffic, {} by NetworkPolicy: {}",
                    q.dst,
                    proto_str(q.proto),
                    if allowed { "allowed" } else { "dropped" },
                    policy["reason"].as_str().unwrap_or_default()
                )
            }
        };
        set(&mut out, "policy", policy);
        set(&mut out, "reason", Value::String(reason));
        return out;
    };
    set(&mut out, "listener", listener_json(l));
    if l.https_redirect {
        set(&mut out, "verdict", json!("reject"));
        set(
            &mut out,
            "reason",
            json!(format!(
                "httpsRedirect: plain HTTP is answered with 301 to https://{}",
                parsed.http_host.clone().unwrap_or_default()
            )),
        );
        return out;
    }
    let name = match l.kind {
        ListenerKind::TlsPassthrough | ListenerKind::TlsAutoPassthrough => parsed.sni.clone(),
        ListenerKind::TlsTerminate => {
            if l.tls.as_ref().is_some_and(|t| t.http) {
                parsed.http_host.clone().or(parsed.sni.clone())
            } else {
                parsed.sni.clone()
            }
        }
        ListenerKind::Http => parsed.http_host.clone(),
        _ => None,
    };
    let binding = pick_binding(l, name.as_deref());
    let Some(b) = binding else {
        set(&mut out, "verdict", json!("reject"));
        let decoded = (l.kind == ListenerKind::TlsAutoPassthrough)
            .then(|| name.as_deref().and_then(decode_auto_passthrough))
            .flatten();
        if let Some((port, subset, host)) = decoded {
            set(&mut out, "reason", json!(format!(
                "AUTO_PASSTHROUGH: the SNI names {host} port {port}{}, which no admitted Service provides",
                if subset.is_empty() { String::new() } else { format!(" subset {subset}") }
            )));
            return out;
        }
        let reason = match (&name, l.kind.inspects()) {
            (None, true) => "the listener routes by name and the connection names none (no SNI/Host); no catch-all route".to_string(),
            (Some(n), _) => format!("no route of this listener matches `{n}`"),
            (None, false) => "the listener has no route".to_string(),
        };
        set(&mut out, "reason", json!(reason));
        return out;
    };
    let route: &Route = &ir.routes[b.route];
    set(&mut out, "route", json!(route.name));
    if !route.destination_subnets.is_empty()
        && !route
            .destination_subnets
            .iter()
            .any(|n| n.contains(&dst_ip))
    {
        set(&mut out, "verdict", json!("reject"));
        set(
            &mut out,
            "reason",
            json!(format!(
                "{dst_ip} is outside the route's destinationSubnets"
            )),
        );
        return out;
    }
    let backends = if route.kind == RouteKind::Http {
        let path = parsed.path.clone().unwrap_or_else(|| "/".into());
        match route
            .http
            .iter()
            .find(|r| r.uri.is_empty() || r.uri.iter().any(|m| m.matches(&path)))
        {
            None => {
                set(&mut out, "verdict", json!("reject"));
                set(
                    &mut out,
                    "reason",
                    json!(format!(
                        "no http rule of {} matches path {path}",
                        route.name
                    )),
                );
                return out;
            }
            Some(rule) => {
                if let Some(r) = &rule.redirect {
                    set(&mut out, "verdict", json!("reject"));
                    set(
                        &mut out,
                        "reason",
                        json!(format!("redirect {} to {:?}", r.code, r)),
                    );
                    return out;
                }
                rule.backends.clone()
            }
        }
    } else {
        route.backends.clone()
    };
    set(&mut out, "backends", backends_json(&backends));
    let valid_weight: u64 = backends
        .iter()
        .filter(|b| matches!(b.target, BackendTarget::Endpoints(_)))
        .map(|b| u64::from(b.weight))
        .sum();
    if valid_weight == 0 {
        set(&mut out, "verdict", json!("reject"));
        set(
            &mut out,
            "reason",
            json!(
                "every backend of the route is invalid or has weight 0: connections are rejected"
            ),
        );
        return out;
    }
    let table = match table_for(&backends, route.maglev_table_size, q.dst.is_ipv6()) {
        Ok(t) => t,
        Err(e) => {
            set(&mut out, "verdict", json!("reject"));
            set(
                &mut out,
                "reason",
                json!(format!("the route's Maglev table cannot be built: {e}")),
            );
            return out;
        }
    };
    let hash = flow_hash(q.src, q.dst, proto_number(q.proto));
    match table.pick(hash) {
        Pick::Backend(a) => {
            // NetworkPolicy applies to the client -> picked backend connection.
            let policy = policy_of(q.src.ip(), a);
            let allowed = policy["verdict"] == "allow";
            set(
                &mut out,
                "verdict",
                json!(if allowed { "forward" } else { "drop" }),
            );
            set(&mut out, "backend", json!(a.to_string()));
            set(
                &mut out,
                "reason",
                json!(format!(
                    "listener {} -> route {} -> Maglev slot {} of {} -> {a}; {}: {}",
                    l.name,
                    route.name,
                    hash % table.size() as u64,
                    table.size(),
                    if allowed {
                        "NetworkPolicy allows it"
                    } else {
                        "dropped by NetworkPolicy"
                    },
                    policy["reason"].as_str().unwrap_or_default()
                )),
            );
            set(&mut out, "policy", policy);
        }
        Pick::Reject => {
            set(&mut out, "verdict", json!("reject"));
            set(&mut out, "reason", json!(format!(
                "listener {} -> route {} -> Maglev slot {} belongs to an invalid backend: connection rejected (TCP RST / ICMP port unreachable)",
                l.name,
                route.name,
                hash % table.size() as u64
            )));
        }
    }
    out
}

/// IANA protocol number of a listener transport.
fn proto_number(p: L4) -> u8 {
    match p {
        L4::Tcp => 6,
        L4::Udp => 17,
    }
}

fn proto_str(p: L4) -> &'static str {
    match p {
        L4::Tcp => "tcp",
        L4::Udp => "udp",
    }
}

/// Decodes Istio's AUTO_PASSTHROUGH SNI `outbound_.<port>_.<subset>_.<host>` into
/// (port, subset, host).
pub fn decode_auto_passthrough(sni: &str) -> Option<(u16, String, String)> {
    let rest = sni.strip_prefix("outbound_.")?;
    let (port, rest) = rest.split_once("_.")?;
    let (subset, host) = rest.split_once("_.")?;
    Some((port.parse().ok()?, subset.to_string(), host.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_passthrough_names() {
        assert_eq!(
            decode_auto_passthrough("outbound_.9080_.v1_.reviews.bookinfo.svc.cluster.local"),
            Some((
                9080,
                "v1".into(),
                "reviews.bookinfo.svc.cluster.local".into()
            ))
        );
        assert_eq!(
            decode_auto_passthrough("outbound_.443_._.a.b"),
            Some((443, String::new(), "a.b".into()))
        );
        assert_eq!(decode_auto_passthrough("a.example.com"), None);
    }
}
