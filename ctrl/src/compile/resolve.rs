//! Service references resolved to backends: a Service port (by number, or by name for
//! Consul), optionally narrowed to a DestinationRule subset, becomes its ready endpoints
//! from EndpointSlices, else the Endpoints object, else the Pods the Service selects.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::model::core::{ServicePort, ServiceSpec};
use crate::model::meta::{IntOrString, LabelSelector};
use crate::model::{Kind, Object};

use super::ctx::{Ctx, ResolveKey};
use super::ir::{Backend, BackendTarget};

impl Ctx<'_> {
    /// The Maglev table size for a Service: its DestinationRule's, else the default.
    pub(super) fn maglev_size_for(&self, ns: &str, svc: &str) -> u64 {
        self.by
            .rules
            .get(&(ns, svc))
            .into_iter()
            .flatten()
            .find_map(|dr| {
                dr.traffic_policy
                    .as_ref()
                    .and_then(|t| t.load_balancer.as_ref())
                    .and_then(|l| l.consistent_hash.as_ref())
                    .and_then(|c| c.maglev.as_ref())
                    .and_then(|m| m.table_size)
            })
            .unwrap_or(self.default_maglev)
    }

    fn subset_labels(&self, ns: &str, svc: &str, subset: &str) -> Option<BTreeMap<String, String>> {
        self.by
            .rules
            .get(&(ns, svc))?
            .iter()
            .find_map(|dr| dr.subsets.iter().find(|s| s.name == subset))
            .map(|s| s.labels.clone())
    }

    fn pod_labels_by_ip(&self, ns: &str, ip: IpAddr) -> Option<&BTreeMap<String, String>> {
        self.by.pod_by_ip.get(&(ns, ip)).copied()
    }

    /// Resolves a Service port (by number, or by target port name for Consul) to ready
    /// endpoints, optionally restricted to a subset's labels.
    pub(super) fn backend(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
        weight: u32,
    ) -> Backend {
        let mut name = format!(
            "{ns}/{svc}:{}",
            port.map(|p| p.to_string())
                .or(port_name.map(str::to_string))
                .unwrap_or_else(|| "*".into())
        );
        if let Some(s) = subset {
            name.push('/');
            name.push_str(s);
        }
        let target = self.resolve(ns, svc, port, port_name, subset);
        Backend {
            name,
            weight,
            target,
        }
    }

    /// [`Ctx::resolve_once`], remembered: routes to one Service port share the work.
    fn resolve(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
    ) -> BackendTarget {
        let key: ResolveKey = (
            ns.to_string(),
            svc.to_string(),
            port,
            port_name.map(str::to_string),
            subset.map(str::to_string),
        );
        if let Some(t) = self.resolved.borrow().get(&key) {
            return t.clone();
        }
        let t = self.resolve_once(ns, svc, port, port_name, subset);
        self.resolved.borrow_mut().insert(key, t.clone());
        t
    }

    fn resolve_once(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
    ) -> BackendTarget {
        let Some(item) = self.index.get(Kind::Service, ns, svc) else {
            return BackendTarget::Invalid(format!("Service {ns}/{svc} not found"));
        };
        let Object::Service(s) = &item.object else {
            return BackendTarget::Invalid("not a Service".into());
        };
        let sp = match service_port(&s.spec, ns, svc, port, port_name) {
            Ok(sp) => sp,
            Err(e) => return BackendTarget::Invalid(e.to_string()),
        };
        let subset_labels = match subset {
            None => None,
            Some(sub) => match self.subset_labels(ns, svc, sub) {
                Some(l) => Some(l),
                None => {
                    return BackendTarget::Invalid(format!(
                        "no DestinationRule defines subset `{sub}` of {ns}/{svc}"
                    ))
                }
            },
        };
        let in_subset = |ip: IpAddr| match &subset_labels {
            None => true,
            Some(want) => self
                .pod_labels_by_ip(ns, ip)
                .is_some_and(|l| want.iter().all(|(k, v)| l.get(k) == Some(v))),
        };
        let sp_name = sp.name.clone().unwrap_or_default();
        // EndpointSlices labelled with the service name, else the Endpoints object,
        // else the Pods selected by the Service.
        let mut eps = match self.slice_endpoints(ns, svc, &sp_name, &in_subset) {
            Some(eps) => eps,
            None => match self.endpoints_object(ns, svc, &sp_name, &in_subset) {
                Some(eps) => eps,
                None => self.selected_pods(ns, &s.spec, sp, &in_subset),
            },
        };
        eps.sort();
        eps.dedup();
        if eps.is_empty() {
            BackendTarget::Invalid(format!(
                "Service {ns}/{svc}{} has no ready endpoints",
                subset.map(|s| format!(" subset {s}")).unwrap_or_default()
            ))
        } else {
            BackendTarget::Endpoints(eps)
        }
    }

    /// The ready endpoints of the EndpointSlices of Service `ns/svc` on the port named
    /// `sp_name`; `None` when the Service has no EndpointSlice.
    fn slice_endpoints(
        &self,
        ns: &str,
        svc: &str,
        sp_name: &str,
        in_subset: &dyn Fn(IpAddr) -> bool,
    ) -> Option<Vec<SocketAddr>> {
        let slices = self.by.slices.get(&(ns, svc))?;
        let mut eps = Vec::new();
        for es in slices {
            let Some(p) = es
                .spec
                .ports
                .iter()
                .find(|p| p.name.clone().unwrap_or_default() == sp_name)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            for e in &es.spec.endpoints {
                if e.conditions.ready == Some(false) {
                    continue;
                }
                for a in &e.addresses {
                    if let Ok(ip) = a.parse::<IpAddr>() {
                        if in_subset(ip) {
                            eps.push(SocketAddr::new(ip, p));
                        }
                    }
                }
            }
        }
        Some(eps)
    }

    /// The addresses of the Endpoints object of Service `ns/svc` on the port named
    /// `sp_name` (or its only port); `None` when there is no such object.
    fn endpoints_object(
        &self,
        ns: &str,
        svc: &str,
        sp_name: &str,
        in_subset: &dyn Fn(IpAddr) -> bool,
    ) -> Option<Vec<SocketAddr>> {
        let Some(Object::Endpoints(e)) =
            self.index.get(Kind::Endpoints, ns, svc).map(|i| &i.object)
        else {
            return None;
        };
        let mut eps = Vec::new();
        for sub in &e.spec {
            let Some(p) = sub
                .ports
                .iter()
                .find(|p| p.name.clone().unwrap_or_default() == sp_name || sub.ports.len() == 1)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            for a in &sub.addresses {
                if let Ok(ip) = a.ip.parse::<IpAddr>() {
                    if in_subset(ip) {
                        eps.push(SocketAddr::new(ip, p));
                    }
                }
            }
        }
        Some(eps)
    }

    /// The addresses of the Pods of namespace `ns` that the Service's selector selects,
    /// on the target port of `sp`.
    fn selected_pods(
        &self,
        ns: &str,
        spec: &ServiceSpec,
        sp: &ServicePort,
        in_subset: &dyn Fn(IpAddr) -> bool,
    ) -> Vec<SocketAddr> {
        let mut eps = Vec::new();
        let Some(sel) = &spec.selector else {
            return eps;
        };
        let sel = LabelSelector {
            match_labels: sel.clone(),
            match_expressions: Vec::new(),
        };
        for p in self.by.pods.get(ns).into_iter().flatten() {
            if sel.is_empty() || !sel.matches(&p.meta.labels) {
                continue;
            }
            let target = match &sp.target_port {
                None => u16::try_from(sp.port).ok(),
                Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
                Some(IntOrString::Str(name)) => p
                    .spec
                    .spec
                    .containers
                    .iter()
                    .flat_map(|c| c.ports.iter())
                    .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                    .and_then(|cp| u16::try_from(cp.container_port).ok()),
            };
            let Some(target) = target else { continue };
            for ip in p.spec.ips() {
                if let Ok(ip) = ip.parse::<IpAddr>() {
                    if in_subset(ip) {
                        eps.push(SocketAddr::new(ip, target));
                    }
                }
            }
        }
        eps
    }
}

