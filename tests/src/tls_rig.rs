//! The kernel rig of the TLS tests (`tests/kernel_splice.rs`, `tests/kernel_terminate.rs`):
//! sluice's `Worker<Balancer>` in the test process on two fresh TAP ports, the namespaces
//! of [`crate::kernel`] around it (client 10.77.0.1 -> VIP 10.77.0.10; backends 10.78.0.11,
//! .12, .13), the inventory the tests' routes point at, and the TLS programs' helpers.
//! The tests using it run one at a time (a process-wide lock), since they share the
//! machine's few cores.

use crate::kernel::{Balance, Py, Topology, BACKENDS, VIP};
use crate::kernel_tls::{
    require_programs, wait_listening, Certs, HTTP_SERVER, TLS_CLIENT, TLS_SERVER,
};
use crate::sys::{can_admin_net, unique_name};
use sluice_dataplane::balancer::BalancerConfig;
use sluice_dataplane::port::{tap, Opened, Pool};
use sluice_dataplane::stats::Counters;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The client's address.
pub const CLIENT: &str = crate::kernel::CLIENT;
/// The third backend (weight 0), added to the backend namespace by the tests that use it.
pub const BACKEND_C: &str = "10.78.0.13";
/// Where the TLS backends listen.
pub const TLS_PORT: u16 = 8443;
/// Where the HTTP backends listen.
pub const HTTP_PORT: u16 = 8080;
/// Longest wait for one agent command.
pub const AGENT_LIMIT: Duration = Duration::from_secs(120);
/// The pcaps of real ClientHellos (`/work/shared/testdata/tls/README.md`).
pub const TESTDATA: &str = "/work/shared/testdata/tls";

static SERIAL: Mutex<()> = Mutex::new(());

/// sluice on two fresh TAP ports serving `config`, and the namespaces around it. Fields
/// drop in order: the namespaces (after the programs in them, which the tests hold as
/// locals declared later), then the workers.
pub struct Rig {
    /// The namespaces.
    pub topo: Topology,
    /// The dataplane.
    pub balance: Balance,
    /// The buffers (every one must be back at the end).
    pub pool: Pool,
    /// The backend TAP device's name.
    pub backend_if: String,
    _serial: MutexGuard<'static, ()>,
}

impl Rig {
    /// sluice (one worker) serving `config`, and the namespaces around it.
    pub fn start(config: &str) -> Rig {
        Rig::with_workers(config, 1)
    }

    /// [`Rig::start`] with `workers` workers, each on its own queue of both TAP ports.
    pub fn with_workers(config: &str, workers: u16) -> Rig {
        let cfg = BalancerConfig {
            flow_capacity: 16 * 1024,
            ..BalancerConfig::default()
        };
        Rig::with_config(config, workers, cfg)
    }

    /// [`Rig::with_workers`] with the balancer settings `cfg`.
    pub fn with_config(config: &str, workers: u16, cfg: BalancerConfig) -> Rig {
        assert!(
            can_admin_net(),
            "kernel tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
        );
        require_programs(&["openssl", "curl", "python3", "ss"]);
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = sluice_testkit::config::snapshot("kernel.yaml", config);
        let pool = Pool::new(8192);
        let (out_if, in_if) = (unique_name("kso"), unique_name("ksi"));
        let open = |name: &str, ifname: &str| -> Opened {
            tap::open(name, ifname, workers, &pool).unwrap_or_else(|e| panic!("TAP {ifname}: {e}"))
        };
        let (outside, inside) = (open("outside", &out_if), open("inside", &in_if));
        let balance = Balance::start_with(outside, inside, usize::from(workers), snapshot, cfg);
        let topo = Topology::new(&out_if, &in_if);
        Rig {
            topo,
            balance,
            pool,
            backend_if: in_if,
            _serial: serial,
        }
    }

