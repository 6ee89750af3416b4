//! Listener addresses sluice serves: a Gateway API Gateway's `spec.addresses` (type
//! `IPAddress`) and an Istio Gateway server's `bind`.
//!
//! An address that lies in a connected network of a port (the Appliance's
//! `ports[].addresses`, [`RunPlan::ports`]) is *owned* by sluice on that port: it goes
//! into the snapshot's [`Addresses`] table, so the dataplane answers ARP/ND for it there,
//! counts it as its own and announces it when it appears (gratuitous ARP / unsolicited
//! NA), and a reload that adds or removes it takes effect without a restart. A port's own
//! address, or one of the Appliance's `virtualAddresses` (answered on every port, fixed at
//! start), needs nothing more. Any other address cannot be reached through sluice:
//! [`check`] reports it as `AddressNotUsable` (the Gateway API condition reason) at its
//! field, as the Gateway API asks of an implementation that cannot assign a requested
//! address.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;
use sluice_dataplane::pipeline::IfAddr;
use sluice_dataplane::tables::addresses::Addresses;

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::Object;
use crate::plan::RunPlan;

use super::served::Exclusions;

/// One listener address sluice serves on one port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedAddress {
    /// The address.
    pub address: IpAddr,
    /// The port's index (worker port order).
    #[serde(skip)]
    pub port_index: usize,
    /// The port's name.
    pub port: String,
    /// The objects that ask for it (`Kind ns/name`), in source order.
    pub owners: Vec<String>,
}

