//! The TLS load client: rustls on ring, so that every contender faces the same client.
//!
//! One thread, epoll, non-blocking sockets, `conns` connections in flight (a new one as
//! soon as one ends). A connection: TCP connect, a TLS 1.3 handshake (offering only
//! `TLS13_AES_128_GCM_SHA256` and X25519, so every contender negotiates the same
//! suite and group whatever its preferences), one request, the answer read to the
//! server's close and checked:
//!
//! | mode | request (stream / HTTP) | answer |
//! |---|---|---|
//! | [`Mode::Full`] | `hello\n` / `GET /hello` | `backend=a\n` (the HTTP body), `200` |
//! | [`Mode::Resumed`] | the same | the same |
//! | [`Mode::Bulk`] | `bulk N\n` / `GET /bulk/N` | `N` bytes of the backend's pattern, every chunk checked |
//! | hold ([`hold`]) | `hold\n` / `GET /hello` keep-alive | `backend=a\n`; then the connection is kept, idle |
//!
//! `Full` never resumes (`Resumption::disabled()`). `Resumed` gives every slot a session
//! store of its own: the slot's first connection is a full handshake (in the warm-up),
//! each later one offers the ticket its predecessor received. The handshake kind rustls
//! reports (`handshake_kind()`) is counted for every right answer, so a contender that
//! does not resume shows as such.
//!
//! The client pins the server certificate: it accepts exactly the certificate the
//! contenders were given (byte for byte) and verifies the handshake signature with it
//! (ring). Chain validation against a CA would add a signature verification per
//! handshake to the load core, the busier one in full handshakes.
//!
//! Only what ends inside the measurement window counts (a warm-up before it; connections
//! still open at its end are `unfinished`); bulk bytes count as they arrive in it.

use super::backend::{pattern, pattern_matches};
use super::SERVER_NAME;
use crate::stats::Latencies;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, SignatureScheme,
};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What each connection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A full handshake (no resumption), one small request and answer.
    Full,
    /// A resumed handshake (a ticket from the slot's previous connection), one small
    /// request and answer.
    Resumed,
    /// A full handshake, then `bytes` from the backend through the contender.
    Bulk {
        /// Bytes each connection moves.
        bytes: u64,
    },
}

impl Mode {
    /// Its name in the report (`full`, `resumed`, `bulk`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Resumed => "resumed",
            Mode::Bulk { .. } => "bulk",
        }
    }
}

/// What the decrypted stream carries: which request the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The backend's line protocol, straight through (`stream`, `mode tcp`, TLSRoute).
    Stream,
    /// HTTP/1.1 (`http`, `mode http`, HTTPS listeners).
    Http,
}

/// What a connection is for (the modes plus holding it open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Mode(Mode),
    Hold,
}

impl Purpose {
    fn request(self, proto: Protocol) -> Vec<u8> {
        let http = |path: &str, close: bool| {
            let conn = if close { "Connection: close\r\n" } else { "" };
            format!("GET {path} HTTP/1.1\r\nHost: {SERVER_NAME}\r\n{conn}\r\n").into_bytes()
        };
        match (self, proto) {
            (Purpose::Mode(Mode::Bulk { bytes }), Protocol::Stream) => {
                format!("bulk {bytes}\n").into_bytes()
            }
            (Purpose::Mode(Mode::Bulk { bytes }), Protocol::Http) => {
                http(&format!("/bulk/{bytes}"), true)
            }
            (Purpose::Mode(_), Protocol::Stream) => b"hello\n".to_vec(),
            (Purpose::Mode(_), Protocol::Http) => http("/hello", true),
            (Purpose::Hold, Protocol::Stream) => b"hold\n".to_vec(),
            (Purpose::Hold, Protocol::Http) => http("/hello", false),
        }
    }

    fn bulk(self) -> Option<u64> {
        match self {
            Purpose::Mode(Mode::Bulk { bytes }) => Some(bytes),
            _ => None,
        }
    }
}

