//! `sluice.dev/v1alpha1` Appliance: the machine itself — ports, cores, addresses,
//! routes, limits. Every struct here rejects unknown fields.

use serde::Deserialize;

/// `Appliance.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplianceSpec {
    /// CPU cores; one pinned worker per core. Absent: core 0. Explicitly empty
    /// (`cores: []`) is an error: a dataplane without workers forwards nothing.
    #[serde(default)]
    pub cores: Option<Vec<u32>>,
    /// Network ports.
    #[serde(default)]
    pub ports: Vec<AppliancePort>,
    /// Static routes (next hops for forwarded traffic).
    #[serde(default)]
    pub routes: Vec<StaticRoute>,
    /// Virtual addresses that listeners bind to when they name none.
    #[serde(default)]
    pub virtual_addresses: Vec<String>,
    /// Static neighbours: addresses whose MAC is configured, never learned from ARP/NDP
    /// and never overwritten by what packets claim.
    #[serde(default)]
    pub neighbours: Vec<StaticNeighbour>,
    /// Extra EAL arguments, used when a DPDK port is present.
    #[serde(default)]
    pub eal: Vec<String>,
    /// Default Maglev table size (prime); 65537 when absent.
    #[serde(default)]
    pub maglev_table_size: Option<u64>,
    /// Table caps and flow-table sizes.
    #[serde(default)]
    pub limits: Box<Limits>,
    /// Admin API endpoint.
    #[serde(default)]
    pub admin: Option<Admin>,
    /// Connection tracking: timeouts and the source NAT port range (boxed: most
    /// Appliances leave it out).
    #[serde(default)]
    pub conntrack: Option<Box<Conntrack>>,
    /// Delayed binding for SNI/Host listeners: embryo slots, first-bytes buffer and
    /// deadline, backend connect retries (boxed: most Appliances leave it out).
    #[serde(default)]
    pub delayed_binding: Option<Box<DelayedBinding>>,
    /// TLS termination: caps on terminated connections and their memory per worker,
    /// buffers, deadlines (boxed: most Appliances leave it out).
    #[serde(default)]
    pub termination: Option<Box<Termination>>,
}

/// TLS termination settings per worker; defaults when absent (README "TLS termination").
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Termination {
    /// Terminated connections a worker holds at once (16384; 1 to 1048576). A SYN beyond
    /// it is answered with RST (`terminate_refused`).
    #[serde(default)]
    pub connections_per_worker: Option<u32>,
    /// MiB a worker may spend on terminated connections, counted per connection as its
    /// four TCP buffers and the TLS state (512; 1 to 1048576). The lower of the two caps
    /// applies.
    #[serde(default)]
    pub memory_mib_per_worker: Option<u32>,
    /// Receive and send buffer, each, of the client's TCP connection (8192; 2048 to
    /// 1048576). Bigger buffers move more per round trip and cost memory.
    #[serde(default)]
    pub client_buffer_bytes: Option<u32>,
    /// Receive and send buffer, each, of the backend's TCP connection (8192; 2048 to
    /// 1048576).
    #[serde(default)]
    pub backend_buffer_bytes: Option<u32>,
    /// Milliseconds from the SYN to the end of the TLS handshake and, for HTTPS, the
    /// first request head (10000; 100 to 600000): slowloris clients are reset.
    #[serde(default)]
    pub handshake_timeout_ms: Option<u32>,
    /// Milliseconds without a packet either way before a connection is closed (300000;
    /// 1000 to 86400000).
    #[serde(default)]
    pub idle_timeout_ms: Option<u32>,
    /// Milliseconds a backend has to accept before the next one is tried (3000; 100 to
    /// 60000).
    #[serde(default)]
    pub backend_connect_timeout_ms: Option<u32>,
    /// Backends tried for one connection before the client is reset (3; 1 to 10).
    #[serde(default)]
    pub backend_tries: Option<u32>,
    /// TCP keep-alive interval towards clients and backends, milliseconds (60000; 0 =
    /// off, else 1000 to 7200000).
    #[serde(default)]
    pub keep_alive_ms: Option<u32>,
    /// Largest HTTP request head the proxy reads (larger: 431), bytes (16384; 1024 to
    /// 16384).
    #[serde(default)]
    pub request_head_bytes: Option<u32>,
    /// Idle HTTP backend connections a worker keeps for any client's next request to the
    /// same backend (256; 0 to 65536, 0 = none kept past their client connection).
    #[serde(default)]
    pub backend_pool_connections: Option<u32>,
    /// Milliseconds a pooled backend connection may stay unused before it is closed
    /// (10000; 100 to 3600000) — keep it below the backends' keep-alive timeouts.
    #[serde(default)]
    pub backend_pool_idle_ms: Option<u32>,
    /// Mirrored request copies a worker has in flight at once; more are not sent and are
    /// counted (256; 0 to 65536).
    #[serde(default)]
    pub mirror_connections: Option<u32>,
    /// The mesh's root of trust and the gateway's own certificate for Istio servers in
    /// mode `ISTIO_MUTUAL` (which Istio's agent would provision); without it such servers
    /// are not served.
    #[serde(default)]
    pub istio_mutual: Option<IstioMutual>,
}