/// The listener addresses of `it` (a Gateway API Gateway or an Istio Gateway), each with
/// the field it is written in. Values that do not parse are validation's to report.
fn listener_addresses(it: &Item, i: usize, excluded: &Exclusions) -> Vec<(IpAddr, String)> {
    if excluded.item(i) {
        return Vec::new();
    }
    match &it.object {
        Object::Gateway(g) => g
            .spec
            .addresses
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind.as_deref().unwrap_or("IPAddress") == "IPAddress")
            .filter_map(|(i, a)| {
                Some((a.value.parse().ok()?, format!("spec.addresses[{i}].value")))
            })
            .collect(),
        Object::IstioGateway(g) => g
            .spec
            .servers
            .iter()
            .enumerate()
            .filter(|(si, _)| !excluded.listener(i, *si))
            .filter_map(|(si, s)| {
                Some((
                    s.bind.as_deref()?.parse().ok()?,
                    format!("spec.servers[{si}].bind"),
                ))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Why sluice cannot serve `ip` on `port`'s network `a` although the network holds it:
/// it is the network's own or its broadcast address (IPv4 below /31).
fn reserved_in(a: &IfAddr, ip: IpAddr) -> Option<&'static str> {
    let IpAddr::V4(v) = ip else {
        return None;
    };
    if !a.addr.is_ipv4() || a.prefix_len >= 31 {
        return None;
    }
    let host = u32::MAX >> a.prefix_len;
    match u32::from(v) & host {
        0 => Some("network"),
        h if h == host => Some("broadcast"),
        _ => None,
    }
}

/// Checks every Gateway address against the plan's ports, virtual addresses and static
/// neighbours and returns those sluice serves, one per (address, port) in address order.
/// An address in no port's network (or a network's own or broadcast address, or a static
/// neighbour's) that is neither a port's address nor a virtual address is not served,
/// `AddressNotUsable`, reported through the Gateway's reporter at its field
/// (`spec.addresses[i].value`: the whole Gateway is left out; `spec.servers[i].bind`:
/// that server). Objects and servers already `excluded` are not looked at.
pub fn check(
    items: &[Item],
    plan: &RunPlan,
    excluded: &Exclusions,
    diags: &mut Vec<Diagnostic>,
) -> Vec<ServedAddress> {
    let mut served: BTreeMap<(IpAddr, usize), Vec<String>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        for (ip, field) in listener_addresses(it, i, excluded) {
            let own = plan.virtual_addrs.contains(&ip)
                || plan
                    .ports
                    .iter()
                    .any(|p| p.addrs.iter().any(|a| a.addr == ip));
            if own {
                continue;
            }
            if plan.neighbours.iter().any(|n| n.ip == ip) {
                it.reporter(diags).not_served_because(
                    &it.path(&field),
                    "AddressNotUsable",
                    format!(
                        "{ip} is a static neighbour of the Appliance (spec.neighbours), \
                         another host's address"
                    ),
                );
                continue;
            }
            let mut holders = 0;
            let mut reserved = None;
            for (i, p) in plan.ports.iter().enumerate() {
                for a in p.addrs.iter().filter(|a| a.holds(ip)) {
                    match reserved_in(a, ip) {
                        Some(r) => reserved = Some((r, p.name.as_str(), *a)),
                        None => {
                            holders += 1;
                            let owners = served.entry((ip, i)).or_default();
                            let label = it.object.label();
                            if !owners.contains(&label) {
                                owners.push(label);
                            }
                        }
                    }
                }
            }
            if holders > 0 {
                continue;
            }
            let message = match reserved {
                Some((what, port, a)) => format!(
                    "{ip} is the {what} address of port {port}'s network \
                     ({}/{}); sluice cannot answer ARP for it",
                    a.addr, a.prefix_len
                ),
                None => format!(
                    "{ip} is in no network of sluice's ports ({}) and is \
                     not one of the Appliance's virtualAddresses, so sluice cannot answer \
                     ARP/ND for it and its traffic would not arrive; use an address in a \
                     port's network, or add it to spec.virtualAddresses",
                    networks(plan)
                ),
            };
            it.reporter(diags)
                .not_served_because(&it.path(&field), "AddressNotUsable", message);
        }
    }
    served
        .into_iter()
        .map(|((address, port_index), owners)| ServedAddress {
            address,
            port_index,
            port: plan
                .ports
                .get(port_index)
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            owners,
        })
        .collect()
}

/// The ports' networks, for messages: `edge 10.97.0.2/24, fd97::2/64; core ...`.
fn networks(plan: &RunPlan) -> String {
    plan.ports
        .iter()
        .map(|p| {
            let a: Vec<String> = p
                .addrs
                .iter()
                .map(|a| format!("{}/{}", a.addr, a.prefix_len))
                .collect();
            format!("{} {}", p.name, a.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The dataplane table of `served`.
pub fn table(served: &[ServedAddress]) -> Addresses {
    Addresses::new(served.iter().filter_map(|s| {
        u16::try_from(s.port_index)
            .ok()
            .map(|port| (s.address, port))
    }))
}

#[cfg(test)]
mod tests {
    use crate::compile::{build, Built};
    use crate::diag::{Diagnostics, Severity};
    use crate::load::{load_str, Loaded};

    /// Two ports (`edge` 10.97.0.2/24 + fd97::2/64, `core` 10.98.0.2/24), one virtual
    /// address; every Gateway below uses addresses of these.
    const APPLIANCE: &str = "apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  ports:
  - {name: edge, tap: {name: t0}, addresses: [10.97.0.2/24, \"fd97::2/64\"]}
  - {name: core, tap: {name: t1}, addresses: [10.98.0.2/24]}
  virtualAddresses: [10.99.0.10]
  neighbours: [{ip: 10.97.0.99, mac: \"02:00:00:00:00:99\"}]
---
";

    fn build_text(text: &str) -> Result<Built, Diagnostics> {
        let mut loaded = Loaded::default();
        load_str("a.yaml", &format!("{APPLIANCE}{text}"), &mut loaded);
        build(loaded)
    }

    /// The 1-based lines of `text` (after the Appliance) marked `#<-`.
    fn marked(text: &str) -> Vec<usize> {
        let skip = APPLIANCE.lines().count();
        text.lines()
            .enumerate()
            .filter(|(_, l)| l.contains("#<-"))
            .map(|(i, _)| skip + i + 1)
            .collect()
    }

    const GATEWAY_API: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: web}
spec:
  gatewayClassName: sluice
  addresses:
  - {type: IPAddress, value: 10.97.0.20}
  - {value: \"fd97::20\"}
  - {type: IPAddress, value: 10.98.0.20}
  - {type: IPAddress, value: 10.97.0.2}
  - {type: IPAddress, value: 10.99.0.10}
  listeners: [{name: tcp, port: 7000, protocol: TCP}]
";

    const ISTIO: &str = "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: igw, namespace: mesh}
spec:
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    bind: 10.97.0.21
    hosts: [\"*\"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 8443, name: tls2, protocol: TLS}
    bind: 10.97.0.21
    hosts: [\"*\"]
    tls: {mode: PASSTHROUGH}
";

    /// Addresses in a port's network are served there, with their owners; a port's own
    /// address and a virtual address are accepted and need nothing more.
    #[test]
    fn addresses_in_a_port_network_are_served() {
        let b = build_text(&format!("{GATEWAY_API}---\n{ISTIO}")).expect("builds");
        let served: Vec<(String, &str, Vec<&str>)> = b
            .addresses
            .iter()
            .map(|a| {
                (
                    a.address.to_string(),
                    a.port.as_str(),
                    a.owners.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            served,
            vec![
                ("10.97.0.20".into(), "edge", vec!["Gateway web/gw"]),
                (
                    "10.97.0.21".into(),
                    "edge",
                    vec!["Gateway.networking.istio.io mesh/igw"]
                ),
                ("10.98.0.20".into(), "core", vec!["Gateway web/gw"]),
                ("fd97::20".into(), "edge", vec!["Gateway web/gw"]),
            ]
        );
        let t = &b.snapshot.addresses;
        assert_eq!(t.len(), 4);
        assert!(t.on(0, "10.97.0.20".parse().expect("ip")));
        assert!(t.on(1, "10.98.0.20".parse().expect("ip")));
        assert!(!t.on(0, "10.98.0.20".parse().expect("ip")));
        assert!(!t.has("10.97.0.2".parse().expect("ip")), "a port's own");
        assert!(!t.has("10.99.0.10".parse().expect("ip")), "a virtual one");
        // `tables` and `check` list them.
        let j = b.tables_json(None).expect("json");
        assert_eq!(j["addresses"][2]["address"], "10.98.0.20", "{j}");
        assert_eq!(j["addresses"][2]["port"], "core", "{j}");
        assert_eq!(j["addresses"][2]["owners"][0], "Gateway web/gw", "{j}");
        assert!(
            b.summary()
                .contains("served addresses: 10.97.0.20 on edge, "),
            "{}",
            b.summary()
        );
    }

    /// An address in no port's network, not virtual, is AddressNotUsable at its field:
    /// `spec.addresses[i].value` of a Gateway API Gateway, `spec.servers[i].bind` of an
    /// Istio one; so is a network's broadcast address.
    #[test]
    fn addresses_outside_every_network_are_not_usable() {
        let text = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: web}
spec:
  gatewayClassName: sluice
  addresses:
  - {type: IPAddress, value: 10.97.0.20}
  - {type: IPAddress, value: 192.0.2.1} #<-
  - {type: IPAddress, value: 10.97.0.99} #<-
  listeners: [{name: tcp, port: 7000, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: igw, namespace: mesh}
spec:
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    bind: 10.97.0.21
    hosts: [\"*\"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 8443, name: tls2, protocol: TLS}
    bind: \"2001:db8::1\" #<-
    hosts: [\"*\"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 9443, name: tls3, protocol: TLS}
    bind: 10.98.0.255 #<-
    hosts: [\"*\"]
    tls: {mode: PASSTHROUGH}
";
        let b = build_text(text).unwrap_or_else(|d| panic!("the rest is served: {d:?}"));
        let errors: Vec<_> = b
            .diagnostics
            .iter()
            .filter(|e| e.severity == Severity::NotServed)
            .collect();
        // The Gateway API Gateway is left out whole; the Istio servers one by one.
        let ports: Vec<u16> = b.ir.listeners.iter().map(|l| l.port).collect();
        assert_eq!(ports, [443], "{ports:?}");
        let lines = marked(text);
        assert_eq!(errors.len(), 4, "{errors:#?}");
        let at: Vec<(usize, Option<&str>, Option<&str>)> = errors
            .iter()
            .map(|e| (e.pos.line, e.object.as_deref(), e.path.as_deref()))
            .collect();
        assert_eq!(
            at,
            vec![
                (
                    lines[0],
                    Some("Gateway web/gw"),
                    Some("spec.addresses[1].value")
                ),
                (
                    lines[1],
                    Some("Gateway web/gw"),
                    Some("spec.addresses[2].value")
                ),
                (
                    lines[2],
                    Some("Gateway.networking.istio.io mesh/igw"),
                    Some("spec.servers[1].bind")
                ),
                (
                    lines[3],
                    Some("Gateway.networking.istio.io mesh/igw"),
                    Some("spec.servers[2].bind")
                ),
            ]
        );
        for e in &errors {
            assert_eq!(e.reason, Some("AddressNotUsable"), "{e}");
            assert!(
                e.to_string().starts_with("not served (AddressNotUsable): "),
                "{e}"
            );
        }
        assert!(
            errors[0].message.contains("192.0.2.1 is in no network of sluice's ports (edge 10.97.0.2/24, fd97::2/64; core 10.98.0.2/24)")
                && errors[0].message.contains("virtualAddresses"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1]
                .message
                .contains("10.97.0.99 is a static neighbour"),
            "{}",
            errors[1]
        );
        assert!(
            errors[3]
                .message
                .contains("10.98.0.255 is the broadcast address of port core's network"),
            "{}",
            errors[3]
        );
    }
}
