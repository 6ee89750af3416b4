//! The namespaces and links of the benchmark, and threads that run inside a namespace.
//!
//! ```text
//!  client ns                      proxy ns                          backend ns
//!  cli0 10.95.1.1/24 ── veth ── prx0 10.95.1.2/24 (:443)
//!                               prx1 10.95.2.2/24 ── veth ── bk0 10.95.2.11/24 (a), .12 (b)
//!
//!  TAP lane (in-process contenders such as sluice, whose worker holds both TAP fds):
//!  <outside> 10.95.3.1/24 ── TAP ── sluice 10.95.3.2, VIP 10.95.3.10 (:443)
//!                                   sluice 10.95.4.100+n ── TAP ── <inside> 10.95.4.11/24 (a), .12 (b)
//! ```
//!
//! Each lane (one per round) gives the contender a source NAT address of its own
//! (10.95.4.100 + n): a fresh instance starts its SNAT port cursor afresh, and reusing an
//! (address, port, backend) tuple that a backend still holds in TIME_WAIT from an earlier
//! round fails: the new SYN carries the timestamp of another client connection, which on
//! this kernel (6.18) is not ordered after the old one's (the timestamp offset differs
//! between connections), so PAWS rejects it and the client retransmits its SYN a second
//! later (seen here: `TcpExtPAWSTimewait` in the backend namespace, ~100 cps instead of
//! thousands and a 3 s p99 in every round after the first).
//!
//! Every address is in 10.95.0.0/16 on a device the benchmark created inside a namespace
//! of its own; nothing is configured in the initial namespace (a TAP device is created
//! there by its opener and moved out at once), so no traffic leaves the machine. The
//! namespaces are deleted on drop (their veths with them), also when the benchmark
//! panics. IPv6 is off in them (no router solicitations or MLD on the links), and the
//! client and proxy namespaces use ephemeral ports 1024-65535.

use sluice_testkit::sys::{unique_name, Netns};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::process::Command;
use std::thread::JoinHandle;

/// The client's address towards the proxy namespace.
pub const CLIENT_PEER: Ipv4Addr = Ipv4Addr::new(10, 95, 1, 1);
/// The proxies' listening address (proxy namespace).
pub const PROXY_FRONT: Ipv4Addr = Ipv4Addr::new(10, 95, 1, 2);
/// The proxy namespace's address towards the backends.
pub const PROXY_BACK: Ipv4Addr = Ipv4Addr::new(10, 95, 2, 2);
/// Backend addresses on the proxy namespace's link, in the order of [`BACKENDS`].
pub const BACKEND_PEER: [Ipv4Addr; 2] =
    [Ipv4Addr::new(10, 95, 2, 11), Ipv4Addr::new(10, 95, 2, 12)];
/// The client's address on the TAP lane.
pub const CLIENT_TAP: Ipv4Addr = Ipv4Addr::new(10, 95, 3, 1);
/// The in-process contender's address on the client TAP (the client's next hop to the VIP).
pub const LANE_OUTSIDE: Ipv4Addr = Ipv4Addr::new(10, 95, 3, 2);
/// The virtual address an in-process contender listens on.
pub const LANE_VIP: Ipv4Addr = Ipv4Addr::new(10, 95, 3, 10);
/// The in-process contender's address on the backend TAP (its source NAT address) on the
/// first lane; lane `n` uses the `n`th address after it.
pub const LANE_INSIDE_FIRST: Ipv4Addr = Ipv4Addr::new(10, 95, 4, 100);
/// How many lanes one topology can give out.
pub const MAX_LANES: u8 = 150;
/// Backend addresses on the TAP lane, in the order of [`BACKENDS`].
pub const BACKEND_TAP: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 95, 4, 11), Ipv4Addr::new(10, 95, 4, 12)];
/// Prefix length of every link.
pub const PREFIX: u8 = 24;
/// The port every contender listens on.
pub const FRONT_PORT: u16 = 443;
/// The backends: name (what its reply says) and port (on every backend address).
pub const BACKENDS: [(&str, u16); 2] = [("a", 8001), ("b", 8002)];

