//! HTTP/1.1 on smoltcp sockets for the per-request proxy's simulations: keep-alive
//! backends that say who they are and what they received, and a client that sends a
//! list of requests (one after another or pipelined, whole or a byte per segment) and
//! parses the responses. Written straight from RFC 9112, independent of sluice's codec.

use crate::splice::socket;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::IpListenEndpoint;

/// One request as a backend received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The backend's address (`ip`).
    pub backend: String,
    /// Request line.
    pub line: String,
    /// Header lines (`name: value`, as received).
    pub headers: Vec<String>,
    /// The body, decoded (chunked framing removed).
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|h| {
            let (n, v) = h.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// A request's head and body parsed from `buf` (chunked or Content-Length), and the bytes
/// it took; `None` while incomplete.
pub fn parse_message(buf: &[u8]) -> Option<(String, Vec<String>, Vec<u8>, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let first = lines.next()?.to_string();
    let headers: Vec<String> = lines.map(str::to_string).collect();
    let find = |name: &str| {
        headers.iter().find_map(|h| {
            let (n, v) = h.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let mut at = end + 4;
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let line_end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
            let size_s = std::str::from_utf8(&buf[at..line_end]).ok()?;
            let size = usize::from_str_radix(size_s.split(';').next()?.trim(), 16).ok()?;
            at = line_end + 2;
            if size == 0 {
                // Trailers until the empty line.
                loop {
                    let e = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
                    let empty = e == at;
                    at = e + 2;
                    if empty {
                        break;
                    }
                }
                break;
            }
            if buf.len() < at + size + 2 {
                return None;
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
        }
    } else if let Some(n) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if buf.len() < at + n {
            return None;
        }
        body.extend_from_slice(&buf[at..at + n]);
        at += n;
    }
    Some((first, headers, body, at))
}

struct Conn {
    h: SocketHandle,
    ep: IpListenEndpoint,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    close_after: bool,
    abort_after: bool,
    /// `100 Continue` sent for the request being read.
    continued: bool,
}

/// Keep-alive HTTP/1.1 backends on the backend host. Each answers `200` with a body of
/// `<backend ip> <method> <path> <body length>\n` and the headers it received, one per
/// line; the path picks other behaviour:
/// - `/status/NNN`: that status;
/// - `/big/N`: a body of N bytes (`0123456789` repeated), Content-Length framed;
/// - `/chunked/N`: N bytes in chunks of 1000;
/// - `/close`: `Connection: close`, then FIN (as for any request with `Connection: close`);
/// - `/cut`: a head announcing 100000 bytes, 10 of them, then RST;
/// - `/hang...`: no answer at all.
#[derive(Default)]
pub struct HttpBackends {
    conns: Vec<Conn>,
    /// Every request received, in order.
    pub received: Vec<Received>,
}

impl HttpBackends {
    /// No servers yet.
    pub fn new() -> HttpBackends {
        HttpBackends::default()
    }

    /// `n` listening sockets on `ep` with `buf` bytes of buffer each way.
    pub fn listen(
        mut self,
        sockets: &mut SocketSet<'static>,
        ep: impl Into<IpListenEndpoint>,
        n: usize,
        buf: usize,
    ) -> HttpBackends {
        let ep = ep.into();
        for _ in 0..n {
            let mut s = socket(buf, buf);
            s.listen(ep).expect("listen");
            self.conns.push(Conn {
                h: sockets.add(s),
                ep,
                inbuf: Vec::new(),
                out: Vec::new(),
                sent: 0,
                close_after: false,
                abort_after: false,
                continued: false,
            });
        }
        self
    }

    /// Closes every connection with nothing pending (as a server's keep-alive timeout
    /// does).
    pub fn close_idle(&mut self, sockets: &mut SocketSet<'static>) {
        for c in &mut self.conns {
            let s = sockets.get_mut::<tcp::Socket>(c.h);
            if s.state() == tcp::State::Established && c.out.is_empty() && c.inbuf.is_empty() {
                s.close();
            }
        }
    }

    /// Requests received by the backend at `ip`.
    pub fn hits(&self, ip: &str) -> usize {
        self.received.iter().filter(|r| r.backend == ip).count()
    }

    /// Serves.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        for c in &mut self.conns {
            let s = sockets.get_mut::<tcp::Socket>(c.h);
            if !s.is_open() {
                c.inbuf.clear();
                c.out.clear();
                c.sent = 0;
                c.close_after = false;
                c.abort_after = false;
                c.continued = false;
                let _ = s.listen(c.ep);
                continue;
            }
            let mut buf = [0u8; 16 * 1024];
            while s.can_recv() {
                match s.recv_slice(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => c.inbuf.extend_from_slice(&buf[..n]),
                }
            }
            // `Expect: 100-continue`: the interim answer once the head is in.
            if c.out.is_empty() && !c.continued {
                let head_end = c.inbuf.windows(4).position(|w| w == b"\r\n\r\n");
                let expects = head_end.is_some_and(|e| {
                    String::from_utf8_lossy(&c.inbuf[..e])
                        .to_ascii_lowercase()
                        .contains("\r\nexpect: 100-continue")
                });
                if expects && parse_message(&c.inbuf).is_none() {
                    c.out = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
                    c.continued = true;
                }
            }
            while c.out.is_empty() {
                let Some((line, headers, body, used)) = parse_message(&c.inbuf) else {
                    break;
                };
                c.inbuf.drain(..used);
                c.continued = false;
                let local = s
                    .local_endpoint()
                    .map(|e| e.addr.to_string())
                    .unwrap_or_default();
                let mut parts = line.split(' ');
                let method = parts.next().unwrap_or("").to_string();
                let path = parts.next().unwrap_or("").to_string();
                let rec = Received {
                    backend: local.clone(),
                    line: line.clone(),
                    headers: headers.clone(),
                    body: body.clone(),
                };
                self.received.push(rec);
                let mut text = format!("{local} {method} {path} {}\n", body.len());
                for h in &headers {
                    text.push_str(h);
                    text.push('\n');
                }
                // A request that asks for the connection's end gets it after its answer.
                let asked_close = headers
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case("connection: close"));
                if path.starts_with("/hang") {
                    // Never answered (the connection stays open).
                    continue;
                }
                let (status, body, extra) = if let Some(code) = path.strip_prefix("/status/") {
                    (code.parse().unwrap_or(500), text.into_bytes(), "")
                } else if let Some(n) = path.strip_prefix("/big/") {
                    let n: usize = n.parse().unwrap_or(0);
                    (
                        200,
                        b"0123456789".iter().copied().cycle().take(n).collect(),
                        "",
                    )
                } else if path == "/close" {
                    c.close_after = true;
                    (200, text.into_bytes(), "Connection: close\r\n")
                } else if path == "/cut" {
                    c.abort_after = true;
                    c.out = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789".to_vec();
                    break;
                } else {
                    (200, text.into_bytes(), "")
                };
                if let Some(n) = path.strip_prefix("/chunked/") {
                    let n: usize = n.parse().unwrap_or(0);
                    let data: Vec<u8> = b"0123456789".iter().copied().cycle().take(n).collect();
                    c.out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                    for chunk in data.chunks(1000) {
                        c.out
                            .extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                        c.out.extend_from_slice(chunk);
                        c.out.extend_from_slice(b"\r\n");
                    }
                    c.out.extend_from_slice(b"0\r\n\r\n");
                    continue;
                }
                let extra = if asked_close {
                    c.close_after = true;
                    "Connection: close\r\n"
                } else {
                    extra
                };
                let reason = if status == 200 { "OK" } else { "Status" };
                c.out = format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nX-Backend: {local}\r\n{extra}\r\n",
                    body.len()
                )
                .into_bytes();
                if method != "HEAD" {
                    c.out.extend_from_slice(&body);
                }
            }
            while c.sent < c.out.len() && s.can_send() {
                match s.send_slice(&c.out[c.sent..]) {
                    Ok(n) if n > 0 => c.sent += n,
                    _ => break,
                }
            }
            if c.sent >= c.out.len() && !c.out.is_empty() {
                if c.abort_after {
                    // Reset once the bytes are out (acknowledged): an abort discards
                    // what is still queued.
                    if s.send_queue() == 0 {
                        s.abort();
                        c.out.clear();
                        c.sent = 0;
                    }
                    continue;
                }
                c.out.clear();
                c.sent = 0;
                if c.close_after {
                    s.close();
                }
            }
        }
    }
}

