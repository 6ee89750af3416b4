//! The backend behind every TLS-terminating contender: one plain TCP server (one epoll
//! thread, non-blocking sockets) that speaks two tiny protocols, told apart by the first
//! bytes of a connection.
//!
//! - **Stream** (what `stream`/`mode tcp` proxies carry): one request line.
//!   `hello\n` is answered `backend=<name>\n` and closed; `hold\n` likewise answered but
//!   the connection stays open until the peer closes it (idle connections);
//!   `bulk <N>\n` is answered with `N` bytes of [`pattern`] and closed.
//! - **HTTP/1.1** (what `http` proxies carry): `GET /hello` is answered `200` with body
//!   `backend=<name>\n`; `GET /bulk/<N>` with `N` bytes of [`pattern`]; always with
//!   `Content-Length` and `Connection: close`, and closed: no proxy can reuse a backend
//!   connection, so every contender opens one per client connection, as the stream
//!   proxies must.
//!
//! The backend reads everything a request brings before it answers, so it never closes
//! a socket with unread bytes (which would answer with a reset and could destroy the
//! answer in flight).

use crate::sni_load::net::spawn_in;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The period of the bulk [`pattern`], bytes: a prime, so that a chunk delivered at the
/// wrong offset (lost, duplicated or reordered bytes) does not line up by chance.
pub const PATTERN_PERIOD: usize = 65521;
/// The most the backend writes in one call, bytes.
const MAX_WRITE: usize = 256 * 1024;
/// The longest request head accepted, bytes.
const MAX_REQUEST: usize = 8 * 1024;

/// The bulk payload: byte `i` is `pattern()[i % PATTERN_PERIOD]`. The vector is longer
/// than the period (by the largest write, 256 KiB) so that any window of up to that length starting
/// in the first period is contiguous.
pub fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(PATTERN_PERIOD + MAX_WRITE);
    for _ in 0..PATTERN_PERIOD {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.push((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8);
    }
    for i in 0..MAX_WRITE {
        v.push(v[i % PATTERN_PERIOD]);
    }
    v
}

/// Whether `chunk` is what the pattern holds at stream offset `offset`.
pub fn pattern_matches(pattern: &[u8], offset: u64, chunk: &[u8]) -> bool {
    let mut at = (offset % PATTERN_PERIOD as u64) as usize;
    let mut rest = chunk;
    while !rest.is_empty() {
        let n = rest.len().min(PATTERN_PERIOD);
        if pattern.get(at..at + n) != Some(&rest[..n]) {
            return false;
        }
        rest = &rest[n..];
        at = (at + n) % PATTERN_PERIOD;
    }
    true
}

/// What the backend did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// `hello` requests answered (stream and HTTP).
    pub answered: u64,
    /// `hold` requests answered (connections then kept open).
    pub held: u64,
    /// Bulk answers written completely.
    pub bulk_done: u64,
    /// Bulk bytes written.
    pub bulk_bytes: u64,
    /// Requests not understood.
    pub bad_requests: u64,
    /// Connections that ended (or failed) before their answer was written.
    pub incomplete: u64,
}

/// The running backend (one thread). Stopped and joined on drop.
pub struct Backend {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<BackendStats, String>>>,
}

impl Backend {
    /// Starts the backend `name` on `port` of every address of namespace `ns`, one
    /// thread pinned to `core`; returns once it listens.
    pub fn start(ns: &str, core: usize, name: &str, port: u16) -> Result<Backend, String> {
        Backend::start_with(ns, core, name, port, false)
    }

    /// [`Backend::start`], with `SO_REUSEPORT` when `shared`: several backends (in
    /// several processes, each with its own open-file limit) then listen on the same
    /// port and the kernel spreads the connections over them.
    pub fn start_with(
        ns: &str,
        core: usize,
        name: &str,
        port: u16,
        shared: bool,
    ) -> Result<Backend, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let flag = stop.clone();
        let name = name.to_string();
        let handle = spawn_in(ns, Some(core), "tls-backend", move || {
            let l = match listener(port, shared) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let _ = ready_tx.send(Ok(()));
            Server::new(&name).run(&l, &flag)
        })?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Backend {
                stop,
                handle: Some(handle),
            }),
            Ok(Err(e)) => Err(format!("backend: {e}")),
            Err(_) => Err("backend did not start".into()),
        }
    }

    /// Stops the thread (closing every connection it holds); what it did.
    pub fn stop(mut self) -> Result<BackendStats, String> {
        self.finish()
    }

    fn finish(&mut self) -> Result<BackendStats, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => crate::sni_load::net::join(h),
            None => Ok(BackendStats::default()),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A non-blocking listener on 0.0.0.0:`port` with a deep accept queue (`shared`:
/// `SO_REUSEPORT`).
fn listener(port: u16, shared: bool) -> Result<TcpListener, String> {
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true).map_err(|e| e.to_string())?;
    if shared {
        rustix::net::sockopt::set_socket_reuseport(&fd, true).map_err(|e| e.to_string())?;
    }
    rustix::net::bind(&fd, &SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        .map_err(|e| format!("bind :{port}: {e}"))?;
    rustix::net::listen(&fd, 4096).map_err(|e| format!("listen :{port}: {e}"))?;
    Ok(TcpListener::from(fd))
}

/// A request, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Hello { http: bool },
    Hold,
    Bulk { http: bool, bytes: u64 },
}

