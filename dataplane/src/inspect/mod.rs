//! First-payload inspection: the parsers that read the first bytes of a connection to route
//! it by name.
//!
//! - [`tls`]: the TLS ClientHello (SNI, ALPN, supported versions, ECH presence).
//! - [`http`]: the HTTP/1.x request head (method, target, `Host`), and the HTTP/2
//!   prior-knowledge preface.
//! - [`name`]: the validated, lowercased host names both of them produce.
//!
//! [`classify`] is the entry point a listener calls with the bytes received so far.
//!
//! All parsers share one contract: they take a contiguous prefix of the stream (the caller
//! appends what arrives and calls again), never panic, never read out of bounds, never
//! allocate, give a verdict that does not change once given, and bound what the caller has
//! to buffer (16 KiB).

pub mod http;
pub mod name;
pub mod tls;

mod classify;
pub use classify::{classify, Inspected};

#[cfg(test)]
mod tests;
