//! TLS termination in simulation: rustls clients over smoltcp TCP on the client host,
//! sluice's `Balancer` terminating on the in-memory wire (its terminate engine: smoltcp
//! shards + rustls), smoltcp echo backends. Byte-exact transfers under loss, reordering
//! and duplication on both legs; routing by SNI; HTTPS requests routed one by one on one
//! connection (HTTP backends); a backend nobody answers; a silent client (handshake
//! deadline); the connection cap; a client reset passed to the backend.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_dataplane::tables::listeners::{
    proto, ListenerKind, ListenerSpec, ListenerTable, RouteEntry,
};
use sluice_dataplane::tables::maglev::{Entry, EntryTarget, MaglevTable};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::tables::tls::TlsListener;
use sluice_dataplane::terminate::TerminateConfig;
use sluice_tests::http_apps::{parse_message, HttpBackends};
use sluice_tests::sim::{Faults, Rng, Sim};
use sluice_tests::splice::{
    balancer_config, ip, print_counters, sim_snapshot, snapshot, socket, EchoBackends, VIP,
};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use std::io::{Read, Write};

use std::sync::Arc;

/// The certificate sluice serves (names a, b and c.example.test) and the client's trust
/// in it.
struct Pki {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// A client that speaks TLS 1.2 only.
    client12: Arc<ClientConfig>,
}

fn pki() -> Pki {
    let names = vec![
        "a.example.test".to_string(),
        "b.example.test".to_string(),
        "c.example.test".to_string(),
        "ghost.example.test".to_string(),
        "refuse.example.test".to_string(),
    ];
    let ck = rcgen::generate_simple_self_signed(names).expect("certificate");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    server.ticketer = rustls::crypto::ring::Ticketer::new().expect("ticketer");
    let mut roots = RootCertStore::empty();
    roots.add(cert).expect("root");
    let client = |versions: &[&'static rustls::SupportedProtocolVersion]| {
        Arc::new(
            ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .expect("versions")
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        )
    };
    Pki {
        server: Arc::new(server),
        client: client(rustls::DEFAULT_VERSIONS),
        client12: client(&[&rustls::version::TLS12]),
    }
}

fn route(name: &str, backends: &[&str]) -> RouteEntry {
    let entries: Vec<Entry> = backends
        .iter()
        .map(|b| Entry {
            target: EntryTarget::Backend(b.parse().expect("backend")),
            weight: 1,
        })
        .collect();
    RouteEntry {
        name: name.into(),
        subnets: Box::new([]),
        table: MaglevTable::build(&entries, 251).expect("maglev"),
        table_v6: None,
        http: Default::default(),
    }
}

/// The simulated appliance's tables with a terminating listener on VIP:443 (TLS, routed
/// by SNI): `a.example.test` -> a:7000, `ghost.example.test` -> .98:7000 (nobody),
/// `refuse.example.test` -> a:7999 (refused), every other name -> b:7000.
fn terminating_snapshot(server: Arc<ServerConfig>) -> Snapshot {
    let mut snap = snapshot();
    snap.listeners = ListenerTable::build(
        vec![ListenerSpec {
            name: "terminate".into(),
            addresses: vec![ip(VIP)],
            port: 443,
            proto: proto::TCP,
            kind: ListenerKind::TlsTerminate,
            bindings: vec![
                ("a.example.test".into(), 0),
                ("ghost.example.test".into(), 2),
                ("refuse.example.test".into(), 3),
                ("*".into(), 1),
            ],
            https_redirect: false,
            transparent: false,
            tls: Some(Arc::new(TlsListener {
                config: server,
                http: false,
            })),
            proxy: false,
        }],
        vec![
            route("a", &["10.78.0.11:7000"]),
            route("b", &["10.78.0.12:7000"]),
            route("ghost", &["10.78.0.98:7000"]),
            // Backend a's host, on a port nothing listens on: its stack answers RST.
            route("refuse", &["10.78.0.11:7999"]),
        ],
    )
    .expect("listeners");
    snap
}

