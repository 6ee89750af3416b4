//! The load client: `conns` connections in flight at all times (a new one starts as soon
//! as one ends), each a TLS ClientHello and a one-line answer.
//!
//! One thread, epoll, non-blocking sockets. A connection: connect to the target, send
//! the hello (connection `k` sends hello `k mod n`), read until the server closes, check
//! that the answer is `backend=<name>\n` with the name the hello's SNI maps to, close.
//! A right answer counts as a completed connection with its latency (connect to the
//! server's close); a wrong name is a *mismatch*; anything else is an error of a named
//! kind. Only what ends inside the measurement window counts: a warm-up before it, and
//! the connections still open at its end are abandoned (counted as `unfinished`).

use crate::stats::Latencies;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// One hello the client sends and the answer it expects.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The SNI (for reports).
    pub sni: String,
    /// The ClientHello record.
    pub bytes: Vec<u8>,
    /// The backend that must answer (`a` expects `backend=a\n`).
    pub expect: String,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Where to connect.
    pub target: SocketAddrV4,
    /// The hellos, used in turn.
    pub hellos: Vec<Hello>,
    /// Connections in flight.
    pub conns: usize,
    /// When the measurement window opens (connections start right away: the time before
    /// is the warm-up).
    pub window_start: Instant,
    /// How long the window stays open.
    pub duration: Duration,
    /// A connection not done after this long is an error (`timeout`).
    pub timeout: Duration,
}

/// What the client saw in the window.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Connections answered by the right backend.
    pub conns: u64,
    /// Connections answered by another backend than the SNI maps to.
    pub mismatches: u64,
    /// Failed connections by kind.
    pub errors: BTreeMap<String, u64>,
    /// Latencies of the right answers in µs.
    pub latency_us: Latencies,
    /// Connections right, wrong or failed during the warm-up (not counted above).
    pub warmup_ended: u64,
    /// Connections still open when the window closed.
    pub unfinished: u64,
    /// Mismatches by `sni->answer`, for diagnosis.
    pub mismatch_detail: BTreeMap<String, u64>,
}

impl LoadReport {
    /// The latency quantile `q` (0..=1) in ms; 0 without samples.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency_us.quantile(q) as f64 / 1000.0
    }

    /// Errors of every kind.
    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }
}

enum State {
    Idle,
    Connecting,
    Sending(usize),
    Reading,
}

struct Slot {
    stream: Option<TcpStream>,
    state: State,
    started: Instant,
    hello: usize,
    reply: Vec<u8>,
}

enum Outcome {
    Ok,
    Mismatch(String),
    Error(String),
}

fn errno_kind(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".into(),
        ErrorKind::ConnectionReset => "reset".into(),
        ErrorKind::ConnectionAborted => "aborted".into(),
        ErrorKind::TimedOut => "timed_out".into(),
        ErrorKind::AddrNotAvailable => "no_local_port".into(),
        ErrorKind::BrokenPipe => "broken_pipe".into(),
        _ => match e.raw_os_error() {
            Some(n) => format!("errno_{n}"),
            None => format!("{:?}", e.kind()),
        },
    }
}

struct Client<'a> {
    spec: &'a LoadSpec,
    ep: rustix::fd::OwnedFd,
    slots: Vec<Slot>,
    next_hello: usize,
    report: LoadReport,
    deadline: Instant,
}