/// Why a destination names no port of its Service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoServicePort {
    #[error("Service {0} has no port {1}")]
    Number(String, u32),
    #[error("Service {0} has no port named {1}")]
    Name(String, String),
    #[error("Service {0} has several ports and the destination names none")]
    Ambiguous(String),
}

/// The port of Service `ns/svc` a destination names: by number, else by name or target
/// port name, else the only port.
fn service_port<'s>(
    spec: &'s ServiceSpec,
    ns: &str,
    svc: &str,
    port: Option<u32>,
    port_name: Option<&str>,
) -> Result<&'s ServicePort, NoServicePort> {
    let sp = spec.ports.iter().find(|p| match (port, port_name) {
        (Some(n), _) => p.port == i64::from(n),
        (None, Some(name)) => {
            p.name.as_deref() == Some(name)
                || matches!(&p.target_port, Some(IntOrString::Str(t)) if t == name)
        }
        (None, None) => spec.ports.len() == 1,
    });
    let service = || format!("{ns}/{svc}");
    sp.ok_or_else(|| match (port, port_name) {
        (Some(n), _) => NoServicePort::Number(service(), n),
        (None, Some(n)) => NoServicePort::Name(service(), n.to_string()),
        (None, None) => NoServicePort::Ambiguous(service()),
    })
}
