//! Delayed binding for SNI and Host routing: sluice answers the client's handshake
//! itself, reads the first bytes, picks the backend, connects it, and from then on splices
//! the two TCP connections by rewriting sequence numbers — no TCP stack, no copy of the
//! data once spliced, constant work per packet.
//!
//! ```text
//! client                      sluice                                  backend
//!   SYN (isn c, opts) ──────▶ SYN-ACK, seq = cookie(tuple, c, opts)
//!   ACK (+ first bytes) ────▶ cookie checked: embryo (buffer), first bytes placed
//!   more first bytes ───────▶ … ClientHello / request head complete: route, Maglev,
//!                             policy, SNAT ────────────────────────▶ SYN (isn c, opts)
//!                                                                ◀── SYN-ACK (isn b, ws)
//!                             delta = cookie - b ──────────────────▶ ACK + buffered bytes
//!   ◀─────── seq + delta, window rescaled ─── spliced ─── ack - delta, SACK - delta ──▶
//! ```
//!
//! Everything drawn in the middle column is the [`engine`]: the L4 balancer hands it the
//! packets of delayed-binding listeners and of flows whose embryo is open, and its timers
//! once per poll round; a spliced flow's packets then get the balancer's flow path plus
//! [`rewrite::splice_rewrite`]. The engine's decision for an embryo's bytes (route, pick,
//! redirect answer) is a value of its own (module `plan`). Measured with `bench_splice`
//! (new connections per second, spliced against plain forwarding).
//!
//! - **Handshake** ([`cookie`]): the SYN-ACK's sequence number is a keyed SYN cookie
//!   carrying the client's MSS, window scale and SACK-permitted; a SYN creates no state.
//!   The SYN-ACK offers MSS (sluice's), window scale [`SpliceConfig::wscale`] and SACK
//!   when the client offered them. **TCP timestamps are not offered**: translating them
//!   would need per-packet option rewriting in both directions for no gain at the edge;
//!   without them the client's and the backend's timestamps stay off, and PAWS/RTTM fall
//!   back to RFC 9293 behaviour.
//! - **First bytes** ([`first_bytes`]): the third segment (or the first data segment, if
//!   the ACK was lost) proves the cookie and opens an *embryo*: a fixed slot with a
//!   buffer of [`SpliceConfig::buffer_bytes`] (default 16 KiB) holding at most
//!   [`SpliceConfig::max_pieces`] separate pieces, and a deadline. Segments are placed by
//!   sequence number (out of order, retransmitted, overlapping) and the contiguous prefix
//!   is parsed ([`crate::inspect`]) whenever it grows past what the parser asked for.
//!   sluice **acknowledges** the contiguous bytes it holds as they arrive (window: the
//!   buffer's free room), so the client's congestion control and Nagle's algorithm run
//!   as with any server, whatever the number of segments or the pauses between writes.
//!   Having acknowledged them, sluice owns them until the backend does: see *Replay*.
//! - **Verdict** ([`inspect`]): a ClientHello's SNI or a request's Host routes through
//!   the listener's host matcher; not TLS on a TLS port, no name, no matching route,
//!   nothing before the deadline (server-first protocols), a prefix that outgrows the
//!   buffer or a client FIN before the end all fall back to the listener's default route
//!   (the catch-all) if it has one, else the client gets RST; each case is counted
//!   (`first_bytes_*` events).
//! - **Binding**: route -> Maglev (reject slot -> RST) -> policy (client -> backend,
//!   denied -> RST) -> SNAT -> a SYN to the backend with the client's initial sequence
//!   number and options (so the client's sequence space needs no rewriting). On its
//!   SYN-ACK sluice records `delta = cookie - backend isn` and the backend's window scale,
//!   acknowledges it and replays the buffered bytes (with the client's FIN, if it came
//!   right behind them). A backend that resets, or stays
//!   silent through [`SpliceConfig::syn_tries`] SYNs, is replaced by the route's next
//!   pick, up to [`SpliceConfig::backend_tries`] backends; then the client gets RST.
//! - **Replay**: the flow is spliced at once (packets flow both ways with the rewrite),
//!   but the embryo and its buffer stay until the backend acknowledges every replayed
//!   byte; until then the replay is sent again every [`SpliceConfig::syn_rto_ms`], up to
//!   [`REPLAY_TRIES`] times (then the client is reset).
//! - **Splice**: from the backend, `seq += delta` and the window is rescaled from the
//!   backend's scale to the one sluice announced; from the client, `ack -= delta` and
//!   every SACK edge `-= delta` (and the window rescaled if the backend declined
//!   scaling). Checksums are updated incrementally, the FullNAT rewrite and the flow's
//!   TCP state (FIN, RST, TIME_WAIT) are the L4 balancer's. The flow keeps 8 bytes of
//!   splice state ([`crate::flow::Splice`]); the embryo and its buffer are returned.
//! - **HTTP redirects**: a request on an `httpsRedirect` listener, or matching a rule with
//!   a redirect, is answered by sluice itself: `301` (or the rule's code) with
//!   `Location: https://<host><path>` and `Connection: close`, sent with FIN; the client's
//!   FIN is acknowledged, and the embryo returned.

