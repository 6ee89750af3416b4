//! `sluice explain`: trace one hypothetical connection through the compiled
//! configuration and say what would happen to it, as JSON.
//!
//! Output keys: `verdict` (`forward`, `drop` or `reject`), `listener`, `route`,
//! `backend` (`ip:port` or null: the Maglev pick for this 5-tuple, with the same flow
//! hash and table the dataplane uses), `backends` (the route's weighted candidates with
//! their share), `policy` (NetworkPolicy's word on client -> destination, or client ->
//! the picked backend: `{"verdict": "allow"|"deny", "egress", "ingress", "reason"}`
//! naming the policy and rule that allowed each direction or the direction that denied),
//! `inspect` (what the first bytes said), `certificate` (on a terminating listener: the
//! certificate the handshake gets for the SNI — `source`, `sans`, `notAfter`, `keyType`,
//! the `listener` whose it is and the `match`: `exact`, `wildcard` or `default` — or
//! null, the verdict `reject` and the reason when the handshake would fail) and `reason`.
//!
//! On an HTTP route the request (`--http-method`, `--http-path` with its `?query`,
//! `--http-header`, `--http-scheme`, the Host; or what the payload says) is looked up
//! in the route's HTTP rules as the dataplane looks it up: `rule` names the rule that
//! matched, and the action is either the `backend` picked (forward) or the `answer`
//! sluice gives (`{"status", "location"}`: a redirect, a direct response, 404 when no
//! rule matches, 500/503 for an invalid backend).

use std::net::{IpAddr, SocketAddr};

use serde_json::{json, Value};
use sluice_dataplane::inspect::{self, Inspected};

use sluice_dataplane::tables::http::{Header, HttpAction, Request};
use sluice_dataplane::tables::listeners::{ListenerEntry, RouteEntry};
use sluice_dataplane::tables::maglev::{flow_hash, MaglevTable, Pick};
use sluice_dataplane::tables::tls::CertMatch;

use crate::compile::hostname::pattern_matches;
use crate::compile::ir::{
    specificity, Backend, BackendTarget, Listener, ListenerKind, Member, RouteKind, L4,
};
use crate::compile::Built;
use crate::model::Object;

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
    /// The HTTP request's other parts (HTTP routes).
    pub http: HttpQuery,
}

/// The parts of a hypothetical HTTP request besides its Host.
#[derive(Debug, Clone, Default)]
pub struct HttpQuery {
    /// Method (default `GET`, or the payload's).
    pub method: Option<String>,
    /// Path with an optional `?query` (default `/`, or the payload's).
    pub path: Option<String>,
    /// Header lines `(name, value)`.
    pub headers: Vec<(String, String)>,
    /// `http` or `https` (default: `https` on a terminating listener, else `http`).
    pub scheme: Option<String>,
}

/// Parses a `Name: value` header argument.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((n, v)) if !n.trim().is_empty() => Ok((n.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("`{s}` is not `Name: value`")),
    }
}

/// What the first bytes said, in a form the JSON and the router use.
#[derive(Debug, Default)]
struct Parsed {
    json: Option<Value>,
    sni: Option<String>,
    http_host: Option<String>,
    path: Option<String>,
    method: Option<String>,
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
                p.method = Some(head.method.to_string());
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

fn backends_json(backends: &[Backend]) -> Value {
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

/// The table a connection picks from, the backends it was built from, and (HTTP) the
/// status answered for an invalid backend.
type Picked<'t> = (&'t MaglevTable, Vec<Backend>, Option<u16>);

/// One trace in progress: the built configuration, the query, and the answer so far.
struct Trace<'a> {
    built: &'a Built,
    q: &'a Query,
    parsed: Parsed,
    out: Value,
}