/// Files of the mesh identity `ISTIO_MUTUAL` servers terminate with (PEM; a relative
/// path is relative to the Appliance manifest's directory).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioMutual {
    /// CA certificates client certificates must chain to (the mesh root, Istio's
    /// `root-cert.pem`).
    pub ca_certificates: String,
    /// The gateway's certificate chain, leaf first (Istio's `cert-chain.pem`).
    pub certificate_chain: String,
    /// The gateway's private key (Istio's `key.pem`).
    pub private_key: String,
    /// A certificate revocation list (PEM) for client certificates; optional.
    #[serde(default)]
    pub ca_crl: Option<String>,
}

/// Delayed-binding settings (SNI/Host passthrough); defaults when absent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DelayedBinding {
    /// Connections a worker holds between its SYN cookie's return and the splice (1024).
    #[serde(default)]
    pub embryos_per_worker: Option<u32>,
    /// Bytes buffered for a connection's first bytes (16384; 512 to 65535).
    #[serde(default)]
    pub buffer_bytes: Option<u32>,
    /// Out-of-order pieces of first bytes held at once (8; 1 to 8).
    #[serde(default)]
    pub max_segments: Option<u32>,
    /// Milliseconds the first bytes may take (5000).
    #[serde(default)]
    pub first_bytes_timeout_ms: Option<u32>,
    /// Milliseconds from the first SYN to a silent backend to the second (1000); each
    /// later wait doubles (exponential backoff, as Linux).
    #[serde(default)]
    pub backend_syn_timeout_ms: Option<u32>,
    /// SYNs sent to one backend before the next is tried (3).
    #[serde(default)]
    pub backend_syn_tries: Option<u32>,
    /// Backends tried for one connection before the client is reset (3).
    #[serde(default)]
    pub backend_tries: Option<u32>,
}

/// Connection-tracking settings; every timeout in seconds, Linux nf_conntrack's default
/// when absent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Conntrack {
    /// SYN seen, no answer (120).
    #[serde(default)]
    pub tcp_syn_sent: Option<u32>,
    /// SYN-ACK seen, no final ACK (60).
    #[serde(default)]
    pub tcp_syn_recv: Option<u32>,
    /// Established (432000: five days).
    #[serde(default)]
    pub tcp_established: Option<u32>,
    /// One side sent FIN (120).
    #[serde(default)]
    pub tcp_fin_wait: Option<u32>,
    /// The other side answered the FIN (60).
    #[serde(default)]
    pub tcp_close_wait: Option<u32>,
    /// Both FINs seen (30).
    #[serde(default)]
    pub tcp_last_ack: Option<u32>,
    /// Closed cleanly (120).
    #[serde(default)]
    pub tcp_time_wait: Option<u32>,
    /// Reset (10).
    #[serde(default)]
    pub tcp_close: Option<u32>,
    /// UDP before a reply (30).
    #[serde(default)]
    pub udp_unreplied: Option<u32>,
    /// UDP after a reply (120).
    #[serde(default)]
    pub udp_replied: Option<u32>,
    /// Source NAT ports, `"FIRST-LAST"` (default `"1024-65535"`), split evenly among the
    /// workers.
    #[serde(default)]
    pub snat_ports: Option<String>,
    /// Seconds a closed connection's source NAT tuple rests before it is handed out
    /// again, so a backend holding it in TIME_WAIT never sees it reused (60, Linux's
    /// 2×MSL; 0 to 3600).
    #[serde(default)]
    pub snat_rest_seconds: Option<u32>,
}