pub mod cookie;
pub mod engine;
pub mod first_bytes;
pub mod options;
pub(crate) mod plan;
pub mod rewrite;

use crate::inspect::name::HostName;
use crate::inspect::{http, tls};
use crate::stats::Event;
use crate::tables::listeners::ListenerKind;
use first_bytes::Pieces;
use std::net::SocketAddr;

/// Delayed-binding settings of a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpliceConfig {
    /// Embryos (connections between cookie and splice) a worker holds at once.
    pub embryos: usize,
    /// Buffer for a connection's first bytes.
    pub buffer_bytes: usize,
    /// Separate (out-of-order) pieces a buffer tracks.
    pub max_pieces: usize,
    /// How long the first bytes may take, from the cookie's return.
    pub first_bytes_ms: u64,
    /// Time from the first SYN to a silent backend to the second; each later wait is
    /// twice the one before ([`syn_timeout_ms`], Linux's exponential backoff).
    pub syn_rto_ms: u64,
    /// SYNs sent to one backend before it counts as silent (3, as Linux's first three
    /// SYN transmissions, so a lossy link does not fail connections; see `perf/NOTES.md`).
    pub syn_tries: u8,
    /// Backends tried for one connection.
    pub backend_tries: u8,
    /// Window scale sluice announces to clients that offer scaling.
    pub wscale: u8,
    /// MSS sluice announces to IPv4 clients (IPv6: 20 less).
    pub mss_v4: u16,
    /// Secret the SYN cookies are keyed with (shared by the workers).
    pub cookie_secret: [u8; 16],
    /// Embryos one source address may hold at once on a worker (0: no cap).
    pub embryos_per_source: u16,
}

/// How long to wait after the `n`-th SYN (1-based) to a backend before the next one
/// (or, after the last, before failing over): `rto`, then twice as long each time (capped
/// at 64 times).
pub fn syn_timeout_ms(rto: u64, n: u8) -> u64 {
    rto.saturating_mul(1 << n.saturating_sub(1).min(6))
}

impl Default for SpliceConfig {
    fn default() -> Self {
        SpliceConfig {
            embryos: 1024,
            buffer_bytes: 16 * 1024,
            max_pieces: first_bytes::MAX_PIECES,
            first_bytes_ms: 5_000,
            syn_rto_ms: 1_000,
            syn_tries: 3,
            backend_tries: 3,
            wscale: 7,
            mss_v4: 1460,
            cookie_secret: [0x5a; 16],
            embryos_per_source: 128,
        }
    }
}

/// Where an embryo is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the first bytes.
    Reading,
    /// SYN sent to [`Embryo::backend`], waiting for its SYN-ACK.
    Connecting,
    /// sluice answered the request itself (redirect) and closes.
    Responding,
    /// Spliced; the replayed bytes are not all acknowledged by the backend yet.
    Replaying,
}

/// Times the replay is sent before the connection is given up.
pub const REPLAY_TRIES: u8 = 5;

