//! Named drop reasons and per-worker counters.
//!
//! Every packet sluice drops is counted under one [`DropReason`]. Each worker counts into
//! its own plain [`Counters`] (no atomics on the hot path) and publishes them every few
//! hundred poll rounds into its cache-line-aligned [`SharedCounters`], which the control
//! thread reads without disturbing the worker.
//!
//! HTTP rules are counted apart, in each worker's [`RuleCounters`]: one cache line of
//! cells per rule slot (requests, responses by status class), written by the worker
//! alone and read by the control thread whenever it likes, so nothing is copied to
//! publish them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! named_counters {
    ($(#[doc = $edoc:literal])* $enum:ident { $($(#[doc = $doc:literal])* $name:ident => $text:literal,)* }) => {
        $(#[doc = $edoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum $enum {
            $($(#[doc = $doc])* $name,)*
        }

        impl $enum {
            /// Every variant, in counter order.
            pub const ALL: &'static [$enum] = &[$($enum::$name,)*];
            /// Number of variants.
            pub const COUNT: usize = [$($enum::$name,)*].len();

            /// The stable snake_case name (used in stats output).
            pub const fn name(self) -> &'static str {
                match self {
                    $($enum::$name => $text,)*
                }
            }
        }
    };
}

named_counters! {
/// Events worth counting that are not drops (flows, redirects).
Event {
    /// A flow was admitted (NAT, transparent or routed).
    FlowCreated => "flow_created",
    /// A flow timed out.
    FlowExpired => "flow_expired",
    /// A flow's policy was re-checked after a table swap.
    PolicyRechecked => "policy_rechecked",
    /// A flow a newer policy denies was closed and its peers told: TCP RST to both
    /// (the second one when a buffer was free), ICMP administratively prohibited to a
    /// UDP sender.
    FlowRevoked => "flow_revoked",
    /// A new connection's policy was decided with its burst's others, in one burst
    /// lookup (policy tables of `BalancerConfig::policy_bursts_from` bytes and up).
    PolicyBurstChecked => "policy_burst_checked",
    /// A packet was handed to another worker (the owner of its flow).
    RedirectedOut => "redirected_out",
    /// A packet arrived from another worker's redirect.
    RedirectedIn => "redirected_in",
    /// A TCP RST or ICMP unreachable was sent for a rejected backend share.
    RejectSent => "reject_sent",
    /// A packet was parked until its next hop's MAC is known.
    NeighbourParked => "neighbour_parked",
    /// A parked packet was sent once its next hop resolved.
    NeighbourReleased => "neighbour_released",
    /// An ARP request or neighbour solicitation was sent (first try, retry or probe of a
    /// stale entry).
    NeighbourSolicited => "neighbour_solicited",
    /// A SYN to a delayed-binding listener was answered with a SYN cookie.
    SynCookieSent => "syn_cookie_sent",
    /// A cookie came back: an embryo reads the connection's first bytes.
    EmbryoOpened => "embryo_opened",
    /// A SYN went to a backend for an embryo (first try, retry or failover).
    BackendSynSent => "backend_syn_sent",
    /// A backend answered and the two connections were spliced.
    Spliced => "spliced",
    /// A backend reset or stayed silent; the next one is tried.
    BackendFailover => "backend_failover",
    /// sluice reset a client connection it had accepted (no route, no backend, denied).
    SpliceResetSent => "splice_reset_sent",
    /// sluice answered an HTTP request with a redirect.
    HttpRedirectSent => "http_redirect_sent",
    /// First bytes: not TLS on a TLS listener, not HTTP/1 on an HTTP one.
    FirstBytesUnrecognised => "first_bytes_unrecognised",
    /// First bytes: no SNI or Host to route on.
    FirstBytesNoName => "first_bytes_no_name",
    /// First bytes: the name matches no route (and there is no catch-all).
    FirstBytesNoRoute => "first_bytes_no_route",
    /// First bytes: none or too few before the deadline (server-first protocols too).
    FirstBytesTimeout => "first_bytes_timeout",
    /// First bytes: more than the buffer holds, or too many out-of-order pieces.
    FirstBytesOverflow => "first_bytes_overflow",
    /// First bytes: the client closed before they were complete.
    FirstBytesClientFin => "first_bytes_client_fin",
    /// The embryo table was full: its oldest embryo was closed for a new connection (and
    /// its client reset, counted `splice_reset_sent`, when a buffer was free).
    EmbryoEvicted => "embryo_evicted",
    /// The SNAT port range was exhausted: a half-open flow (handshake never completed)
    /// holding the next port was dropped early for a new connection.
    HalfOpenEvicted => "half_open_evicted",
    /// The flow table was full: a flow that never became a connection (half-open TCP,
    /// unreplied UDP) or had expired was dropped early for a new one
    /// (`FlowTable::insert_evicting`).
    FlowEarlyDrop => "flow_early_drop",
    /// A gratuitous ARP or unsolicited neighbour advertisement was sent for a served
    /// listener address that a new tables generation brought
    /// ([`crate::pipeline::announce`]).
    AddressAnnounced => "address_announced",
    /// A SYN to a terminating listener opened a terminated connection.
    TerminateAccepted => "terminate_accepted",
    /// A SYN to a terminating listener was refused with RST: the worker holds its cap.
    TerminateRefused => "terminate_refused",
    /// Every terminated-connection slot was taken: a half-open one (the client never
    /// completed the TCP handshake, silent for a second) was reset for a new SYN.
    TerminateEvicted => "terminate_evicted",
    /// A TLS handshake completed (full or resumed).
    TerminateHandshake => "terminate_handshake",
    /// A TLS handshake completed by resumption (a session ticket).
    TerminateResumed => "terminate_resumed",
    /// A TLS handshake or record failed (no certificate for the name, a protocol error,
    /// a bad record): the alert was sent, then FIN.
    TerminateTlsFailed => "terminate_tls_failed",
    /// A handshake was refused: the listener requires a client certificate (Istio
    /// `MUTUAL`, Gateway API `frontendValidation`) and the client sent none (also counted
    /// `terminate_tls_failed`; the reasons: [`crate::terminate::refusal`]).
    TlsClientCertMissing => "tls_client_cert_missing",
    /// A handshake was refused: the client certificate does not chain to the listener's
    /// CA certificates (unknown issuer, bad signature, wrong key usage, undecodable).
    TlsClientCertUntrusted => "tls_client_cert_untrusted",
    /// A handshake was refused: the client certificate (or an intermediate) is revoked by
    /// the listener's CRL.
    TlsClientCertRevoked => "tls_client_cert_revoked",
    /// A handshake was refused: the client certificate is expired or not yet valid.
    TlsClientCertExpired => "tls_client_cert_expired",
    /// A handshake was refused: the client certificate matches none of the listener's
    /// `subjectAltNames`, or none of its `verifyCertificateSpki`/`verifyCertificateHash`.
    TlsClientCertPinMismatch => "tls_client_cert_pin_mismatch",
    /// A handshake was refused: the client offers no TLS version the listener serves.
    TlsVersionRefused => "tls_version_refused",
    /// A handshake was refused: the client offers no cipher suite the listener serves.
    TlsNoSharedSuite => "tls_no_shared_suite",
    /// A handshake (or the first request head) did not complete before its deadline:
    /// the client was reset.
    TerminateHandshakeTimeout => "terminate_handshake_timeout",
    /// No route for the connection's SNI or Host: the client was reset.
    TerminateNoRoute => "terminate_no_route",
    /// A terminated connection's backend accepted it.
    TerminateBackendConnected => "terminate_backend_connected",
    /// No backend accepted a terminated connection (reject slot, or every try failed):
    /// the client was reset.
    TerminateBackendFailed => "terminate_backend_failed",
    /// A reset on one side of a terminated connection was passed to the other.
    TerminateReset => "terminate_reset",
    /// A terminated connection idle for `idle_ms` was closed.
    TerminateIdleClosed => "terminate_idle_closed",
    /// A terminated connection ended (both sides closed or reset).
    TerminateClosed => "terminate_closed",
    /// An HTTP request head was parsed on a proxied connection.
    HttpRequest => "http_request",
    /// No route or rule matched an HTTP request: sluice answered 404.
    HttpNoRoute => "http_no_route",
    /// A malformed request head (400, 501, 505) or a broken chunked body.
    HttpBadRequest => "http_bad_request",
    /// A request head over the size or header-count limit: 431.
    HttpHeadTooLarge => "http_head_too_large",
    /// A request head not complete before its deadline: 408.
    HttpHeadTimeout => "http_head_timeout",
    /// A request fell in an invalid backend's share: 500 (Gateway API) or 503 (Istio).
    HttpInvalidBackend => "http_invalid_backend",
    /// A request went on a backend connection a previous request left open.
    HttpBackendReused => "http_backend_reused",
    /// A backend connection idle between requests went to the worker's pool (its
    /// client moved to another backend or closed).
    HttpBackendPooled => "http_backend_pooled",
    /// A request went on a connection from the worker's pool (also counted as
    /// `http_backend_reused`).
    HttpPoolReused => "http_pool_reused",
    /// A pooled connection closed: idle too long, closed by its backend, or pushed out
    /// by a newer one.
    HttpPoolClosed => "http_pool_closed",
    /// A mirrored copy of a request was started.
    HttpMirrorSent => "http_mirror_sent",
    /// A mirrored copy was not sent whole: no connection slot, policy, no backend, its
    /// backend refused or fell behind, or the request ended early.
    HttpMirrorDropped => "http_mirror_dropped",
    /// A backend's response head was malformed or too large: 502.
    HttpBadResponse => "http_bad_response",
    /// A backend closed or reset in the middle of a response: the client was reset.
    HttpUpstreamReset => "http_upstream_reset",
    /// A request passed its rule's timeout: 504 (or a reset once the response began).
    HttpRequestTimeout => "http_request_timeout",
    /// A 1xx final response (101) went to a client.
    HttpResponse1xx => "http_response_1xx",
    /// A 2xx response went to a client.
    HttpResponse2xx => "http_response_2xx",
    /// A 3xx response went to a client.
    HttpResponse3xx => "http_response_3xx",
    /// A 4xx response went to a client.
    HttpResponse4xx => "http_response_4xx",
    /// A 5xx response went to a client.
    HttpResponse5xx => "http_response_5xx",
}
}

named_counters! {
/// Why a packet was dropped.
DropReason {
    /// Shorter than an Ethernet header.
    EthTruncated => "eth_truncated",
    /// Unicast to another MAC, or multicast sluice does not listen to.
    NotForUs => "not_for_us",
    /// 802.1Q tagged: ports are untagged.
    VlanUnsupported => "vlan_unsupported",
    /// An EtherType sluice does not handle.
    UnknownEtherType => "unknown_ethertype",
    /// An ARP packet too short or not Ethernet/IPv4.
    ArpMalformed => "arp_malformed",
    /// ARP for an address that is not ours (learning may still have happened).
    ArpNotForUs => "arp_not_for_us",
    /// ARP reply consumed after learning the neighbour.
    ArpReplyConsumed => "arp_reply_consumed",
    /// An ARP or NDP claim refused (the neighbour table unchanged): an address that
    /// lives behind another port than the one the claim came in on, one of sluice's own
    /// addresses, a static neighbour, or a change of an entry's MAC that sluice did not
    /// ask for (an entry it resolved itself, or a fresh one) or within the lock time of
    /// the last change. An ARP request or solicitation for sluice's address is still
    /// answered (and counted here besides).
    ArpSpoofed => "arp_spoofed",
    /// IPv4 header truncated, bad version or lengths.
    Ipv4Malformed => "ipv4_malformed",
    /// IPv4 header checksum wrong.
    Ipv4Checksum => "ipv4_checksum",
    /// IPv6 header truncated or bad version.
    Ipv6Malformed => "ipv6_malformed",
    /// ICMP/ICMPv6 truncated or with a bad checksum.
    IcmpMalformed => "icmp_malformed",
    /// An ICMP/ICMPv6 type sluice does not answer (to one of its addresses).
    IcmpUnhandled => "icmp_unhandled",
    /// A neighbour advertisement consumed after learning.
    NdAdvertConsumed => "nd_advert_consumed",
    /// A neighbour solicitation for an address that is not ours, or malformed NDP.
    NdNotForUs => "nd_not_for_us",
    /// Addressed to sluice but not something it answers (TCP/UDP to its own address,
    /// fragments of pings, ...).
    LocalUnhandled => "local_unhandled",
    /// Broadcast or multicast IP traffic (not routed).
    IpMulticast => "ip_multicast",
    /// No route to the destination.
    NoRoute => "no_route",
    /// The next hop's MAC could not be resolved: every request went unanswered (parked
    /// packets), the next hop is in its failed hold-down, or (without a buffer allocator)
    /// the packet was turned into the request itself or dropped while one was pending.
    NeighbourUnresolved => "neighbour_unresolved",
    /// TTL or hop limit exhausted (an ICMP time exceeded was sent back).
    TtlExceeded => "ttl_exceeded",
    /// Routed back out of the port it came in on towards itself (a loop).
    RouteLoop => "route_loop",
    /// The port's tx queue did not take the packet.
    TxFull => "tx_full",
    /// The out port does not exist on this worker (configuration error).
    BadPort => "bad_port",
    /// The packet does not fit the buffer after a rewrite.
    NoRoom => "no_room",
    /// A new connection NetworkPolicy does not allow (source -> backend or destination).
    PolicyDenied => "policy_denied",
    /// A packet of a flow that a newer policy no longer allows: the flow was closed (and
    /// the packet turned into the RST or ICMP that says so, see `flow_revoked`).
    PolicyRevoked => "policy_revoked",
    /// A new flow while the worker's flow table is full (established flows untouched).
    FlowTableFull => "flow_table_full",
    /// A TCP segment other than a SYN that belongs to no tracked connection.
    NoFlow => "no_flow",
    /// A TCP segment without a flow whose SYN comes with FIN or RST (no stack opens a
    /// connection so; scanners and evasion do): opens nothing.
    TcpBadFlags => "tcp_bad_flags",
    /// A TCP segment sluice answers itself (a SYN to a delayed-binding listener) whose
    /// checksum is wrong: not answered.
    TcpChecksum => "tcp_checksum",
    /// The connection hashed to an invalid backend's share: answered with a TCP RST or an
    /// ICMP port unreachable.
    BackendRejected => "backend_rejected",
    /// No source NAT port free for this backend on this worker.
    SnatPortsExhausted => "snat_ports_exhausted",
    /// No sluice address of the backend's family on the port towards it (nothing to
    /// source-NAT to).
    NoSnatAddress => "no_snat_address",
    /// A fragment of a datagram to a listener (sluice does not reassemble).
    Fragment => "fragment",
    /// The per-worker parking lot for unresolved next hops was full: the oldest packet of
    /// the next hop's queue (or the new packet, when no next hop slot was free) was dropped.
    NeighbourQueueFull => "neighbour_queue_full",
    /// A segment delivered to the terminate engine's TCP endpoint ([`crate::terminate`]):
    /// it goes no further as a packet.
    TerminateConsumed => "terminate_consumed",
    /// A SYN to a terminating listener while the worker holds its cap of terminated
    /// connections (`limits.terminate`): answered with RST (`terminate_refused`).
    TerminateFull => "terminate_full",
    /// A client segment taken by delayed binding (handshake, first bytes, close of an
    /// answer sluice gave itself): it goes no further.
    SpliceConsumed => "splice_consumed",
    /// An ACK to a delayed-binding listener without a valid SYN cookie.
    BadCookie => "bad_cookie",
    /// A valid cookie came back while every embryo slot was in use.
    EmbryoTableFull => "embryo_table_full",
    /// The owner worker's redirect ring was full.
    RedirectFull => "redirect_full",
    /// The listener's route does not apply to this destination (destinationSubnets), or
    /// the listener has no route for the connection.
    NoRouteMatch => "no_route_match",
    /// A new connection over its source's new-connections-per-second limit
    /// (`limits.newConnectionsPerSecondPerSource`).
    SourceRateLimited => "source_rate_limited",
    /// A delayed-binding connection over its source's concurrent embryo limit
    /// (`limits.embryosPerSource`).
    SourceEmbryoLimit => "source_embryo_limit",
}
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Packets and bytes a worker moved through one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets handed to the device.
    pub tx_packets: u64,
    /// Bytes handed to the device.
    pub tx_bytes: u64,
}

/// A worker's counters (plain integers, owned by the worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Per port, in configuration order.
    pub ports: Vec<PortCounters>,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::COUNT],
    /// Events, indexed by `Event as usize`.
    pub events: [u64; Event::COUNT],
    /// Flows in the worker's table when last published.
    pub flows: u64,
    /// Terminated TLS connections open on the worker when last published
    /// ([`crate::terminate`]).
    pub terminated: u64,
    /// Poll rounds that received nothing on any port.
    pub empty_polls: u64,
    /// Poll rounds that received something.
    pub busy_polls: u64,
    /// TSC cycles spent in busy rounds (rx, pipeline, tx).
    pub busy_cycles: u64,
    /// Packets processed in busy rounds (for cycles per packet).
    pub packets: u64,
}

