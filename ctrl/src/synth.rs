//! Generated configurations of many listeners and routes, for scale tests and
//! benchmarks: the same few objects (an Appliance, a namespace, one Service with a few
//! pods) plus `n` listeners and `n` routes in one of three [`Shape`]s.
//!
//! Every generated configuration is valid: it loads, validates and compiles without
//! errors, with one listener on port `10000 + i` and one route bound to it for each `i`.

use std::fmt::Write as _;

/// How the `n` listeners and routes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One Gateway API Gateway with `n` TCP listeners and `n` TCPRoutes, each naming its
    /// listener with `sectionName`.
    OneGateway,
    /// `n` Gateways of one TCP listener each and `n` TCPRoutes, one per Gateway.
    ManyGateways,
    /// One Istio Gateway with `n` TCP servers and `n` VirtualServices, each with a tcp
    /// route matching its server's port.
    Istio,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 3] = [Shape::OneGateway, Shape::ManyGateways, Shape::Istio];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Shape::OneGateway => "one_gateway",
            Shape::ManyGateways => "many_gateways",
            Shape::Istio => "istio",
        }
    }
}

/// Pods behind the generated Service.
pub const PODS: usize = 8;
/// First listener port; listener `i` is on `FIRST_PORT + i`.
pub const FIRST_PORT: usize = 10_000;

/// Manifests (multi-document YAML) of `n` listeners and `n` routes in `shape`, with
/// Maglev tables of `maglev` slots (a prime).
pub fn manifests(shape: Shape, n: usize, maglev: u64) -> String {
    let mut y = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {{name: synth}}
spec:
  cores: [0]
  ports:
  - {{name: outside, tap: {{name: synthout}}, addresses: [10.77.0.2/16]}}
  - {{name: inside, tap: {{name: synthin}}, addresses: [10.78.0.2/16]}}
  virtualAddresses: [10.77.0.10]
  maglevTableSize: {maglev}
---
apiVersion: v1
kind: Namespace
metadata: {{name: s}}
---
apiVersion: v1
kind: Service
metadata: {{name: pool, namespace: s}}
spec: {{selector: {{app: pool}}, ports: [{{port: 7000}}]}}
"#
    );
    for i in 0..PODS {
        let _ = write!(
            y,
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: s, labels: {{app: pool}}}}\nstatus: {{podIP: 10.78.1.{}}}\n",
            10 + i
        );
    }
    match shape {
        Shape::OneGateway => {
            y.push_str("---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: many, namespace: s}\nspec:\n  gatewayClassName: sluice\n  listeners:\n");
            for i in 0..n {
                let _ = writeln!(
                    y,
                    "  - {{name: l{i}, port: {}, protocol: TCP}}",
                    FIRST_PORT + i
                );
            }
            for i in 0..n {
                let _ = write!(
                    y,
                    "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: r{i}, namespace: s}}\nspec:\n  parentRefs: [{{name: many, sectionName: l{i}}}]\n  rules: [{{backendRefs: [{{name: pool, port: 7000}}]}}]\n"
                );
            }
        }
        Shape::ManyGateways => {
            for i in 0..n {
                let _ = write!(
                    y,
                    "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g{i}, namespace: s}}\nspec:\n  gatewayClassName: sluice\n  listeners: [{{name: tcp, port: {}, protocol: TCP}}]\n",
                    FIRST_PORT + i
                );
                let _ = write!(
                    y,
                    "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: r{i}, namespace: s}}\nspec:\n  parentRefs: [{{name: g{i}}}]\n  rules: [{{backendRefs: [{{name: pool, port: 7000}}]}}]\n"
                );
            }
        }
        Shape::Istio => {
            y.push_str("---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: many, namespace: s}\nspec:\n  servers:\n");
            for i in 0..n {
                let _ = writeln!(
                    y,
                    "  - {{port: {{number: {}, name: tcp-{i}, protocol: TCP}}, hosts: [\"*\"]}}",
                    FIRST_PORT + i
                );
            }
            for i in 0..n {
                let _ = write!(
                    y,
                    "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v{i}, namespace: s}}\nspec:\n  hosts: [v{i}.example.com]\n  gateways: [many]\n  tcp: [{{match: [{{port: {}}}], route: [{{destination: {{host: pool, port: {{number: 7000}}}}}}]}}]\n",
                    FIRST_PORT + i
                );
            }
        }
    }
    y
}
