//! Manifests -> IR -> dataplane tables. This module resolves the validated objects into
//! the [`ir::Ir`]: Istio servers and Gateway API listeners become listeners bound to
//! addresses; VirtualService / TLSRoute / TCPRoute / UDPRoute / Consul TCPRoute rules
//! become routes whose backends are resolved to endpoints through Services,
//! EndpointSlices, Endpoints or selected Pods; pods become workloads.
//!
//! Binding rules implemented here:
//! - Istio: a VirtualService binds to a Gateway server when it names the gateway in
//!   `gateways` (`[ns/]name`; `mesh` is ignored on an appliance), it is exported to the
//!   gateway's namespace (`exportTo`: empty or `*` = everywhere, `.` = its own namespace),
//!   its namespace is allowed by the server host's `ns/` part (`*` any, `.` the
//!   gateway's), and one of its hosts matches a server host (wildcards either way).
//! - Gateway API: a route attaches to the listeners its parentRef selects (sectionName,
//!   port), of the right protocol (TLSRoute: TLS, TCPRoute: TCP, UDPRoute: UDP), whose
//!   `allowedRoutes` admit its namespace and kind; TLSRoute and HTTPRoute hostnames are
//!   narrowed to their intersection with the listener hostname, and a route without any
//!   intersection is not attached (warning). HTTPRoutes (HTTP and HTTPS listeners) are
//!   merged per hostname into one table of matches in the spec's precedence order.
//! - HTTP routes (both kinds) compile to `sluice_dataplane::tables::http::HttpRoutes`
//!   (`http`), matched per request by the proxy; a listener whose every route decides
//!   once per connection exactly is left to splice (`ListenerEntry::proxy`).
//!
//! Files: this one holds the entry points and the per-build context with its lookups;
//! `resolve` turns a Service reference into endpoints, `istio` binds VirtualServices to
//! Istio Gateway servers, `gateway_api` attaches routes to Gateway API listeners.

pub mod addresses;
pub mod backends;
pub mod build;
pub mod certs;
mod ctx;
mod gateway_api;
pub mod hostname;
pub mod http;
pub mod ir;
mod istio;
mod merge;
pub mod policy;
pub mod report;
mod resolve;
pub mod served;
pub mod snapshot;
pub mod status;
pub mod tables;
pub mod tls;
mod to_ir;

pub use build::{build, build_paths, check_machine, diagnostics, Built, PolicyReport};

pub use ctx::{BuildStats, CLUSTER_DOMAIN, DEFAULT_MAGLEV_TABLE_SIZE};
pub use istio::{istio_bound_host, RETRY_ON};
pub use to_ir::{build_ir, build_ir_with_stats};