/// Accepts exactly one server certificate and checks handshake signatures against it.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "not the benchmark's certificate".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client's TLS configuration for one server certificate.
#[derive(Debug, Clone)]
pub struct TlsClient {
    base: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsClient {
    /// TLS 1.3 only, `TLS13_AES_128_GCM_SHA256`, X25519, SNI [`SERVER_NAME`], `cert`
    /// pinned, no resumption.
    pub fn new(cert: CertificateDer<'static>) -> Result<TlsClient, String> {
        TlsClient::with_client_auth(cert, None)
    }

    /// [`TlsClient::new`], presenting `auth`'s client certificate when there is one.
    pub fn with_client_auth(
        cert: CertificateDer<'static>,
        auth: Option<&super::certs::ClientAuth>,
    ) -> Result<TlsClient, String> {
        let mut p = rustls::crypto::ring::default_provider();
        p.cipher_suites = vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
        p.kx_groups = vec![rustls::crypto::ring::kx_group::X25519];
        let provider = Arc::new(p);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("TLS client: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned { cert, provider }));
        let mut config = match auth {
            None => builder.with_no_client_auth(),
            Some(a) => {
                use rustls::pki_types::pem::PemObject;
                let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(a.key_pem.as_bytes())
                    .map_err(|e| format!("client key: {e:?}"))?;
                builder
                    .with_client_auth_cert(vec![a.cert_der.clone()], key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
        };
        config.resumption = Resumption::disabled();
        Ok(TlsClient {
            base: Arc::new(config),
            name: ServerName::try_from(SERVER_NAME).map_err(|e| e.to_string())?,
        })
    }

    /// The configuration of one connection slot: the shared one without resumption, or
    /// one with a session store of the slot's own.
    fn slot_config(&self, resume: bool) -> Arc<ClientConfig> {
        if resume {
            let mut c = (*self.base).clone();
            c.resumption = Resumption::in_memory_sessions(4);
            Arc::new(c)
        } else {
            self.base.clone()
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TlsLoadSpec {
    /// Where to connect.
    pub target: SocketAddrV4,
    /// What each connection does.
    pub mode: Mode,
    /// What the decrypted stream carries.
    pub proto: Protocol,
    /// The TLS configuration.
    pub tls: TlsClient,
    /// The backend that must answer (`a` expects `backend=a\n`).
    pub expect: String,
    /// Connections in flight.
    pub conns: usize,
    /// When the measurement window opens (connections start right away: the time before
    /// is the warm-up).
    pub window_start: Instant,
    /// How long the window stays open.
    pub duration: Duration,
    /// A connection not done after this long is an error (`timeout`); bulk connections
    /// are exempt once their body has begun.
    pub timeout: Duration,
}

/// What the client saw in the window.
#[derive(Debug, Clone, Default)]
pub struct TlsLoadReport {
    /// Connections answered right.
    pub conns: u64,
    /// Of those, by the handshake rustls reports: `full`, `full_hrr` (after a
    /// HelloRetryRequest), `resumed`.
    pub handshakes: BTreeMap<String, u64>,
    /// Bulk body bytes received (and checked) in the window.
    pub bytes: u64,
    /// Failed connections by kind.
    pub errors: BTreeMap<String, u64>,
    /// Right answers whose connection ended without a `close_notify` (TCP FIN alone).
    pub unclean_closes: u64,
    /// Latencies of the right answers in µs (connect to the server's close).
    pub latency_us: Latencies,
    /// Connections that ended during the warm-up.
    pub warmup_ended: u64,
    /// Connections still open when the window closed.
    pub unfinished: u64,
}

impl TlsLoadReport {
    /// The latency quantile `q` (0..=1) in ms; 0 without samples.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency_us.quantile(q) as f64 / 1000.0
    }

    /// Errors of every kind.
    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Right answers after a handshake of kind `kind` (`full`, `full_hrr`, `resumed`).
    pub fn handshakes_of(&self, kind: &str) -> u64 {
        self.handshakes.get(kind).copied().unwrap_or(0)
    }
}

fn kind_name(k: Option<HandshakeKind>) -> &'static str {
    match k {
        Some(HandshakeKind::Full) => "full",
        Some(HandshakeKind::FullWithHelloRetryRequest) => "full_hrr",
        Some(HandshakeKind::Resumed) => "resumed",
        None => "unknown",
    }
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

/// A short name for a TLS error (its variant, and the alert received).
fn tls_error_kind(e: &rustls::Error) -> String {
    match e {
        rustls::Error::AlertReceived(a) => format!("tls_alert_{a:?}"),
        other => {
            let d = format!("{other:?}");
            let variant: String = d
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            format!("tls_{variant}")
        }
    }
}

/// An HTTP response head at the start of `buf`: `(status, head length, Content-Length)`,
/// `Ok(None)` while incomplete.
fn http_head(buf: &[u8]) -> Result<Option<(u16, usize, Option<u64>)>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > 16 * 1024 {
            Err("bad_reply_head".into())
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "bad_reply_head".to_string())?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .filter(|l| l.starts_with("HTTP/1."))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| "bad_reply_head".to_string())?;
    let mut length = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok();
            }
            if k.trim().eq_ignore_ascii_case("transfer-encoding") {
                return Err("chunked_reply".into());
            }
        }
    }
    Ok(Some((status, end + 4, length)))
}

enum Outcome {
    Ok,
    /// Answered and kept open (hold).
    Held,
    Error(String),
}

/// One connection in flight.
struct Conn {
    stream: TcpStream,
    tls: ClientConnection,
    connecting: bool,
    sent: bool,
    eof: bool,
    /// `Some(clean)` once the plaintext stream ended (`close_notify`, or a TCP FIN alone).
    closed: Option<bool>,
    kind: Option<HandshakeKind>,
    /// The answer (head and small bodies).
    reply: Vec<u8>,
    /// Bulk: the HTTP head is behind us (always for streams).
    in_body: bool,
    body: u64,
}

struct Slot {
    conn: Option<Conn>,
    started: Instant,
    config: Arc<ClientConfig>,
}

struct Client<'a> {
    spec: &'a TlsLoadSpec,
    purpose: Purpose,
    request: Vec<u8>,
    expect: Vec<u8>,
    pattern: Vec<u8>,
    ep: rustix::fd::OwnedFd,
    slots: Vec<Slot>,
    report: TlsLoadReport,
    held: Vec<TcpStream>,
    deadline: Instant,
}

