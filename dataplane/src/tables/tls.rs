//! TLS termination settings of a listener, built by the control plane and read by the
//! terminate engine ([`crate::terminate`]): the rustls server configuration (its
//! certificate resolver picks by SNI, ALPN, session tickets) and what follows the
//! handshake.

use std::sync::Arc;

/// What a terminating listener needs at handshake time.
#[derive(Debug)]
pub struct TlsListener {
    /// The rustls server configuration: certificates (resolved by SNI), protocol
    /// versions, ALPN, tickets. Shared by every connection the listener accepts in this
    /// tables generation; a connection keeps the one it started with across swaps.
    pub config: Arc<rustls::ServerConfig>,
    /// The decrypted stream is HTTP (routed by Host, and path) rather than opaque TCP
    /// (routed by SNI, or port).
    pub http: bool,
}