/// The simulated appliance serving [`terminating_snapshot`] with `pki`'s certificate, no
/// faults, the worker seeded `seed` with termination settings `cfg`.
fn world(pki: &Pki, seed: u64, cfg: TerminateConfig) -> (Sim<Balancer>, Publisher<Snapshot>) {
    sim_snapshot(
        terminating_snapshot(pki.server.clone()),
        Faults::NONE,
        Faults::NONE,
        config(seed, cfg),
    )
}

fn config(seed: u64, terminate: TerminateConfig) -> BalancerConfig {
    BalancerConfig {
        terminate,
        ..balancer_config(seed)
    }
}

/// `io::Write` into a smoltcp socket.
struct Into<'a>(&'a mut tcp::Socket<'static>);

impl Write for Into<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self.0.send_slice(b) {
            Ok(0) => Err(std::io::ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            Err(_) => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A TLS client on the client host: sends `data`, expects it back, then closes.
struct Client {
    h: SocketHandle,
    tls: ClientConnection,
    data: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    tls_error: bool,
    closing: bool,
}

impl Client {
    fn new(sim: &mut Sim<Balancer>, pki: &Pki, sni: &str, port: u16, data: Vec<u8>) -> Client {
        Client::with(sim, pki.client.clone(), sni, port, data)
    }

    fn with(
        sim: &mut Sim<Balancer>,
        config: Arc<ClientConfig>,
        sni: &str,
        port: u16,
        data: Vec<u8>,
    ) -> Client {
        let mut s = socket(64 * 1024, 64 * 1024);
        let host = &mut sim.hosts[0];
        s.connect(host.iface.context(), (Sim::addr(ip(VIP)), 443), port)
            .expect("connect");
        let name = ServerName::try_from(sni.to_string()).expect("name");
        Client {
            h: host.sockets.add(s),
            tls: ClientConnection::new(config, name).expect("client"),
            data,
            sent: 0,
            got: Vec::new(),
            tls_error: false,
            closing: false,
        }
    }

    fn state(&self, sim: &Sim<Balancer>) -> tcp::State {
        sim.hosts[0].sockets.get::<tcp::Socket>(self.h).state()
    }

    /// Moves bytes between the socket and rustls.
    fn step(&mut self, sim: &mut Sim<Balancer>) {
        let s = sim.hosts[0].sockets.get_mut::<tcp::Socket>(self.h);
        while s.can_recv() && !self.tls_error {
            let tls = &mut self.tls;
            let n = s
                .recv(|b| {
                    let n = tls.read_tls(&mut &b[..]).unwrap_or(0);
                    (n, n)
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            if self.tls.process_new_packets().is_err() {
                self.tls_error = true;
            }
        }
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = self.tls.reader().read(&mut buf) {
            if n == 0 {
                break;
            }
            self.got.extend_from_slice(&buf[..n]);
        }
        if !self.tls.is_handshaking() && self.sent < self.data.len() && !self.tls.wants_write() {
            let end = (self.sent + 8 * 1024).min(self.data.len());
            self.sent += self
                .tls
                .writer()
                .write(&self.data[self.sent..end])
                .unwrap_or(0);
        }
        if self.got.len() >= self.data.len() && !self.closing && !self.data.is_empty() {
            self.tls.send_close_notify();
            self.closing = true;
        }
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Into(s)) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        if self.closing && !self.tls.wants_write() && s.state() == tcp::State::Established {
            s.close();
        }
    }
}

/// Runs `clients` until each is closed (or `limit_ms` of simulated time pass).
fn run(
    sim: &mut Sim<Balancer>,
    backends: &mut EchoBackends,
    clients: &mut [Client],
    limit_ms: u64,
) {
    run_with(
        sim,
        &mut |s| backends.step(&mut s.hosts[1].sockets),
        clients,
        limit_ms,
    );
}

/// [`run`] with any backends (`step` moves them).
fn run_with(
    sim: &mut Sim<Balancer>,
    step: &mut dyn FnMut(&mut Sim<Balancer>),
    clients: &mut [Client],
    limit_ms: u64,
) {
    let end = sim.now_ms + limit_ms;
    while sim.now_ms < end {
        for _ in 0..8 {
            sim.round();
            step(sim);
            for c in clients.iter_mut() {
                c.step(sim);
            }
        }
        sim.now_ms += 1;
        if clients
            .iter()
            .all(|c| matches!(c.state(sim), tcp::State::Closed | tcp::State::TimeWait))
        {
            break;
        }
    }
}

fn data(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn terminated_transfers_are_byte_exact_under_faults_on_both_legs() {
    let pki = pki();
    let faults = Faults {
        drop: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        corrupt: 0.0,
    };
    let (mut sim, _p) = sim_snapshot(
        terminating_snapshot(pki.server.clone()),
        faults,
        faults,
        config(7, TerminateConfig::default()),
    );
    let mut backends = EchoBackends::new()
        .listen(&mut sim.hosts[1].sockets, 7000, 8, 64 * 1024)
        .listen(&mut sim.hosts[1].sockets, 7000, 0, 64 * 1024);
    let mut rng = Rng::new(11);
    let mut clients: Vec<Client> = (0..4)
        .map(|i| {
            let sni = if i % 2 == 0 {
                "a.example.test"
            } else {
                "c.example.test"
            };
            let d = data(&mut rng, 300_000);
            Client::new(&mut sim, &pki, sni, 40_000 + i as u16, d)
        })
        .collect();
    run(&mut sim, &mut backends, &mut clients, 120_000);
    print_counters(&sim);
    for (i, c) in clients.iter().enumerate() {
        assert!(!c.tls_error, "client {i}: TLS error");
        assert_eq!(c.got.len(), c.data.len(), "client {i}: bytes back");
        assert!(c.got == c.data, "client {i}: bytes differ");
    }
    // SNI routing: a.example.test to a, c.example.test (the catch-all) to b.
    assert_eq!(backends.hits("10.78.0.11"), 2);
    assert_eq!(backends.hits("10.78.0.12"), 2);
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateHandshake), 4);
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 4);
    // Every connection released: nothing left open on the worker.
    sim.run_until(30_000, |s| {
        backends.step(&mut s.hosts[1].sockets);
        s.worker.stage().terminator().open() == 0
    });
    assert_eq!(sim.worker.stage().terminator().open(), 0);
    assert_eq!(sim.worker.counters().events_of(Event::TerminateClosed), 4);
}

#[test]
fn a_backend_nobody_answers_resets_the_client() {
    let pki = pki();
    let cfg = TerminateConfig {
        connect_ms: 500,
        backend_tries: 2,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 3, cfg);
    let mut backends = EchoBackends::new();
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "ghost.example.test",
        41_000,
        b"hello".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut c, 20_000);
    print_counters(&sim);
    assert!(
        matches!(c[0].state(&sim), tcp::State::Closed),
        "client reset: {:?}",
        c[0].state(&sim)
    );
    assert!(c[0].got.is_empty());
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateHandshake), 1);
    assert_eq!(k.events_of(Event::TerminateBackendFailed), 1);
    assert_eq!(sim.worker.stage().terminator().open(), 0);
}

