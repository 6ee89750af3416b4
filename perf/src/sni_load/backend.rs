//! The backends: TCP servers that answer the first request they receive with a line
//! naming themselves (`backend=a\n`) and close.
//!
//! One thread serves every backend (one listener per backend port, bound to all the
//! namespace's addresses) with epoll and non-blocking sockets, so a connection costs the
//! load core little: accept, one or two reads, one write, close. "The first request" is a
//! whole TLS record when the stream starts with a handshake record (so the socket never
//! closes with unread bytes, which would answer with a reset), else whatever arrived
//! first.

use super::net::spawn_in;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the backends did, summed over all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Connections answered.
    pub answered: u64,
    /// Connections that ended (or failed) before a whole request arrived.
    pub incomplete: u64,
}

/// The running backends (one thread). Stopped and joined on drop.
pub struct Backends {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<BackendStats, String>>>,
}

/// The reply of backend `name`.
pub fn reply(name: &str) -> Vec<u8> {
    format!("backend={name}\n").into_bytes()
}

/// A non-blocking listener on 0.0.0.0:`port` with a deep accept queue.
fn listener(port: u16) -> Result<TcpListener, String> {
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true).map_err(|e| e.to_string())?;
    rustix::net::bind(&fd, &SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        .map_err(|e| format!("bind :{port}: {e}"))?;
    rustix::net::listen(&fd, 4096).map_err(|e| format!("listen :{port}: {e}"))?;
    Ok(TcpListener::from(fd))
}

struct Conn {
    stream: TcpStream,
    backend: usize,
    buf: Vec<u8>,
}

/// Whether `buf` holds a whole request: a TLS record, or any bytes of something else.
fn complete(buf: &[u8]) -> bool {
    match buf.first() {
        None => false,
        Some(22) => {
            buf.len() >= 5 && buf.len() >= 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]]))
        }
        Some(_) => true,
    }
}

enum Step {
    /// Wait for more bytes.
    Wait,
    /// Answered (or failed): close.
    Done(bool),
}

/// Reads what is there; answers once the request is whole.
fn serve(c: &mut Conn, replies: &[Vec<u8>]) -> Step {
    let mut chunk = [0u8; 4096];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return Step::Done(false),
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                if complete(&c.buf) {
                    // A 10-byte write to a fresh socket: the send buffer takes it whole.
                    let ok = c.stream.write_all(&replies[c.backend]).is_ok();
                    return Step::Done(ok);
                }
                if c.buf.len() > 64 * 1024 {
                    return Step::Done(false);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Step::Done(false),
        }
    }
}

const LISTENER_TOKENS: u64 = 64;

impl Backends {
    /// Starts one listener per `(name, port)` of `backends` on every address of namespace
    /// `ns`, served by one thread pinned to `core`; returns once they listen.
    pub fn start(ns: &str, core: usize, backends: &[(&str, u16)]) -> Result<Backends, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let specs: Vec<(Vec<u8>, u16)> = backends.iter().map(|(n, p)| (reply(n), *p)).collect();
        if specs.len() as u64 >= LISTENER_TOKENS {
            return Err("too many backends".into());
        }
        let (ready_tx, ready_rx) = mpsc::channel();
        let flag = stop.clone();
        let handle = spawn_in(ns, Some(core), "sni-backends", move || {
            let listeners = match specs
                .iter()
                .map(|(_, port)| listener(*port))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let replies: Vec<Vec<u8>> = specs.into_iter().map(|(r, _)| r).collect();
            let _ = ready_tx.send(Ok(()));
            run(&listeners, &replies, &flag)
        })?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Backends {
                stop,
                handle: Some(handle),
            }),
            Ok(Err(e)) => Err(format!("backends: {e}")),
            Err(_) => Err("backends did not start".into()),
        }
    }

    /// Stops the thread; what it did.
    pub fn stop(mut self) -> Result<BackendStats, String> {
        self.finish()
    }

    fn finish(&mut self) -> Result<BackendStats, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => super::net::join(h),
            None => Ok(BackendStats::default()),
        }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn run(
    listeners: &[TcpListener],
    replies: &[Vec<u8>],
    stop: &AtomicBool,
) -> Result<BackendStats, String> {
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
    for (i, l) in listeners.iter().enumerate() {
        epoll::add(
            &ep,
            l,
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN,
        )
        .map_err(|e| e.to_string())?;
    }
    let mut stats = BackendStats::default();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Vec::with_capacity(256);
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
            if token < LISTENER_TOKENS {
                let b = token as usize;
                let Some(l) = listeners.get(b) else { continue };
                loop {
                    let stream = match l.accept() {
                        Ok((s, _)) => s,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        // ECONNABORTED and the like: that connection is gone.
                        Err(_) => {
                            stats.incomplete += 1;
                            continue;
                        }
                    };
                    if stream.set_nonblocking(true).is_err() {
                        stats.incomplete += 1;
                        continue;
                    }
                    let mut c = Conn {
                        stream,
                        backend: b,
                        buf: Vec::new(),
                    };
                    // The request is often there already.
                    match serve(&mut c, replies) {
                        Step::Done(ok) => {
                            if ok {
                                stats.answered += 1
                            } else {
                                stats.incomplete += 1
                            }
                        }
                        Step::Wait => {
                            let slot = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            let data = epoll::EventData::new_u64(LISTENER_TOKENS + slot as u64);
                            if epoll::add(&ep, &c.stream, data, epoll::EventFlags::IN).is_err() {
                                stats.incomplete += 1;
                                free.push(slot);
                                continue;
                            }
                            conns[slot] = Some(c);
                        }
                    }
                }
            } else {
                let slot = (token - LISTENER_TOKENS) as usize;
                let Some(Some(c)) = conns.get_mut(slot) else {
                    continue;
                };
                if let Step::Done(ok) = serve(c, replies) {
                    if ok {
                        stats.answered += 1
                    } else {
                        stats.incomplete += 1
                    }
                    // Dropping the stream closes it (and takes it out of the epoll set).
                    conns[slot] = None;
                    free.push(slot);
                }
            }
        }
    }
    Ok(stats)
}
