//! The contenders of the TLS termination benchmarks: nginx (`stream` and `http`), HAProxy
//! (`mode tcp` and `mode http`) as [`External`] processes in the proxy namespace, and
//! sluice as an [`InProcess`] worker on a TAP lane with a compiled Gateway configuration.
//!
//! Every contender: one worker / one thread pinned to the proxy core, TLS 1.3 only, the
//! run's certificate of one key type, session resumption on (nginx: a shared session
//! cache and its default session tickets; HAProxy: its defaults, a session cache and
//! tickets), one backend ([`BACKEND`], `a`), idle timeouts of an hour (so the memory
//! benchmark's idle connections stay), accept backlog 4096, and as many connections as
//! the open-file limit they inherit allows ([`nofile_limit`]: HAProxy's `maxconn`,
//! nginx's `worker_connections`).
//!
//! HTTP contenders talk HTTP/1.1 to the client and plain HTTP to the backend without
//! upstream keep-alive (nginx's default `proxy_http_version 1.0`; HAProxy's default):
//! the backend answers `Connection: close`, so no contender could reuse a backend
//! connection, and each opens one per client connection, as the stream contenders do.
//! nginx buffers responses in memory only (`proxy_max_temp_file_size 0`: never to disk).

use super::certs::Cert;
use super::client::Protocol;
use crate::sni_load::net::{self, TapLane};
use crate::sni_load::{self, External, InProcess, InProcessRun, Routing};
use base64::Engine as _;
use std::net::SocketAddrV4;
use std::path::Path;

/// The backend every contender sends to: index 0 of [`net::BACKENDS`] (`a`, port 8001).
pub const BACKEND: usize = 0;

/// The name of the backend that answers.
pub fn backend_name() -> &'static str {
    net::BACKENDS[BACKEND].0
}

/// The hard limit on open files of this process, which the contenders inherit: it caps
/// their connections (a stream proxy needs two descriptors per connection). Raising it
/// takes CAP_SYS_RESOURCE, which a container may not have.
pub fn nofile_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(1 << 20)
}

/// The most connections nginx carrying `proto` can hold open with `nofile`
/// descriptors: two per connection for a stream proxy (client and backend side), one
/// for an idle HTTP one (its backend connection closed after the answer), less a margin
/// for listeners, logs and backend connections in flight.
pub fn nginx_max_open(proto: Protocol, nofile: u64) -> u64 {
    match proto {
        Protocol::Stream => nofile.saturating_sub(200) / 2,
        Protocol::Http => nofile.saturating_sub(400),
    }
}

/// HAProxy's `maxconn` (the most connections it holds open) with `nofile` descriptors:
/// it reserves two per connection in every mode and refuses to start when they are not
/// there; at least 100, at most 60000.
pub fn haproxy_maxconn(nofile: u64) -> u64 {
    (nofile.saturating_sub(200) / 2).clamp(100, 60_000)
}

fn front() -> SocketAddrV4 {
    SocketAddrV4::new(net::PROXY_FRONT, net::FRONT_PORT)
}

/// The nginx configuration of a TLS-terminating contender: `stream` (`proxy_pass` of the
/// decrypted bytes) or `http` (`location / { proxy_pass http://backend; }`), with
/// `nofile` descriptors (`worker_rlimit_nofile`, `worker_connections`).
pub fn nginx_config(dir: &Path, cert: &Cert, proto: Protocol, nofile: u64) -> String {
    let backend = net::backend_peer(BACKEND);
    let tls = format!(
        "ssl_certificate {crt};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        ssl_session_cache shared:TLS:64m;
        ssl_session_timeout 1h;{verify}",
        crt = cert.cert_file.display(),
        key = cert.key_file.display(),
        verify = cert.client_auth.as_ref().map_or(String::new(), |a| format!(
            "
        ssl_verify_client on;
        ssl_verify_depth 2;
        ssl_client_certificate {};",
            a.ca_file.display()
        ))
    );
    let (module, block) = match proto {
        Protocol::Stream => (
            format!("load_module {};\n", sni_load::proxy::NGINX_STREAM_MODULE),
            format!(
                "stream {{
    upstream backend {{
        server {backend};
    }}
    server {{
        listen {front} ssl backlog=4096;
        {tls}
        proxy_connect_timeout 5s;
        proxy_timeout 1h;
        proxy_pass backend;
    }}
}}
",
                front = front()
            ),
        ),
        Protocol::Http => (
            String::new(),
            format!(
                "http {{
    access_log off;
    keepalive_timeout 1h;
    keepalive_requests 1000000;
    proxy_connect_timeout 5s;
    proxy_read_timeout 1h;
    proxy_send_timeout 1h;
    proxy_buffer_size 16k;
    proxy_buffers 8 64k;
    proxy_max_temp_file_size 0;
    upstream backend {{
        server {backend};
    }}
    server {{
        listen {front} ssl backlog=4096;
        {tls}
        location / {{
            proxy_pass http://backend;
        }}
    }}
}}
",
                front = front()
            ),
        ),
    };
    format!(
        "# generated by sluice-perf tls_load: TLS termination, one worker
{module}worker_processes 1;
worker_rlimit_nofile {nofile};
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections {nofile};
}}