#[test]
fn a_silent_client_meets_the_handshake_deadline() {
    let pki = pki();
    let cfg = TerminateConfig {
        handshake_ms: 2_000,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 5, cfg);
    // A plain TCP client: connects, says nothing.
    let host = &mut sim.hosts[0];
    let mut s = socket(4096, 4096);
    s.connect(host.iface.context(), (Sim::addr(ip(VIP)), 443), 42_000)
        .expect("connect");
    let h = host.sockets.add(s);
    sim.run_until(1_000, |s| {
        s.hosts[0].sockets.get::<tcp::Socket>(h).state() == tcp::State::Established
    });
    assert_eq!(sim.worker.stage().terminator().open(), 1);
    let reset = sim.run_until(5_000, |s| {
        s.hosts[0].sockets.get::<tcp::Socket>(h).state() == tcp::State::Closed
    });
    print_counters(&sim);
    assert!(reset, "the silent client is reset");
    assert!(sim.now_ms >= 2_000);
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateHandshakeTimeout), 1);
    assert_eq!(sim.worker.stage().terminator().open(), 0);
}

#[test]
fn a_full_worker_refuses_new_handshakes_and_keeps_the_established() {
    let pki = pki();
    let cfg = TerminateConfig {
        max_connections: 2,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 9, cfg);
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 4, 64 * 1024);
    let mut rng = Rng::new(3);
    // Two idle clients hold both slots (handshake done, nothing sent yet).
    let mut held: Vec<Client> = (0..2)
        .map(|i| Client::new(&mut sim, &pki, "a.example.test", 43_000 + i, Vec::new()))
        .collect();
    for _ in 0..200 {
        sim.round();
        backends.step(&mut sim.hosts[1].sockets);
        for c in held.iter_mut() {
            c.step(&mut sim);
        }
        sim.now_ms += 1;
    }
    assert_eq!(sim.worker.stage().terminator().open(), 2);
    let mut third = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        43_100,
        b"x".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut third, 2_000);
    assert_eq!(third[0].state(&sim), tcp::State::Closed, "refused with RST");
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateRefused), 1);
    assert_eq!(k.drops_of(DropReason::TerminateFull), 1);
    // The established ones still carry data, then close.
    for c in held.iter_mut() {
        c.data = data(&mut rng, 100_000);
    }
    run(&mut sim, &mut backends, &mut held, 60_000);
    print_counters(&sim);
    for c in &held {
        assert!(c.got == c.data, "the established connections finish");
    }
}