impl Client<'_> {
    fn in_window(&self, now: Instant) -> bool {
        now >= self.spec.window_start && now < self.deadline
    }

    fn record(&mut self, k: usize, outcome: Outcome, now: Instant) {
        let Some(c) = self.slots[k].conn.take() else {
            return;
        };
        if let Outcome::Held = outcome {
            self.held.push(c.stream);
            *self
                .report
                .handshakes
                .entry(kind_name(c.kind).into())
                .or_default() += 1;
            self.report.conns += 1;
            return;
        }
        if now < self.spec.window_start {
            self.report.warmup_ended += 1;
            return;
        }
        match outcome {
            Outcome::Ok => {
                self.report.conns += 1;
                *self
                    .report
                    .handshakes
                    .entry(kind_name(c.kind).into())
                    .or_default() += 1;
                if c.closed == Some(false) {
                    self.report.unclean_closes += 1;
                }
                let us = now.duration_since(self.slots[k].started).as_micros();
                self.report
                    .latency_us
                    .record(u64::try_from(us).unwrap_or(u64::MAX));
            }
            Outcome::Held => {}
            Outcome::Error(kind) => *self.report.errors.entry(kind).or_default() += 1,
        }
    }

    fn fail(&mut self, k: usize, kind: String, now: Instant) {
        if now >= self.spec.window_start || self.purpose == Purpose::Hold {
            *self.report.errors.entry(kind).or_default() += 1;
        } else {
            self.report.warmup_ended += 1;
        }
        self.slots[k].conn = None;
    }

    /// Opens a new connection in slot `k` (records a failure to do so).
    fn start(&mut self, k: usize, now: Instant) {
        self.slots[k].started = now;
        let fd = match rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        ) {
            Ok(fd) => fd,
            Err(e) => return self.fail(k, format!("socket_{}", e.raw_os_error()), now),
        };
        // As every TLS client does: a handshake flight or a request is never held back
        // waiting for the ACK of the previous one (Nagle).
        let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
        match rustix::net::connect(&fd, &self.spec.target) {
            Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
            Err(e) => {
                let kind = errno_kind(&std::io::Error::from_raw_os_error(e.raw_os_error()));
                return self.fail(k, format!("connect_{kind}"), now);
            }
        }
        let stream = TcpStream::from(fd);
        let data = epoll::EventData::new_u64(k as u64);
        let flags = epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::ET;
        if let Err(e) = epoll::add(&self.ep, &stream, data, flags) {
            return self.fail(k, format!("epoll_{e}"), now);
        }
        let tls =
            match ClientConnection::new(self.slots[k].config.clone(), self.spec.tls.name.clone()) {
                Ok(t) => t,
                Err(e) => return self.fail(k, tls_error_kind(&e), now),
            };
        self.slots[k].conn = Some(Conn {
            stream,
            tls,
            connecting: true,
            sent: false,
            eof: false,
            closed: None,
            kind: None,
            reply: Vec::new(),
            in_body: self.spec.proto == Protocol::Stream,
            body: 0,
        });
    }

    /// Takes decrypted bytes; an outcome when they decide one.
    fn feed(&mut self, k: usize, data: &[u8]) -> Option<Outcome> {
        let bulk = self.purpose.bulk();
        let now_in_window = bulk.is_some() && self.in_window(Instant::now());
        let c = self.slots[k].conn.as_mut()?;
        let Some(total) = bulk else {
            c.reply.extend_from_slice(data);
            if c.reply.len() > 16 * 1024 {
                return Some(Outcome::Error("bad_reply".into()));
            }
            return None;
        };
        let mut data = data;
        if !c.in_body {
            let before = c.reply.len();
            c.reply.extend_from_slice(data);
            match http_head(&c.reply) {
                Ok(None) => return None,
                Err(e) => return Some(Outcome::Error(e)),
                Ok(Some((status, len, _))) => {
                    if status != 200 {
                        return Some(Outcome::Error(format!("status_{status}")));
                    }
                    c.in_body = true;
                    data = &data[len - before..];
                }
            }
        }
        if !pattern_matches(&self.pattern, c.body, data) {
            return Some(Outcome::Error("bulk_bytes_wrong".into()));
        }
        c.body += data.len() as u64;
        if c.body > total {
            return Some(Outcome::Error("bulk_too_long".into()));
        }
        if now_in_window {
            self.report.bytes += data.len() as u64;
        }
        None
    }

    /// Whether a held connection's answer is whole (and right); `Err` when it is wrong.
    fn hold_answered(&self, c: &Conn) -> Result<bool, String> {
        match self.spec.proto {
            Protocol::Stream => {
                if c.reply == self.expect {
                    Ok(true)
                } else if self.expect.starts_with(&c.reply) {
                    Ok(false)
                } else {
                    Err("bad_reply".into())
                }
            }
            Protocol::Http => match http_head(&c.reply)? {
                None => Ok(false),
                Some((200, len, Some(n))) => {
                    let body = &c.reply[len..];
                    if (body.len() as u64) < n {
                        Ok(false)
                    } else if body == self.expect.as_slice() {
                        Ok(true)
                    } else {
                        Err("bad_reply".into())
                    }
                }
                Some((200, _, None)) => Err("no_content_length".into()),
                Some((s, _, _)) => Err(format!("status_{s}")),
            },
        }
    }

    /// The verdict on a connection whose stream has ended.
    fn judge(&self, c: &Conn) -> Outcome {
        if !c.sent {
            return Outcome::Error("closed_in_handshake".into());
        }
        if let Some(total) = self.purpose.bulk() {
            return if c.in_body && c.body == total {
                Outcome::Ok
            } else {
                Outcome::Error("bulk_short".into())
            };
        }
        if c.reply.is_empty() {
            return Outcome::Error("closed_without_reply".into());
        }
        match self.spec.proto {
            Protocol::Stream if c.reply == self.expect => Outcome::Ok,
            Protocol::Stream => Outcome::Error("bad_reply".into()),
            Protocol::Http => match http_head(&c.reply) {
                Ok(Some((200, len, _))) if c.reply[len..] == self.expect[..] => Outcome::Ok,
                Ok(Some((200, _, _))) => Outcome::Error("bad_reply_body".into()),
                Ok(Some((s, _, _))) => Outcome::Error(format!("status_{s}")),
                Ok(None) => Outcome::Error("bad_reply_head".into()),
                Err(e) => Outcome::Error(e),
            },
        }
    }

    /// Moves slot `k` on after an event; its outcome once it has one.
    fn advance(&mut self, k: usize) -> Option<Outcome> {
        let mut buf = [0u8; 16 * 1024];
        {
            let c = self.slots[k].conn.as_mut()?;
            if c.connecting {
                match rustix::net::sockopt::socket_error(&c.stream) {
                    Ok(Ok(())) => c.connecting = false,
                    Ok(Err(e)) => {
                        let e = std::io::Error::from_raw_os_error(e.raw_os_error());
                        return Some(Outcome::Error(format!("connect_{}", errno_kind(&e))));
                    }
                    Err(e) => return Some(Outcome::Error(format!("connect_{e}"))),
                }
            }
        }
        loop {
            let mut progress = false;
            let c = self.slots[k].conn.as_mut()?;
            if !c.eof {
                while c.tls.wants_write() {
                    match c.tls.write_tls(&mut c.stream) {
                        Ok(_) => progress = true,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Some(Outcome::Error(format!("send_{}", errno_kind(&e)))),
                    }
                }
                match c.tls.read_tls(&mut c.stream) {
                    Ok(0) => {
                        c.eof = true;
                        progress = true;
                    }
                    Ok(_) => {
                        progress = true;
                        if let Err(e) = c.tls.process_new_packets() {
                            // Send our alert if it goes.
                            let _ = c.tls.write_tls(&mut c.stream);
                            return Some(Outcome::Error(tls_error_kind(&e)));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => progress = true,
                    Err(e) => {
                        let when = if c.sent { "after" } else { "in" };
                        return Some(Outcome::Error(format!(
                            "{}_{when}_handshake",
                            errno_kind(&e)
                        )));
                    }
                }
            }
            if !c.sent && !c.tls.is_handshaking() {
                c.kind = c.tls.handshake_kind();
                c.sent = true;
                progress = true;
                if c.tls.writer().write_all(&self.request).is_err() {
                    return Some(Outcome::Error("request_not_buffered".into()));
                }
            }
            loop {
                let c = self.slots[k].conn.as_mut()?;
                match c.tls.reader().read(&mut buf) {
                    Ok(0) => {
                        c.closed = Some(true);
                        break;
                    }
                    Ok(n) => {
                        progress = true;
                        if let Some(o) = self.feed(k, &buf[..n]) {
                            return Some(o);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                        c.closed = Some(false);
                        break;
                    }
                    Err(e) => return Some(Outcome::Error(format!("read_{}", errno_kind(&e)))),
                }
            }
            let c = self.slots[k].conn.as_ref()?;
            if self.purpose == Purpose::Hold && c.sent {
                match self.hold_answered(c) {
                    Ok(true) => return Some(Outcome::Held),
                    Ok(false) => {}
                    Err(e) => return Some(Outcome::Error(e)),
                }
            }
            if c.closed.is_some() || (c.eof && !progress) {
                return Some(self.judge(c));
            }
            if !progress {
                return None;
            }
        }
    }
}

fn new_client<'a>(
    spec: &'a TlsLoadSpec,
    purpose: Purpose,
    deadline: Instant,
) -> Result<Client<'a>, String> {
    if spec.conns == 0 {
        return Err("no connections".into());
    }
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let now = Instant::now();
    let resume = purpose == Purpose::Mode(Mode::Resumed);
    Ok(Client {
        spec,
        purpose,
        request: purpose.request(spec.proto),
        expect: format!("backend={}\n", spec.expect).into_bytes(),
        pattern: if purpose.bulk().is_some() {
            pattern()
        } else {
            Vec::new()
        },
        ep,
        slots: (0..spec.conns)
            .map(|_| Slot {
                conn: None,
                started: now,
                config: spec.tls.slot_config(resume),
            })
            .collect(),
        report: TlsLoadReport::default(),
        held: Vec::new(),
        deadline,
    })
}

