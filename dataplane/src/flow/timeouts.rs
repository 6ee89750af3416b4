//! How long a flow lives without packets, per connection state (Linux conntrack's
//! defaults), and how long a half-open one lives while its table is under pressure.

use super::tcp::TcpState;

/// How long a half-open TCP flow (SYN_SENT, SYN_RECV) may stay silent while its table is
/// under pressure ([`PRESSURE_PERCENT`](super::PRESSURE_PERCENT) full), when its
/// configured timeout is longer: a SYN flood's unanswered handshakes then give their
/// entries back within seconds instead of holding them for the half-open lifetime (120 s).
/// A real handshake completes within a round trip, and a client that retransmits its SYN
/// (after 1 s, 3 s, 7 s on Linux) refreshes its flow each time.
pub const PRESSURE_HALF_OPEN_S: u32 = 5;

/// Timeouts in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// SYN seen, no answer.
    pub tcp_syn_sent: u32,
    /// SYN-ACK seen, no final ACK.
    pub tcp_syn_recv: u32,
    /// Established.
    pub tcp_established: u32,
    /// One side sent FIN.
    pub tcp_fin_wait: u32,
    /// The other side answered the FIN, its own FIN pending.
    pub tcp_close_wait: u32,
    /// Both FINs seen, last ACK pending.
    pub tcp_last_ack: u32,
    /// Closed cleanly.
    pub tcp_time_wait: u32,
    /// Reset.
    pub tcp_close: u32,
    /// UDP (and other protocols) before a reply.
    pub udp_unreplied: u32,
    /// UDP after a reply.
    pub udp_replied: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        // Linux nf_conntrack defaults.
        Timeouts {
            tcp_syn_sent: 120,
            tcp_syn_recv: 60,
            tcp_established: 432_000,
            tcp_fin_wait: 120,
            tcp_close_wait: 60,
            tcp_last_ack: 30,
            tcp_time_wait: 120,
            tcp_close: 10,
            udp_unreplied: 30,
            udp_replied: 120,
        }
    }
}

impl Timeouts {
    /// The timeout of a flow in state `s`.
    pub fn for_state(&self, s: TcpState) -> u32 {
        match s {
            TcpState::SynSent => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
            TcpState::UdpUnreplied => self.udp_unreplied,
            TcpState::UdpReplied => self.udp_replied,
        }
    }
}