impl Trace<'_> {
    fn set(&mut self, k: &str, v: Value) {
        self.out[k] = v;
    }

    /// Ends the trace with a verdict and its reason.
    fn end(mut self, verdict: &str, reason: String) -> Value {
        self.set("verdict", json!(verdict));
        self.set("reason", Value::String(reason));
        self.out
    }

    /// NetworkPolicy's word on `src -> dst`, from the built policy tables.
    fn policy_of(&self, src: IpAddr, dst: SocketAddr) -> Value {
        crate::compile::policy::explain::explain_connection(
            &self.built.ir,
            &self.built.snapshot.policy,
            src,
            dst.ip(),
            proto_number(self.q.proto),
            dst.port(),
        )
    }

    /// No listener: routed traffic between workloads, or nothing sluice serves.
    fn no_listener(mut self) -> Value {
        let (q, ir) = (self.q, &self.built.ir);
        let workload = ir.workloads.iter().find(|w| w.ip == q.dst.ip());
        let src_workload = ir.workloads.iter().find(|w| w.ip == q.src.ip());
        let policy = self.policy_of(q.src.ip(), q.dst);
        let allowed = policy["verdict"] == "allow";
        let reason = policy["reason"].as_str().unwrap_or_default().to_string();
        self.set("policy", policy);
        let what = match (workload, src_workload) {
            (None, None) => {
                let unserved = not_served_on_port(self.built, q.dst.port());
                let why = match unserved.first() {
                    Some(first) => {
                        format!("no listener on {}/{}: {first}", q.dst, proto_str(q.proto))
                    }
                    None => format!(
                        "no listener on {}/{} and neither end is a workload",
                        q.dst,
                        proto_str(q.proto)
                    ),
                };
                if !unserved.is_empty() {
                    self.set("not_served", json!(unserved));
                }
                return self.end("drop", why);
            }
            (Some(w), _) => format!("destination is workload {}/{}", w.namespace, w.pod),
            (None, Some(_)) => "source is a workload".to_string(),
        };
        let why = format!(
            "no listener on {}/{}; {what}: routed traffic, {} by NetworkPolicy: {reason}",
            q.dst,
            proto_str(q.proto),
            if allowed { "allowed" } else { "dropped" },
        );
        self.end(if allowed { "forward" } else { "drop" }, why)
    }

    /// The name the listener routes by: the SNI, the HTTP Host, or none.
    fn routing_name(&self, l: &Listener) -> Option<String> {
        let p = &self.parsed;
        match l.kind {
            ListenerKind::TlsPassthrough | ListenerKind::TlsAutoPassthrough => p.sni.clone(),
            ListenerKind::TlsTerminate if l.tls.as_ref().is_some_and(|t| t.http) => {
                p.http_host.clone().or(p.sni.clone())
            }
            ListenerKind::TlsTerminate => p.sni.clone(),
            ListenerKind::Http => p.http_host.clone(),
            _ => None,
        }
    }

    /// No route of the listener takes the name.
    fn no_route(mut self, l: &Listener, name: Option<&str>) -> Value {
        let decoded = (l.kind == ListenerKind::TlsAutoPassthrough)
            .then(|| name.and_then(decode_auto_passthrough))
            .flatten();
        if let Some((port, subset, host)) = decoded {
            let why = format!(
                "AUTO_PASSTHROUGH: the SNI names {host} port {port}{}, which no admitted Service provides",
                if subset.is_empty() { String::new() } else { format!(" subset {subset}") }
            );
            return self.end("reject", why);
        }
        let unserved = name
            .map(|n| not_served_routes_for(self.built, n))
            .unwrap_or_default();
        let reason = match (name, l.kind.inspects(), unserved.first()) {
            (Some(n), _, Some(first)) => format!("no route of this listener matches `{n}`: {first}"),
            (None, true, _) => "the listener routes by name and the connection names none (no SNI/Host); no catch-all route".to_string(),
            (Some(n), _, None) => format!("no route of this listener matches `{n}`"),
            (None, false, _) => "the listener has no route".to_string(),
        };
        if !unserved.is_empty() {
            self.set("not_served", json!(unserved));
        }
        self.end("reject", reason)
    }

    /// The Maglev table the dataplane picks from for this connection on route `index`,
    /// with the IR backends it was built from and (HTTP) the status answered for an
    /// invalid backend; `Err` ends the trace (no rule, an answer).
    fn table<'t>(
        &mut self,
        index: usize,
        entry: &'t RouteEntry,
    ) -> Result<Picked<'t>, (&'static str, String)> {
        let route = &self.built.ir.routes[index];
        let dst_v6 = self.q.dst.is_ipv6();
        if route.kind != RouteKind::Http {
            return Ok((
                table_of(&entry.table, entry.table_v6.as_ref(), dst_v6),
                route.backends.clone(),
                None,
            ));
        }
        let (answer, found) = self.http_lookup(entry);
        let Some((rule_name, action)) = found else {
            self.set("answer", answer);
            return Err((
                "reject",
                format!("no HTTP rule of {} matches the request: 404", route.name),
            ));
        };
        self.set("rule", json!(rule_name));
        match action {
            HttpAction::Forward {
                table,
                table_v6,
                invalid_status,
            } => {
                let backends = route
                    .http
                    .iter()
                    .find(|r| r.name == rule_name)
                    .map(|r| match &r.action {
                        crate::compile::ir::HttpAction::Forward { backends, .. } => {
                            backends.clone()
                        }
                        _ => Vec::new(),
                    })
                    .unwrap_or_default();
                Ok((
                    table_of(table, table_v6.as_ref(), dst_v6),
                    backends,
                    Some(*invalid_status),
                ))
            }
            _ => {
                self.set("answer", answer);
                Err(("reject", format!("rule {rule_name} answers itself")))
            }
        }
    }

    /// Looks the query's HTTP request up in a route's rules: the answer sluice gives
    /// (404 when no rule matches, the redirect, the direct response), and the rule.
    fn http_lookup<'t>(&self, entry: &'t RouteEntry) -> (Value, Option<(String, &'t HttpAction)>) {
        let h = &self.q.http;
        let target = h
            .path
            .clone()
            .or_else(|| self.parsed.path.clone())
            .unwrap_or_else(|| "/".into());
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let terminating = self
            .built
            .snapshot
            .listeners
            .lookup(
                self.q.dst.ip(),
                self.q.dst.port(),
                proto_number(self.q.proto),
            )
            .is_some_and(|l| l.tls.is_some());
        let scheme = h
            .scheme
            .clone()
            .unwrap_or_else(|| if terminating { "https" } else { "http" }.into());
        let method = h
            .method
            .clone()
            .or_else(|| self.parsed.method.clone())
            .unwrap_or_else(|| "GET".into());
        let authority = self.parsed.http_host.clone().unwrap_or_default();
        let headers: Vec<Header> = h
            .headers
            .iter()
            .map(|(n, v)| Header {
                name: n,
                value: v.as_bytes(),
            })
            .collect();
        let req = Request {
            method: &method,
            scheme: &scheme,
            authority: &authority,
            path,
            query,
            headers: &headers,
            port: self.q.dst.port(),
            source: self.q.src.ip(),
        };
        let Some((m, rule)) = entry.http.find(&req) else {
            return (json!({"status": 404, "location": Value::Null}), None);
        };
        let answer = match &rule.action {
            HttpAction::Redirect(r) => {
                let mut out = [0u8; 4096];
                let location = r
                    .write_location(&req, m, &mut out)
                    .map(|n| String::from_utf8_lossy(&out[..n]).into_owned());
                json!({"status": r.code, "location": location})
            }
            HttpAction::Direct { status, body } => {
                json!({"status": status, "location": Value::Null, "body_bytes": body.len()})
            }
            HttpAction::Forward { invalid_status, .. } => {
                json!({"status": invalid_status, "location": Value::Null})
            }
        };
        (answer, Some((rule.name.to_string(), &rule.action)))
    }

    /// The listener took the connection: route by name, check the route's destination
    /// subnets, pick from its Maglev table, ask NetworkPolicy about the backend.
    fn through(mut self, entry: &ListenerEntry) -> Value {
        let (q, built) = (self.q, self.built);
        let Some(l) = built.ir.listeners.iter().find(|l| *l.name == *entry.name) else {
            return self.end("drop", format!("listener {} is not in the IR", entry.name));
        };
        self.set("listener", listener_json(l));
        if entry.https_redirect {
            let why = format!(
                "httpsRedirect: plain HTTP is answered with 301 to https://{}",
                self.parsed.http_host.clone().unwrap_or_default()
            );
            return self.end("reject", why);
        }
        if l.kind == ListenerKind::TlsTerminate {
            match certificate_for(l, self.parsed.sni.as_deref()) {
                Ok(cert) => self.set("certificate", cert),
                Err(why) => {
                    self.set("certificate", Value::Null);
                    return self.end("reject", format!("TLS handshake fails: {why}"));
                }
            }
            // What the handshake asks of the client: its certificate verified against
            // these CAs and pins (`optional`: OPTIONAL_MUTUAL), or nothing (null).
            let client = l.tls.as_ref().and_then(|t| t.client.as_ref());
            self.set("client_certificate", json!(client));
        }
        let name = self.routing_name(l);
        if l.members.len() > 1 {
            // Listeners sharing the port: the name selects one first.
            let chosen = selected_member(l, name.as_deref().unwrap_or(""));
            self.set(
                "listener_selected",
                chosen.map_or(Value::Null, |m| json!(m.name)),
            );
        }
        let Some(index) = entry.route(name.as_deref().unwrap_or("").as_bytes()) else {
            return self.no_route(l, name.as_deref());
        };
        let Some(route) = built.snapshot.listeners.route(index) else {
            return self.end("drop", format!("route {index} is not in the tables"));
        };
        self.set("route", json!(&*route.name));
        let losers = lost_to(self.built, &route.name, name.as_deref());
        if !losers.is_empty() {
            // Routes that wanted this name too and lost it by precedence.
            self.set("precedence_losers", json!(losers));
        }
        if !route.applies_to(q.dst.ip()) {
            let why = format!("{} is outside the route's destinationSubnets", q.dst.ip());
            return self.end("reject", why);
        }
        let (table, backends, invalid_status) = match self.table(index as usize, route) {
            Ok(t) => t,
            Err((verdict, why)) => return self.end(verdict, why),
        };
        let invalid_answer = |t: &mut Self| {
            if let Some(status) = invalid_status {
                t.set("answer", json!({"status": status, "location": Value::Null}));
            }
        };
        self.set("backends", backends_json(&backends));
        let valid_weight: u64 = backends
            .iter()
            .filter(|b| matches!(b.target, BackendTarget::Endpoints(_)))
            .map(|b| u64::from(b.weight))
            .sum();
        if valid_weight == 0 {
            invalid_answer(&mut self);
            let why = match invalid_status {
                Some(s) => format!("every backend of the rule is invalid or has weight 0: requests are answered with {s}"),
                None => "every backend of the route is invalid or has weight 0: connections are rejected".to_string(),
            };
            return self.end("reject", why);
        }
        let hash = flow_hash(q.src, q.dst, proto_number(q.proto));
        let slot = hash % table.size() as u64;
        match table.pick(hash) {
            Pick::Backend(a) => {
                // NetworkPolicy applies to the client -> picked backend connection.
                let policy = self.policy_of(q.src.ip(), a);
                let allowed = policy["verdict"] == "allow";
                let why = format!(
                    "listener {} -> route {} -> Maglev slot {slot} of {} -> {a}; {}: {}",
                    l.name,
                    route.name,
                    table.size(),
                    if allowed {
                        "NetworkPolicy allows it"
                    } else {
                        "dropped by NetworkPolicy"
                    },
                    policy["reason"].as_str().unwrap_or_default()
                );
                self.set("backend", json!(a.to_string()));
                self.set("policy", policy);
                self.end(if allowed { "forward" } else { "drop" }, why)
            }
            Pick::Reject => {
                invalid_answer(&mut self);
                let why = format!(
                    "listener {} -> route {} -> Maglev slot {slot} belongs to an invalid backend: connection rejected (TCP RST / ICMP port unreachable)",
                    l.name, route.name
                );
                self.end("reject", why)
            }
        }
    }
}

