//! The benchmark's world: addresses and ports, and the manifests the tables compile from
//! (compile and build).

use sluice_ctrl::compile::ir::Ir;
use sluice_ctrl::compile::snapshot;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::MacAddr;
use sluice_testkit::{config, manifests as docs};
use std::net::Ipv4Addr;

pub(crate) const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
pub(crate) const INSIDE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x11]);
pub(crate) const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 1]);
pub(crate) const BACKEND_MAC: MacAddr = MacAddr([0x02, 0xbe, 0, 0, 0, 1]);
pub(crate) const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
pub(crate) const VIP_PORT: u16 = 7000;
pub(crate) const BACKENDS: usize = 256;
pub(crate) const FRAME: usize = 60;
pub(crate) const STRIDE: usize = 64;
/// Distinct SYNs replayed by the connection-rate test.
pub(crate) const NEW_CONN_FRAMES: usize = 2_000_000;

pub(crate) fn backend_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 1 + (i / 200) as u8, 10 + (i % 200) as u8)
}

/// The manifests: the listener the traffic uses, its 256 backends, a policy, and
/// `extra` more listeners with a TCPRoute each (for the swap test).
pub(crate) fn manifests(extra: usize, maglev: u64) -> String {
    let mut y = format!(
        r#"{appliance}{namespace}{service}{policy}{gateway}"#,
        appliance = docs::bench_appliance(VIP, Some(maglev)),
        namespace = docs::namespace("b"),
        policy = docs::allow_from("b", "from-clients", "10.77.0.0/16", &[VIP_PORT]),
        gateway = docs::tcp_gateway("b", "echo", VIP, VIP_PORT, "pool"),
        service = docs::service("b", "pool", VIP_PORT),
    );
    for i in 0..BACKENDS {
        y.push_str(&docs::pod("b", &format!("p{i}"), "pool", backend_ip(i)));
    }
    if extra > 0 {
        y.push_str("---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: many, namespace: b}\nspec:\n  gatewayClassName: sluice\n  addresses: [{type: IPAddress, value: 10.77.0.11}]\n  listeners:\n");
        for i in 0..extra {
            y.push_str(&format!(
                "  - {{name: l{i}, port: {}, protocol: TCP}}\n",
                20_000 + i
            ));
        }
        for i in 0..extra {
            y.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: r{i}, namespace: b}}\nspec:\n  parentRefs: [{{name: many, sectionName: l{i}}}]\n  rules: [{{backendRefs: [{{name: pool, port: {VIP_PORT}}}]}}]\n"
            ));
        }
    }
    y
}

/// Manifests -> IR (the "compile" half of a reload).
pub(crate) fn compile(text: &str) -> Result<Ir, String> {
    config::try_ir("bench.yaml", text).map_err(|e| config::brief(&e))
}

pub(crate) fn build(ir: &Ir) -> Result<Snapshot, String> {
    snapshot::from_ir(ir).map_err(|e| e.to_string())
}