/// Runs the event loop until `deadline`, or (`hold_target`) until that many
/// connections are held; starts connections in every slot (but no more than the held
/// target needs).
fn drive(c: &mut Client<'_>, hold_target: Option<usize>) -> Result<(), String> {
    let wants_more = |c: &Client<'_>| match hold_target {
        Some(n) => c.held.len() + c.slots.iter().filter(|s| s.conn.is_some()).count() < n,
        None => true,
    };
    let now = Instant::now();
    for k in 0..c.slots.len() {
        if wants_more(c) {
            c.start(k, now);
        }
    }
    let mut events = Vec::with_capacity(c.slots.len().max(16));
    let mut last_sweep = now;
    loop {
        let now = Instant::now();
        if now >= c.deadline || hold_target.is_some_and(|n| c.held.len() >= n) {
            return Ok(());
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
                if now < c.deadline && wants_more(c) {
                    c.start(k, now);
                }
            }
        }
        let now = Instant::now();
        if now.duration_since(last_sweep) >= Duration::from_millis(20) {
            last_sweep = now;
            for k in 0..c.slots.len() {
                let s = &c.slots[k];
                // A bulk transfer that has begun is long, not stuck: the window's end
                // cuts it (`unfinished`).
                let stuck = s.conn.is_some() && now.duration_since(s.started) > c.spec.timeout;
                if stuck {
                    let moving =
                        c.purpose.bulk().is_some() && s.conn.as_ref().is_some_and(|x| x.body > 0);
                    if moving {
                        continue;
                    }
                    c.fail(k, "timeout".into(), now);
                }
                if c.slots[k].conn.is_none() && now < c.deadline && wants_more(c) {
                    c.start(k, now);
                }
            }
        }
    }
}