/// Parses the request at the start of `buf`: `Ok(None)` while it is incomplete.
fn parse(buf: &[u8]) -> Result<Option<Request>, ()> {
    if buf.starts_with(b"GET ") {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            return if buf.len() > MAX_REQUEST {
                Err(())
            } else {
                Ok(None)
            };
        };
        let line = buf[..end].split(|b| *b == b'\r').next().ok_or(())?;
        let path = line.split(|b| *b == b' ').nth(1).ok_or(())?;
        return match path {
            b"/hello" => Ok(Some(Request::Hello { http: true })),
            p if p.starts_with(b"/bulk/") => {
                let n = std::str::from_utf8(&p[6..]).map_err(|_| ())?;
                let bytes = n.parse().map_err(|_| ())?;
                Ok(Some(Request::Bulk { http: true, bytes }))
            }
            _ => Err(()),
        };
    }
    if b"GET ".starts_with(&buf[..buf.len().min(4)]) && buf.len() < 4 {
        return Ok(None);
    }
    let Some(end) = buf.iter().position(|b| *b == b'\n') else {
        return if buf.len() > MAX_REQUEST {
            Err(())
        } else {
            Ok(None)
        };
    };
    match &buf[..end] {
        b"hello" => Ok(Some(Request::Hello { http: false })),
        b"hold" => Ok(Some(Request::Hold)),
        l if l.starts_with(b"bulk ") => {
            let n = std::str::from_utf8(&l[5..]).map_err(|_| ())?;
            Ok(Some(Request::Bulk {
                http: false,
                bytes: n.parse().map_err(|_| ())?,
            }))
        }
        _ => Err(()),
    }
}

enum Phase {
    /// Reading the request.
    Reading(Vec<u8>),
    /// Writing `head[done..]`, then `body_left` bytes of the pattern from `body_at`.
    Writing {
        head: Vec<u8>,
        done: usize,
        body_at: u64,
        body_left: u64,
        bulk: bool,
        hold: bool,
    },
    /// Answered, kept open; whatever else arrives is read and dropped.
    Holding,
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
}

/// What a step of a connection came to.
enum Step {
    /// Wait for the next event.
    Wait,
    /// Close it (counted already).
    Close,
}

struct Server {
    reply: Vec<u8>,
    pattern: Vec<u8>,
    stats: BackendStats,
}

impl Server {
    fn new(name: &str) -> Server {
        Server {
            reply: format!("backend={name}\n").into_bytes(),
            pattern: pattern(),
            stats: BackendStats::default(),
        }
    }