impl Counters {
    /// Zeroed counters for `ports` ports.
    pub fn new(ports: usize) -> Counters {
        Counters {
            ports: vec![PortCounters::default(); ports],
            drops: [0; DropReason::COUNT],
            events: [0; Event::COUNT],
            flows: 0,
            terminated: 0,
            empty_polls: 0,
            busy_polls: 0,
            busy_cycles: 0,
            packets: 0,
        }
    }

    /// Counts one drop.
    #[inline]
    pub fn drop(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }

    /// Counts `n` drops.
    #[inline]
    pub fn drop_n(&mut self, r: DropReason, n: u64) {
        self.drops[r as usize] += n;
    }

    /// Counts one event.
    #[inline]
    pub fn event(&mut self, e: Event) {
        self.events[e as usize] += 1;
    }

    /// Events counted under `e`.
    pub fn events_of(&self, e: Event) -> u64 {
        self.events[e as usize]
    }

    /// Drops counted under `r`.
    pub fn drops_of(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Adds another worker's counters (ports matched by index).
    pub fn add(&mut self, o: &Counters) {
        if self.ports.len() < o.ports.len() {
            self.ports.resize(o.ports.len(), PortCounters::default());
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.rx_packets += b.rx_packets;
            a.rx_bytes += b.rx_bytes;
            a.tx_packets += b.tx_packets;
            a.tx_bytes += b.tx_bytes;
        }
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
        for (a, b) in self.events.iter_mut().zip(o.events.iter()) {
            *a += b;
        }
        self.flows += o.flows;
        self.terminated += o.terminated;
        self.empty_polls += o.empty_polls;
        self.busy_polls += o.busy_polls;
        self.busy_cycles += o.busy_cycles;
        self.packets += o.packets;
    }

    /// Average TSC cycles per packet in busy rounds (0 when nothing was processed).
    pub fn cycles_per_packet(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.busy_cycles as f64 / self.packets as f64
        }
    }
}