/// Runs `spec`'s load until its window closes (on a thread inside the client's
/// namespace).
pub fn run(spec: &TlsLoadSpec) -> Result<TlsLoadReport, String> {
    let deadline = spec.window_start + spec.duration;
    let mut c = new_client(spec, Purpose::Mode(spec.mode), deadline)?;
    drive(&mut c, None)?;
    c.report.unfinished = c.slots.iter().filter(|s| s.conn.is_some()).count() as u64;
    Ok(c.report)
}

/// Opens connections (`spec.conns` in flight) until `n` are established, answered and
/// idle, or `limit` passes; returns them (open: the contender keeps its side) with what
/// the client saw. `spec.mode`, `window_start` and `duration` are not used. Each held
/// connection keeps only its socket: the client's TLS state is dropped, and nothing is
/// sent on it again.
pub fn hold(
    spec: &TlsLoadSpec,
    n: usize,
    limit: Duration,
) -> Result<(TlsLoadReport, Vec<TcpStream>), String> {
    let mut c = new_client(spec, Purpose::Hold, Instant::now() + limit)?;
    drive(&mut c, Some(n))?;
    c.report.unfinished = c.slots.iter().filter(|s| s.conn.is_some()).count() as u64;
    Ok((c.report, std::mem::take(&mut c.held)))
}

