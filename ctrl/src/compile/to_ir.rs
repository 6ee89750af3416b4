//! Validated objects -> [`Ir`]: namespaces, nodes, workloads and policies, then each
//! gateway's listeners bound to their routes (Istio and Gateway API).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use super::ir::*;
use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::Object;
use crate::validate::Index;

use super::ctx::{BuildStats, Ctx, Lookups, DEFAULT_MAGLEV_TABLE_SIZE};
use super::served::Exclusions;

/// Builds the IR from validated items, in precedence order (as [`super::build()`] sorts
/// them: where objects compete, the earlier wins). Warnings (routes not attached, ...)
/// are appended to `diags`.
pub fn build_ir(items: &[Item], diags: &mut Vec<Diagnostic>) -> Ir {
    build_ir_with_stats(items, &Exclusions::default(), diags).0
}

/// [`build_ir`] without what `excluded` leaves out, also returning how much binding work
/// it did.
pub fn build_ir_with_stats(
    items: &[Item],
    excluded: &Exclusions,
    diags: &mut Vec<Diagnostic>,
) -> (Ir, BuildStats) {
    let index = Index::new(items);
    let mut ir = Ir::default();
    let mut ctx = Ctx {
        items,
        index: &index,
        default_maglev: DEFAULT_MAGLEV_TABLE_SIZE,
        virtual_addresses: Vec::new(),
        by: Lookups::new(items, excluded),
        excluded,
        attachment: Default::default(),
        resolved: RefCell::new(HashMap::new()),
        stats: BuildStats::default(),
    };
    for it in items {
        if let Object::Appliance(a) = &it.object {
            ir.appliance = Some(a.spec.clone());
            if let Some(s) = a.spec.maglev_table_size {
                ctx.default_maglev = s;
            }
            ctx.virtual_addresses = a
                .spec
                .virtual_addresses
                .iter()
                .filter_map(|v| v.parse().ok())
                .collect();
            break;
        }
    }
    for it in items {
        match &it.object {
            Object::Namespace(n) => {
                let mut labels = n.meta.labels.clone();
                labels.insert("kubernetes.io/metadata.name".into(), n.meta.name.clone());
                ir.namespaces.insert(n.meta.name.clone(), labels);
            }
            Object::Node(n) => ir.nodes.push(Node {
                name: n.meta.name.clone(),
                addresses: n
                    .spec
                    .addresses
                    .iter()
                    .filter(|a| a.kind != "Hostname")
                    .filter_map(|a| a.address.parse().ok())
                    .collect(),
            }),
            Object::Pod(p) if !p.spec.spec.host_network => {
                for ip in p.spec.ips() {
                    let Ok(ip) = ip.parse() else { continue };
                    ir.workloads.push(Workload {
                        ip,
                        namespace: p.meta.namespace().to_string(),
                        pod: p.meta.name.clone(),
                        labels: p.meta.labels.clone(),
                        named_ports: p
                            .spec
                            .spec
                            .containers
                            .iter()
                            .flat_map(|c| c.ports.iter())
                            .filter_map(|cp| {
                                Some((
                                    cp.name.clone()?,
                                    cp.protocol,
                                    u16::try_from(cp.container_port).ok()?,
                                ))
                            })
                            .collect(),
                        node: p.spec.spec.node_name.clone(),
                    });
                }
            }
            Object::NetworkPolicy(p) => ir.policies.push(Policy {
                namespace: p.meta.namespace().to_string(),
                name: p.meta.name.clone(),
                spec: p.spec.clone(),
            }),
            _ => {}
        }
    }
    // Namespaces referenced by objects but not declared still exist for selectors.
    for it in items {
        if it.object.kind().namespaced() {
            let ns = it.object.meta().namespace().to_string();
            ir.namespaces.entry(ns.clone()).or_insert_with(|| {
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns)])
            });
        }
    }
    for (i, it) in items.iter().enumerate() {
        match &it.object {
            Object::IstioGateway(g) => ctx.istio_gateway(i, &g.spec, &mut ir, diags),
            Object::Gateway(g) => ctx.gateway_api(i, &g.spec, &mut ir, diags),
            _ => {}
        }
    }
    ctx.attachment.report_refusals(items, diags);
    ir.attachment = std::mem::take(&mut ctx.attachment);
    (ir, ctx.stats)
}