#[repr(align(64))]
#[derive(Default)]
struct AlignedU64(AtomicU64);

/// A worker's published counters, read by the control thread. Each field sits on its own
/// cache line group so the single writer does not share lines with other workers.
#[repr(align(64))]
pub struct SharedCounters {
    ports: Box<[[AlignedU64; 4]]>,
    drops: Box<[AlignedU64]>,
    events: Box<[AlignedU64]>,
    polls: [AlignedU64; 6],
}

impl core::fmt::Debug for SharedCounters {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedCounters").finish_non_exhaustive()
    }
}

impl SharedCounters {
    /// Zeroed shared counters for `ports` ports.
    pub fn new(ports: usize) -> SharedCounters {
        SharedCounters {
            ports: (0..ports).map(|_| Default::default()).collect(),
            drops: (0..DropReason::COUNT)
                .map(|_| AlignedU64::default())
                .collect(),
            events: (0..Event::COUNT).map(|_| AlignedU64::default()).collect(),
            polls: Default::default(),
        }
    }

    /// Stores a worker's counters (single writer: plain relaxed stores).
    pub fn publish(&self, c: &Counters) {
        for (s, p) in self.ports.iter().zip(&c.ports) {
            s[0].0.store(p.rx_packets, Relaxed);
            s[1].0.store(p.rx_bytes, Relaxed);
            s[2].0.store(p.tx_packets, Relaxed);
            s[3].0.store(p.tx_bytes, Relaxed);
        }
        for (s, d) in self.drops.iter().zip(c.drops.iter()) {
            s.0.store(*d, Relaxed);
        }
        self.polls[0].0.store(c.empty_polls, Relaxed);
        self.polls[1].0.store(c.busy_polls, Relaxed);
        self.polls[2].0.store(c.busy_cycles, Relaxed);
        self.polls[3].0.store(c.packets, Relaxed);
        self.polls[4].0.store(c.flows, Relaxed);
        self.polls[5].0.store(c.terminated, Relaxed);
        for (s, e) in self.events.iter().zip(c.events.iter()) {
            s.0.store(*e, Relaxed);
        }
    }