#[test]
fn a_client_reset_resets_the_backend() {
    let pki = pki();
    let (mut sim, _p) = world(&pki, 13, TerminateConfig::default());
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 1, 64 * 1024);
    let mut rng = Rng::new(5);
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        44_000,
        data(&mut rng, 1_000_000),
    )];
    // Until the backend has the connection and bytes flow.
    for _ in 0..2_000 {
        sim.round();
        backends.step(&mut sim.hosts[1].sockets);
        c[0].step(&mut sim);
        sim.now_ms += 1;
        if c[0].got.len() > 10_000 {
            break;
        }
    }
    assert_eq!(backends.established(&sim.hosts[1].sockets), 1);
    sim.hosts[0].sockets.get_mut::<tcp::Socket>(c[0].h).abort();
    let gone = sim.run_until(2_000, |s| {
        backends.step(&mut s.hosts[1].sockets);
        backends.established(&s.hosts[1].sockets) == 0
    });
    print_counters(&sim);
    assert!(gone, "the backend's connection is reset");
    assert!(sim.worker.counters().events_of(Event::TerminateReset) >= 1);
    assert_eq!(sim.worker.stage().terminator().open(), 0);
}

/// An HTTPS listener (`http: true`) on VIP:443: `www.example.test` with `/api/` -> a,
/// anything else -> b; no other host.
fn https_snapshot(server: Arc<ServerConfig>) -> Snapshot {
    use sluice_dataplane::tables::http::{
        HttpAction, HttpRoutes, HttpRule, RequestMatch, StrMatch,
    };
    let table = |b: &str| {
        MaglevTable::build(
            &[Entry {
                target: EntryTarget::Backend(b.parse().expect("backend")),
                weight: 1,
            }],
            251,
        )
        .expect("maglev")
    };
    let mut snap = snapshot();
    snap.listeners = ListenerTable::build(
        vec![ListenerSpec {
            name: "https".into(),
            addresses: vec![ip(VIP)],
            port: 443,
            proto: proto::TCP,
            kind: ListenerKind::TlsTerminate,
            bindings: vec![("www.example.test".into(), 0)],
            https_redirect: false,
            transparent: false,
            tls: Some(Arc::new(TlsListener {
                config: server,
                http: true,
            })),
            proxy: true,
        }],
        vec![RouteEntry {
            name: "www".into(),
            subnets: Box::new([]),
            table: table("10.78.0.13:7000"),
            table_v6: None,
            http: {
                let rule = |name: &str, backend: &str| HttpRule {
                    name: name.into(),
                    counter: 0,
                    action: HttpAction::Forward {
                        table: table(backend),
                        table_v6: None,
                        invalid_status: 503,
                    },
                    rewrite: Default::default(),
                    request_headers: Default::default(),
                    response_headers: Default::default(),
                    timeout_ms: 0,
                    retries: Default::default(),
                    mirrors: Box::new([]),
                };
                HttpRoutes {
                    rules: Box::new([
                        rule("api", "10.78.0.11:7000"),
                        rule("rest", "10.78.0.12:7000"),
                    ]),
                    matches: Box::new([
                        (
                            RequestMatch {
                                path: Some(StrMatch::Prefix("/api/".into())),
                                ..RequestMatch::default()
                            },
                            0,
                        ),
                        (RequestMatch::default(), 1),
                    ]),
                }
            },
        }],
    )
    .expect("listeners");
    snap
}

