//! `sluice-tests`: shared helpers for the integration tests in `tests/tests/`.
//!
//! - [`sim`]: the simulation harness: smoltcp hosts on in-memory wires (a `phy::Device`
//!   over the in-memory port), a virtual clock, a seeded fault injector (drop, duplicate,
//!   reorder, corrupt), and sluice's worker stepped on the same clock.
//! - [`ctl`]: `sluice ctl` against a running `sluice run`.
//! - [`fixtures`]: what several tests build alike: the simulated appliance's manifest,
//!   links and addresses, and hand-made ARP and ICMP frames.
//! - [`hello`]: TLS ClientHellos with a chosen SNI, in one record or several.
//! - [`apps`]: small applications on smoltcp sockets: a TCP client, an echo server, a tiny
//!   HTTP server and client, ping.
//! - [`http_apps`]: HTTP/1.1 keep-alive backends and a pipelining client on smoltcp
//!   sockets, for the per-request proxy's simulations.
//! - [`raw`]: hand-made TCP segments on a simulated wire (a client whose every segment
//!   the test writes) and an independent checksum check of frames.
//! - [`splice`]: the delayed-binding simulation fixture (manifests, appliance, echo
//!   backends, a runner of smoltcp clients) shared by the `sim_splice*` tests.
//! - [`stage`]: the balancer stage alone on two ports, and frames to call its
//!   `process_burst` with.
//! - [`sys`]: guards for kernel resources the tests create (TAP devices, network
//!   namespaces, child processes) that clean up on drop, also when a test fails (from
//!   `sluice-testkit`, shared with the benchmarks), and the DPDK case runner.
//!
//! Manifests are compiled into tables by `sluice_testkit::config`.
//! - [`kernel`]: real kernel clients and servers (python3 in network namespaces) around
//!   sluice's balancer running in the test process.
//! - [`kernel_tls`]: real TLS and HTTP programs for the delayed-binding kernel tests
//!   (self-signed certificates, `openssl s_server`, python3 TLS/HTTP servers and clients,
//!   a SYN flooder) and client bytes read from pcaps.
//! - [`tls_rig`]: the rig of the TLS kernel tests (sluice on two TAP ports, the
//!   namespaces, the inventory and routes the tests point at).

pub mod apps;
pub mod ctl;
pub mod fixtures;
pub mod hello;
pub mod http_apps;
pub mod kernel;
pub mod kernel_tls;
pub mod raw;
pub mod sim;
pub mod splice;
pub mod stage;
pub mod sys;
pub mod tls_rig;