    /// Reads the last published counters.
    pub fn snapshot(&self) -> Counters {
        let mut c = Counters::new(self.ports.len());
        for (p, s) in c.ports.iter_mut().zip(self.ports.iter()) {
            p.rx_packets = s[0].0.load(Relaxed);
            p.rx_bytes = s[1].0.load(Relaxed);
            p.tx_packets = s[2].0.load(Relaxed);
            p.tx_bytes = s[3].0.load(Relaxed);
        }
        for (d, s) in c.drops.iter_mut().zip(self.drops.iter()) {
            *d = s.0.load(Relaxed);
        }
        c.empty_polls = self.polls[0].0.load(Relaxed);
        c.busy_polls = self.polls[1].0.load(Relaxed);
        c.busy_cycles = self.polls[2].0.load(Relaxed);
        c.packets = self.polls[3].0.load(Relaxed);
        c.flows = self.polls[4].0.load(Relaxed);
        c.terminated = self.polls[5].0.load(Relaxed);
        for (e, s) in c.events.iter_mut().zip(self.events.iter()) {
            *e = s.0.load(Relaxed);
        }
        c
    }
}

/// Counter slots of HTTP rules in each worker's [`RuleCounters`], [`OVERFLOW_SLOT`]
/// included (64 bytes each: 256 KiB a worker).
pub const RULE_SLOTS: usize = 4096;