/// Backend `i` of [`BACKENDS`] as the proxy namespace reaches it.
pub fn backend_peer(i: usize) -> SocketAddrV4 {
    SocketAddrV4::new(BACKEND_PEER[i], BACKENDS[i].1)
}

/// Backend `i` of [`BACKENDS`] as the TAP lane reaches it.
pub fn backend_tap(i: usize) -> SocketAddrV4 {
    SocketAddrV4::new(BACKEND_TAP[i], BACKENDS[i].1)
}

/// Runs `args` (a command and its arguments) inside namespace `ns`; its stdout, or an
/// error with its stderr.
pub fn ns_run(ns: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .map_err(|e| format!("ip netns exec {ns} {}: {e}", args.join(" ")))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "ip netns exec {ns} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim(),
            String::from_utf8_lossy(&o.stdout).trim()
        ))
    }
}

/// The three namespaces and the veths between them. Deleted on drop.
#[derive(Debug)]
pub struct Topology {
    lanes: std::sync::atomic::AtomicU8,
    /// The load client's namespace.
    pub client: Netns,
    /// The external proxies' namespace.
    pub proxy: Netns,
    /// The backends' namespace.
    pub backend: Netns,
}

impl Topology {
    /// Creates the namespaces, the two veth pairs and their addresses (see the module
    /// docs). Needs root; panics (after cleaning up) when `ip` refuses.
    pub fn new() -> Result<Topology, String> {
        let t = Topology {
            lanes: std::sync::atomic::AtomicU8::new(0),
            client: Netns::new("snc"),
            proxy: Netns::new("snp"),
            backend: Netns::new("snb"),
        };
        for ns in [&t.client, &t.proxy, &t.backend] {
            for k in ["all", "default"] {
                ns_run(
                    &ns.name,
                    &[
                        "sysctl",
                        "-qw",
                        &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                    ],
                )?;
            }
        }
        for ns in [&t.client, &t.proxy] {
            ns_run(
                &ns.name,
                &["sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535"],
            )?;
        }
        let cidr = |a: Ipv4Addr| format!("{a}/{PREFIX}");
        for (a_ns, a_if, b_ns, b_if) in [
            (&t.client, "cli0", &t.proxy, "prx0"),
            (&t.proxy, "prx1", &t.backend, "bk0"),
        ] {
            ns_run(
                &a_ns.name,
                &[
                    "ip", "link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns",
                    &b_ns.name,
                ],
            )?;
        }
        let mut addrs = vec![
            (&t.client, "cli0", CLIENT_PEER),
            (&t.proxy, "prx0", PROXY_FRONT),
            (&t.proxy, "prx1", PROXY_BACK),
        ];
        addrs.extend(BACKEND_PEER.iter().map(|a| (&t.backend, "bk0", *a)));
        for (ns, dev, a) in addrs {
            ns_run(&ns.name, &["ip", "addr", "add", &cidr(a), "dev", dev])?;
        }
        for (ns, dev) in [
            (&t.client, "cli0"),
            (&t.proxy, "prx0"),
            (&t.proxy, "prx1"),
            (&t.backend, "bk0"),
        ] {
            ns_run(&ns.name, &["ip", "link", "set", dev, "up"])?;
        }
        Ok(t)
    }

    /// A new TAP lane: names for its two devices, unique on the machine (the devices are
    /// created in the initial namespace by whoever opens them), and a source NAT address
    /// no earlier lane of this topology used.
    pub fn tap_lane(&self) -> Result<TapLane, String> {
        let n = self
            .lanes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n >= MAX_LANES {
            return Err(format!("more than {MAX_LANES} TAP lanes"));
        }
        let first = u32::from(LANE_INSIDE_FIRST);
        Ok(TapLane {
            outside_if: unique_name("sno"),
            inside_if: unique_name("sni"),
            inside: Ipv4Addr::from(first + u32::from(n)),
        })
    }

