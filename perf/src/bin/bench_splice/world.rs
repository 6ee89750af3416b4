//! The benchmark's world: addresses, services and pods, the manifests they compile
//! from, and the forwarder sluice runs with.

use sluice_dataplane::pipeline::{
    Forwarder, ForwarderConfig, IfAddr, NeighConfig, NeighbourCache, PortConf,
};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::MacAddr;
use sluice_testkit::{config, manifests as docs};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

pub(crate) const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
pub(crate) const INSIDE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x11]);
pub(crate) const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 1]);
pub(crate) const BACKEND_MAC: MacAddr = MacAddr([0x02, 0xbe, 0, 0, 0, 1]);
pub(crate) const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
pub(crate) const SNAT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
pub(crate) const SNI_PORT: u16 = 443;
pub(crate) const TCP_PORT: u16 = 7000;
pub(crate) const TLS_BACKEND_PORT: u16 = 8443;
pub(crate) const TCP_BACKEND_PORT: u16 = 7000;
/// Pods per Service.
pub(crate) const PODS: usize = 8;
/// The TLS Services: (name, the TLSRoute's hostname, the SNI clients send).
pub(crate) const SNI_SERVICES: [(&str, &str, &str); 4] = [
    ("alpha", "alpha.bench.test", "alpha.bench.test"),
    ("beta", "beta.bench.test", "beta.bench.test"),
    ("gamma", "gamma.bench.test", "gamma.bench.test"),
    ("delta", "*.delta.bench.test", "www.delta.bench.test"),
];
/// The plain TCP Service's index (its pods' third octet is this + 1).
pub(crate) const PLAIN_SERVICE: usize = SNI_SERVICES.len();
/// Client addresses (10.77.1.1 on), each a known neighbour.
pub(crate) const CLIENT_ADDRS: u32 = 64;
/// Steps of a connection's life in part 1 (a burst each).
pub(crate) const STEPS: usize = 8;
pub(crate) const STEP_NAMES: [&str; STEPS] = [
    "client_syn",
    "client_ack",
    "client_hello",
    "backend_syn_ack",
    "backend_data",
    "client_fin",
    "backend_fin",
    "client_last_ack",
];
/// Payload of the backend's data segment in part 1 (a ServerHello's first segment).
pub(crate) const SERVER_BYTES: usize = 1200;
/// Packets of one contender's slice in part 2.
pub(crate) const SLICE: usize = 16_384;
/// A call whose TSC time exceeds its CPU time by this much was preempted (µs).
pub(crate) const PREEMPT_SLACK_US: u64 = 20;
/// Window field the clients and backends send (scale 7 on both sides).
pub(crate) const WINDOW: u16 = 502;

pub(crate) fn pod_ip(service: usize, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 1 + service as u8, 10 + i as u8)
}

/// The Service a backend address belongs to.
pub(crate) fn service_of(ip: Ipv4Addr) -> Option<usize> {
    let o = ip.octets();
    (o[0] == 10 && o[1] == 78 && o[2] >= 1 && (10..10 + PODS as u8).contains(&o[3]))
        .then(|| usize::from(o[2] - 1))
}

pub(crate) fn manifests() -> String {
    let mut y = format!(
        r#"{appliance}{namespace}{policy}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: b}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {VIP}}}]
  listeners:
  - {{name: tls, port: {SNI_PORT}, protocol: TLS, tls: {{mode: Passthrough}}}}
  - {{name: tcp, port: {TCP_PORT}, protocol: TCP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: plain, namespace: b}}
spec:
  parentRefs: [{{name: gw, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: plain, port: {TCP_BACKEND_PORT}}}]}}]
"#,
        appliance = docs::bench_appliance(VIP, None),
        namespace = docs::namespace("b"),
        policy = docs::allow_from(
            "b",
            "from-clients",
            "10.77.0.0/16",
            &[TLS_BACKEND_PORT, TCP_BACKEND_PORT]
        ),
    );
    let mut service = |s: usize, name: &str, port: u16| {
        y.push_str(&docs::service_with_pods(
            "b",
            name,
            port,
            (0..PODS).map(|i| pod_ip(s, i)),
        ));
    };
    for (s, (name, _, _)) in SNI_SERVICES.iter().enumerate() {
        service(s, name, TLS_BACKEND_PORT);
    }
    service(PLAIN_SERVICE, "plain", TCP_BACKEND_PORT);
    for (name, host, _) in SNI_SERVICES {
        y.push_str(&format!(
            "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {{name: {name}, namespace: b}}\nspec:\n  parentRefs: [{{name: gw, sectionName: tls}}]\n  hostnames: [\"{host}\"]\n  rules: [{{backendRefs: [{{name: {name}, port: {TLS_BACKEND_PORT}}}]}}]\n"
        ));
    }
    y
}

pub(crate) fn snapshot() -> Result<Snapshot, String> {
    config::try_snapshot("bench.yaml", &manifests()).map_err(|e| config::brief(&e))
}

pub(crate) fn forwarder() -> Result<Forwarder, String> {
    let addr = |a: Ipv4Addr| {
        vec![IfAddr {
            addr: IpAddr::V4(a),
            prefix_len: 16,
        }]
    };
    let conf = ForwarderConfig::with_virtual(
        vec![
            PortConf {
                name: "outside".into(),
                mac: SLUICE_MAC,
                addrs: addr(Ipv4Addr::new(10, 77, 0, 2)),
            },
            PortConf {
                name: "inside".into(),
                mac: INSIDE_MAC,
                addrs: addr(SNAT_IP),
            },
        ],
        &[],
        vec![IpAddr::V4(VIP)],
    )
    .map_err(|e| e.to_string())?;
    // Neighbours stay reachable for the whole run (no probes).
    let neigh = Arc::new(NeighbourCache::with_config(
        1024,
        NeighConfig {
            reachable_ms: u64::MAX / 4,
            ..NeighConfig::default()
        },
    ));
    for s in 0..=PLAIN_SERVICE {
        for i in 0..PODS {
            neigh.learn(IpAddr::V4(pod_ip(s, i)), BACKEND_MAC, 0);
        }
    }
    for c in 0..CLIENT_ADDRS {
        neigh.learn(IpAddr::V4(client_ip(c)), CLIENT_MAC, 0);
    }
    Ok(Forwarder::new(Arc::new(conf), neigh))
}

pub(crate) fn client_ip(c: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a4d_0101u32 + c)
}

/// Client `k`'s address and port (64 addresses, ports 1024-65535: 4.1M tuples).
pub(crate) fn client(k: u64) -> SocketAddrV4 {
    let c = (k % u64::from(CLIENT_ADDRS)) as u32;
    let port = 1024 + (k / u64::from(CLIENT_ADDRS) % 64_512) as u16;
    SocketAddrV4::new(client_ip(c), port)
}

/// A 32-bit mix of `k` (initial sequence numbers).
pub(crate) fn isn(k: u64, salt: u64) -> u32 {
    let mut x = k.wrapping_add(salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x >> 32) as u32
}

// ---------------------------------------------------------------------------------------
// ClientHello.