/// A connection between the cookie's return and the splice (or sluice's own answer).
#[derive(Debug, Clone, Copy)]
pub struct Embryo {
    /// Where it is.
    pub phase: Phase,
    /// The client's port (for answers sent straight back).
    pub in_port: u8,
    /// The client's options, from the cookie.
    pub syn: cookie::SynOptions,
    /// The client's initial sequence number.
    pub client_isn: u32,
    /// sluice's initial sequence number towards the client (the cookie).
    pub our_isn: u32,
    /// The client's latest window field.
    pub client_win: u16,
    /// The client sent FIN (after the bytes held).
    pub client_fin: bool,
    /// Which bytes are held.
    pub pieces: Pieces,
    /// The prefix length the parser needs before it can say more.
    pub need: u32,
    /// Reading: when the first bytes are due; Connecting/Responding: the next
    /// retransmission.
    pub deadline_ms: u64,
    /// Connecting: the backend, SYNs sent to it, backends tried so far.
    pub backend: Option<SocketAddr>,
    /// SYNs sent to the current backend.
    pub syns: u8,
    /// Backends tried.
    pub tries: u8,
    /// Connecting: bytes of the buffer to replay once the backend answers.
    pub replay: u32,
    /// Responding: length of sluice's answer (kept in the buffer after the request).
    pub answer: u16,
    /// Client tuple (addresses as the flow table stores them, ports).
    pub client: crate::flow::Tuple,
    /// Replaying: the backend's initial sequence number.
    pub backend_isn: u32,
    /// Replaying: the flow's splice state once the replay is acknowledged.
    pub spliced: crate::flow::Splice,
    position: u32,
}

/// A fixed set of embryos and their buffers (allocated once), in the order they opened
/// (so the oldest can give way when all are in use), with a cap on how many one source
/// address holds at once (counted in a small table of buckets by a seeded hash of the
/// source, as [`crate::flow::sources`] does; sources that share a bucket share its cap).
pub struct Embryos {
    slots: Box<[Embryo]>,
    bufs: Box<[u8]>,
    buffer_bytes: usize,
    free: Vec<u32>,
    active: Vec<u32>,
    /// Open order: per slot, the next older and the next newer open slot (`NONE`: none).
    older: Box<[u32]>,
    newer: Box<[u32]>,
    /// The oldest and the newest open slot.
    oldest: u32,
    newest: u32,
    /// Embryos open per source bucket.
    per_source: Box<[u16]>,
    /// Embryos one source may hold at once (0: no cap).
    source_cap: u16,
    seed: u64,
}

/// No slot (the end of the open order).
const NONE: u32 = u32::MAX;
/// Buckets of the per-source embryo count (a power of two).
const SOURCE_BUCKETS: usize = 1024;

/// Why [`Embryos::open`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is in use.
    Full,
    /// The source holds its cap of embryos.
    SourceCap,
}

impl std::fmt::Debug for Embryos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embryos")
            .field("capacity", &self.slots.len())
            .field("active", &self.active.len())
            .finish()
    }
}

const EMPTY: Embryo = Embryo {
    phase: Phase::Reading,
    in_port: 0,
    syn: cookie::SynOptions {
        mss: 536,
        wscale: None,
        sack: false,
    },
    client_isn: 0,
    our_isn: 0,
    client_win: 0,
    client_fin: false,
    pieces: Pieces::EMPTY,
    need: 0,
    deadline_ms: 0,
    backend: None,
    syns: 0,
    tries: 0,
    replay: 0,
    answer: 0,
    client: crate::flow::Tuple {
        src: [0; 16],
        dst: [0; 16],
        sport: 0,
        dport: 0,
        proto: 0,
    },
    backend_isn: 0,
    spliced: crate::flow::Splice::NONE,
    position: 0,
};

impl Embryo {
    /// An embryo in [`Phase::Reading`] for the connection `client` (its tuple as the
    /// client sent it) whose SYN asked for `syn`.
    pub fn new(
        client: crate::flow::Tuple,
        syn: cookie::SynOptions,
        client_isn: u32,
        our_isn: u32,
    ) -> Embryo {
        Embryo {
            client,
            syn,
            client_isn,
            our_isn,
            ..EMPTY
        }
    }
}