#[test]
fn https_requests_are_routed_one_by_one_and_arrive_in_plaintext() {
    let pki = pki();
    let (mut sim, _p) = sim_snapshot(
        https_snapshot(pki.server.clone()),
        Faults::NONE,
        Faults::NONE,
        config(17, TerminateConfig::default()),
    );
    let mut backends = HttpBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 4, 64 * 1024);
    let req = |path: &str, host: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sim\r\n\r\n").into_bytes()
    };
    // Both requests on one TLS connection (pipelined), then one for a Host without a
    // route. The certificate names a.example.test: the client asks for that name, each
    // request's Host routes (no SNI/Host coupling is enforced here).
    let mut data = req("/api/v1", "www.example.test");
    data.extend(req("/index.html", "www.example.test"));
    data.extend(req("/", "other.example.test"));
    let mut clients = [Client::new(&mut sim, &pki, "a.example.test", 45_000, data)];
    run_with(
        &mut sim,
        &mut |s| backends.step(&mut s.hosts[1].sockets),
        &mut clients,
        20_000,
    );
    print_counters(&sim);
    let mut got = &clients[0].got[..];
    let mut answers = Vec::new();
    while let Some((line, _, body, used)) = parse_message(got) {
        answers.push((line, String::from_utf8_lossy(&body).into_owned()));
        got = &got[used..];
    }
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[0].0, "HTTP/1.1 200 OK");
    assert!(
        answers[0].1.starts_with("10.78.0.11 GET /api/v1 0\n"),
        "{}",
        answers[0].1
    );
    assert!(
        answers[1].1.starts_with("10.78.0.12 GET /index.html 0\n"),
        "{}",
        answers[1].1
    );
    assert_eq!(answers[2].0, "HTTP/1.1 404 Not Found");
    // Decrypted, forwarded as plain HTTP with the scheme the client used.
    assert_eq!(
        backends.received[0].header("x-forwarded-proto"),
        Some("https")
    );
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateAccepted), 1);
    assert_eq!(k.events_of(Event::HttpRequest), 3);
    assert_eq!(k.events_of(Event::HttpNoRoute), 1);
}

#[test]
fn backend_close_and_reset_reach_the_client() {
    let pki = pki();
    let (mut sim, _p) = world(&pki, 19, TerminateConfig::default());
    // A backend that answers "bye" and closes (FIN), and one that resets at once.
    let host = &mut sim.hosts[1];
    let mut s = socket(4096, 4096);
    s.listen(7000).expect("listen");
    let closer = host.sockets.add(s);
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        46_000,
        b"hi".to_vec(),
    )];
    let end = sim.now_ms + 5_000;
    let mut said = false;
    while sim.now_ms < end {
        sim.step();
        c[0].step(&mut sim);
        let s = sim.hosts[1].sockets.get_mut::<tcp::Socket>(closer);
        if s.state() == tcp::State::Established && s.can_recv() && !said {
            let mut b = [0u8; 16];
            let _ = s.recv_slice(&mut b);
            s.send_slice(b"bye").expect("send");
            s.close();
            said = true;
        }
        if c[0].tls.is_handshaking() {
            continue;
        }
        // close_notify then FIN from sluice: rustls reports the clean end.
        if c[0].got == b"bye" && c[0].state(&sim) == tcp::State::CloseWait {
            break;
        }
    }
    assert_eq!(c[0].got, b"bye");
    assert_eq!(
        c[0].state(&sim),
        tcp::State::CloseWait,
        "FIN after close_notify"
    );
    assert!(!c[0].tls_error);
    let mut buf = [0u8; 4];
    assert_eq!(
        c[0].tls.reader().read(&mut buf).ok(),
        Some(0),
        "close_notify seen"
    );

    // Reset: the backend aborts once the request arrives.
    let mut s = socket(4096, 4096);
    s.listen(7000).expect("listen");
    let resetter = sim.hosts[1].sockets.add(s);
    sim.hosts[1].sockets.remove(closer);
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        46_001,
        b"hi".to_vec(),
    )];
    let before = sim.worker.counters().events_of(Event::TerminateReset);
    let end = sim.now_ms + 5_000;
    while sim.now_ms < end {
        sim.step();
        c[0].step(&mut sim);
        let s = sim.hosts[1].sockets.get_mut::<tcp::Socket>(resetter);
        if s.state() == tcp::State::Established && s.can_recv() {
            s.abort();
        }
        if c[0].state(&sim) == tcp::State::Closed {
            break;
        }
    }
    print_counters(&sim);
    assert_eq!(c[0].state(&sim), tcp::State::Closed, "the client is reset");
    assert!(c[0].got.is_empty());
    assert_eq!(
        sim.worker.counters().events_of(Event::TerminateReset),
        before + 1
    );
}