    /// Moves an opened TAP lane's devices into the client and backend namespaces and
    /// gives them the lane's addresses (client: [`CLIENT_TAP`] and a route to
    /// [`LANE_VIP`] via [`LANE_OUTSIDE`]; backends: [`BACKEND_TAP`]). Then pings the
    /// contender's two addresses from each side, which also makes it learn the
    /// neighbours' MACs.
    pub fn attach(&self, lane: &TapLane) -> Result<(), String> {
        let cidr = |a: Ipv4Addr| format!("{a}/{PREFIX}");
        for (ns, dev) in [
            (&self.client, &lane.outside_if),
            (&self.backend, &lane.inside_if),
        ] {
            let o = Command::new("ip")
                .args(["link", "set", dev, "netns", &ns.name])
                .output()
                .map_err(|e| format!("ip link set {dev}: {e}"))?;
            if !o.status.success() {
                return Err(format!(
                    "ip link set {dev} netns {}: {}",
                    ns.name,
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            ns_run(&ns.name, &["ip", "link", "set", dev, "up"])?;
        }
        let c = &self.client.name;
        ns_run(
            c,
            &[
                "ip",
                "addr",
                "add",
                &cidr(CLIENT_TAP),
                "dev",
                &lane.outside_if,
            ],
        )?;
        ns_run(
            c,
            &[
                "ip",
                "route",
                "add",
                &format!("{LANE_VIP}/32"),
                "via",
                &LANE_OUTSIDE.to_string(),
                "dev",
                &lane.outside_if,
            ],
        )?;
        for a in BACKEND_TAP {
            ns_run(
                &self.backend.name,
                &["ip", "addr", "add", &cidr(a), "dev", &lane.inside_if],
            )?;
        }
        let mut pings = vec![(c, CLIENT_TAP, LANE_OUTSIDE)];
        pings.extend(
            BACKEND_TAP
                .iter()
                .map(|a| (&self.backend.name, *a, lane.inside)),
        );
        for (ns, from, to) in pings {
            ns_run(
                ns,
                &[
                    "ping",
                    "-c",
                    "1",
                    "-W",
                    "2",
                    "-I",
                    &from.to_string(),
                    &to.to_string(),
                ],
            )?;
        }
        Ok(())
    }
}

/// A TAP lane: its devices' names (`outside_if` faces the client, `inside_if` the
/// backends) and the contender's address towards the backends. Whoever runs the contender
/// opens (creates) the devices; [`Topology::attach`] moves them into the namespaces. They
/// disappear when their opener closes them.
#[derive(Debug, Clone)]
pub struct TapLane {
    /// The client-side device.
    pub outside_if: String,
    /// The backend-side device.
    pub inside_if: String,
    /// The contender's address on the backend side (its source NAT address); on the
    /// client side it is [`LANE_OUTSIDE`] with [`LANE_VIP`].
    pub inside: Ipv4Addr,
}

/// Spawns thread `name` that enters namespace `ns`, pins itself to `core` (if any) and
/// runs `f`. The namespace is the thread's own: sockets it creates live there.
pub fn spawn_in<T: Send + 'static>(
    ns: &str,
    core: Option<usize>,
    name: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<JoinHandle<Result<T, String>>, String> {
    let path = format!("/run/netns/{ns}");
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            rustix::thread::move_into_link_name_space(
                file.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| format!("setns {path}: {e}"))?;
            if let Some(id) = core {
                if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                    return Err(format!("could not pin to core {id}"));
                }
            }
            f()
        })
        .map_err(|e| format!("spawn {name}: {e}"))
}

/// Joins a [`spawn_in`] thread, turning a panic into an error.
pub fn join<T>(h: JoinHandle<Result<T, String>>) -> Result<T, String> {
    h.join().map_err(|_| "thread panicked".to_string())?
}
