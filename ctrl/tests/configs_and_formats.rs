//! Every example in `configs/` loads, validates and compiles; the seeds' own formats
//! (Ligato proto3 JSON, Consul TCPRoute JSON) map onto the model field by field; random
//! mutations of the examples never panic the loader and every error is located.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sluice_ctrl::compile::ir::{BackendTarget, ListenerKind, L4};
use sluice_ctrl::compile::{build as compile_loaded, build_paths as compile_paths, diagnostics};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_ctrl::model::meta::{IntOrString, Protocol, SelectorOperator};
use sluice_ctrl::model::netpol::PolicyType;
use sluice_ctrl::model::{Format, Object};

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("configs/ readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            files(&p, out);
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(p);
        }
    }
}

#[test]
fn every_example_directory_compiles() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(configs())
        .expect("configs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 5, "{dirs:?}");
    for d in dirs {
        let c = compile_paths(std::slice::from_ref(&d));
        let errors: Vec<String> = diagnostics(&c)
            .iter()
            .filter(|d| d.is_error())
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", d.display());
        assert!(c.is_ok());
        assert!(
            !c.as_ref().expect("compiles").items.is_empty(),
            "{} is empty",
            d.display()
        );
    }
    // and all of them together, as `sluice check configs/` does
    let c = compile_paths(&[configs()]);
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn every_example_file_loads_alone() {
    let mut all = Vec::new();
    files(&configs(), &mut all);
    assert!(all.len() >= 12, "{all:?}");
    for f in all {
        let loaded = sluice_ctrl::load::load_paths(std::slice::from_ref(&f));
        let errors: Vec<String> = loaded
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", f.display());
        assert!(!loaded.items.is_empty(), "{}", f.display());
    }
}

#[test]
fn bookinfo_binds_as_istio_does() {
    let c = compile_paths(&[configs().join("istio-bookinfo")]);
    let built = c.expect("compiles");
    let not_served: Vec<String> = built
        .not_served()
        .map(|d| {
            format!(
                "{} {}",
                d.object.as_deref().unwrap_or(""),
                d.path.as_deref().unwrap_or("")
            )
        })
        .collect();
    // The cookie rule (a `headers` match) is served: requests are routed one by one.
    // The SIMPLE server on 443 names certificate files this machine does not have
    // (/etc/certs/...): left out; the one on 9443 terminates with the credentialName
    // Secret.
    assert_eq!(
        not_served,
        [
            "Gateway.networking.istio.io some-config-namespace/my-gateway spec.servers[1].tls.serverCertificate",
        ]
    );
    let ir = built.ir;
    let l = |port: u16| ir.listeners.iter().find(|l| l.port == port);
    assert!(l(80).expect("listener").https_redirect);
    assert!(l(443).is_none(), "no certificate files: not served");
    let https = l(9443).expect("credentialName: served");
    assert_eq!(https.kind, ListenerKind::TlsTerminate);
    let cert = &https.members[0].certificates[0];
    assert_eq!(cert.source, "Secret some-config-namespace/bookinfo-secret");
    assert_eq!(cert.sans, ["bookinfo.com", "*.bookinfo.com"]);
    // 9080 takes bookinfo-rule: the cookie match first, then /reviews/ (80/20).
    let l9080 = l(9080).expect("listener");
    assert!(!l9080.bindings.is_empty());
    let r = &ir.routes[l9080.bindings[0].route];
    assert_eq!(
        r.name,
        "VirtualService bookinfo-namespace/bookinfo-rule http"
    );
    assert_eq!(r.http_matches.len(), 2);
    assert_eq!(r.http_matches[0].0.headers[0].name, "cookie");
    assert!(sluice_ctrl::compile::tables::proxies(&ir, l9080));
    // 2379 has no tcp route (the seed's mongo route matches port 27017 only)
    assert!(l(2379).expect("listener").bindings.is_empty());
    let mongo = &ir.routes[l(27017).expect("listener").bindings[0].route];
    assert_eq!(
        mongo.backends[0].target,
        BackendTarget::Endpoints(vec!["10.80.1.31:27017".parse().expect("addr")])
    );
}

#[test]
fn gateway_api_weights_and_endpoint_sources() {
    let c = compile_paths(&[configs().join("gateway-api")]);
    let ir = c.expect("compiles").ir;
    let pg = ir
        .routes
        .iter()
        .find(|r| r.name == "TCPRoute data/postgres")
        .expect("route");
    let w: Vec<u32> = pg.backends.iter().map(|b| b.weight).collect();
    assert_eq!(w, [70, 30, 0]);
    assert_eq!(
        pg.backends[0].target,
        BackendTarget::Endpoints(vec!["10.91.0.5:5432".parse().expect("addr")])
    );
    // EndpointSlice: not-ready endpoint left out
    assert_eq!(
        pg.backends[1].target,
        BackendTarget::Endpoints(vec![
            "10.91.0.6:5432".parse().expect("addr"),
            "10.91.0.7:5432".parse().expect("addr")
        ])
    );
    assert!(matches!(pg.backends[2].target, BackendTarget::Invalid(_)));
}

#[test]
fn gateway_api_udproute_binds_the_udp_listener() {
    let c = compile_paths(&[configs().join("gateway-api")]);
    let ir = c.expect("compiles").ir;
    let l = ir
        .listeners
        .iter()
        .find(|l| l.port == 53)
        .expect("the dns listener");
    assert_eq!(l.kind, ListenerKind::Udp);
    assert_eq!(l.protocol, L4::Udp);
    assert_eq!(l.bindings.len(), 1);
    let dns = &ir.routes[l.bindings[0].route];
    assert_eq!(dns.name, "UDPRoute dns/dns");
    let w: Vec<u32> = dns.backends.iter().map(|b| b.weight).collect();
    assert_eq!(w, [90, 10]);
    // Selected pods, at the Service's targetPort.
    assert_eq!(
        dns.backends[0].target,
        BackendTarget::Endpoints(vec![
            "10.93.0.2:5353".parse().expect("addr"),
            "10.93.0.3:5353".parse().expect("addr")
        ])
    );
    // Another namespace, admitted by the ReferenceGrant from UDPRoutes of `dns`.
    assert_eq!(
        dns.backends[1].target,
        BackendTarget::Endpoints(vec!["10.94.0.2:53".parse().expect("addr")])
    );
    // No TCPRoute or TLSRoute lands on the UDP listener, nor the UDPRoute elsewhere.
    for other in ir.listeners.iter().filter(|x| x.port != 53) {
        assert!(
            other
                .bindings
                .iter()
                .all(|b| !ir.routes[b.route].name.starts_with("UDPRoute")),
            "{other:?}"
        );
    }
}

#[test]
fn ligato_policy_maps_onto_networkpolicy() {
    let loaded = sluice_ctrl::load::load_paths(&[configs().join("netpol/ligato-policy.json")]);
    assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
    let Object::NetworkPolicy(p) = &loaded.items[0].object else {
        panic!("not a policy")
    };
    assert_eq!(p.format, Format::Ligato);
    assert_eq!(p.meta.name, "ligato-allow-frontend");
    assert_eq!(p.meta.namespace(), "prod");
    assert_eq!(
        p.meta.labels.get("source").map(String::as_str),
        Some("ligato")
    );
    assert_eq!(
        p.spec.policy_types,
        Some(vec![PolicyType::Ingress, PolicyType::Egress])
    );
    assert_eq!(
        p.spec
            .pod_selector
            .match_labels
            .get("app")
            .map(String::as_str),
        Some("web")
    );
    assert_eq!(
        p.spec.pod_selector.match_expressions[0].operator,
        SelectorOperator::DoesNotExist
    );
    let ing = &p.spec.ingress.as_ref().expect("ingress")[0];
    assert_eq!(ing.ports[0].port, Some(IntOrString::Int(8080)));
    assert_eq!(ing.ports[1].port, Some(IntOrString::Str("metrics".into())));
    assert_eq!(
        ing.from[1].ip_block.as_ref().expect("block").except,
        ["192.0.2.128/25"]
    );
    let eg = &p.spec.egress.as_ref().expect("egress")[0];
    assert_eq!(eg.ports[0].protocol, Some(Protocol::Udp));
    assert!(eg.to[0].namespace_selector.as_ref().expect("ns").is_empty());
}

#[test]
fn ligato_snake_case_and_numeric_enums() {
    let mut loaded = Loaded::default();
    load_str(
        "p.json",
        r#"{"name": "p", "namespace": "x", "policy_type": 2,
            "egress_rule": [{"port": [{"protocol": 1, "port": {"type": 0, "number": 53}}]}]}"#,
        &mut loaded,
    );
    let c = compile_loaded(loaded);
    assert_eq!(
        diagnostics(&c).iter().filter(|d| d.is_error()).count(),
        0,
        "{:?}",
        diagnostics(&c)
    );
    let Object::NetworkPolicy(p) = &c.as_ref().expect("compiles").items[0].object else {
        panic!()
    };
    assert_eq!(p.spec.policy_types, Some(vec![PolicyType::Egress]));
    let eg = &p.spec.egress.as_ref().expect("egress")[0];
    assert_eq!(eg.ports[0].protocol, Some(Protocol::Udp));
    assert_eq!(eg.ports[0].port, Some(IntOrString::Int(53)));
}

