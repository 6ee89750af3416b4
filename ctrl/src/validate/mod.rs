//! Semantic checks across objects: references, TLS mode requirements, protocol values,
//! hostname and CIDR syntax, selectors, ports, weights, duplicates and conflicting
//! listeners. Every problem is reported (not only the first), each with file, line,
//! object and field path.
//!
//! What is an error and what a warning: anything that makes the intent unclear or a
//! listener unusable is an error (the whole config is rejected). A backend that does not
//! resolve (missing Service, no endpoints, unknown subset, cross-namespace reference
//! without a ReferenceGrant) is a warning: per seed 004 such a backend keeps its weight
//! and its share of connections is actively rejected.
//!
//! One file per family of kinds, like [`crate::model`]: `istio`, `gateway_api`, `netpol`,
//! `appliance`, `core` (Pods, Services, Secrets); `hostnames` holds the hostname syntax
//! they share and `index` the lookups of every reference check ([`Index`]). This file
//! holds the entry point, [`validate`], and the field checks used by several kinds.

mod appliance;
mod core;
mod fields;
mod gateway_api;
mod hostnames;
mod index;
mod istio;
mod netpol;

use std::collections::HashMap;

use crate::diag::Diagnostic;
use crate::load::{Item, Loaded};
use crate::model::meta::{transparent_by_annotation, SOURCE_NAT_ANNOTATION};
use crate::model::{Kind, Object};

pub use fields::{cidr, is_prime, MAX_BACKEND_REFS, MAX_WEIGHT};
pub use gateway_api::{route_kinds_of, GATEWAY_PROTOCOLS, MIN_TLS_VERSION};
pub use hostnames::service_of_host;
pub use hostnames::{gateway_hostname_error, istio_host_error};
pub use index::Index;
pub use istio::{split_gateway_ref, ISTIO_PROTOCOLS};

/// Runs every check; appends diagnostics to `loaded.diagnostics`.
pub fn validate(loaded: &mut Loaded) {
    let mut out = Vec::new();
    {
        let items = &loaded.items;
        let index = Index::new(items);
        check_duplicates(items, &mut out);
        let appliances: Vec<&Item> = items
            .iter()
            .filter(|i| i.object.kind() == Kind::Appliance)
            .collect();
        for extra in appliances.iter().skip(1) {
            extra.reporter(&mut out).error(
                &extra.path("metadata.name"),
                "only one Appliance may be given",
            );
        }
        for it in items {
            let mut r = it.reporter(&mut out);
            if it.object.meta().name.is_empty() {
                let field = match it.object.format() {
                    crate::model::Format::Kubernetes => "metadata.name",
                    crate::model::Format::Ligato => "name",
                    crate::model::Format::Consul => "id.name",
                };
                r.error(&it.path(field), "missing name");
            }
            if let Some(ts) = &it.object.meta().creation_timestamp {
                if crate::model::meta::parse_rfc3339(ts).is_none() {
                    r.error(
                        &it.path("metadata.creationTimestamp"),
                        format!("`{ts}` is not an RFC 3339 time (like 2024-01-02T03:04:05Z)"),
                    );
                }
            }
            match &it.object {
                Object::IstioGateway(g) => istio::istio_gateway(it, &g.spec, &mut r),
                Object::VirtualService(v) => istio::virtual_service(it, &v.spec, &index, &mut r),
                Object::DestinationRule(d) => istio::destination_rule(it, &d.spec, &mut r),
                Object::Gateway(g) => gateway_api::gateway(it, &g.spec, &mut r),
                Object::TlsRoute(t) => gateway_api::tls_route(it, &t.spec, &index, &mut r),
                Object::HttpRoute(h) => gateway_api::http_route(it, &h.spec, &index, &mut r),
                Object::TcpRoute(t) => {
                    gateway_api::tcp_route(it, &t.spec, "TCPRoute", &index, &mut r)
                }
                Object::UdpRoute(u) => {
                    gateway_api::tcp_route(it, &u.spec, "UDPRoute", &index, &mut r)
                }
                Object::NetworkPolicy(p) => netpol::network_policy(it, &p.spec, &mut r),
                Object::Appliance(a) => appliance::appliance(it, &a.spec, &mut r),
                Object::Pod(p) => core::pod(it, &p.spec, &mut r),
                Object::Service(s) => core::service(it, &s.spec, &mut r),
                Object::Secret(s) if s.spec.kind == "kubernetes.io/tls" => {
                    core::tls_secret(it, &s.spec, &mut r)
                }
                _ => {}
            }
            if matches!(it.object.kind(), Kind::Gateway | Kind::IstioGateway) {
                let meta = it.object.meta();
                if let Err(e) = transparent_by_annotation(&meta.annotations) {
                    r.error(
                        &it.path("metadata.annotations").key(SOURCE_NAT_ANNOTATION),
                        e.to_string(),
                    );
                }
            }
        }
    }
    loaded.diagnostics.extend(out);
}

fn check_duplicates(items: &[Item], out: &mut Vec<Diagnostic>) {
    let mut seen: HashMap<(Kind, String, String), &Item> = HashMap::new();
    for it in items {
        let m = it.object.meta();
        if m.name.is_empty() {
            continue;
        }
        let ns = if it.object.kind().namespaced() {
            m.namespace().to_string()
        } else {
            String::new()
        };
        let key = (it.object.kind(), ns, m.name.clone());
        match seen.get(&key) {
            Some(first) => {
                let p = first.origin.locate(&first.base);
                it.reporter(out).error(
                    &it.path("metadata.name"),
                    format!(
                        "duplicate object: {} is already defined at {}:{}:{}",
                        it.object.label(),
                        first.origin.file,
                        p.line,
                        p.col
                    ),
                );
            }
            None => {
                seen.insert(key, it);
            }
        }
    }
}
