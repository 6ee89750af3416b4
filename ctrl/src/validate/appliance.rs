//! The Appliance: cores, ports, routes, virtual addresses, limits.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::appliance::ApplianceSpec;

use super::fields::{cidr, maglev_size};

pub(super) fn appliance(it: &Item, spec: &ApplianceSpec, r: &mut Reporter) {
    let mut cores = BTreeSet::new();
    for (i, c) in spec.cores.iter().flatten().enumerate() {
        if !cores.insert(*c) {
            r.error(
                &it.path(&format!("spec.cores[{i}]")),
                format!("core {c} is listed twice"),
            );
        }
    }
    let mut names = BTreeSet::new();
    let mut has_dpdk = false;
    for (i, p) in spec.ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        if p.name.is_empty() {
            r.error(&it.path(&format!("{at}.name")), "port name is required");
        } else if !names.insert(p.name.clone()) {
            r.error(
                &it.path(&format!("{at}.name")),
                format!("duplicate port name `{}`", p.name),
            );
        }
        let kinds = usize::from(p.tap.is_some())
            + usize::from(p.dpdk.is_some())
            + usize::from(p.pcap.is_some());
        if kinds != 1 {
            r.error(&it.path(&at), "a port needs exactly one of tap, dpdk, pcap");
        }
        has_dpdk |= p.dpdk.is_some();
        if let Some(t) = &p.tap {
            if t.name.is_empty() || t.name.len() > 15 {
                r.error(
                    &it.path(&format!("{at}.tap.name")),
                    format!("TAP name `{}` must be 1..15 bytes", t.name),
                );
            }
        }
        if let Some(pc) = &p.pcap {
            if pc.rx.is_none() && pc.tx.is_none() {
                r.error(
                    &it.path(&format!("{at}.pcap")),
                    "a pcap port needs rx, tx or both",
                );
            }
        }
        for (j, a) in p.addresses.iter().enumerate() {
            if a.parse::<IpNet>().is_err() {
                r.error(
                    &it.path(&format!("{at}.addresses[{j}]")),
                    format!("`{a}` must be an address with prefix length, like 10.77.0.2/24"),
                );
            }
        }
        if p.queues == Some(0) {
            r.error(
                &it.path(&format!("{at}.queues")),
                "queues must be at least 1",
            );
        }
        if let Some(m) = p.mtu {
            if !(576..=9216).contains(&m) {
                r.error(
                    &it.path(&format!("{at}.mtu")),
                    format!("mtu {m} is out of range 576..9216"),
                );
            }
        }
    }
    for (i, rt) in spec.routes.iter().enumerate() {
        let at = format!("spec.routes[{i}]");
        let to = cidr(it, &format!("{at}.to"), &rt.to, r);
        match rt.via.parse::<IpAddr>() {
            Err(_) => r.error(
                &it.path(&format!("{at}.via")),
                format!("`{}` is not an IP address", rt.via),
            ),
            Ok(via) => {
                if to.is_some_and(|t| t.addr().is_ipv4() != via.is_ipv4()) {
                    r.error(
                        &it.path(&format!("{at}.via")),
                        "next hop and destination are of different address families",
                    );
                }
            }
        }
    }
    for (i, v) in spec.virtual_addresses.iter().enumerate() {
        if v.parse::<IpAddr>().is_err() {
            r.error(
                &it.path(&format!("spec.virtualAddresses[{i}]")),
                format!("`{v}` is not an IP address"),
            );
        }
    }
    if !spec.eal.is_empty() && !has_dpdk {
        r.warn(
            &it.path("spec.eal"),
            "eal arguments are used only when a dpdk port is present",
        );
    }
    maglev_size(it, "spec.maglevTableSize", spec.maglev_table_size, r);
    if let Some(rest) = spec.conntrack.as_ref().and_then(|c| c.snat_rest_seconds) {
        let at = it.path("spec.conntrack.snatRestSeconds");
        if rest > 3600 {
            r.error(
                &at,
                "at most 3600: a longer rest leaves the port range idle",
            );
        } else if rest < 60 {
            r.warn(
                &at,
                "below 60 s (2×MSL), a backend may still hold a reused tuple in TIME_WAIT",
            );
        }
    }
    let l = &spec.limits;
    for (name, v) in [
        ("flowsPerWorker", l.flows_per_worker),
        ("identities", l.identities),
        ("prefixes", l.prefixes),
        ("policyEntries", l.policy_entries),
        ("listeners", l.listeners),
        ("backendsPerRoute", l.backends_per_route),
        (
            "newConnectionsPerSecondPerSource",
            l.new_connections_per_second_per_source,
        ),
        ("embryosPerSource", l.embryos_per_source),
    ] {
        if v == Some(0) {
            r.error(
                &it.path(&format!("spec.limits.{name}")),
                "a limit must be at least 1",
            );
        }
    }
    for (name, v, max) in [
        (
            "newConnectionsPerSecondPerSource",
            l.new_connections_per_second_per_source,
            u64::from(u32::MAX),
        ),
        (
            "embryosPerSource",
            l.embryos_per_source,
            u64::from(u16::MAX),
        ),
    ] {
        if v.is_some_and(|v| v > max) {
            r.error(
                &it.path(&format!("spec.limits.{name}")),
                format!("at most {max}"),
            );
        }
    }
}
