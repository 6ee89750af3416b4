//! The admin API: a unix socket served by the running `sluice run`, and `sluice ctl`, its
//! client.
//!
//! Protocol: the client connects, writes one command line, and reads one JSON document
//! followed by a newline; the server then closes the connection. Commands:
//!
//! - `stats`: the same counters as the once-per-second summary: per port (device counters
//!   and what the workers moved), per worker (packets, bytes, flows, events, drops by
//!   reason, empty polls, cycles per packet) and totals.
//! - `neighbours`: the neighbour cache's resolved entries, `[{ip, mac, source}]`, where
//!   `source` is `static` (`spec.neighbours`), `resolved` (an answer to sluice's own
//!   request) or `learned` (what the neighbour sent unasked).
//! - `reload`: asks the control thread to reload the configuration and answers after the
//!   attempt: `{ok, generation, errors: [...], trigger, time, unix_time, took_ms}`.
//! - `status`: the tables generation, the configuration paths, the last reload (time,
//!   trigger, ok or its errors), generations waiting to be freed, flows per worker and
//!   uptime.
//!
//! Each connection is served on its own short-lived thread (at most
//! [`MAX_CONNECTIONS`] at once), so a slow reload does not hold `stats` up.

//! - [`server`]: the socket, served by `sluice run` on its own thread.
//! - [`client`]: `sluice ctl` and the human forms of the answers.

pub mod client;
pub mod server;

pub use client::{ctl, human_reload, human_stats, human_status, query, query_with_timeout};
pub use client::{CtlArgs, CtlCommand, CtlError};
pub use server::{serve, Access, MAX_CONNECTIONS, RELOAD_TIMEOUT};