#[test]
fn consul_tcproute_maps_onto_tcproute() {
    let c = compile_paths(&[configs().join("consul")]);
    assert_eq!(
        diagnostics(&c).iter().filter(|d| d.is_error()).count(),
        0,
        "{:?}",
        diagnostics(&c)
    );
    let route = c
        .as_ref()
        .expect("compiles")
        .items
        .iter()
        .find_map(|i| match &i.object {
            Object::TcpRoute(r) => Some(r),
            _ => None,
        })
        .expect("route");
    assert_eq!(route.format, Format::Consul);
    assert_eq!(route.meta.name, "api-tcp");
    assert_eq!(route.spec.parent_refs[0].port, Some(7000));
    let b = &route.spec.rules[0].backend_refs;
    assert_eq!(b[0].weight, Some(3));
    assert_eq!(b[0].port_name.as_deref(), Some("tcp"));
    assert_eq!(b[1].weight, None);
    let ir = c.expect("ir").ir;
    let r = &ir.routes[0];
    assert_eq!(r.backends[0].weight, 3);
    assert_eq!(r.backends[1].weight, 1, "absent weight defaults to 1");
    assert_eq!(
        r.backends[0].target,
        BackendTarget::Endpoints(vec!["10.92.0.3:7000".parse().expect("addr")])
    );
    assert!(matches!(r.backends[1].target, BackendTarget::Invalid(_)));
}

