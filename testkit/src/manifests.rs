//! Manifest documents the tests and benchmarks write again and again, as YAML text in the
//! flow style of the hand-written fixtures. Each function returns one document that
//! starts with its `---` separator and ends with a newline, so that documents append to
//! a configuration string in any order.

use std::fmt::Display;

/// The benchmarks' Appliance: one core, TAP ports `outside` (sluice at 10.77.0.2/16) and
/// `inside` (10.78.0.2/16), virtual address `vip`, and `maglevTableSize` when given.
pub fn bench_appliance(vip: impl Display, maglev: Option<u64>) -> String {
    let maglev = maglev.map_or(String::new(), |m| format!("  maglevTableSize: {m}\n"));
    format!(
        "---\napiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: bench}}\nspec:\n  cores: [0]\n  ports:\n  - {{name: outside, tap: {{name: benchout}}, addresses: [10.77.0.2/16]}}\n  - {{name: inside, tap: {{name: benchin}}, addresses: [10.78.0.2/16]}}\n  virtualAddresses: [{vip}]\n{maglev}"
    )
}

/// A `v1` Namespace.
pub fn namespace(name: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n")
}

/// A `v1` Service `name` in `ns`, selecting the pods labelled `app: <name>`, on TCP
/// `port`.
pub fn service(ns: &str, name: &str, port: u16) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{selector: {{app: {name}}}, ports: [{{port: {port}}}]}}\n"
    )
}

/// A `v1` Pod `name` in `ns`, labelled `app: <app>`, with address `ip` (no containers:
/// every port of its Services is served).
pub fn pod(ns: &str, name: &str, app: &str, ip: impl Display) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: {app}}}}}\nstatus: {{podIP: {ip}}}\n"
    )
}

/// A [`service`] `name` and its pods `<name>-0`, `<name>-1`, ... at `ips`.
pub fn service_with_pods<I: Display>(
    ns: &str,
    name: &str,
    port: u16,
    ips: impl IntoIterator<Item = I>,
) -> String {
    let mut y = service(ns, name, port);
    for (i, ip) in ips.into_iter().enumerate() {
        y.push_str(&pod(ns, &format!("{name}-{i}"), name, ip));
    }
    y
}

/// A `networking.k8s.io/v1` NetworkPolicy `name` in `ns` that selects every pod there
/// and admits `cidr` on TCP `ports`.
pub fn allow_from(ns: &str, name: &str, cidr: &str, ports: &[u16]) -> String {
    let ports: Vec<String> = ports.iter().map(|p| format!("{{port: {p}}}")).collect();
    format!(
        "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  podSelector: {{}}\n  ingress:\n  - from: [{{ipBlock: {{cidr: {cidr}}}}}]\n    ports: [{}]\n",
        ports.join(", ")
    )
}

/// A TCPRoute `name` in `ns` to Service `service` on `port`, attached to Gateway `gw`
/// (the Gateway API one, class `sluice`) on `vip` with one TCP listener `name` on `port`.
pub fn tcp_gateway(ns: &str, name: &str, vip: impl Display, port: u16, service: &str) -> String {
    format!(
        r#"---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{name: {service}, port: {port}}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {vip}}}]
  listeners: [{{name: {name}, port: {port}, protocol: TCP}}]
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_compile_into_a_backend_set() {
        let text = [
            namespace("t"),
            service_with_pods("t", "a", 7000, ["10.78.0.11", "10.78.0.12"]),
            pod("t", "other", "b", "10.78.0.13"),
            allow_from("t", "clients", "10.77.0.0/16", &[7000, 7001]),
            tcp_gateway("t", "echo", "10.77.0.10", 7000, "a"),
        ]
        .concat();
        assert!(text.starts_with("---\napiVersion: v1\nkind: Namespace\n"));
        assert_eq!(text.matches("kind: Pod").count(), 3);
        let ir = crate::config::try_ir("t.yaml", &text).expect("compiles");
        assert_eq!(ir.workloads.len(), 3);
        assert_eq!((ir.listeners.len(), ir.routes.len()), (1, 1));
        assert_eq!(ir.policies.len(), 1);
    }
}