/// One network port and its addresses.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliancePort {
    /// Port name, unique.
    #[serde(default)]
    pub name: String,
    /// A Linux TAP device (no DPDK needed).
    #[serde(default)]
    pub tap: Option<TapPort>,
    /// A DPDK ethdev: PCI address or vdev devargs.
    #[serde(default)]
    pub dpdk: Option<DpdkPort>,
    /// A pcap file pair: RX replayed from `rx`, TX written to `tx`.
    #[serde(default)]
    pub pcap: Option<PcapPort>,
    /// Interface addresses with prefix length (`10.77.0.2/24`, `fd77::2/64`).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// RX/TX queues (default: one per worker).
    #[serde(default)]
    pub queues: Option<u16>,
    /// MTU (default 1500).
    #[serde(default)]
    pub mtu: Option<u16>,
}

/// A TAP device.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TapPort {
    /// Interface name (at most 15 bytes).
    pub name: String,
}

/// A DPDK device.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DpdkPort {
    /// `0000:3b:00.0` or a vdev such as `net_tap0,iface=x`.
    pub devargs: String,
}

/// A pcap file pair.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PcapPort {
    /// Capture replayed as received packets.
    #[serde(default)]
    pub rx: Option<String>,
    /// Capture written with transmitted packets.
    #[serde(default)]
    pub tx: Option<String>,
}

/// A static neighbour (`{ip: 10.78.0.11, mac: "02:00:00:00:00:0b", port: inside}`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticNeighbour {
    /// Its IP address: in a connected network of its port, not one of sluice's own.
    pub ip: String,
    /// Its MAC (`aa:bb:cc:dd:ee:ff`), unicast.
    pub mac: String,
    /// The port it is behind (a `spec.ports` name); by default the port whose network
    /// holds `ip`.
    #[serde(default)]
    pub port: Option<String>,
}

/// A static route.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticRoute {
    /// Destination prefix.
    pub to: String,
    /// Next hop address.
    pub via: String,
}

/// Caps on compiled tables and flow-table sizes. A config over a cap is rejected.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Flow-table entries per worker (default 1,048,576).
    #[serde(default)]
    pub flows_per_worker: Option<u64>,
    /// Distinct identities (workload groups and address classes).
    #[serde(default)]
    pub identities: Option<u64>,
    /// ipcache prefixes.
    #[serde(default)]
    pub prefixes: Option<u64>,
    /// Policy entries (identity, peer, protocol, port range).
    #[serde(default)]
    pub policy_entries: Option<u64>,
    /// Listeners.
    #[serde(default)]
    pub listeners: Option<u64>,
    /// Backends per route.
    #[serde(default)]
    pub backends_per_route: Option<u64>,
    /// New connections one source address may open per second on each worker (1000);
    /// more are dropped (`source_rate_limited`).
    #[serde(default)]
    pub new_connections_per_second_per_source: Option<u64>,
    /// Delayed-binding connections one source address may hold open on each worker
    /// between its SYN cookie's return and the splice (128; 1 to 65535); more are dropped
    /// (`source_embryo_limit`).
    #[serde(default)]
    pub embryos_per_source: Option<u64>,
}

/// Admin API endpoint.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Admin {
    /// Unix socket path (default `/run/sluice/admin.sock`).
    #[serde(default)]
    pub socket: Option<String>,
    /// A group (name or number) whose members may use the socket too: it is then mode
    /// 0660 and owned by that group. Without one it is 0600: root and sluice's own user.
    #[serde(default)]
    pub group: Option<String>,
}