impl Client<'_> {
    fn record(&mut self, k: usize, outcome: Outcome, now: Instant) {
        let s = &mut self.slots[k];
        s.stream = None;
        s.state = State::Idle;
        if now < self.spec.window_start {
            self.report.warmup_ended += 1;
            return;
        }
        match outcome {
            Outcome::Ok => {
                self.report.conns += 1;
                let us = now.duration_since(s.started).as_micros();
                self.report
                    .latency_us
                    .record(u64::try_from(us).unwrap_or(u64::MAX));
            }
            Outcome::Mismatch(detail) => {
                self.report.mismatches += 1;
                *self.report.mismatch_detail.entry(detail).or_default() += 1;
            }
            Outcome::Error(kind) => *self.report.errors.entry(kind).or_default() += 1,
        }
    }

    /// Opens a new connection in slot `k` (records a failure to do so and leaves it idle).
    fn start(&mut self, k: usize, now: Instant) {
        let hello = self.next_hello % self.spec.hellos.len();
        self.next_hello += 1;
        let s = &mut self.slots[k];
        s.started = now;
        s.hello = hello;
        s.reply.clear();
        let fd = match rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                let kind = format!("socket_{}", e.raw_os_error());
                return self.record(k, Outcome::Error(kind), now);
            }
        };
        match rustix::net::connect(&fd, &self.spec.target) {
            Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
            Err(e) => {
                let kind = errno_kind(&std::io::Error::from_raw_os_error(e.raw_os_error()));
                return self.record(k, Outcome::Error(format!("connect_{kind}")), now);
            }
        }
        let stream = TcpStream::from(fd);
        // Edge-triggered for both directions from the start: one epoll_ctl per connection.
        let data = epoll::EventData::new_u64(k as u64);
        let flags = epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::ET;
        if let Err(e) = epoll::add(&self.ep, &stream, data, flags) {
            return self.record(k, Outcome::Error(format!("epoll_{e}")), now);
        }
        let s = &mut self.slots[k];
        s.stream = Some(stream);
        s.state = State::Connecting;
    }

    /// Moves slot `k` on after an event; returns the outcome once it has ended.
    fn advance(&mut self, k: usize) -> Option<Outcome> {
        let spec = self.spec;
        let s = &mut self.slots[k];
        let stream = s.stream.as_mut()?;
        loop {
            match s.state {
                State::Idle => return None,
                // No edge comes before the handshake ends (a connecting socket polls as
                // neither readable nor writable); a write that finds it still connecting
                // says EAGAIN and the next edge comes when it is established.
                State::Connecting => match rustix::net::sockopt::socket_error(&*stream) {
                    Ok(Ok(())) => s.state = State::Sending(0),
                    Ok(Err(e)) => {
                        let e = std::io::Error::from_raw_os_error(e.raw_os_error());
                        return Some(Outcome::Error(format!("connect_{}", errno_kind(&e))));
                    }
                    Err(e) => return Some(Outcome::Error(format!("connect_{e}"))),
                },
                State::Sending(done) => {
                    let bytes = &spec.hellos[s.hello].bytes;
                    match stream.write(&bytes[done..]) {
                        Ok(n) if done + n == bytes.len() => s.state = State::Reading,
                        Ok(n) => {
                            s.state = State::Sending(done + n);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Some(Outcome::Error(format!("send_{}", errno_kind(&e)))),
                    }
                }
                State::Reading => {
                    let mut chunk = [0u8; 256];
                    match stream.read(&mut chunk) {
                        Ok(0) => return Some(judge(&s.reply, &spec.hellos[s.hello])),
                        Ok(n) => {
                            s.reply.extend_from_slice(&chunk[..n]);
                            if s.reply.len() > 1024 {
                                return Some(Outcome::Error("bad_reply".into()));
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            let kind = errno_kind(&e);
                            return Some(Outcome::Error(if s.reply.is_empty() {
                                format!("{kind}_before_reply")
                            } else {
                                format!("{kind}_after_reply")
                            }));
                        }
                    }
                }
            }
        }
    }
}

fn judge(reply: &[u8], hello: &Hello) -> Outcome {
    if reply.is_empty() {
        return Outcome::Error("closed_without_reply".into());
    }
    let Some(name) = reply
        .strip_prefix(b"backend=")
        .and_then(|r| r.strip_suffix(b"\n"))
    else {
        return Outcome::Error("bad_reply".into());
    };
    if name == hello.expect.as_bytes() {
        Outcome::Ok
    } else {
        Outcome::Mismatch(format!("{}->{}", hello.sni, String::from_utf8_lossy(name)))
    }
}

/// Runs the load until the window closes (call it on a thread inside the client's
/// namespace, e.g. with [`super::net::spawn_in`]).
pub fn run(spec: &LoadSpec) -> Result<LoadReport, String> {
    if spec.hellos.is_empty() || spec.conns == 0 {
        return Err("nothing to send".into());
    }
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let now = Instant::now();
    let mut c = Client {
        spec,
        ep,
        slots: (0..spec.conns)
            .map(|_| Slot {
                stream: None,
                state: State::Idle,
                started: now,
                hello: 0,
                reply: Vec::with_capacity(64),
            })
            .collect(),
        next_hello: 0,
        report: LoadReport::default(),
        deadline: spec.window_start + spec.duration,
    };
    for k in 0..spec.conns {
        c.start(k, now);
    }
    let mut events = Vec::with_capacity(spec.conns.max(16));
    let mut last_sweep = now;
    loop {
        let now = Instant::now();
        if now >= c.deadline {
            break;
        }
        let wait = (c.deadline - now).min(Duration::from_millis(10));
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(wait.subsec_nanos()).max(1),
        };
        events.clear();
        match epoll::wait(&c.ep, spare_capacity(&mut events), Some(&ts)) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("epoll_wait: {e}")),
        }
        for ev in events.iter() {
            let k = ev.data.u64() as usize;
            if k >= c.slots.len() {
                continue;
            }
            if let Some(outcome) = c.advance(k) {
                let now = Instant::now();
                c.record(k, outcome, now);
                if now < c.deadline {
                    c.start(k, now);
                }
            }
        }
        let now = Instant::now();
        if now.duration_since(last_sweep) >= Duration::from_millis(20) {
            last_sweep = now;
            for k in 0..c.slots.len() {
                let s = &c.slots[k];
                let stuck = s.stream.is_some() && now.duration_since(s.started) > spec.timeout;
                let idle = s.stream.is_none() && matches!(s.state, State::Idle);
                if stuck {
                    c.record(k, Outcome::Error("timeout".into()), now);
                }
                // Slots left idle by a failed start or a timeout get a new connection.
                if (stuck || idle) && now < c.deadline {
                    c.start(k, now);
                }
            }
        }
    }
    c.report.unfinished = c.slots.iter().filter(|s| s.stream.is_some()).count() as u64;
    c.slots.clear();
    Ok(c.report)
}

/// One connection with `hello` to `target`, blocking, within `limit`: `Ok` when the
/// expected backend answered (readiness probe; run it inside the client's namespace).
pub fn probe(target: SocketAddrV4, hello: &Hello, limit: Duration) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&target.into(), limit)
        .map_err(|e| format!("connect {target}: {e}"))?;
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    s.write_all(&hello.bytes)
        .map_err(|e| format!("send to {target}: {e}"))?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)
        .map_err(|e| format!("read from {target}: {e}"))?;
    match judge(&reply, hello) {
        Outcome::Ok => Ok(()),
        Outcome::Mismatch(d) => Err(format!("wrong backend: {d}")),
        Outcome::Error(e) => Err(format!("{e} ({:?})", String::from_utf8_lossy(&reply))),
    }
}
