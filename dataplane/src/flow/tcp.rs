//! Connection states, conntrack style: TCP from the flags seen in each direction, UDP
//! (and other datagram protocols) from whether a reply was seen.

use super::tuple::Dir;

/// TCP flags of a segment (the low byte of the TCP flags field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;

    fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }

    /// A connection-opening SYN (SYN without ACK, RST or FIN).
    pub fn is_syn_only(self) -> bool {
        self.has(Self::SYN) && !self.has(Self::ACK) && !self.has(Self::RST) && !self.has(Self::FIN)
    }

    /// SYN together with FIN or RST: no connection opens so (Linux conntrack calls it
    /// invalid); scanners and evasion do.
    pub fn is_bad_syn(self) -> bool {
        self.has(Self::SYN) && (self.has(Self::FIN) || self.has(Self::RST))
    }
}

/// State of a tracked flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpState {
    /// TCP: the client's SYN was seen.
    SynSent,
    /// TCP: the backend's SYN-ACK was seen.
    SynRecv,
    /// TCP: the handshake completed.
    Established,
    /// TCP: the client sent FIN (half close).
    FinWait,
    /// TCP: the backend sent FIN first (half close from the other side).
    CloseWait,
    /// TCP: both sides sent FIN; the last ACK is pending.
    LastAck,
    /// TCP: closed cleanly; late segments still match for a while.
    TimeWait,
    /// TCP: reset.
    Close,
    /// UDP or another protocol: no reply yet.
    UdpUnreplied,
    /// UDP or another protocol: the backend replied.
    UdpReplied,
}

impl TcpState {
    /// Whether the flow still carries a connection (not closing or closed).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            TcpState::SynSent
                | TcpState::SynRecv
                | TcpState::Established
                | TcpState::UdpUnreplied
                | TcpState::UdpReplied
        )
    }

    /// Whether the flow never became a connection: a TCP handshake not completed
    /// (SYN_SENT, SYN_RECV) or a datagram never answered. Linux conntrack calls such
    /// entries not *assured*; early drop takes only these.
    pub fn is_unanswered(self) -> bool {
        matches!(
            self,
            TcpState::SynSent | TcpState::SynRecv | TcpState::UdpUnreplied
        )
    }

    /// The state after a TCP segment with `flags` travelling in `dir`.
    pub fn on_tcp(self, dir: Dir, flags: TcpFlags) -> TcpState {
        use TcpState::*;
        if flags.has(TcpFlags::RST) {
            return Close;
        }
        let fin = flags.has(TcpFlags::FIN);
        let ack = flags.has(TcpFlags::ACK);
        let syn = flags.has(TcpFlags::SYN);
        match (self, dir) {
            (SynSent, Dir::Reply) if syn && ack => SynRecv,
            (SynSent, _) => SynSent,
            (SynRecv, Dir::Orig) if fin => FinWait,
            (SynRecv, Dir::Orig) if ack && !syn => Established,
            (SynRecv, _) => SynRecv,
            (Established, Dir::Orig) if fin => FinWait,
            (Established, Dir::Reply) if fin => CloseWait,
            (Established, _) => Established,
            (FinWait, Dir::Reply) if fin => LastAck,
            (CloseWait, Dir::Orig) if fin => LastAck,
            (FinWait, _) => FinWait,
            (CloseWait, _) => CloseWait,
            (LastAck, _) if ack && !fin => TimeWait,
            (LastAck, _) => LastAck,
            (TimeWait, _) => TimeWait,
            (Close, _) => Close,
            (s @ (UdpUnreplied | UdpReplied), d) => s.on_datagram(d),
        }
    }

    /// The state after a datagram travelling in `dir`.
    pub fn on_datagram(self, dir: Dir) -> TcpState {
        match (self, dir) {
            (TcpState::UdpUnreplied, Dir::Reply) => TcpState::UdpReplied,
            (s, _) => s,
        }
    }
}