/// The slot of the HTTP rules that have none of their own (every slot taken, or tables
/// built without the control plane's registry): their counts add up there.
pub const OVERFLOW_SLOT: u32 = 0;

/// One HTTP rule's counts (summed over workers by the control plane).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Requests routed to the rule.
    pub requests: u64,
    /// Responses that went to clients for those requests (the backend's or sluice's own),
    /// by status class: `[1xx, 2xx, 3xx, 4xx, 5xx]` ([`RuleCounts::class`]).
    pub responses: [u64; 5],
}

impl RuleCounts {
    /// The index in [`RuleCounts::responses`] of `status`'s class (anything outside
    /// 100..=499 counts as 5xx, as the global `http_response_*` events do).
    #[inline]
    pub const fn class(status: u16) -> usize {
        match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        }
    }

    /// Adds `o` (another worker's counts of the same slot).
    pub fn add(&mut self, o: &RuleCounts) {
        self.requests = self.requests.wrapping_add(o.requests);
        for (a, b) in self.responses.iter_mut().zip(o.responses) {
            *a = a.wrapping_add(b);
        }
    }

    /// What was counted since `base` (an earlier reading of the same cells), never
    /// below zero.
    pub fn since(&self, base: &RuleCounts) -> RuleCounts {
        let mut d = RuleCounts {
            requests: self.requests.saturating_sub(base.requests),
            responses: [0; 5],
        };
        for ((d, a), b) in d
            .responses
            .iter_mut()
            .zip(self.responses)
            .zip(base.responses)
        {
            *d = a.saturating_sub(b);
        }
        d
    }
}