#[test]
fn tls12_and_resumed_handshakes() {
    let pki = pki();
    let (mut sim, _p) = world(&pki, 23, TerminateConfig::default());
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 4, 64 * 1024);
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        47_000,
        b"one".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut c, 10_000);
    assert_eq!(c[0].got, b"one");
    // The same client config again: a ticket from the first connection resumes.
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        47_001,
        b"two".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut c, 10_000);
    assert_eq!(c[0].got, b"two");
    assert_eq!(
        c[0].tls.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    // TLS 1.2: a full handshake, then a resumed one (tickets, RFC 5077).
    for (port, kind) in [
        (47_002, rustls::HandshakeKind::Full),
        (47_003, rustls::HandshakeKind::Resumed),
    ] {
        let mut c = [Client::with(
            &mut sim,
            pki.client12.clone(),
            "b.example.test",
            port,
            b"twelve".to_vec(),
        )];
        run(&mut sim, &mut backends, &mut c, 10_000);
        assert_eq!(c[0].got, b"twelve");
        assert_eq!(
            c[0].tls.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_2)
        );
        assert_eq!(c[0].tls.handshake_kind(), Some(kind));
    }
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateHandshake), 4);
    assert_eq!(k.events_of(Event::TerminateResumed), 2);
}

#[test]
fn an_idle_connection_is_closed_with_close_notify_and_fin() {
    let pki = pki();
    let cfg = TerminateConfig {
        idle_ms: 2_000,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 29, cfg);
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 1, 64 * 1024);
    // Handshake, backend connected, then nothing either way.
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        48_000,
        Vec::new(),
    )];
    let start = sim.now_ms;
    let mut closed_at = None;
    while sim.now_ms < start + 6_000 {
        sim.step();
        backends.step(&mut sim.hosts[1].sockets);
        c[0].step(&mut sim);
        if c[0].state(&sim) == tcp::State::CloseWait {
            closed_at = Some(sim.now_ms);
            break;
        }
    }
    print_counters(&sim);
    let at = closed_at.expect("sluice closed the idle connection");
    assert!(
        at - start >= 2_000,
        "not before idleTimeoutMs: {}",
        at - start
    );
    let mut buf = [0u8; 4];
    assert_eq!(
        c[0].tls.reader().read(&mut buf).ok(),
        Some(0),
        "close_notify"
    );
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateIdleClosed), 1);
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 1);
}

#[test]
fn half_open_connections_give_way_to_new_handshakes_when_the_worker_is_full() {
    use sluice_tests::raw::{divert_ports, syn_options, RawClient};
    use std::net::SocketAddr;
    let pki = pki();
    let cfg = TerminateConfig {
        max_connections: 4,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 31, cfg);
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 2, 64 * 1024);
    // Four SYNs whose senders never answer the SYN-ACK (their frames are taken off the
    // client host's wire, as a spoofed flood's would go nowhere).
    let ports: Vec<u16> = (40_500..40_504).collect();
    sim.hosts[0]
        .dev
        .set_divert(Some(divert_ports(ports.clone())));
    let vip = SocketAddr::new(ip(VIP), 443);
    for (i, p) in ports.iter().enumerate() {
        let mut raw = RawClient::new(
            0,
            SocketAddr::new(ip("10.77.0.1"), *p),
            vip,
            1000 * i as u32,
        );
        raw.syn(&mut sim, syn_options(1460, Some(7), true));
    }
    sim.run_until(100, |_| false);
    assert_eq!(sim.worker.stage().terminator().open(), 4);
    // Younger than a second: a new SYN is refused.
    let mut early = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        48_100,
        b"x".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut early, 300);
    assert_eq!(early[0].state(&sim), tcp::State::Closed, "refused");
    assert_eq!(sim.worker.counters().events_of(Event::TerminateRefused), 1);
    // Older: a half-open one gives way and the handshake completes.
    sim.run_until(1_500, |_| false);
    let mut later = [Client::new(
        &mut sim,
        &pki,
        "a.example.test",
        48_101,
        b"hello".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut later, 10_000);
    print_counters(&sim);
    assert_eq!(later[0].got, b"hello");
    assert_eq!(sim.worker.counters().events_of(Event::TerminateEvicted), 1);
}