/// The table of a backend set for the destination's family.
fn table_of<'t>(v4: &'t MaglevTable, v6: Option<&'t MaglevTable>, dst_v6: bool) -> &'t MaglevTable {
    match (v6, dst_v6) {
        (Some(t), true) => t,
        _ => v4,
    }
}

/// Traces the connection through the built tables (the listener table, host matcher,
/// Maglev tables and policy tables the workers read) and returns the JSON answer.
pub fn explain(built: &Built, q: &Query) -> Value {
    let parsed = inspect_payload(q);
    let out = json!({
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
    let trace = Trace {
        built,
        q,
        parsed,
        out,
    };
    let entry = built
        .snapshot
        .listeners
        .lookup(q.dst.ip(), q.dst.port(), proto_number(q.proto));
    match entry {
        Some(e) => trace.through(e),
        None => trace.no_listener(),
    }
}

/// The certificate a terminating listener serves a handshake with this SNI (or none),
/// chosen by the same resolver the dataplane serves it with, or why there is none.
fn certificate_for(l: &Listener, sni: Option<&str>) -> Result<Value, String> {
    let resolver = crate::compile::tls::resolver(l).map_err(|e| e.to_string())?;
    let shown = sni.map_or_else(|| "no SNI".to_string(), |s| format!("SNI `{s}`"));
    let Some(choice) = resolver.pick(sni.map(str::as_bytes)) else {
        let member = match sni {
            Some(s) => selected_member(l, s).or_else(|| catch_all(l)),
            None => catch_all(l),
        };
        return Err(match member {
            Some(m) => format!("{shown} selects {}, which has no certificate", m.name),
            None if sni.is_some() => {
                format!("{shown} matches no hostname of this listener and none takes every name")
            }
            None => format!("{shown}, and no listener on this port takes every name"),
        });
    };
    let m = l
        .members
        .get(choice.member)
        .ok_or_else(|| "the certificate's listener is not in the IR".to_string())?;
    let c = m
        .certificates
        .get(choice.cert)
        .ok_or_else(|| "the certificate is not in the IR".to_string())?;
    let by = match choice.by {
        CertMatch::Exact => "exact",
        CertMatch::Wildcard => "wildcard",
        CertMatch::Default => "default",
    };
    Ok(json!({
        "source": c.source,
        "sans": c.sans,
        "notAfter": c.not_after,
        "keyType": c.key_type,
        "listener": m.name,
        "match": by,
    }))
}

/// The member of a shared listener without hostname.
fn catch_all(l: &Listener) -> Option<&Member> {
    l.members
        .iter()
        .find(|m| m.hostnames.is_empty() || m.hostnames.iter().any(|h| h == "*"))
}

/// The member of a shared listener that a name selects: the most specific hostname that
/// matches it (exact, then longest wildcard suffix), else the member without hostname.
fn selected_member<'l>(l: &'l Listener, name: &str) -> Option<&'l Member> {
    l.members
        .iter()
        .flat_map(|m| m.hostnames.iter().map(move |h| (h, m)))
        .filter(|(h, _)| !name.is_empty() && pattern_matches(h, name))
        .min_by_key(|(h, _)| specificity(h))
        .map(|(_, m)| m)
        .or_else(|| l.members.iter().find(|m| m.hostnames.is_empty()))
}