/// A response as the client parsed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header lines.
    pub headers: Vec<String>,
    /// Body (chunked framing removed).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|h| {
            let (n, v) = h.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTP/1.1 client on the client host: sends `requests` (raw bytes each), pipelined
/// or one after the other's response, whole or `segment` bytes at a time, and parses the
/// responses (requests with method HEAD get none of a body).
pub struct HttpClient {
    /// The socket.
    pub h: SocketHandle,
    requests: Vec<Vec<u8>>,
    heads: Vec<bool>,
    next: usize,
    sent: usize,
    /// Send every request at once (pipelining), or wait for each response.
    pub pipeline: bool,
    /// Bytes per send (0: as many as fit).
    pub segment: usize,
    inbuf: Vec<u8>,
    /// Responses parsed, in order.
    pub responses: Vec<Response>,
    /// Close once every response came.
    pub close_when_done: bool,
    /// Bytes read per step at most (0: all there are): a slow reader.
    pub read_per_step: usize,
    /// Interim (1xx) statuses received, in order.
    pub interim: Vec<u16>,
    /// A `100 Continue` came for the request being sent.
    continued: bool,
}

impl HttpClient {
    /// A client on `sockets` connecting from `port` to `dst`.
    pub fn new(
        sockets: &mut SocketSet<'static>,
        cx: &mut smoltcp::iface::Context,
        dst: (smoltcp::wire::IpAddress, u16),
        port: u16,
        requests: Vec<Vec<u8>>,
    ) -> HttpClient {
        let mut s = socket(256 * 1024, 256 * 1024);
        s.set_nagle_enabled(false);
        s.connect(cx, dst, port).expect("connect");
        let heads = requests.iter().map(|r| r.starts_with(b"HEAD ")).collect();
        HttpClient {
            h: sockets.add(s),
            requests,
            heads,
            next: 0,
            sent: 0,
            pipeline: false,
            segment: 0,
            inbuf: Vec::new(),
            responses: Vec::new(),
            close_when_done: true,
            read_per_step: 0,
            interim: Vec::new(),
            continued: false,
        }
    }

