//! Route backends -> Maglev tables. A route's backends are Services (or subsets) with a
//! weight each; a Service has N endpoints. Its weight is spread evenly over them, the way
//! Envoy's weighted clusters pick a cluster by weight and then a host by Maglev: every
//! endpoint of backend `b` gets weight `W_b * L / N_b`, with `L` the least common
//! multiple of the endpoint counts, so the normalised weights are the exact ratios
//! `W_b / (N_b * ΣW)` and a single-Service route builds the very table Envoy builds.
//! An invalid backend becomes one reject entry with weight `W_b * L`.

use sluice_dataplane::tables::maglev::{BuildError, Entry, EntryTarget, MaglevTable};

use super::ir::{Backend, BackendTarget, Route};

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The weighted entries of a set of backends (see the module docs).
pub fn maglev_entries(backends: &[Backend]) -> Result<Vec<Entry>, BuildError> {
    let mut lcm: u64 = 1;
    for b in backends {
        if let BackendTarget::Endpoints(e) = &b.target {
            let n = e.len() as u64;
            if n > 0 && b.weight > 0 {
                lcm = (lcm / gcd(lcm, n))
                    .checked_mul(n)
                    .ok_or(BuildError::WeightOverflow)?;
            }
        }
    }
    let mut out = Vec::new();
    for b in backends.iter().filter(|b| b.weight > 0) {
        let w = u64::from(b.weight);
        match &b.target {
            BackendTarget::Endpoints(eps) if !eps.is_empty() => {
                let each = w
                    .checked_mul(lcm / eps.len() as u64)
                    .ok_or(BuildError::WeightOverflow)?;
                out.extend(eps.iter().map(|a| Entry {
                    target: EntryTarget::Backend(*a),
                    weight: each,
                }));
            }
            _ => out.push(Entry {
                target: EntryTarget::Reject(b.name.clone()),
                weight: w.checked_mul(lcm).ok_or(BuildError::WeightOverflow)?,
            }),
        }
    }
    Ok(out)
}

/// The Maglev table of a set of backends at the route's table size.
pub fn maglev_table(backends: &[Backend], size: u64) -> Result<MaglevTable, BuildError> {
    MaglevTable::build(&maglev_entries(backends)?, size)
}

/// The Maglev table of a TCP/TLS route (HTTP routes have one per rule).
pub fn route_table(route: &Route) -> Result<MaglevTable, BuildError> {
    maglev_table(&route.backends, route.maglev_table_size)
}

/// Whether the backends' endpoints mix IPv4 and IPv6 (dual-stack Services).
pub fn mixes_families(backends: &[Backend]) -> bool {
    let mut fams = backends.iter().flat_map(|b| match &b.target {
        BackendTarget::Endpoints(e) => e.iter().map(|a| a.is_ipv6()).collect::<Vec<_>>(),
        _ => Vec::new(),
    });
    match fams.next() {
        Some(first) => fams.any(|f| f != first),
        None => false,
    }
}

/// The backends as a client of one family sees them: full NAT keeps the family, so a
/// dual-stack route gives IPv4 clients the IPv4 endpoints and IPv6 clients the IPv6 ones.
/// A Service with no endpoint of that family stays in the table as invalid (its weight is
/// rejected), as Gateway API asks of any backend that cannot be reached.
pub fn for_family(backends: &[Backend], v6: bool) -> Vec<Backend> {
    backends
        .iter()
        .map(|b| match &b.target {
            BackendTarget::Endpoints(e) => {
                let kept: Vec<_> = e.iter().copied().filter(|a| a.is_ipv6() == v6).collect();
                Backend {
                    name: b.name.clone(),
                    weight: b.weight,
                    target: if kept.is_empty() {
                        BackendTarget::Invalid(format!(
                            "no IPv{} endpoints",
                            if v6 { 6 } else { 4 }
                        ))
                    } else {
                        BackendTarget::Endpoints(kept)
                    },
                }
            }
            _ => b.clone(),
        })
        .collect()
}