{block}",
        dir = dir.display()
    )
}

/// The HAProxy configuration of a TLS-terminating contender (`mode tcp` or `mode http`),
/// with as many connections as `nofile` descriptors allow ([`haproxy_maxconn`]).
pub fn haproxy_config(cert: &Cert, proto: Protocol, nofile: u64) -> String {
    let maxconn = haproxy_maxconn(nofile);
    let (mode, keepalive) = match proto {
        Protocol::Stream => ("tcp", ""),
        Protocol::Http => (
            "http",
            "    timeout http-keep-alive 1h\n    timeout http-request 10s\n",
        ),
    };
    format!(
        "# generated by sluice-perf tls_load: TLS termination, one thread
global
    nbthread 1
    maxconn {maxconn}
    ulimit-n {nofile}
    ssl-default-bind-options ssl-min-ver TLSv1.3

defaults
    mode {mode}
    maxconn {maxconn}
    timeout connect 5s
    timeout client 1h
    timeout server 1h
{keepalive}
frontend tls
    bind {front} ssl crt {crt}{verify} backlog 4096
    default_backend be

backend be
    server s0 {backend}
",
        front = front(),
        crt = cert.combined_file.display(),
        verify = cert.client_auth.as_ref().map_or(String::new(), |a| format!(
            " verify required ca-file {}",
            a.ca_file.display()
        )),
        backend = net::backend_peer(BACKEND),
    )
}

/// nginx terminating TLS (`nginx-stream` or `nginx-http`).
pub fn nginx(cert: &Cert, proto: Protocol) -> External {
    let cert = cert.clone();
    let name = match proto {
        Protocol::Stream => "nginx-stream",
        Protocol::Http => "nginx-http",
    };
    External::new(
        name,
        move |dir| {
            let text = nginx_config(dir, &cert, proto, nofile_limit());
            ("nginx.conf".into(), text)
        },
        sni_load::nginx_command,
    )
    .with_routing(Routing::Terminated(backend_name().into()))
}

/// HAProxy terminating TLS (`haproxy-tcp` or `haproxy-http`).
pub fn haproxy(cert: &Cert, proto: Protocol) -> External {
    let cert = cert.clone();
    let name = match proto {
        Protocol::Stream => "haproxy-tcp",
        Protocol::Http => "haproxy-http",
    };
    External::new(
        name,
        move |_| {
            let text = haproxy_config(&cert, proto, nofile_limit());
            ("haproxy.cfg".into(), text)
        },
        sni_load::haproxy_command,
    )
    .with_routing(Routing::Terminated(backend_name().into()))
}

/// Which API sluice's HTTP contender is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpApi {
    /// An Istio Gateway server (`HTTPS`, `tls.mode: SIMPLE`, `credentialName`) and a
    /// VirtualService `http` route: what the control plane routes by Host today.
    Istio,
    /// A Gateway API `HTTPS` listener (`Terminate`, `certificateRefs`) and an HTTPRoute
    /// (not implemented by the control plane yet: reported as not served).
    GatewayApi,
}

/// The namespace of sluice's objects.
const NS: &str = "tls-bench";
/// The Secret holding the certificate (and `ca.crt`, the client CA, with client
/// authentication).
const SECRET: &str = "bench-cert";
/// The ConfigMap holding the client CA (Gateway API `frontendValidation`).
const CLIENT_CA: &str = "bench-client-ca";