impl Embryos {
    /// `capacity` embryos of `buffer_bytes` each (all memory allocated here), at most
    /// `source_cap` of them (0: any number) from one source; `seed` keys the source hash.
    pub fn new(capacity: usize, buffer_bytes: usize, source_cap: u16, seed: u64) -> Embryos {
        let capacity = capacity.max(1);
        Embryos {
            slots: vec![EMPTY; capacity].into_boxed_slice(),
            bufs: vec![0u8; capacity * buffer_bytes].into_boxed_slice(),
            buffer_bytes,
            free: (0..capacity as u32).rev().collect(),
            active: Vec::with_capacity(capacity),
            older: vec![NONE; capacity].into_boxed_slice(),
            newer: vec![NONE; capacity].into_boxed_slice(),
            oldest: NONE,
            newest: NONE,
            per_source: vec![0; SOURCE_BUCKETS].into_boxed_slice(),
            source_cap,
            seed,
        }
    }

    fn source_bucket(&self, e: &Embryo) -> usize {
        crate::flow::sources::bucket_of(e.client.source().ip(), self.seed, SOURCE_BUCKETS)
    }

    /// Takes a free slot, filled with `e`, as the newest; refused when all are in use
    /// (the caller may close [`Embryos::oldest`] and try again) or `e`'s source holds
    /// its cap.
    pub fn open(&mut self, mut e: Embryo) -> Result<u32, Refused> {
        let b = self.source_bucket(&e);
        let held = self.per_source.get(b).copied().unwrap_or(0);
        if self.source_cap != 0 && held >= self.source_cap {
            return Err(Refused::SourceCap);
        }
        let i = self.free.pop().ok_or(Refused::Full)?;
        e.position = self.active.len() as u32;
        self.active.push(i);
        self.slots[i as usize] = e;
        if let Some(n) = self.per_source.get_mut(b) {
            *n = n.saturating_add(1);
        }
        self.older[i as usize] = self.newest;
        self.newer[i as usize] = NONE;
        match self.newest {
            NONE => self.oldest = i,
            n => self.newer[n as usize] = i,
        }
        self.newest = i;
        Ok(i)
    }

    /// The open embryo that opened first, if any.
    pub fn oldest(&self) -> Option<u32> {
        (self.oldest != NONE).then_some(self.oldest)
    }

    /// Returns a slot (and its buffer).
    pub fn close(&mut self, i: u32) {
        let Some(e) = self.slots.get(i as usize) else {
            return;
        };
        let pos = e.position as usize;
        if self.active.get(pos) != Some(&i) {
            return; // not open
        }
        let b = self.source_bucket(e);
        if let Some(n) = self.per_source.get_mut(b) {
            *n = n.saturating_sub(1);
        }
        let (older, newer) = (self.older[i as usize], self.newer[i as usize]);
        match older {
            NONE => self.oldest = newer,
            o => self.newer[o as usize] = newer,
        }
        match newer {
            NONE => self.newest = older,
            n => self.older[n as usize] = older,
        }
        self.active.swap_remove(pos);
        if let Some(&moved) = self.active.get(pos) {
            self.slots[moved as usize].position = pos as u32;
        }
        self.slots[i as usize].position = u32::MAX;
        self.free.push(i);
    }

    /// Whether slot `i` is open.
    pub fn is_open(&self, i: u32) -> bool {
        self.slots
            .get(i as usize)
            .is_some_and(|e| self.active.get(e.position as usize) == Some(&i))
    }

    /// An open embryo.
    pub fn get(&self, i: u32) -> &Embryo {
        &self.slots[i as usize]
    }

    /// An open embryo, mutably.
    pub fn get_mut(&mut self, i: u32) -> &mut Embryo {
        &mut self.slots[i as usize]
    }

    /// An embryo and its buffer.
    pub fn with_buf(&mut self, i: u32) -> (&mut Embryo, &mut [u8]) {
        let b = self.buffer_bytes;
        let at = i as usize * b;
        (&mut self.slots[i as usize], &mut self.bufs[at..at + b])
    }

    /// An embryo's buffer.
    pub fn buf(&self, i: u32) -> &[u8] {
        let b = self.buffer_bytes;
        &self.bufs[i as usize * b..(i as usize + 1) * b]
    }