/// The table a connection to a destination of this family uses: the route's one table,
/// or for a dual-stack route the table of that family's endpoints (see [`for_family`]).
pub fn table_for(backends: &[Backend], size: u64, dst_v6: bool) -> Result<MaglevTable, BuildError> {
    if mixes_families(backends) {
        maglev_table(&for_family(backends, dst_v6), size)
    } else {
        maglev_table(backends, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_dataplane::tables::maglev::Pick;

    fn be(name: &str, weight: u32, eps: &[&str]) -> Backend {
        Backend {
            name: name.into(),
            weight,
            target: if eps.is_empty() {
                BackendTarget::Invalid("none".into())
            } else {
                BackendTarget::Endpoints(eps.iter().map(|e| e.parse().expect("addr")).collect())
            },
        }
    }

    #[test]
    fn dual_stack_routes_get_one_table_per_family() {
        let backends = [
            be("ds", 1, &["10.0.0.1:80", "[fd00::1]:80"]),
            be("v4only", 1, &["10.0.0.2:80"]),
        ];
        assert!(mixes_families(&backends));
        let v4 = table_for(&backends, 7, false).expect("table");
        let v6 = table_for(&backends, 7, true).expect("table");
        assert!(v4.slots().all(|p| match p {
            Pick::Backend(a) => a.is_ipv4(),
            Pick::Reject => false,
        }));
        let (v6_backends, rejects) = v6.counts();
        assert_eq!(v6.backends(), ["[fd00::1]:80".parse().expect("addr")]);
        assert_eq!(v6_backends.iter().sum::<usize>() + rejects, 7);
        assert!(
            rejects > 0,
            "the IPv4-only Service's share is rejected for IPv6"
        );
        // A single-family route keeps its one table.
        let single = [be("a", 1, &["10.0.0.1:80"])];
        assert!(!mixes_families(&single));
        assert_eq!(
            table_for(&single, 7, true).expect("t"),
            maglev_table(&single, 7).expect("t")
        );
    }

    #[test]
    fn one_service_builds_envoys_table() {
        let t = maglev_table(
            &[be(
                "s",
                5,
                &[
                    "127.0.0.1:90",
                    "127.0.0.1:91",
                    "127.0.0.1:92",
                    "127.0.0.1:93",
                    "127.0.0.1:94",
                    "127.0.0.1:95",
                ],
            )],
            7,
        )
        .expect("table");
        let ports: Vec<u16> = t
            .slots()
            .map(|p| match p {
                Pick::Backend(a) => a.port(),
                Pick::Reject => 0,
            })
            .collect();
        assert_eq!(ports, [92, 94, 90, 91, 95, 90, 93]);
    }

    #[test]
    fn weights_split_over_endpoints_and_invalid_backends_reject() {
        // 70/30/0 with 1, 2 and 3 endpoints; plus an invalid backend of weight 100.
        let backends = [
            be("a", 70, &["10.0.0.1:80"]),
            be("b", 30, &["10.0.0.2:80", "10.0.0.3:80"]),
            be("c", 0, &["10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80"]),
            be("ghost", 100, &[]),
        ];
        let t = maglev_table(&backends, 65537).expect("table");
        let (per, reject) = t.counts();
        let m = 65537.0;
        let share = |addr: &str| {
            let a: std::net::SocketAddr = addr.parse().expect("addr");
            t.backends()
                .iter()
                .position(|b| *b == a)
                .map_or(0.0, |i| per[i] as f64 / m)
        };
        assert!((share("10.0.0.1:80") - 0.35).abs() < 0.002);
        assert!((share("10.0.0.2:80") - 0.075).abs() < 0.002);
        assert!((share("10.0.0.3:80") - 0.075).abs() < 0.002);
        assert_eq!(share("10.0.0.4:80"), 0.0);
        assert!((reject as f64 / m - 0.5).abs() < 0.002);
    }
}
