//! Small applications on smoltcp sockets, driven by the simulation one step at a time.

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{icmp, tcp};
use smoltcp::wire::IpAddress;

fn tcp_socket(buf: usize) -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; buf]),
        tcp::SocketBuffer::new(vec![0; buf]),
    )
}

/// A TCP echo server: sends back every byte it receives; listens again after a close.
#[derive(Debug)]
pub struct EchoServer {
    handle: SocketHandle,
    port: u16,
    /// Bytes echoed so far.
    pub echoed: usize,
}

impl EchoServer {
    /// Listens on `port`.
    pub fn new(sockets: &mut SocketSet<'static>, port: u16) -> EchoServer {
        let mut s = tcp_socket(64 * 1024);
        s.listen(port).expect("listen");
        EchoServer {
            handle: sockets.add(s),
            port,
            echoed: 0,
        }
    }

    /// Moves received bytes to the send buffer.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let s = sockets.get_mut::<tcp::Socket>(self.handle);
        if !s.is_open() {
            let _ = s.listen(self.port);
            return;
        }
        let mut buf = [0u8; 4096];
        while s.can_recv() && s.send_capacity() - s.send_queue() >= buf.len() {
            let n = s.recv_slice(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            let _ = s.send_slice(&buf[..n]);
            self.echoed += n;
        }
        if !s.may_recv() && s.send_queue() == 0 && s.state() == tcp::State::CloseWait {
            s.close();
        }
    }
}

/// A TCP client: connects, sends `data`, collects what comes back, closes when it has
/// `expect` bytes back (or when the peer closes, with `expect = None`).
#[derive(Debug)]
pub struct TcpClient {
    handle: SocketHandle,
    data: Vec<u8>,
    sent: usize,
    expect: Option<usize>,
    /// Bytes received.
    pub received: Vec<u8>,
    /// Set once the exchange is complete.
    pub done: bool,
}

impl TcpClient {
    /// Connects from `local_port` to `remote:port`.
    pub fn new(
        iface: &mut smoltcp::iface::Interface,
        sockets: &mut SocketSet<'static>,
        remote: IpAddress,
        port: u16,
        local_port: u16,
        data: Vec<u8>,
        expect: Option<usize>,
    ) -> TcpClient {
        let mut s = tcp_socket(64 * 1024);
        s.connect(iface.context(), (remote, port), local_port)
            .expect("connect");
        TcpClient {
            handle: sockets.add(s),
            data,
            sent: 0,
            expect,
            received: Vec::new(),
            done: false,
        }
    }

    /// Sends what fits, reads what arrived.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let s = sockets.get_mut::<tcp::Socket>(self.handle);
        if s.may_send() && self.sent < self.data.len() {
            self.sent += s.send_slice(&self.data[self.sent..]).unwrap_or(0);
        }
        let mut buf = [0u8; 4096];
        while s.can_recv() {
            match s.recv_slice(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
            }
        }
        match self.expect {
            Some(n) if self.received.len() >= n && !self.done => {
                s.close();
                self.done = true;
            }
            None if !s.may_recv() && s.state() != tcp::State::SynSent && !self.done => {
                if matches!(
                    s.state(),
                    tcp::State::CloseWait
                        | tcp::State::Closed
                        | tcp::State::TimeWait
                        | tcp::State::LastAck
                ) {
                    s.close();
                    self.done = true;
                }
            }
            _ => {}
        }
    }

    /// The socket's state.
    pub fn state(&self, sockets: &SocketSet<'static>) -> tcp::State {
        sockets.get::<tcp::Socket>(self.handle).state()
    }
}

/// A tiny HTTP/1.0 server: reads a request head, answers `200 OK` with `body`, closes.
#[derive(Debug)]
pub struct HttpServer {
    handle: SocketHandle,
    port: u16,
    body: Vec<u8>,
    head: Vec<u8>,
    response: Vec<u8>,
    sent: usize,
    /// Request heads served.
    pub requests: Vec<String>,
}