    /// Open embryos.
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// The `k`-th open embryo's slot (for timer scans; order changes as slots close).
    pub fn active(&self, k: usize) -> Option<u32> {
        self.active.get(k).copied()
    }

    /// Bytes held: slots and buffers.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * (std::mem::size_of::<Embryo>() + self.buffer_bytes)
    }
}

/// What the first bytes say (see [`inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Not enough bytes yet; call again once the prefix has at least this many.
    NeedMore(usize),
    /// Route by this name (`None`: the listener's default route); `why` names a fallback.
    Route {
        /// The SNI or Host, lowercase.
        name: Option<HostName>,
        /// HTTP: the request path (for HTTP rules); TLS: empty.
        path: &'a str,
        /// Why the default route is used, if it is.
        why: Option<Event>,
    },
    /// Answer an HTTP request with a redirect to https (the listener's httpsRedirect).
    HttpsRedirect {
        /// Host as the request named it (lowercase, without port).
        host: HostName,
        /// The request target's path and query.
        target: &'a str,
    },
}

/// Reads the first bytes held for a connection on a `kind` listener. `end` names why no
/// more bytes will come (deadline, overflow, client FIN), if so: then the verdict is final.
pub fn inspect(
    kind: ListenerKind,
    https_redirect: bool,
    bytes: &[u8],
    end: Option<Event>,
) -> Verdict<'_> {
    let fallback = |why: Event| Verdict::Route {
        name: None,
        path: "",
        why: Some(why),
    };
    match kind {
        ListenerKind::Http => match http::parse(bytes) {
            http::Outcome::NeedMore { at_least } => match end {
                None => Verdict::NeedMore(at_least),
                Some(why) => fallback(why),
            },
            http::Outcome::Request(head) => {
                let name = head.routing_name().copied();
                if https_redirect {
                    if let Some(host) = name {
                        return Verdict::HttpsRedirect {
                            host,
                            target: origin_target(&head),
                        };
                    }
                }
                Verdict::Route {
                    name,
                    path: head.path,
                    why: name.is_none().then_some(Event::FirstBytesNoName),
                }
            }
            _ => fallback(Event::FirstBytesUnrecognised),
        },
        _ => match tls::parse(bytes) {
            tls::Outcome::NeedMore { at_least } => match end {
                None => Verdict::NeedMore(at_least),
                Some(why) => fallback(why),
            },
            tls::Outcome::Hello(hello) => {
                let name = hello.routing_name().copied();
                Verdict::Route {
                    name,
                    path: "",
                    why: name.is_none().then_some(Event::FirstBytesNoName),
                }
            }
            tls::Outcome::NotTls | tls::Outcome::Malformed(_) => {
                fallback(Event::FirstBytesUnrecognised)
            }
        },
    }
}

/// The path and query to put after `https://host` (origin-form as sent; the path of an
/// absolute-form target; `/` otherwise).
fn origin_target<'a>(head: &http::RequestHead<'a>) -> &'a str {
    match head.form {
        http::TargetForm::Origin => head.target,
        _ if head.path.starts_with('/') => head.path,
        _ => "/",
    }
}

/// Writes sluice's HTTP redirect answer into `out`: status `code`, `Location: location`
/// (written as given), no body, `Connection: close`. Returns the length, or `None` if
/// it does not fit.
pub fn redirect_answer(out: &mut [u8], code: u16, location: &[&str]) -> Option<usize> {
    let reason = match code {
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        _ => "Redirect",
    };
    let mut n = 0;
    let mut put = |s: &[u8]| -> Option<()> {
        out.get_mut(n..n + s.len())?.copy_from_slice(s);
        n += s.len();
        Some(())
    };
    put(b"HTTP/1.1 ")?;
    let c = code.min(999);
    put(&[
        b'0' + (c / 100) as u8,
        b'0' + (c / 10 % 10) as u8,
        b'0' + (c % 10) as u8,
    ])?;
    put(b" ")?;
    put(reason.as_bytes())?;
    put(b"\r\nLocation: ")?;
    for part in location {
        if part.bytes().any(|b| b < 0x21 || b == 0x7f) {
            return None; // never let a header be split or smuggled
        }
        put(part.as_bytes())?;
    }
    put(b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    Some(n)
}

#[cfg(test)]
mod tests;