#[test]
fn a_refusing_backend_and_a_client_reset_mid_handshake_leave_nothing_behind() {
    let pki = pki();
    let cfg = TerminateConfig {
        backend_tries: 2,
        ..TerminateConfig::default()
    };
    let (mut sim, _p) = world(&pki, 37, cfg);
    let mut backends = EchoBackends::new();
    // The backend's stack refuses (RST to the SYN): the next pick, then the client reset.
    let mut c = [Client::new(
        &mut sim,
        &pki,
        "refuse.example.test",
        49_000,
        b"x".to_vec(),
    )];
    run(&mut sim, &mut backends, &mut c, 5_000);
    print_counters(&sim);
    assert_eq!(c[0].state(&sim), tcp::State::Closed, "client reset");
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::BackendFailover), 1);
    assert_eq!(k.events_of(Event::TerminateBackendFailed), 1);
    assert_eq!(sim.worker.stage().terminator().open(), 0);

    // A client that resets after its ClientHello, before the handshake ends.
    let mut c = Client::new(&mut sim, &pki, "a.example.test", 49_001, b"x".to_vec());
    for _ in 0..200 {
        sim.round();
        c.step(&mut sim);
        if sim.worker.stage().terminator().open() == 1 && c.state(&sim) == tcp::State::Established {
            break;
        }
    }
    assert!(c.tls.is_handshaking());
    sim.hosts[0].sockets.get_mut::<tcp::Socket>(c.h).abort();
    let gone = sim.run_until(2_000, |s| s.worker.stage().terminator().open() == 0);
    print_counters(&sim);
    assert!(gone, "the connection is released at the client's RST");
    assert_eq!(
        sim.worker.counters().events_of(Event::TerminateHandshake),
        1
    );
}

/// A CA made with rcgen, and leaves it signs (ECDSA P-256).
struct TestCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn test_ca(name: &str) -> TestCa {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let cert = p.self_signed(&key).expect("ca");
    TestCa { cert, key }
}