/// One slot's cells: a cache line of its own, so a request touches one line.
#[repr(align(64))]
#[derive(Default)]
struct RuleCell {
    requests: AtomicU64,
    responses: [AtomicU64; 5],
}

/// A worker's HTTP rule counters: a fixed array of slots, allocated once (the terminate
/// engine's HTTP proxy counts a request into its rule's slot, `HttpRule::counter` in
/// [`crate::tables::http`], and the response that answered it).
///
/// The worker is the only writer: a count is a relaxed load and store (a plain `mov` on
/// x86), not a read-modify-write; the control thread reads the cells at any time
/// ([`RuleCounters::get`]). The array is shared (`Arc`) by the worker and the control
/// thread and never moves, so counts survive table swaps: a rule keeps its slot across
/// reloads as long as the control plane keeps it. A slot out of range counts in
/// [`OVERFLOW_SLOT`].
pub struct RuleCounters {
    cells: Vec<RuleCell>,
}

/// Rule counters with no slot at all (what a [`crate::pipeline::stage::Ctx`] counts into
/// unless its worker lends its own): every count is dropped.
pub static NO_RULE_COUNTERS: RuleCounters = RuleCounters { cells: Vec::new() };

impl core::fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RuleCounters")
            .field("slots", &self.cells.len())
            .finish_non_exhaustive()
    }
}