/// sluice's manifests for a TLS-terminating contender, on the lane VIP: the Appliance of
/// the benchmarks, a `kubernetes.io/tls` Secret made of `cert`'s PEM files, the backend's
/// Service and Pod (on the lane's backend address) and
///
/// - stream: a Gateway API Gateway with a `TLS` listener in mode `Terminate`
///   (`certificateRefs` to the Secret) and a TLSRoute to the backend;
/// - HTTP: see [`HttpApi`].
pub fn sluice_manifests(cert: &Cert, proto: Protocol, api: HttpApi) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let (bname, bport) = net::BACKENDS[BACKEND];
    let host = super::SERVER_NAME;
    let vip = net::LANE_VIP;
    let port = net::FRONT_PORT;
    let mut y = sluice_testkit::manifests::bench_appliance(vip, None);
    y.push_str(&sluice_testkit::manifests::namespace(NS));
    y.push_str(&format!(
        "---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {{name: {SECRET}, namespace: {NS}}}
data:
  tls.crt: {crt}
  tls.key: {key}
{ca}",
        crt = b64(&cert.cert_pem),
        key = b64(&cert.key_pem),
        ca = cert
            .client_auth
            .as_ref()
            .map_or(String::new(), |a| format!("  ca.crt: {}\n", b64(&a.ca_pem)))
    ));
    if let Some(a) = &cert.client_auth {
        let pem: String = a.ca_pem.lines().map(|l| format!("    {l}\n")).collect();
        y.push_str(&format!(
            "---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {CLIENT_CA}, namespace: {NS}}}
data:
  ca.crt: |
{pem}"
        ));
    }
    // Client certificates required: Gateway API's frontend validation, Istio's MUTUAL.
    let (validation, istio_mode) = match cert.client_auth {
        Some(_) => (
            format!(", frontendValidation: {{caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: {CLIENT_CA}}}]}}"),
            "MUTUAL",
        ),
        None => (String::new(), "SIMPLE"),
    };
    y.push_str(&sluice_testkit::manifests::service_with_pods(
        NS,
        bname,
        bport,
        [net::backend_tap(BACKEND).ip()],
    ));
    let gateway_api = |protocol: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {NS}}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {vip}}}]
  listeners:
  - name: tls
    port: {port}
    protocol: {protocol}
    hostname: {host}
    tls: {{mode: Terminate, certificateRefs: [{{kind: Secret, name: {SECRET}}}]{validation}}}
"
        )
    };
    match (proto, api) {
        (Protocol::Stream, _) => {
            y.push_str(&gateway_api("TLS"));
            y.push_str(&format!(
                "---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: to-{bname}, namespace: {NS}}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames: [{host}]
  rules: [{{backendRefs: [{{name: {bname}, port: {bport}}}]}}]
"
            ));
        }
        (Protocol::Http, HttpApi::GatewayApi) => {
            y.push_str(&gateway_api("HTTPS"));
            y.push_str(&format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: to-{bname}, namespace: {NS}}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames: [{host}]
  rules: [{{backendRefs: [{{name: {bname}, port: {bport}}}]}}]
"
            ));
        }
        (Protocol::Http, HttpApi::Istio) => {
            y.push_str(&format!(
                "---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {NS}}}
spec:
  selector: {{app: sluice}}
  servers:
  - port: {{number: {port}, name: https, protocol: HTTPS}}
    hosts: [{host}]
    tls: {{mode: {istio_mode}, credentialName: {SECRET}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: to-{bname}, namespace: {NS}}}
spec:
  hosts: [{host}]
  gateways: [gw]
  http:
  - route:
    - destination: {{host: {bname}.{NS}.svc.cluster.local, port: {{number: {bport}}}}}
"
            ));
        }
    }
    y
}

/// Compiles `manifests` the way a reload does; the snapshot, or why it cannot serve the
/// benchmark: the errors, or what the control plane leaves out of the tables (a listener
/// or route it does not serve gets no traffic, so the probe could only fail).
pub fn sluice_snapshot(
    manifests: &str,
) -> Result<sluice_dataplane::tables::snapshot::Snapshot, String> {
    let built = sluice_testkit::config::try_build("tls.yaml", manifests)
        .map_err(|e| format!("config rejected: {}", sluice_testkit::config::brief(&e)))?;
    let left_out: Vec<String> = built
        .diagnostics
        .iter()
        .filter(|d| d.is_not_served())
        .map(|d| {
            format!(
                "{}{}: {}",
                d.object.as_deref().unwrap_or("?"),
                d.path.as_deref().map_or(String::new(), |p| format!(" {p}")),
                d.message
            )
        })
        .collect();
    if left_out.is_empty() {
        Ok(built.snapshot)
    } else {
        Err(format!(
            "the control plane does not serve the benchmark's configuration: {}",
            left_out.join("; ")
        ))
    }
}