/// A leaf of `ca` with these SANs: its chain and key.
fn test_leaf(
    ca: &TestCa,
    sans: Vec<rcgen::SanType>,
) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.subject_alt_names = sans;
    let cert = p.signed_by(&key, &ca.cert, &ca.key).expect("leaf");
    (
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

/// Client certificate refusals in the engine: each reason counted once on its own
/// event and all on `terminate_tls_failed`; the verified client's bytes go through.
#[test]
fn client_certificates_are_refused_by_reason_and_counted() {
    use rustls::server::WebPkiClientVerifier;
    use sluice_dataplane::tables::client_auth::{provider_sha256, PinnedVerifier, Pins};
    const SPIFFE: &str = "spiffe://cluster.local/ns/default/sa/client";
    let ca = test_ca("sim CA");
    let other = test_ca("other CA");
    let dns = |n: &str| rcgen::SanType::DnsName(n.try_into().expect("dns"));
    let uri = |n: &str| rcgen::SanType::URI(n.try_into().expect("uri"));
    let (server_chain, server_key) = test_leaf(&ca, vec![dns("a.example.test")]);
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert.der().clone()).expect("root");
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .expect("verifier");
    let verifier = Arc::new(PinnedVerifier::new(
        webpki,
        Pins::new(&[SPIFFE.to_string()], vec![], vec![]),
        provider_sha256(),
    ));
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(server_chain, server_key)
        .expect("server");
    let client = |cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>| {
        let b = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots.clone());
        Arc::new(match cert {
            None => b.with_no_client_auth(),
            Some((chain, key)) => b.with_client_auth_cert(chain, key).expect("client cert"),
        })
    };
    let (mut sim, _p) = sim_snapshot(
        terminating_snapshot(Arc::new(server)),
        Faults::NONE,
        Faults::NONE,
        config(11, TerminateConfig::default()),
    );
    let mut backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 8, 64 * 1024);
    let mut rng = Rng::new(11);
    let payload = data(&mut rng, 20_000);
    let good = client(Some(test_leaf(&ca, vec![uri(SPIFFE)])));
    let stranger = client(Some(test_leaf(&other, vec![uri(SPIFFE)])));
    let unlisted = client(Some(test_leaf(&ca, vec![dns("client.example.test")])));
    let anonymous = client(None);
    let mut clients = vec![
        Client::with(&mut sim, good, "a.example.test", 41_001, payload.clone()),
        Client::with(
            &mut sim,
            stranger,
            "a.example.test",
            41_002,
            payload.clone(),
        ),
        Client::with(
            &mut sim,
            unlisted,
            "a.example.test",
            41_003,
            payload.clone(),
        ),
        Client::with(
            &mut sim,
            anonymous,
            "a.example.test",
            41_004,
            payload.clone(),
        ),
    ];
    run(&mut sim, &mut backends, &mut clients, 10_000);
    print_counters(&sim);
    assert_eq!(
        clients[0].got, payload,
        "the verified client's bytes, echoed"
    );
    for c in &clients[1..] {
        assert!(c.got.is_empty(), "a refused client gets nothing back");
    }
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TlsClientCertUntrusted), 1);
    assert_eq!(k.events_of(Event::TlsClientCertPinMismatch), 1);
    assert_eq!(k.events_of(Event::TlsClientCertMissing), 1);
    assert_eq!(k.events_of(Event::TerminateTlsFailed), 3);
    assert_eq!(k.events_of(Event::TerminateHandshake), 1);
}

/// A TLS 1.2 client against a TLS 1.3-only listener: `tls_version_refused`; a client
/// whose only suite the listener does not serve: `tls_no_shared_suite`.
#[test]
fn version_and_suite_refusals_are_counted() {
    let provider = rustls::crypto::ring::default_provider();
    let ck = rcgen::generate_simple_self_signed(vec!["a.example.test".to_string()])
        .expect("certificate");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).expect("root");
    let client = |p: rustls::crypto::CryptoProvider| {
        Arc::new(
            ClientConfig::builder_with_provider(Arc::new(p))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .expect("versions")
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        )
    };
    // The listener: TLS 1.3 only, or TLS 1.2 with ECDHE-ECDSA-AES128-GCM only.
    let server = |versions: &[&'static rustls::SupportedProtocolVersion]| {
        let mut p = provider.clone();
        p.cipher_suites.retain(|s| {
            s.tls13().is_some()
                || s.suite() == rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        });
        Arc::new(
            ServerConfig::builder_with_provider(Arc::new(p))
                .with_protocol_versions(versions)
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.clone()], key.clone_key())
                .expect("server"),
        )
    };
    let mut chacha = provider.clone();
    chacha.cipher_suites.retain(|s| {
        s.suite() == rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
    });
    for (versions, want) in [
        (&[&rustls::version::TLS13][..], Event::TlsVersionRefused),
        (&[&rustls::version::TLS12][..], Event::TlsNoSharedSuite),
    ] {
        let (mut sim, _p) = sim_snapshot(
            terminating_snapshot(server(versions)),
            Faults::NONE,
            Faults::NONE,
            config(12, TerminateConfig::default()),
        );
        let mut backends =
            EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 8, 64 * 1024);
        let mut clients = vec![Client::with(
            &mut sim,
            client(chacha.clone()),
            "a.example.test",
            41_101,
            vec![1],
        )];
        run(&mut sim, &mut backends, &mut clients, 5_000);
        print_counters(&sim);
        let k = sim.worker.counters();
        assert_eq!(k.events_of(want), 1, "{want:?}");
        assert_eq!(k.events_of(Event::TerminateTlsFailed), 1);
        assert!(clients[0].tls_error, "the client saw the alert");
    }
}