    /// Adds [`BACKEND_C`] to the backend namespace.
    pub fn add_backend_c(&self) {
        self.topo.backend.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{BACKEND_C}/24"),
            "dev",
            &self.backend_if,
        ]);
    }

    /// The TLS client agent in the client namespace, verifying against `certs`.
    pub fn tls_client(&self, certs: &Certs) -> Py {
        let bundle = certs.bundle();
        Py::start(
            &self.topo.client,
            TLS_CLIENT,
            &[CLIENT, VIP, bundle.to_str().expect("utf-8 path")],
        )
    }

    /// The python TLS servers: `name` on its backend address, port [`TLS_PORT`].
    pub fn tls_servers(&self, certs: &Certs, names: &[&str]) -> Py {
        let port = TLS_PORT.to_string();
        let specs: Vec<String> = names.iter().map(|n| format!("{n}={}", addr(n))).collect();
        let mut args = vec![port.as_str(), certs.dir_str()];
        args.extend(specs.iter().map(String::as_str));
        let mut py = Py::start(&self.topo.backend, TLS_SERVER, &args);
        assert_eq!(py.line(Duration::from_secs(10)), "ready", "TLS servers");
        py
    }

    /// The python HTTP servers ([`HTTP_SERVER`]) on backends `a` and `b`, port
    /// [`HTTP_PORT`], once both listen.
    pub fn http_servers(&self) -> Py {
        let port = HTTP_PORT.to_string();
        let mut servers = Py::start(
            &self.topo.backend,
            HTTP_SERVER,
            &[&port, BACKENDS[0], BACKENDS[1]],
        );
        assert_eq!(servers.line(Duration::from_secs(10)), "ready");
        wait_listening(&self.topo.backend, BACKENDS[1], HTTP_PORT);
        servers
    }

    /// Gives the devices back, stops the workers, closes the ports and deletes the
    /// namespaces (the programs in them must have ended); checks that every buffer went
    /// back to the pool and returns the final counters.
    pub fn finish(self) -> Counters {
        let Rig {
            topo,
            balance,
            pool,
            backend_if: _,
            _serial,
        } = self;
        topo.give_back();
        let c = balance.finish();
        drop(topo);
        assert_eq!(pool.in_use(), 0, "every buffer back in the pool");
        c
    }
}

/// An address in the backend network that nobody holds (ARP goes unanswered).
pub const BACKEND_SILENT: &str = "10.78.0.14";

/// The backend address of `name` (`a`, `b`, `c`; `d` is [`BACKEND_SILENT`]).
pub fn addr(name: &str) -> &'static str {
    match name {
        "a" => BACKENDS[0],
        "b" => BACKENDS[1],
        "c" => BACKEND_C,
        "d" => BACKEND_SILENT,
        _ => panic!("no backend {name}"),
    }
}

/// Namespace `ks`, Services and Pods `a`, `b`, `c`, `d` (each Service's port and target
/// port `port`), and a NetworkPolicy that admits the client network to them.
pub fn inventory(port: u16) -> String {
    let mut y = String::from(
        r#"apiVersion: v1
kind: Namespace
metadata: {name: ks}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: clients, namespace: ks}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress: [{from: [{ipBlock: {cidr: 10.77.0.0/24}}]}]
"#,
    );
    for n in ["a", "b", "c", "d"] {
        y.push_str(&format!(
            r#"---
apiVersion: v1
kind: Service
metadata: {{name: {n}, namespace: ks}}
spec: {{selector: {{app: {n}}}, ports: [{{port: {port}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {n}-0, namespace: ks, labels: {{app: {n}}}}}
status: {{podIP: {ip}}}
"#,
            ip = addr(n)
        ));
    }
    y
}

/// A Gateway API Gateway on the VIP with a TLS Passthrough listener `tls` on 443.
pub const GATEWAY_TLS: &str = r#"---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: ks}
spec:
  gatewayClassName: sluice
  addresses: [{type: IPAddress, value: 10.77.0.10}]
  listeners:
  - {name: tls, port: 443, protocol: TLS, tls: {mode: Passthrough}}
"#;

/// A TLSRoute on the Gateway's `tls` listener: `host` to the weighted backends, `port`.
pub fn tls_route(name: &str, host: &str, backends: &[(&str, u32)], port: u16) -> String {
    let refs: Vec<String> = backends
        .iter()
        .map(|(b, w)| format!("{{name: {b}, port: {port}, weight: {w}}}"))
        .collect();
    format!(
        r#"---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: {name}, namespace: ks}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames: [{host}]
  rules: [{{backendRefs: [{refs}]}}]
"#,
        refs = refs.join(", ")
    )
}