/// The objects that lost a host matching `name` to the object of route `route` by
/// precedence.
fn lost_to(built: &Built, route: &str, name: Option<&str>) -> Vec<String> {
    built
        .ir
        .shadowed
        .iter()
        .filter(|s| route == s.winner || route.starts_with(&format!("{} ", s.winner)))
        .filter(|s| name.is_none_or(|n| pattern_matches(&s.host, n)))
        .map(|s| s.loser.clone())
        .collect()
}

/// The routes left out of the tables whose hostnames match `name`, each as `Kind ns/name
/// is not served: why`.
fn not_served_routes_for(built: &Built, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, it) in built.items.iter().enumerate() {
        if !built.excluded.item(i) {
            continue;
        }
        let hosts: Vec<&str> = match &it.object {
            Object::VirtualService(v) => v.spec.hosts.iter().map(String::as_str).collect(),
            Object::TlsRoute(r) if r.spec.hostnames.is_empty() => vec!["*"],
            Object::TlsRoute(r) => r.spec.hostnames.iter().map(String::as_str).collect(),
            _ => continue,
        };
        if !hosts.iter().any(|h| pattern_matches(h, name)) {
            continue;
        }
        let label = it.object.label();
        let why = built
            .not_served()
            .find(|d| d.object.as_deref() == Some(label.as_str()))
            .map(|d| format!("{}: {}", d.path.as_deref().unwrap_or(""), d.message))
            .unwrap_or_default();
        out.push(format!("{label} is not served: {why}"));
    }
    out
}

/// The gateway listeners on `port` that are not served, each as `name is not served: why`.
fn not_served_on_port(built: &Built, port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for d in built.not_served() {
        let Some(it) = built
            .items
            .iter()
            .find(|it| Some(it.object.label()) == d.object && *it.origin.file == *d.file)
        else {
            continue;
        };
        let rel = d.path.as_deref().unwrap_or("");
        let index = |list: &str| {
            rel.strip_prefix(&format!("spec.{list}["))
                .and_then(|r| r.split(']').next())
                .and_then(|i| i.parse::<usize>().ok())
        };
        let on_port = match &it.object {
            Object::Gateway(g) => index("listeners")
                .and_then(|i| g.spec.listeners.get(i))
                .is_some_and(|l| l.port == u32::from(port)),
            Object::IstioGateway(g) => index("servers")
                .and_then(|i| g.spec.servers.get(i))
                .is_some_and(|s| s.port.number == u32::from(port)),
            _ => false,
        };
        if on_port {
            out.push(format!(
                "{} {} is not served: {}",
                it.object.label(),
                rel,
                d.message
            ));
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