impl RuleCounters {
    /// Zeroed counters of `slots` slots (allocated here, once).
    pub fn new(slots: usize) -> RuleCounters {
        RuleCounters {
            cells: (0..slots).map(|_| RuleCell::default()).collect(),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.cells.len()
    }

    #[inline]
    fn cell(&self, slot: u32) -> Option<&RuleCell> {
        self.cells
            .get(slot as usize)
            .or_else(|| self.cells.get(OVERFLOW_SLOT as usize))
    }

    /// Counts a request routed to the rule of `slot` (the owning worker only).
    #[inline]
    pub fn request(&self, slot: u32) {
        if let Some(c) = self.cell(slot) {
            bump(&c.requests);
        }
    }

    /// Counts a response with `status` to a request of the rule of `slot` (the owning
    /// worker only).
    #[inline]
    pub fn response(&self, slot: u32, status: u16) {
        if let Some(c) = self.cell(slot) {
            bump(&c.responses[RuleCounts::class(status)]);
        }
    }

    /// The counts of `slot` now (zero for a slot out of range).
    pub fn get(&self, slot: u32) -> RuleCounts {
        let Some(c) = self.cells.get(slot as usize) else {
            return RuleCounts::default();
        };
        let mut r = RuleCounts {
            requests: c.requests.load(Relaxed),
            responses: [0; 5],
        };
        for (r, a) in r.responses.iter_mut().zip(&c.responses) {
            *r = a.load(Relaxed);
        }
        r
    }
}

/// One more in a cell only its worker writes: a load and a store, no locked
/// read-modify-write (a second writer could lose counts, never corrupt anything).
#[inline]
fn bump(a: &AtomicU64) {
    a.store(a.load(Relaxed).wrapping_add(1), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for r in DropReason::ALL {
            assert!(seen.insert(r.name()));
            assert!(r
                .name()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        }
        assert_eq!(DropReason::ALL.len(), DropReason::COUNT);
        assert_eq!(
            DropReason::ALL[DropReason::TxFull as usize],
            DropReason::TxFull
        );
    }

    #[test]
    fn publish_snapshot_and_add() {
        let mut c = Counters::new(2);
        c.ports[1].rx_packets = 5;
        c.drop(DropReason::NoRoute);
        c.drop_n(DropReason::TxFull, 3);
        c.busy_cycles = 1000;
        c.packets = 10;
        let s = SharedCounters::new(2);
        s.publish(&c);
        let got = s.snapshot();
        assert_eq!(got, c);
        assert_eq!(got.cycles_per_packet(), 100.0);
        let mut sum = Counters::new(2);
        sum.add(&got);
        sum.add(&got);
        assert_eq!(sum.drops_of(DropReason::TxFull), 6);
        assert_eq!(sum.total_drops(), 8);
        assert_eq!(sum.ports[1].rx_packets, 10);
    }

    #[test]
    fn rule_counters_count_by_slot_and_class() {
        let r = RuleCounters::new(4);
        assert_eq!(r.slots(), 4);
        assert_eq!(std::mem::size_of::<RuleCell>(), 64, "one cache line a slot");
        r.request(2);
        r.request(2);
        r.response(2, 200);
        r.response(2, 101);
        r.response(2, 302);
        r.response(2, 404);
        r.response(2, 503);
        r.response(2, 599);
        r.response(2, 42);
        r.request(1);
        r.response(1, 204);
        assert_eq!(
            r.get(2),
            RuleCounts {
                requests: 2,
                responses: [1, 1, 1, 1, 3]
            }
        );
        assert_eq!(
            r.get(1),
            RuleCounts {
                requests: 1,
                responses: [0, 1, 0, 0, 0]
            }
        );
        assert_eq!(r.get(3), RuleCounts::default());
        // Out of range: counted in the overflow slot, and read as nothing.
        r.request(9);
        r.response(u32::MAX, 500);
        assert_eq!(
            r.get(OVERFLOW_SLOT),
            RuleCounts {
                requests: 1,
                responses: [0, 0, 0, 0, 1]
            }
        );
        assert_eq!(r.get(9), RuleCounts::default());
        // Nothing to count into: nothing happens.
        NO_RULE_COUNTERS.request(0);
        NO_RULE_COUNTERS.response(3, 200);
        assert_eq!(NO_RULE_COUNTERS.get(0), RuleCounts::default());
    }

    #[test]
    fn rule_counts_add_and_since() {
        let a = RuleCounts {
            requests: 5,
            responses: [0, 3, 1, 1, 0],
        };
        let mut sum = a;
        sum.add(&a);
        assert_eq!(
            sum,
            RuleCounts {
                requests: 10,
                responses: [0, 6, 2, 2, 0]
            }
        );
        assert_eq!(sum.since(&a), a);
        assert_eq!(a.since(&sum), RuleCounts::default(), "never below zero");
    }

    /// The worker writes while another thread reads: the reader sees counts that only
    /// grow, and all of them once the writer is done.
    #[test]
    fn a_reader_sees_the_writer_count() {
        let r = std::sync::Arc::new(RuleCounters::new(2));
        let w = r.clone();
        let writer = std::thread::spawn(move || {
            for _ in 0..100_000 {
                w.request(1);
                w.response(1, 200);
            }
        });
        let mut last = 0;
        while !writer.is_finished() {
            let now = r.get(1).requests;
            assert!(now >= last);
            last = now;
        }
        writer.join().expect("writer");
        assert_eq!(
            r.get(1),
            RuleCounts {
                requests: 100_000,
                responses: [0, 100_000, 0, 0, 0]
            }
        );
    }
}