    /// The socket's state.
    pub fn state(&self, sockets: &SocketSet<'static>) -> tcp::State {
        sockets.get::<tcp::Socket>(self.h).state()
    }

    /// Whether every response came.
    pub fn done(&self) -> bool {
        self.responses.len() >= self.requests.len()
    }

    /// Sends and reads.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let s = sockets.get_mut::<tcp::Socket>(self.h);
        let mut buf = [0u8; 16 * 1024];
        let mut budget = if self.read_per_step == 0 {
            usize::MAX
        } else {
            self.read_per_step
        };
        while s.can_recv() && budget > 0 {
            let k = buf.len().min(budget);
            match s.recv_slice(&mut buf[..k]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&buf[..n]);
                    budget -= n;
                }
            }
        }
        loop {
            let head_req = self
                .heads
                .get(self.responses.len())
                .copied()
                .unwrap_or(false);
            let parsed = if head_req {
                let end = self.inbuf.windows(4).position(|w| w == b"\r\n\r\n");
                end.and_then(|e| {
                    let (l, h, _, _) = parse_message(&self.inbuf[..e + 4])?;
                    Some((l, h, Vec::new(), e + 4))
                })
            } else {
                parse_message(&self.inbuf)
            };
            let Some((line, headers, body, used)) = parsed else {
                break;
            };
            self.inbuf.drain(..used);
            let status = line
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            if (100..200).contains(&status) && status != 101 {
                self.interim.push(status);
                self.continued = true;
                continue;
            }
            self.responses.push(Response {
                status,
                headers,
                body,
            });
        }
        if !s.may_send() {
            return;
        }
        while self.next < self.requests.len() {
            let waiting = !self.pipeline && self.responses.len() < self.next;
            if waiting || !s.can_send() {
                break;
            }
            let r = &self.requests[self.next];
            let mut end = if self.segment == 0 {
                r.len()
            } else {
                (self.sent + self.segment).min(r.len())
            };
            // `Expect: 100-continue`: the head, then the body once the 100 came.
            let head_end = r.windows(4).position(|w| w == b"\r\n\r\n").map(|e| e + 4);
            let expects = head_end.is_some_and(|e| {
                String::from_utf8_lossy(&r[..e])
                    .to_ascii_lowercase()
                    .contains("\r\nexpect: 100-continue")
            });
            if let (true, false, Some(e)) = (expects, self.continued, head_end) {
                if self.sent >= e {
                    break;
                }
                end = end.min(e);
            }
            match s.send_slice(&r[self.sent..end]) {
                Ok(n) => self.sent += n,
                Err(_) => break,
            }
            if self.sent >= r.len() {
                self.next += 1;
                self.sent = 0;
                self.continued = false;
            }
            if self.segment != 0 {
                break; // one segment per step
            }
        }
        if self.close_when_done && self.done() && s.state() == tcp::State::Established {
            s.close();
        }
    }
}

/// A GET request for `path` with Host `host` and extra header lines.
pub fn get(host: &str, path: &str, extra: &[&str]) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    for e in extra {
        r.push_str(e);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}