impl HttpServer {
    /// Listens on `port`, serving `body`.
    pub fn new(sockets: &mut SocketSet<'static>, port: u16, body: Vec<u8>) -> HttpServer {
        let mut s = tcp_socket(64 * 1024);
        s.listen(port).expect("listen");
        HttpServer {
            handle: sockets.add(s),
            port,
            body,
            head: Vec::new(),
            response: Vec::new(),
            sent: 0,
            requests: Vec::new(),
        }
    }

    /// Serves.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let s = sockets.get_mut::<tcp::Socket>(self.handle);
        if !s.is_open() {
            self.head.clear();
            self.response.clear();
            self.sent = 0;
            let _ = s.listen(self.port);
            return;
        }
        if self.response.is_empty() {
            let mut buf = [0u8; 1024];
            while s.can_recv() {
                match s.recv_slice(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.head.extend_from_slice(&buf[..n]),
                }
            }
            if let Some(end) = self.head.windows(4).position(|w| w == b"\r\n\r\n") {
                self.requests
                    .push(String::from_utf8_lossy(&self.head[..end]).into_owned());
                self.response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    self.body.len()
                )
                .into_bytes();
                self.response.extend_from_slice(&self.body);
            }
        }
        if !self.response.is_empty() && s.may_send() && self.sent < self.response.len() {
            self.sent += s.send_slice(&self.response[self.sent..]).unwrap_or(0);
            if self.sent == self.response.len() {
                s.close();
            }
        }
    }
}

/// Splits an HTTP response into its head and body.
pub fn split_response(resp: &[u8]) -> Option<(&str, &[u8])> {
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((std::str::from_utf8(&resp[..end]).ok()?, &resp[end + 4..]))
}

/// Ping over a smoltcp ICMP socket: echo requests built with sluice's own wire module.
#[derive(Debug)]
pub struct Pinger {
    handle: SocketHandle,
    ident: u16,
    /// Sequence numbers answered.
    pub replies: Vec<u16>,
}

impl Pinger {
    /// A pinger with identifier `ident`.
    pub fn new(sockets: &mut SocketSet<'static>, ident: u16) -> Pinger {
        let meta = || vec![icmp::PacketMetadata::EMPTY; 16];
        let mut s = icmp::Socket::new(
            icmp::PacketBuffer::new(meta(), vec![0; 4096]),
            icmp::PacketBuffer::new(meta(), vec![0; 4096]),
        );
        s.bind(icmp::Endpoint::Ident(ident)).expect("bind");
        Pinger {
            handle: sockets.add(s),
            ident,
            replies: Vec::new(),
        }
    }

    /// Sends echo request `seq` from `src` to `dst` (the source is needed for the ICMPv6
    /// checksum).
    pub fn send(
        &mut self,
        sockets: &mut SocketSet<'static>,
        src: IpAddress,
        dst: IpAddress,
        seq: u16,
    ) {
        use sluice_dataplane::wire::{icmpv4, icmpv6};
        let payload = b"sluice-ping";
        let mut b = vec![0u8; 8 + payload.len()];
        b[8..].copy_from_slice(payload);
        match (src, dst) {
            (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) => icmpv6::Repr::EchoRequest {
                ident: self.ident,
                seq_no: seq,
                data_len: payload.len(),
            }
            .emit(&mut icmpv6::Packet::new_unchecked(&mut b[..]), s, d),
            _ => icmpv4::Repr::EchoRequest {
                ident: self.ident,
                seq_no: seq,
                data_len: payload.len(),
            }
            .emit(&mut icmpv4::Packet::new_unchecked(&mut b[..])),
        }
        let s = sockets.get_mut::<icmp::Socket>(self.handle);
        let _ = s.send_slice(&b, dst);
    }

    /// Collects replies.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let s = sockets.get_mut::<icmp::Socket>(self.handle);
        while let Ok((data, _from)) = s.recv() {
            // Echo reply: type 0 (v4) or 129 (v6); sequence in bytes 6..8.
            if data.len() >= 8 && (data[0] == 0 || data[0] == 129) {
                self.replies.push(u16::from_be_bytes([data[6], data[7]]));
            }
        }
    }
}
