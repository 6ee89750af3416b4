//! # sluice-ctrl
//!
//! The control plane: it loads Kubernetes-style manifests, validates them, compiles them
//! into the dataplane's tables and drives the dataplane.
//!
//! - [`model`]: serde types of every accepted kind (DESIGN.md §5) and the decoder.
//! - [`load`]: files, directories, stdin, multi-document YAML/JSON with positions.
//! - [`diag`]: field paths, positions and `file:line:col: Kind ns/name: path: message`.
//! - [`validate`]: cross-object checks (references, TLS modes, syntax, conflicts).
//! - [`compile`]: the resolved IR (listeners, routes, backends, workloads, policies), and
//!   [`compile::build()`]: loaded manifests -> IR, tables snapshot and run plan in one call,
//!   with every diagnostic; its summary and table dumps.
//! - [`explain`]: trace one hypothetical connection (`sluice explain`).
//! - [`stdout`]: command output that survives a closed pipe.
//! - `synth` (cargo feature `bench`): generated configurations of many listeners and
//!   routes, for scale tests and benchmarks; not part of the product.
//! - [`plan`]: the Appliance translated into what `sluice run` starts (ports, cores,
//!   routes, limits), or the embedded default.
//! - [`machine`]: the run plan against this machine (cores allowed, memory available,
//!   port devices), checked by `sluice check` and before `sluice run` starts.
//! - [`run`]: `sluice run`: ports opened and pinned workers started as the plan says,
//!   serving the compiled tables.
//! - [`instance`]: what a running instance is, shared by the control and admin threads;
//!   its counters at one moment.
//! - [`sources`]: what asks for a reload: configuration files changing, SIGHUP, the admin
//!   socket.
//! - [`reload`]: one reload attempt: compile, check the Appliance is unchanged, publish a
//!   new tables generation or keep the running one.
//! - [`rule_counters`]: the HTTP rules' counter slots, kept by name across reloads, and
//!   their per-rule counts summed over the workers.
//! - [`api`]: the admin socket of a running instance and `sluice ctl`, its client.

pub mod api;
pub mod compile;
pub mod diag;
pub mod explain;
pub mod instance;
pub mod load;
pub mod machine;
pub mod model;
pub mod plan;
pub mod reload;
pub mod rule_counters;
pub mod run;
pub mod sources;
pub mod stdout;
#[cfg(feature = "bench")]
pub mod synth;
pub mod validate;
