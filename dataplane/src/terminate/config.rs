//! A worker's termination settings and the connection cap they make.

/// Termination settings of a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateConfig {
    /// Terminated connections a worker holds at once.
    pub max_connections: usize,
    /// Memory a worker may spend on terminated connections (TCP buffers and TLS state,
    /// as [`TerminateConfig::connection_bytes`] estimates them).
    pub memory_bytes: usize,
    /// Receive and send buffer of the client's TCP connection, each.
    pub client_buffer: usize,
    /// Receive and send buffer of the backend's TCP connection, each.
    pub backend_buffer: usize,
    /// Time from the SYN to the end of the TLS handshake; and the time an HTTP request
    /// head has from its first byte to its last (then `408`).
    pub handshake_ms: u64,
    /// A connection with no packet either way for this long is closed.
    pub idle_ms: u64,
    /// Time a backend has to accept the connection before the next one is tried.
    pub connect_ms: u64,
    /// Backends tried for one connection.
    pub backend_tries: u8,
    /// TCP keep-alive towards the client and the backend (0: off).
    pub keep_alive_ms: u64,
    /// The largest HTTP request head (and the client buffer of the HTTP proxy); larger
    /// heads get `431`. At most [`crate::http::MAX_HEAD_LEN`].
    pub head_bytes: usize,
    /// Connections per shard (one smoltcp interface and socket set): smoltcp walks every
    /// socket of a set each time it polls one, so small shards keep a packet's cost
    /// flat (2: the figures in `perf/NOTES.md`, bench_http_peers 2026-12-05).
    pub shard_connections: usize,
    /// IP MTU of the packets sluice writes.
    pub mtu: usize,
    /// Seeds the TCP initial sequence numbers (mixed with the clock).
    pub seed: u64,
    /// Idle HTTP backend connections a worker keeps for any client's next request to
    /// the same backend (0: none kept past their client connection).
    pub pool_connections: usize,
    /// A pooled backend connection unused this long is closed (kept below backends'
    /// keep-alive timeouts; a request that finds its pooled connection closed under it
    /// is retried once when it has no body).
    pub pool_idle_ms: u64,
    /// Mirrored request copies a worker has in flight at once (more are not sent, and
    /// counted).
    pub mirror_connections: usize,
}

/// Memory rustls keeps for an established connection, as the cap counts it (measured
/// with `bench_tls_memory`: the figure is in `perf/NOTES.md`).
pub const TLS_STATE_BYTES: usize = 12 * 1024;

impl Default for TerminateConfig {
    fn default() -> Self {
        TerminateConfig {
            max_connections: 16 * 1024,
            memory_bytes: 512 << 20,
            client_buffer: 8 * 1024,
            backend_buffer: 8 * 1024,
            handshake_ms: 10_000,
            idle_ms: 300_000,
            connect_ms: 3_000,
            backend_tries: 3,
            keep_alive_ms: 60_000,
            head_bytes: 16 * 1024,
            shard_connections: 2,
            mtu: 1500,
            seed: 0x7e4d_5eed,
            pool_connections: 256,
            pool_idle_ms: 10_000,
            mirror_connections: 256,
        }
    }
}

impl TerminateConfig {
    /// Memory one connection is counted for: four TCP buffers and the TLS state.
    pub fn connection_bytes(&self) -> usize {
        2 * self.client_buffer + 2 * self.backend_buffer + TLS_STATE_BYTES
    }

    /// Backend connections without a client connection a worker holds at most: pooled
    /// ones and mirrored copies.
    pub fn legs(&self) -> usize {
        self.pool_connections + self.mirror_connections
    }

    /// Connections a worker holds at once: the connection cap or what the memory cap
    /// pays for (after the [`legs`](TerminateConfig::legs)' two TCP buffers each),
    /// whichever is lower.
    pub fn capacity(&self) -> usize {
        let legs = self.legs() * 2 * self.backend_buffer;
        self.max_connections
            .min(self.memory_bytes.saturating_sub(legs) / self.connection_bytes().max(1))
    }
}
