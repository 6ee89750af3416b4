//! Istio Gateway, VirtualService and DestinationRule.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::istio::{self, TlsMode};
use crate::model::{Kind, Object};

use super::fields::{cidr, maglev_size, weight};
use super::hostnames::{istio_host_error, service_of_host};
use super::index::Index;

/// Istio `Port.protocol` values (seed 000).
pub const ISTIO_PROTOCOLS: &[&str] = &[
    "HTTP", "HTTPS", "GRPC", "GRPC-WEB", "HTTP2", "MONGO", "TCP", "TLS",
];

/// What the servers of one Istio Gateway bound so far on a (bind, port): the protocol
/// class, and each host with how it is handled (plain, passthrough, terminate).
type PortUse = (String, BTreeMap<String, &'static str>);

pub(super) fn istio_gateway(it: &Item, spec: &istio::GatewaySpec, r: &mut Reporter) {
    if spec.servers.is_empty() {
        r.error(
            &it.path("spec.servers"),
            "a Gateway needs at least one server",
        );
    }
    let mut names = BTreeSet::new();
    // (bind, port) -> (protocol class, hosts seen)
    let mut ports: BTreeMap<(String, u32), PortUse> = BTreeMap::new();
    for (i, s) in spec.servers.iter().enumerate() {
        let at = format!("spec.servers[{i}]");
        if !(1..=65535).contains(&s.port.number) {
            r.error(
                &it.path(&format!("{at}.port.number")),
                format!("port {} is out of range 1..65535", s.port.number),
            );
        }
        let proto = s.port.protocol.to_ascii_uppercase();
        if !ISTIO_PROTOCOLS.contains(&proto.as_str()) {
            r.error(
                &it.path(&format!("{at}.port.protocol")),
                format!(
                    "unknown protocol `{}` (expected one of {})",
                    s.port.protocol,
                    ISTIO_PROTOCOLS.join(", ")
                ),
            );
        }
        if s.port.name.is_empty() {
            r.error(
                &it.path(&format!("{at}.port.name")),
                "port name is required",
            );
        }
        if let Some(n) = &s.name {
            if !names.insert(n.clone()) {
                r.error(
                    &it.path(&format!("{at}.name")),
                    format!("duplicate server name `{n}`"),
                );
            }
        }
        if let Some(b) = &s.bind {
            if b.parse::<IpAddr>().is_err() {
                r.error(
                    &it.path(&format!("{at}.bind")),
                    format!("bind `{b}` must be an IP address on an appliance"),
                );
            }
        }
        if s.hosts.is_empty() {
            r.error(
                &it.path(&format!("{at}.hosts")),
                "a server needs at least one host",
            );
        }
        for (j, h) in s.hosts.iter().enumerate() {
            if let Some(e) = istio_host_error(h, true) {
                r.error(&it.path(&format!("{at}.hosts[{j}]")), e);
            }
        }
        if let Some(tls) = &s.tls {
            server_tls(it, &format!("{at}.tls"), tls, &proto, r);
        } else if matches!(proto.as_str(), "HTTPS" | "TLS") {
            r.error(
                &it.path(&format!("{at}.tls")),
                format!("a {proto} server needs tls settings"),
            );
        }
        let class = match proto.as_str() {
            "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB" => "HTTP",
            "HTTPS" | "TLS" => "TLS",
            _ => "TCP",
        };
        let key = (s.bind.clone().unwrap_or_default(), s.port.number);
        let entry = ports
            .entry(key)
            .or_insert_with(|| (class.to_string(), BTreeMap::new()));
        let conflict = entry.0 != class || (class == "TCP" && !entry.1.is_empty());
        if entry.0 != class {
            r.not_served_because(&it.path(&format!("{at}.port")), "ProtocolConflict", format!("port {} is already used by a {} server of this gateway; {class} cannot share it", s.port.number, entry.0));
        } else if class == "TCP" && !entry.1.is_empty() {
            r.not_served_because(
                &it.path(&format!("{at}.port")),
                "PortUnavailable",
                format!(
                    "two TCP servers on port {}: TCP cannot be told apart by host",
                    s.port.number
                ),
            );
        }
        let handling = match s.tls.as_ref().map(|t| t.mode) {
            _ if class != "TLS" => "plain",
            Some(TlsMode::Passthrough | TlsMode::AutoPassthrough) | None => "passthrough",
            Some(_) => "terminate",
        };
        if handling == "terminate" {
            if let Some(tls) = &s.tls {
                terminate_settings(it, &format!("{at}.tls"), tls, r);
            }
        }
        for h in &s.hosts {
            if class == "TCP" || conflict {
                break;
            }
            match entry.1.insert(h.clone(), handling) {
                Some(prev) if prev != handling => r.error(
                    &it.path(&format!("{at}.hosts")),
                    format!(
                        "host `{h}` is both {prev} and {handling} on port {}: one TLS port cannot pass a name through and terminate it",
                        s.port.number
                    ),
                ),
                Some(_) => r.not_served_because(
                    &it.path(&format!("{at}.hosts")),
                    "HostnameConflict",
                    format!("host `{h}` appears twice on port {}", s.port.number),
                ),
                None => {}
            }
        }
        if class == "TCP" {
            entry.1.insert("*".into(), handling);
        }
    }
}

fn server_tls(it: &Item, at: &str, tls: &istio::ServerTlsSettings, proto: &str, r: &mut Reporter) {
    let p = |f: &str| it.path(&format!("{at}.{f}"));
    let has_files = tls.server_certificate.is_some()
        || tls.private_key.is_some()
        || tls.ca_certificates.is_some();
    if tls.https_redirect && proto != "HTTP" {
        r.error(
            &p("httpsRedirect"),
            "httpsRedirect applies to HTTP servers only",
        );
    }
    if tls.https_redirect && proto == "HTTP" {
        return; // An HTTP server with httpsRedirect needs nothing else.
    }
    if tls.credential_name.is_some() && has_files {
        // Istio takes the Secret and ignores the files.
        r.warn(
            &p("credentialName"),
            "credentialName and serverCertificate/privateKey/caCertificates are both set: \
             credentialName wins (as in Istio), the files are ignored",
        );
    }
    // The Secret credentialName names is read, and checked, with the certificates
    // (`compile::certs`): a missing or bad one leaves this server out.
    match tls.mode {
        TlsMode::Simple | TlsMode::Mutual | TlsMode::OptionalMutual => {
            if tls.credential_name.is_none() {
                if tls.server_certificate.is_none() {
                    r.error(
                        &p("serverCertificate"),
                        format!(
                            "mode {} needs serverCertificate (or credentialName)",
                            tls.mode.as_str()
                        ),
                    );
                }
                if tls.private_key.is_none() {
                    r.error(
                        &p("privateKey"),
                        format!(
                            "mode {} needs privateKey (or credentialName)",
                            tls.mode.as_str()
                        ),
                    );
                }
                if matches!(tls.mode, TlsMode::Mutual | TlsMode::OptionalMutual)
                    && tls.ca_certificates.is_none()
                {
                    r.error(
                        &p("caCertificates"),
                        format!(
                            "mode {} needs caCertificates (or credentialName with a CA)",
                            tls.mode.as_str()
                        ),
                    );
                }
            }
            // credentialName's CA (`ca.crt`/`cacert` in it or in `<name>-cacert`) is
            // read with the certificates (`compile::certs`): a Secret without one leaves
            // this server out, not the whole configuration.
        }
        TlsMode::IstioMutual => {
            if has_files || tls.credential_name.is_some() {
                r.error(&p("mode"), "ISTIO_MUTUAL uses Istio's certificates: serverCertificate, privateKey, caCertificates and credentialName must be empty");
            }
        }
        TlsMode::Passthrough | TlsMode::AutoPassthrough => {
            if proto == "HTTPS" {
                r.error(
                    &p("mode"),
                    format!(
                        "mode {} on an HTTPS server; use protocol TLS for passthrough",
                        tls.mode.as_str()
                    ),
                );
            }
        }
    }
    if tls.min_protocol_version != istio::TlsProtocol::Auto
        && tls.max_protocol_version != istio::TlsProtocol::Auto
        && tls.min_protocol_version > tls.max_protocol_version
    {
        r.error(
            &p("minProtocolVersion"),
            "minProtocolVersion is above maxProtocolVersion",
        );
    }
}

/// A terminating server's mode and handshake settings: SIMPLE, MUTUAL, OPTIONAL_MUTUAL
/// and ISTIO_MUTUAL are served (their CA certificates are loaded, and checked, with the
/// server certificates: `compile::certs`); protocol versions and cipher suites rustls
/// cannot honour exactly, and pins that do not parse, leave the server out rather than
/// serve it wider or narrower than asked.
fn terminate_settings(it: &Item, at: &str, tls: &istio::ServerTlsSettings, r: &mut Reporter) {
    let p = |f: &str| it.path(&format!("{at}.{f}"));
    match tls.mode {
        TlsMode::Simple | TlsMode::Mutual | TlsMode::OptionalMutual | TlsMode::IstioMutual => {}
        TlsMode::Passthrough | TlsMode::AutoPassthrough => return,
    }
    for (field, v) in [
        ("minProtocolVersion", tls.min_protocol_version),
        ("maxProtocolVersion", tls.max_protocol_version),
    ] {
        if matches!(v, istio::TlsProtocol::V1_0 | istio::TlsProtocol::V1_1) {
            r.not_served_because(
                &p(field),
                "UnsupportedValue",
                format!(
                    "{field} {}: sluice terminates TLS 1.2 and 1.3 only (rustls has no TLS 1.0 \
                     or 1.1): this server is not served",
                    if v == istio::TlsProtocol::V1_0 {
                        "TLSV1_0"
                    } else {
                        "TLSV1_1"
                    }
                ),
            );
        }
    }
    for (k, name) in tls.cipher_suites.iter().enumerate() {
        let served = crate::compile::tls::CIPHER_SUITES;
        if !served.iter().any(|(n, _)| n == name) {
            r.not_served_because(
                &p(&format!("cipherSuites[{k}]")),
                "UnsupportedValue",
                format!(
                    "cipher suite `{name}` is not served (sluice serves {}): this server is \
                     not served",
                    served
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
    let client_side = [
        ("caCertificates", tls.ca_certificates.is_some()),
        ("caCrl", tls.ca_crl.is_some()),
        ("subjectAltNames", !tls.subject_alt_names.is_empty()),
        (
            "verifyCertificateSpki",
            !tls.verify_certificate_spki.is_empty(),
        ),
        (
            "verifyCertificateHash",
            !tls.verify_certificate_hash.is_empty(),
        ),
    ];
    if tls.mode != TlsMode::Simple {
        // The pins of a server that verifies client certificates: one that does not
        // parse would check nothing, so the server is left out.
        let auth = crate::compile::ir::ClientAuth {
            spki: tls.verify_certificate_spki.clone(),
            hash: tls.verify_certificate_hash.clone(),
            ..Default::default()
        };
        if let Err(e) = crate::compile::certs::trust::pins(&auth) {
            let field = match &e {
                crate::compile::certs::trust::PinError::Spki(i, _) => {
                    format!("verifyCertificateSpki[{i}]")
                }
                crate::compile::certs::trust::PinError::Hash(i, _) => {
                    format!("verifyCertificateHash[{i}]")
                }
            };
            r.not_served_because(
                &p(&field),
                "UnsupportedValue",
                format!("{e}: this server is not served"),
            );
        }
        return;
    }
    for (field, set) in client_side {
        if set {
            r.warn(
                &p(field),
                format!(
                    "{field} verifies client certificates, which mode SIMPLE does not request: \
                     ignored"
                ),
            );
        }
    }
}

/// Splits an Istio gateway reference `[ns/]name` (default namespace: the VirtualService's).
pub fn split_gateway_ref<'a>(r: &'a str, own_ns: &'a str) -> (&'a str, &'a str) {
    match r.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (own_ns, r),
    }
}

pub(super) fn virtual_service(
    it: &Item,
    spec: &istio::VirtualServiceSpec,
    index: &Index,
    r: &mut Reporter,
) {
    let ns = it.object.meta().namespace().to_string();
    if spec.hosts.is_empty() {
        r.error(
            &it.path("spec.hosts"),
            "a VirtualService needs at least one host",
        );
    }
    for (i, h) in spec.hosts.iter().enumerate() {
        if let Some(e) = istio_host_error(h, false) {
            r.error(&it.path(&format!("spec.hosts[{i}]")), e);
        }
    }
    let gateway_refs = |list: &[String], at: &str, r: &mut Reporter| {
        for (i, g) in list.iter().enumerate() {
            if g == "mesh" {
                continue;
            }
            let (gns, name) = split_gateway_ref(g, &ns);
            if index.get(Kind::IstioGateway, gns, name).is_none() {
                r.not_served(
                    &it.path(&format!("{at}[{i}]")),
                    format!("Gateway {gns}/{name} not found: not bound to it"),
                );
            }
        }
    };
    gateway_refs(&spec.gateways, "spec.gateways", r);
    if spec.gateways.iter().all(|g| g == "mesh") {
        r.warn(
            &it.path("spec.gateways"),
            "this VirtualService binds no gateway (no `gateways`, or only `mesh`: it is for \
             sidecars); an appliance serves gateways, so it has no effect here",
        );
    }
    let dests = |route: &[istio::RouteDestination], at: &str, r: &mut Reporter| {
        for (i, d) in route.iter().enumerate() {
            let here = format!("{at}[{i}]");
            weight(it, &format!("{here}.weight"), d.weight, r);
            destination(
                it,
                &format!("{here}.destination"),
                &d.destination,
                &ns,
                index,
                r,
            );
        }
        if route.len() > 1 && route.iter().all(|d| d.weight.is_none()) {
            r.warn(
                &it.path(at),
                "several destinations without weights: each gets weight 1 (an equal share)",
            );
        }
    };
    for (i, h) in spec.http.iter().enumerate() {
        let at = format!("spec.http[{i}]");
        for (j, m) in h.matches.iter().enumerate() {
            gateway_refs(&m.gateways, &format!("{at}.match[{j}].gateways"), r);
            http_match(it, &format!("{at}.match[{j}]"), m, r);
        }
        http_actions(it, &at, h, r);
        let plain: Vec<istio::RouteDestination> = h
            .route
            .iter()
            .map(istio::HttpRouteDestination::plain)
            .collect();
        dests(&plain, &format!("{at}.route"), r);
    }
    for (i, t) in spec.tls.iter().enumerate() {
        let at = format!("spec.tls[{i}]");
        if t.matches.is_empty() {
            r.error(
                &it.path(&format!("{at}.match")),
                "a tls route needs at least one match with sniHosts",
            );
        }
        for (j, m) in t.matches.iter().enumerate() {
            let mat = format!("{at}.match[{j}]");
            if m.sni_hosts.is_empty() {
                r.error(&it.path(&format!("{mat}.sniHosts")), "sniHosts is required");
            }
            for (k, h) in m.sni_hosts.iter().enumerate() {
                if let Some(e) = istio_host_error(h, false) {
                    r.error(&it.path(&format!("{mat}.sniHosts[{k}]")), e);
                }
            }
            for (k, c) in m.destination_subnets.iter().enumerate() {
                cidr(it, &format!("{mat}.destinationSubnets[{k}]"), c, r);
            }
            gateway_refs(&m.gateways, &format!("{mat}.gateways"), r);
        }
        if t.route.is_empty() {
            r.error(
                &it.path(&format!("{at}.route")),
                "a tls route needs at least one destination",
            );
        }
        dests(&t.route, &format!("{at}.route"), r);
    }
    for (i, t) in spec.tcp.iter().enumerate() {
        let at = format!("spec.tcp[{i}]");
        for (j, m) in t.matches.iter().enumerate() {
            let mat = format!("{at}.match[{j}]");
            for (k, c) in m.destination_subnets.iter().enumerate() {
                cidr(it, &format!("{mat}.destinationSubnets[{k}]"), c, r);
            }
            if !m.source_labels.is_empty() {
                r.warn(
                    &it.path(&format!("{mat}.sourceLabels")),
                    "sourceLabels selects sidecar workloads; ignored on an appliance",
                );
            }
            gateway_refs(&m.gateways, &format!("{mat}.gateways"), r);
        }
        if t.route.is_empty() {
            r.error(
                &it.path(&format!("{at}.route")),
                "a tcp route needs at least one destination",
            );
        }
        dests(&t.route, &format!("{at}.route"), r);
    }
}

fn destination(
    it: &Item,
    at: &str,
    d: &istio::Destination,
    ns: &str,
    index: &Index,
    r: &mut Reporter,
) {
    if d.host.is_empty() {
        r.error(
            &it.path(&format!("{at}.host")),
            "destination host is required",
        );
        return;
    }
    let (sns, name) = service_of_host(&d.host, ns);
    let Some(svc) = index.get(Kind::Service, sns, name) else {
        r.warn(&it.path(&format!("{at}.host")), format!("Service {sns}/{name} not found: this destination is invalid and its share of connections will be rejected"));
        return;
    };
    if let (Some(port), Object::Service(s)) = (&d.port, &svc.object) {
        if !s
            .spec
            .ports
            .iter()
            .any(|p| p.port == i64::from(port.number))
        {
            r.error(
                &it.path(&format!("{at}.port.number")),
                format!("Service {sns}/{name} has no port {}", port.number),
            );
        }
    } else if let Object::Service(s) = &svc.object {
        if s.spec.ports.len() > 1 {
            r.warn(
                &it.path(&format!("{at}.port")),
                format!("Service {sns}/{name} has several ports and destination.port.number is not set: this destination is invalid and its share of connections will be rejected"),
            );
        }
    }
    if let Some(subset) = &d.subset {
        if !index.defines_subset(sns, name, subset) {
            r.warn(&it.path(&format!("{at}.subset")), format!("no DestinationRule defines subset `{subset}` of {sns}/{name}: this destination is invalid and its share of connections will be rejected"));
        }
    }
}

pub(super) fn destination_rule(it: &Item, spec: &istio::DestinationRuleSpec, r: &mut Reporter) {
    if spec.host.is_empty() {
        r.error(&it.path("spec.host"), "host is required");
    }
    let lb = |tp: &Option<istio::TrafficPolicy>, at: &str, r: &mut Reporter| {
        if let Some(lb) = tp.as_ref().and_then(|t| t.load_balancer.as_ref()) {
            if let Some(s) = &lb.simple {
                r.warn(&it.path(&format!("{at}.loadBalancer.simple")), format!("loadBalancer.simple {s} is not implemented: sluice always balances with Maglev"));
            }
            if let Some(m) = lb.consistent_hash.as_ref().and_then(|c| c.maglev.as_ref()) {
                maglev_size(
                    it,
                    &format!("{at}.loadBalancer.consistentHash.maglev.tableSize"),
                    m.table_size,
                    r,
                );
            }
        }
    };
    lb(&spec.traffic_policy, "spec.trafficPolicy", r);
    let mut names = BTreeSet::new();
    for (i, s) in spec.subsets.iter().enumerate() {
        if s.name.is_empty() {
            r.error(
                &it.path(&format!("spec.subsets[{i}].name")),
                "subset name is required",
            );
        } else if !names.insert(s.name.clone()) {
            r.error(
                &it.path(&format!("spec.subsets[{i}].name")),
                format!("duplicate subset `{}`", s.name),
            );
        }
        lb(
            &s.traffic_policy,
            &format!("spec.subsets[{i}].trafficPolicy"),
            r,
        );
    }
}

/// Checks one `HTTPMatchRequest`: each StringMatch sets at most one of exact, prefix and
/// regex; expressions compile (RE2, within the DFA limits); what sluice cannot match
/// exactly is not served.
fn http_match(it: &Item, at: &str, m: &istio::HttpMatchRequest, r: &mut Reporter) {
    let check = |field: String, sm: &istio::StringMatch, r: &mut Reporter| {
        let set = [sm.exact.is_some(), sm.prefix.is_some(), sm.regex.is_some()]
            .iter()
            .filter(|b| **b)
            .count();
        if set > 1 {
            r.error(
                &it.path(&field),
                "set exactly one of exact, prefix and regex",
            );
        }
        if let Some(re) = &sm.regex {
            if let Err(e) = sluice_dataplane::tables::http::Regex::new(re) {
                r.not_served(&it.path(&format!("{field}.regex")), e.to_string());
            }
        }
    };
    for (name, sm) in [
        ("uri", &m.uri),
        ("scheme", &m.scheme),
        ("authority", &m.authority),
    ] {
        if let Some(sm) = sm {
            check(format!("{at}.{name}"), sm, r);
        }
    }
    if let Some(sm) = &m.method {
        check(format!("{at}.method"), sm, r);
        if sm.exact.is_none() {
            r.not_served(
                &it.path(&format!("{at}.method")),
                "method matches by prefix or regex are not implemented (only exact): \
                 ignoring it would send every method here",
            );
        }
    }
    for (list, what) in [
        (&m.headers, "headers"),
        (&m.without_headers, "withoutHeaders"),
    ] {
        for (k, sm) in list {
            check(format!("{at}.{what}.{k}"), sm, r);
        }
    }
    for (k, sm) in &m.query_params {
        check(format!("{at}.queryParams.{k}"), sm, r);
        if sm.prefix.is_some() {
            // Istio: "prefix matching is currently not supported" for queryParams.
            r.not_served(
                &it.path(&format!("{at}.queryParams.{k}")),
                "queryParams prefix matches are not supported by Istio (only exact and \
                 regex)",
            );
        }
    }
    if m.port.is_some_and(|p| p == 0 || p > 65535) {
        r.error(&it.path(&format!("{at}.port")), "not a port number");
    }
}

/// Checks an `http` entry's actions: exactly one of `route`, `redirect`,
/// `directResponse` (Istio's rules; `delegate` is not served); rewrite, headers,
/// timeout, retries and mirrors as sluice compiles them.
fn http_actions(it: &Item, at: &str, h: &istio::HttpRoute, r: &mut Reporter) {
    let actions = [
        !h.route.is_empty(),
        h.redirect.is_some(),
        h.direct_response.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if actions == 0 {
        r.error(
            &it.path(at),
            "an http route needs one of `route`, `redirect` and `directResponse`",
        );
    } else if actions > 1 {
        r.error(
            &it.path(at),
            "`route`, `redirect` and `directResponse` are mutually exclusive",
        );
    }
    for (i, d) in h.route.iter().enumerate() {
        if d.headers.is_some() {
            r.not_served(
                &it.path(&format!("{at}.route[{i}].headers")),
                "per-destination header changes are not implemented: a rule's header changes \
                 are one set of operations whatever backend the request goes to, so these \
                 cannot be expressed",
            );
        }
    }
    if let Some(x) = &h.redirect {
        if x.port.is_some() && x.derive_port.is_some() {
            r.error(
                &it.path(&format!("{at}.redirect")),
                "set one of port and derivePort",
            );
        }
        if let Some(d) = &x.derive_port {
            if !matches!(d.as_str(), "FROM_PROTOCOL_DEFAULT" | "FROM_REQUEST_PORT") {
                r.error(
                    &it.path(&format!("{at}.redirect.derivePort")),
                    "must be FROM_PROTOCOL_DEFAULT or FROM_REQUEST_PORT",
                );
            }
        }
        if x.port.is_some_and(|p| p == 0 || p > 65535) {
            r.error(
                &it.path(&format!("{at}.redirect.port")),
                "not a port number",
            );
        }
        if let Some(c) = x.redirect_code {
            if !(300..=399).contains(&c) {
                r.error(
                    &it.path(&format!("{at}.redirect.redirectCode")),
                    "a redirect code is a 3xx status",
                );
            }
        }
        if h.rewrite.is_some() {
            r.error(
                &it.path(&format!("{at}.rewrite")),
                "`rewrite` cannot be used with `redirect`",
            );
        }
    }
    if let Some(d) = &h.direct_response {
        if !(200..=599).contains(&d.status) {
            r.error(
                &it.path(&format!("{at}.directResponse.status")),
                "not an HTTP status (200-599)",
            );
        }
        if let Some(b) = &d.body {
            if b.string.is_some() && b.bytes.is_some() {
                r.error(
                    &it.path(&format!("{at}.directResponse.body")),
                    "set one of string and bytes",
                );
            }
            if let Some(x) = &b.bytes {
                use base64::Engine as _;
                if base64::engine::general_purpose::STANDARD
                    .decode(x.trim())
                    .is_err()
                {
                    r.error(
                        &it.path(&format!("{at}.directResponse.body.bytes")),
                        "not valid base64",
                    );
                }
            }
        }
    }
    if let Some(rw) = &h.rewrite {
        if rw.uri.is_some() && rw.uri_regex_rewrite.is_some() {
            r.error(
                &it.path(&format!("{at}.rewrite")),
                "set one of uri and uriRegexRewrite",
            );
        }
        if let Some(x) = &rw.uri_regex_rewrite {
            if let Err(e) = sluice_dataplane::tables::http::RewriteRegex::new(&x.pattern) {
                r.not_served(
                    &it.path(&format!("{at}.rewrite.uriRegexRewrite.match")),
                    e.to_string(),
                );
            }
        }
    }
    if let Some(t) = &h.timeout {
        if crate::compile::http::duration_ms(t).is_none() {
            r.error(
                &it.path(&format!("{at}.timeout")),
                format!("`{t}` is not a duration (e.g. `10s`, `1.5s`, `500ms`)"),
            );
        }
    }
    if let Some(x) = &h.retries {
        if let Some(t) = &x.per_try_timeout {
            if crate::compile::http::duration_ms(t).is_none() {
                r.error(
                    &it.path(&format!("{at}.retries.perTryTimeout")),
                    format!("`{t}` is not a duration"),
                );
            }
        }
        if x.attempts < 0 || x.attempts > i64::from(u8::MAX) {
            r.error(
                &it.path(&format!("{at}.retries.attempts")),
                "attempts must be 0..=255",
            );
        }
        let unknown: Vec<&str> = x
            .retry_on
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && !crate::compile::RETRY_ON.contains(n))
            .collect();
        if !unknown.is_empty() {
            r.warn(
                &it.path(&format!("{at}.retries.retryOn")),
                format!(
                    "{} not implemented: such failures are not retried (sluice retries on {})",
                    unknown.join(", "),
                    crate::compile::RETRY_ON.join(", ")
                ),
            );
        }
    }
    let pct = |p: &Option<istio::Percent>, field: String, r: &mut Reporter| {
        if p.as_ref()
            .is_some_and(|p| !(0.0..=100.0).contains(&p.value))
        {
            r.error(&it.path(&field), "a percentage is 0..=100");
        }
    };
    pct(&h.mirror_percentage, format!("{at}.mirrorPercentage"), r);
    for (i, m) in h.mirrors.iter().enumerate() {
        pct(&m.percentage, format!("{at}.mirrors[{i}].percentage"), r);
    }
    if h.mirror.is_some() && !h.mirrors.is_empty() {
        r.error(
            &it.path(&format!("{at}.mirrors")),
            "set one of mirror and mirrors",
        );
    }
}