    fn answer(&mut self, req: Request) -> Phase {
        let ok_head = |len: u64| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
            )
            .into_bytes()
        };
        let (head, body_left, bulk, hold) = match req {
            Request::Hello { http: false } => (self.reply.clone(), 0, false, false),
            Request::Hello { http: true } => {
                let mut h = ok_head(self.reply.len() as u64);
                h.extend_from_slice(&self.reply);
                (h, 0, false, false)
            }
            Request::Hold => (self.reply.clone(), 0, false, true),
            Request::Bulk { http, bytes } => {
                let head = if http { ok_head(bytes) } else { Vec::new() };
                (head, bytes, true, false)
            }
        };
        Phase::Writing {
            head,
            done: 0,
            body_at: 0,
            body_left,
            bulk,
            hold,
        }
    }

    /// Moves a connection on as far as its socket lets it.
    fn step(&mut self, c: &mut Conn) -> Step {
        let mut chunk = [0u8; 4096];
        loop {
            match &mut c.phase {
                Phase::Reading(buf) => match c.stream.read(&mut chunk) {
                    Ok(0) => {
                        self.stats.incomplete += 1;
                        return Step::Close;
                    }
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        match parse(buf) {
                            Ok(None) => {}
                            Ok(Some(req)) => c.phase = self.answer(req),
                            Err(()) => {
                                self.stats.bad_requests += 1;
                                return Step::Close;
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.stats.incomplete += 1;
                        return Step::Close;
                    }
                },
                Phase::Writing {
                    head,
                    done,
                    body_at,
                    body_left,
                    bulk,
                    hold,
                } => {
                    let res = if *done < head.len() {
                        c.stream.write(&head[*done..])
                    } else if *body_left > 0 {
                        let at = (*body_at % PATTERN_PERIOD as u64) as usize;
                        let n = (*body_left).min(MAX_WRITE as u64) as usize;
                        c.stream.write(&self.pattern[at..at + n])
                    } else {
                        if *bulk {
                            self.stats.bulk_done += 1;
                        } else if *hold {
                            self.stats.held += 1;
                            c.phase = Phase::Holding;
                            continue;
                        } else {
                            self.stats.answered += 1;
                        }
                        return Step::Close;
                    };
                    match res {
                        Ok(n) if *done < head.len() => *done += n,
                        Ok(n) => {
                            *body_at += n as u64;
                            *body_left -= n as u64;
                            self.stats.bulk_bytes += n as u64;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => {
                            self.stats.incomplete += 1;
                            return Step::Close;
                        }
                    }
                }
                Phase::Holding => match c.stream.read(&mut chunk) {
                    Ok(0) => return Step::Close,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Step::Close,
                },
            }
        }
    }

    fn run(mut self, l: &TcpListener, stop: &AtomicBool) -> Result<BackendStats, String> {
        const LISTENER: u64 = u64::MAX;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
        epoll::add(
            &ep,
            l,
            epoll::EventData::new_u64(LISTENER),
            epoll::EventFlags::IN,
        )
        .map_err(|e| e.to_string())?;
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut events = Vec::with_capacity(512);
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        while !stop.load(Ordering::Relaxed) {
            events.clear();
            match epoll::wait(&ep, spare_capacity(&mut events), Some(&tick)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(format!("epoll_wait: {e}")),
            }
            for ev in events.iter() {
                let token = ev.data.u64();
                if token == LISTENER {
                    loop {
                        let stream = match l.accept() {
                            Ok((s, _)) => s,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                            // ECONNABORTED, EMFILE and the like: that connection is gone.
                            Err(_) => {
                                self.stats.incomplete += 1;
                                break;
                            }
                        };
                        let _ = stream.set_nodelay(true);
                        if stream.set_nonblocking(true).is_err() {
                            self.stats.incomplete += 1;
                            continue;
                        }
                        let mut c = Conn {
                            stream,
                            phase: Phase::Reading(Vec::new()),
                        };
                        if let Step::Close = self.step(&mut c) {
                            continue;
                        }
                        let slot = free.pop().unwrap_or_else(|| {
                            conns.push(None);
                            conns.len() - 1
                        });
                        let flags =
                            epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::ET;
                        let data = epoll::EventData::new_u64(slot as u64);
                        if epoll::add(&ep, &c.stream, data, flags).is_err() {
                            self.stats.incomplete += 1;
                            free.push(slot);
                            continue;
                        }
                        conns[slot] = Some(c);
                    }
                } else {
                    let slot = token as usize;
                    let Some(Some(c)) = conns.get_mut(slot) else {
                        continue;
                    };
                    if let Step::Close = self.step(c) {
                        // Dropping the stream closes it (and takes it out of the epoll set).
                        conns[slot] = None;
                        free.push(slot);
                    }
                }
            }
        }
        Ok(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_both_protocols() {
        assert_eq!(parse(b"hel"), Ok(None));
        assert_eq!(parse(b"hello\n"), Ok(Some(Request::Hello { http: false })));
        assert_eq!(parse(b"hold\n"), Ok(Some(Request::Hold)));
        assert_eq!(
            parse(b"bulk 123\n"),
            Ok(Some(Request::Bulk {
                http: false,
                bytes: 123
            }))
        );
        assert_eq!(parse(b"GE"), Ok(None));
        assert_eq!(parse(b"GET /hello HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(
            parse(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Some(Request::Hello { http: true }))
        );
        assert_eq!(
            parse(b"GET /bulk/65536 HTTP/1.0\r\n\r\n"),
            Ok(Some(Request::Bulk {
                http: true,
                bytes: 65536
            }))
        );
        assert_eq!(parse(b"GET /other HTTP/1.1\r\n\r\n"), Err(()));
        assert_eq!(parse(b"nonsense\n"), Err(()));
        assert_eq!(parse(b"bulk x\n"), Err(()));
    }

    #[test]
    fn pattern_checks_offsets_across_the_period() {
        let p = pattern();
        let stream: Vec<u8> = (0..3 * PATTERN_PERIOD + 17)
            .map(|i| p[i % PATTERN_PERIOD])
            .collect();
        for (at, len) in [
            (0, 10),
            (PATTERN_PERIOD - 3, 9),
            (5, 2 * PATTERN_PERIOD + 9),
        ] {
            assert!(pattern_matches(&p, at as u64, &stream[at..at + len]));
            assert!(!pattern_matches(&p, at as u64 + 1, &stream[at..at + len]));
        }
        // Every window the backend writes starts inside the first period.
        assert_eq!(p.len(), PATTERN_PERIOD + MAX_WRITE);
        assert_eq!(&p[PATTERN_PERIOD..PATTERN_PERIOD + 5], &p[..5]);
    }
}
