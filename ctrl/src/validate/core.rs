//! Core inventory kinds: Pod IPs and container ports, Service ports, TLS Secrets.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::core::{PodInfo, SecretData, ServiceSpec};
use crate::model::meta::IntOrString;

use super::fields::port_number;

/// A Pod: its IPs parse, its container ports are in range and uniquely named.
pub(super) fn pod(it: &Item, p: &PodInfo, r: &mut Reporter) {
    for (i, ip) in p.ips().iter().enumerate() {
        if ip.parse::<IpAddr>().is_err() {
            r.error(
                &it.path(&format!("status.podIPs[{i}]")),
                format!("`{ip}` is not an IP address"),
            );
        }
    }
    let mut names = BTreeSet::new();
    for (c, ct) in p.spec.containers.iter().enumerate() {
        for (j, port) in ct.ports.iter().enumerate() {
            let at = format!("spec.containers[{c}].ports[{j}]");
            port_number(it, &format!("{at}.containerPort"), port.container_port, r);
            if let Some(n) = &port.name {
                if !names.insert(n.clone()) {
                    r.error(
                        &it.path(&format!("{at}.name")),
                        format!("duplicate port name `{n}` in the pod"),
                    );
                }
            }
        }
    }
}

/// A Service: its ports and numeric target ports are in range, port names are unique.
pub(super) fn service(it: &Item, spec: &ServiceSpec, r: &mut Reporter) {
    let mut names = BTreeSet::new();
    for (i, p) in spec.ports.iter().enumerate() {
        port_number(it, &format!("spec.ports[{i}].port"), p.port, r);
        if let Some(IntOrString::Int(n)) = &p.target_port {
            port_number(it, &format!("spec.ports[{i}].targetPort"), *n, r);
        }
        let name = p.name.clone().unwrap_or_default();
        if !names.insert(name.clone()) {
            r.error(
                &it.path(&format!("spec.ports[{i}].name")),
                format!("duplicate service port name `{name}`"),
            );
        }
    }
}

/// A `kubernetes.io/tls` Secret holds a certificate and a key. One without is a warning
/// here: what refers to it is not served (`compile::certs`), the rest of the
/// configuration is.
pub(super) fn tls_secret(it: &Item, s: &SecretData, r: &mut Reporter) {
    for key in ["tls.crt", "tls.key"] {
        if !s.entries.contains_key(key) {
            r.warn(
                &it.path("data"),
                format!(
                    "a kubernetes.io/tls Secret needs `{key}`: a listener that uses it is not \
                     served"
                ),
            );
        }
    }
}