#[test]
fn compiling_twice_gives_the_same_ir() {
    let a = compile_paths(&[configs()]).expect("ir").ir;
    let b = compile_paths(&[configs()]).expect("ir").ir;
    assert_eq!(a, b);
}

fn example_texts() -> Vec<(String, String)> {
    let mut all = Vec::new();
    files(&configs(), &mut all);
    all.sort();
    all.into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).expect("read");
            (p.display().to_string(), t)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Random byte-level and line-level mutations of the examples: the loader and the
    /// validator never panic, and every error names the file and a line inside it.
    #[test]
    fn mutated_examples_never_panic(
        file in 0usize..64,
        edits in proptest::collection::vec((any::<u16>(), 0u8..6, any::<u8>()), 1..6),
    ) {
        let texts = example_texts();
        let (name, text) = &texts[file % texts.len()];
        let mut bytes = text.clone().into_bytes();
        for (pos, op, b) in edits {
            if bytes.is_empty() { break; }
            let i = usize::from(pos) % bytes.len();
            match op {
                0 => bytes[i] = b,                                  // replace a byte
                1 => { bytes.remove(i); }                           // delete a byte
                2 => {                                              // insert syntax
                    const SYNTAX: &[u8] = b" :-[]{}#&*!|>'\"\t0x";
                    bytes.insert(i, SYNTAX[usize::from(b) % SYNTAX.len()]);
                }
                3 => {                                              // duplicate a line
                    let s = String::from_utf8_lossy(&bytes).into_owned();
                    let lines: Vec<&str> = s.lines().collect();
                    let k = i % lines.len().max(1);
                    let mut v: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                    if let Some(l) = lines.get(k) { v.insert(k, l.to_string()); }
                    bytes = v.join("\n").into_bytes();
                }
                4 => {                                              // drop a line
                    let s = String::from_utf8_lossy(&bytes).into_owned();
                    let mut v: Vec<&str> = s.lines().collect();
                    if !v.is_empty() { let k = i % v.len(); v.remove(k); }
                    bytes = v.join("\n").into_bytes();
                }
                _ => {                                              // change a value's type
                    let s = String::from_utf8_lossy(&bytes).into_owned();
                    bytes = s.replacen(": ", ": [", 1 + i % 3).into_bytes();
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        // YAML breaks lines at `\n`, `\r\n` and a lone `\r` (YAML 1.2 §5.4); `str::lines`
        // does not know the last, so count as the parser does.
        let lines = text.replace("\r\n", "\n").split(['\n', '\r']).count().max(1);
        let mut loaded = Loaded::default();
        load_str(name, &text, &mut loaded);
        let c = compile_loaded(loaded);
        for d in diagnostics(&c).iter().filter(|d| d.is_error()) {
            prop_assert_eq!(&*d.file, name.as_str());
            prop_assert!(d.pos.line >= 1 && d.pos.line <= lines + 1, "{} (lines {})", d, lines);
            prop_assert!(!d.message.is_empty());
        }
    }
}

/// `configs/gateway-api/httproute.yaml`: GET /api/... on shop.example.com reaches the
/// shop Service with its path rewritten; other paths are redirected to https; the
/// listener is routed per request.
#[test]
fn gateway_api_httproute_example() {
    use sluice_dataplane::tables::http::{HttpAction, HttpScratch, Request};
    let built = compile_paths(&[configs().join("gateway-api")]).expect("compiles");
    let listeners = &built.snapshot.listeners;
    let l = listeners
        .lookup("10.77.0.31".parse().expect("ip"), 80, 6)
        .expect("HTTP listener");
    assert!(l.proxy);
    let route = listeners
        .route(l.route(b"shop.example.com").expect("route"))
        .expect("route");
    let req = |method, path| Request {
        method,
        scheme: "http",
        authority: "shop.example.com",
        path,
        query: "q=1",
        headers: &[],
        port: 80,
        source: "198.51.100.1".parse().expect("ip"),
    };
    let get = req("GET", "/api/cart");
    let (m, rule) = route.http.find(&get).expect("api rule");
    assert_eq!(&*rule.name, "HTTPRoute shop/shop rules[0] (api)");
    assert!(matches!(rule.action, HttpAction::Forward { .. }));
    assert_eq!(rule.timeout_ms, 10_000);
    let mut out = [0u8; 64];
    let n = rule
        .rewrite
        .write_path(&get, m, &mut HttpScratch::new(), &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/v1/cart");
    let post = req("POST", "/api/cart");
    let (m, rule) = route.http.find(&post).expect("redirect rule");
    let HttpAction::Redirect(r) = &rule.action else {
        panic!("{rule:?}");
    };
    let n = r.write_location(&post, m, &mut out).expect("fits");
    assert_eq!(r.code, 301);
    assert_eq!(&out[..n], b"https://shop.example.com/api/cart?q=1");
    assert!(l.route(b"other.example.com").is_none());
}