/// One blocking connection through the contender within `limit`: a full handshake, the
/// small request of `proto`, the answer checked. `Ok` with what was negotiated
/// (readiness probe; run it inside the client's namespace).
pub fn probe(
    target: SocketAddrV4,
    tls: &TlsClient,
    proto: Protocol,
    expect: &str,
    limit: Duration,
) -> Result<String, String> {
    let mut sock = TcpStream::connect_timeout(&target.into(), limit)
        .map_err(|e| format!("connect {target}: {e}"))?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(tls.base.clone(), tls.name.clone())
        .map_err(|e| format!("TLS client: {e}"))?;
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    s.write_all(&Purpose::Mode(Mode::Full).request(proto))
        .map_err(|e| format!("TLS with {target}: {e}"))?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    let clean = loop {
        match s.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break false,
            Err(e) => {
                return Err(format!(
                    "read from {target}: {e} (after {:?})",
                    String::from_utf8_lossy(&reply)
                ))
            }
        }
    };
    let want = format!("backend={expect}\n");
    let ok = match proto {
        Protocol::Stream => reply == want.as_bytes(),
        Protocol::Http => {
            matches!(http_head(&reply), Ok(Some((200, len, _))) if reply[len..] == *want.as_bytes())
        }
    };
    if !ok {
        return Err(format!(
            "wrong answer through {target}: {:?}",
            String::from_utf8_lossy(&reply)
        ));
    }
    Ok(format!(
        "{} {} {}{}",
        conn.protocol_version()
            .map_or("?".into(), |v| format!("{v:?}")),
        conn.negotiated_cipher_suite()
            .map_or("?".into(), |s| format!("{:?}", s.suite())),
        conn.negotiated_key_exchange_group()
            .map_or("?".into(), |g| format!("{:?}", g.name())),
        if clean {
            ""
        } else {
            " (closed without close_notify)"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_heads() {
        assert_eq!(http_head(b"HTTP/1.1 200 OK\r\n"), Ok(None));
        assert_eq!(
            http_head(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nbackend=a\n"),
            Ok(Some((200, 39, Some(10))))
        );
        assert_eq!(
            http_head(b"HTTP/1.0 502 Bad Gateway\r\nServer: x\r\n\r\n"),
            Ok(Some((502, 39, None)))
        );
        assert!(http_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").is_err());
        assert!(http_head(b"SSH-2.0\r\n\r\n").is_err());
    }

    #[test]
    fn requests() {
        let r = |p, proto| String::from_utf8(Purpose::request(p, proto)).expect("text");
        assert_eq!(r(Purpose::Mode(Mode::Full), Protocol::Stream), "hello\n");
        assert_eq!(
            r(Purpose::Mode(Mode::Bulk { bytes: 9 }), Protocol::Stream),
            "bulk 9\n"
        );
        assert_eq!(
            r(Purpose::Mode(Mode::Resumed), Protocol::Http),
            "GET /hello HTTP/1.1\r\nHost: tls.example.test\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            r(Purpose::Hold, Protocol::Http),
            "GET /hello HTTP/1.1\r\nHost: tls.example.test\r\n\r\n"
        );
    }
}

/// The client against a rustls server on loopback (no namespaces, no root): every mode
/// answered right, resumption seen, bulk bytes checked, connections held. Only outcomes
/// are asserted, never how fast.
#[cfg(test)]
mod against_rustls {
    use super::*;
    use crate::tls_load::backend::{pattern, PATTERN_PERIOD};
    use crate::tls_load::certs::{Certs, KeyType};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    use std::io::BufRead;
    use std::net::TcpListener;

    /// A server answering the stream protocol of [`crate::tls_load::backend`] itself,
    /// TLS terminated by rustls (a thread a connection); its address.
    fn server(cert: &crate::tls_load::certs::Cert) -> SocketAddrV4 {
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("key");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![cert.der.clone()], key)
            .expect("certificate"),
        );
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let std::net::SocketAddr::V4(addr) = l.local_addr().expect("addr") else {
            panic!("not IPv4");
        };
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let config = config.clone();
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(config).expect("server");
                    let mut tls = rustls::StreamOwned::new(conn, s);
                    let mut line = String::new();
                    let mut r = std::io::BufReader::new(&mut tls);
                    if r.read_line(&mut line).is_err() {
                        return;
                    }
                    drop(r);
                    let p = pattern();
                    match line.trim_end().strip_prefix("bulk ") {
                        Some(n) => {
                            let mut left: usize = n.parse().unwrap_or(0);
                            let mut at = 0;
                            while left > 0 {
                                let k = left.min(16 * 1024);
                                if tls.write_all(&p[at..at + k]).is_err() {
                                    return;
                                }
                                at = (at + k) % PATTERN_PERIOD;
                                left -= k;
                            }
                        }
                        None => {
                            let _ = tls.write_all(b"backend=a\n");
                        }
                    }
                    if line.trim_end() == "hold" {
                        // Stay until the client goes.
                        let _ = tls.read(&mut [0u8; 16]);
                        return;
                    }
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        addr
    }

    fn spec(target: SocketAddrV4, tls: &TlsClient, mode: Mode) -> TlsLoadSpec {
        TlsLoadSpec {
            target,
            mode,
            proto: Protocol::Stream,
            tls: tls.clone(),
            expect: "a".into(),
            conns: 2,
            window_start: Instant::now(),
            duration: Duration::from_millis(700),
            timeout: Duration::from_secs(20),
        }
    }

    #[test]
    fn every_mode_answered_and_checked() {
        let certs = match Certs::generate(&[KeyType::EcdsaP256]) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let cert = &certs.certs[0];
        let target = server(cert);
        let tls = TlsClient::new(cert.der.clone()).expect("client");
        let n = probe(target, &tls, Protocol::Stream, "a", Duration::from_secs(10)).expect("probe");
        assert!(n.contains("TLS13_AES_128_GCM_SHA256"), "{n}");

        let full = run(&spec(target, &tls, Mode::Full)).expect("full");
        assert!(full.conns > 0 && full.errors.is_empty(), "{full:?}");
        assert_eq!(full.handshakes_of("resumed"), 0, "{full:?}");

        // Each of the two slots' first connection is full; every later one resumes.
        let resumed = run(&spec(target, &tls, Mode::Resumed)).expect("resumed");
        assert!(resumed.errors.is_empty(), "{resumed:?}");
        assert!(resumed.handshakes_of("full") <= 2, "{resumed:?}");
        assert!(resumed.handshakes_of("resumed") > 0, "{resumed:?}");

        let bulk = run(&spec(target, &tls, Mode::Bulk { bytes: 300_000 })).expect("bulk");
        assert!(bulk.errors.is_empty(), "{bulk:?}");
        assert!(bulk.conns > 0 && bulk.bytes >= 300_000, "{bulk:?}");

        // A server that sends other bytes is caught.
        let wrong = server_wrong_bulk(cert);
        let bad = run(&spec(wrong, &tls, Mode::Bulk { bytes: 1000 })).expect("bulk");
        assert_eq!(bad.conns, 0, "{bad:?}");
        assert!(bad.errors.contains_key("bulk_bytes_wrong"), "{bad:?}");

        let (held, streams) =
            hold(&spec(target, &tls, Mode::Full), 5, Duration::from_secs(20)).expect("hold");
        assert_eq!((held.conns, streams.len()), (5, 5), "{held:?}");
    }

    /// A server that answers a bulk request with zeros.
    fn server_wrong_bulk(cert: &crate::tls_load::certs::Cert) -> SocketAddrV4 {
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("key");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![cert.der.clone()], key)
            .expect("certificate"),
        );
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let std::net::SocketAddr::V4(addr) = l.local_addr().expect("addr") else {
            panic!("not IPv4");
        };
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let conn = rustls::ServerConnection::new(config.clone()).expect("server");
                let mut tls = rustls::StreamOwned::new(conn, s);
                let mut buf = [0u8; 64];
                let _ = tls.read(&mut buf);
                let _ = tls.write_all(&[0u8; 1000]);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        addr
    }
}