/// sluice terminating TLS (`sluice-stream` or `sluice-http`): its worker on the TAP lane
/// serving [`sluice_manifests`] (`spin`: busy-polling).
pub fn sluice(cert: &Cert, proto: Protocol, api: HttpApi, spin: bool) -> InProcess {
    let name = match proto {
        Protocol::Stream => "sluice-stream",
        Protocol::Http => "sluice-http",
    };
    let manifests = sluice_manifests(cert, proto, api);
    InProcess::new(
        name,
        Routing::Terminated(backend_name().into()),
        sni_load::sluice::cpu_method(spin),
        move |lane: &TapLane| -> Result<InProcessRun, String> {
            let snapshot = sluice_snapshot(&manifests)?;
            sni_load::sluice::start(lane, snapshot, spin)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls_load::certs::{Certs, KeyType};
    use rustls::pki_types::CertificateDer;

    fn fake_cert() -> Cert {
        Cert {
            key_type: KeyType::EcdsaP256,
            cert_file: "/c/ecdsa.crt".into(),
            key_file: "/c/ecdsa.key".into(),
            combined_file: "/c/ecdsa.pem".into(),
            cert_pem: String::new(),
            key_pem: String::new(),
            der: CertificateDer::from(vec![0u8]),
            client_auth: None,
        }
    }

    #[test]
    fn peer_configs() {
        let c = fake_cert();
        let s = nginx_config(Path::new("/w"), &c, Protocol::Stream, 20_000);
        assert!(s.contains("worker_connections 20000;"));
        assert!(s.contains("load_module"));
        assert!(s.contains("listen 10.95.1.2:443 ssl backlog=4096;"));
        assert!(s.contains("ssl_certificate /c/ecdsa.crt;"));
        assert!(s.contains("stream {"));
        assert!(s.contains("server 10.95.2.11:8001;"));
        let h = nginx_config(Path::new("/w"), &c, Protocol::Http, 20_000);
        assert!(!h.contains("load_module"));
        assert!(h.contains("proxy_pass http://backend;"));
        let t = haproxy_config(&c, Protocol::Stream, 20_000);
        assert!(t.contains("maxconn 9900"));
        assert!(t.contains("ulimit-n 20000"));
        assert!(t.contains("mode tcp"));
        assert!(t.contains("bind 10.95.1.2:443 ssl crt /c/ecdsa.pem backlog 4096"));
        assert!(haproxy_config(&c, Protocol::Http, 20_000).contains("mode http"));
        // Client certificates required and verified against the client CA.
        let mut m = fake_cert();
        m.client_auth = Some(crate::tls_load::certs::ClientAuth {
            ca_file: "/c/client-ca.crt".into(),
            ca_pem: String::new(),
            cert_der: CertificateDer::from(vec![0u8]),
            key_pem: String::new(),
        });
        let n = nginx_config(Path::new("/w"), &m, Protocol::Http, 20_000);
        assert!(n.contains("ssl_verify_client on;"));
        assert!(n.contains("ssl_client_certificate /c/client-ca.crt;"));
        assert!(!nginx_config(Path::new("/w"), &c, Protocol::Http, 20_000).contains("verify"));
        let t = haproxy_config(&m, Protocol::Stream, 20_000);
        assert!(t.contains("ssl crt /c/ecdsa.pem verify required ca-file /c/client-ca.crt backlog"));
    }

    #[test]
    fn sluice_manifests_load_and_compile() {
        // The configurations load and compile without errors; whether the control plane
        // serves them depends on TLS termination (issue #31), so only errors fail here.
        // Real certificates (`openssl`, from scripts/setup): the control plane may read them.
        let certs = match Certs::generate(&[KeyType::EcdsaP256, KeyType::Rsa2048]) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        for c in &certs.certs {
            check_compiles(c);
        }
        // With client authentication (the ConfigMap, `ca.crt`, MUTUAL, frontendValidation).
        let mut mutual = certs;
        mutual.with_client_auth().expect("client certificates");
        for c in &mutual.certs {
            check_compiles(c);
        }
    }

    fn check_compiles(c: &Cert) {
        for (proto, api) in [
            (Protocol::Stream, HttpApi::Istio),
            (Protocol::Http, HttpApi::Istio),
            (Protocol::Http, HttpApi::GatewayApi),
        ] {
            let y = sluice_manifests(c, proto, api);
            if let Err(e) = sluice_testkit::config::try_build("tls.yaml", &y) {
                panic!("{proto:?} {api:?}: {e:#?}\n{y}");
            }
        }
    }
}
