//! What sluice answers itself, in the received buffer: ARP requests and IPv6 neighbour
//! solicitations for its addresses (its ports' own, the virtual ones, and the listener
//! addresses the tables in use serve on the port, [`Ctx::served`]) (learning neighbours from ARP and NDP into the shared
//! [`NeighbourCache`], only on the port whose networks hold them, never sluice's own,
//! spoofed claims refused and counted as `arp_spoofed`), ICMP and ICMPv6 echo requests, and the ICMP errors the forwarder
//! sends (time exceeded, unreachable next hop). No allocation, no copy beyond the quoted
//! header of an ICMP error; nothing here panics on any input.

use super::config::{ForwarderConfig, Link};
use super::neigh::{Claim, NeighbourCache};
use super::reply::{ICMPV6_QUOTE_MAX, REPLY_TTL};
use super::stage::{Ctx, Verdict};
use crate::port::Pkt;
use crate::stats::DropReason;
use crate::tables::addresses::Addresses;
use crate::wire::{
    arp, checksum, ethernet, icmpv4, icmpv6, ip_proto, ipv4, ipv6, EtherType, MacAddr,
};
use std::net::{IpAddr, Ipv6Addr};

const ETH: usize = ethernet::HEADER_LEN;

/// Writes a neighbour advertisement `na` into `pkt`: Ethernet `eth` (source, destination
/// MAC), IPv6 `ip` (source, destination) with hop limit 255; `false` if the buffer is too
/// small. The solicited answer and the unsolicited announcement share it.
pub(super) fn write_na(
    pkt: &mut Pkt,
    eth: (MacAddr, MacAddr),
    ip: (Ipv6Addr, Ipv6Addr),
    na: &icmpv6::Repr,
) -> bool {
    let l4 = na.buffer_len();
    if !pkt.set_len(ETH + ipv6::HEADER_LEN + l4) {
        return false;
    }
    let d = pkt.data_mut();
    ethernet::Repr {
        src_addr: eth.0,
        dst_addr: eth.1,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
    let mut packet = ipv6::Packet::new_unchecked(&mut d[ETH..]);
    ipv6::Repr {
        src_addr: ip.0,
        dst_addr: ip.1,
        next_header: ip_proto::ICMPV6,
        payload_len: l4,
        hop_limit: 255,
    }
    .emit(&mut packet);
    na.emit(
        &mut icmpv6::Packet::new_unchecked(packet.payload_mut()),
        ip.0,
        ip.1,
    );
    true
}

/// The ICMP errors the forwarder sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IcmpError {
    /// TTL / hop limit exhausted in transit.
    TimeExceeded,
    /// The next hop did not resolve (host / address unreachable).
    Unreachable,
}

/// The forwarder's answering side for one packet: its configuration and neighbour cache,
/// borrowed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Responder<'a> {
    pub(super) conf: &'a ForwarderConfig,
    pub(super) neigh: &'a NeighbourCache,
}

impl Responder<'_> {
    /// A packet that came in on `in_port` claims that `ip` is at `mac` (`answer`: it
    /// answers a request): learned, ignored (an address in no port's network), or
    /// refused (`false`: sluice's own address, one that lives behind another port, or
    /// a change the cache refuses; see [`neigh`](super::neigh)).
    fn claim(
        &self,
        in_port: usize,
        ip: IpAddr,
        mac: MacAddr,
        answer: bool,
        now: u64,
        served: &Addresses,
    ) -> bool {
        match self.conf.link_of(in_port, ip, served) {
            Link::On => self.neigh.claim(ip, mac, now, answer) == Claim::Learned,
            Link::Nowhere => true,
            Link::Elsewhere => false,
        }
    }

    /// Answers an ARP request for one of the port's addresses, and learns the sender's
    /// MAC from any ARP packet addressed to one of them and from gratuitous ARP (sender
    /// and target the same), as far as [`Responder::claim`] allows. A refused claim is
    /// counted as `arp_spoofed`: the packet is dropped under it, or, a request for one of
    /// sluice's addresses, still answered (to the MAC that asked) and counted besides.
    pub(super) fn arp(&self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let repr =
            match arp::Packet::new_checked(&pkt.data()[ETH..]).and_then(|p| arp::Repr::parse(&p)) {
                Ok(r) => r,
                Err(_) => return Verdict::Drop(DropReason::ArpMalformed),
            };
        let target_ours =
            self.conf
                .is_ours_on(in_port, IpAddr::V4(repr.target_protocol_addr), ctx.served);
        let sender = repr.source_protocol_addr;
        let sender_ok = !sender.is_unspecified()
            && !sender.is_broadcast()
            && !sender.is_multicast()
            && repr.source_hardware_addr.is_unicast();
        let gratuitous = sender == repr.target_protocol_addr;
        let answer = repr.operation == arp::Operation::Reply;
        let refused = (target_ours || gratuitous)
            && sender_ok
            && !self.claim(
                in_port,
                IpAddr::V4(sender),
                repr.source_hardware_addr,
                answer,
                ctx.now_ms,
                ctx.served,
            );
        match repr.operation {
            arp::Operation::Request if target_ours => {
                if refused {
                    ctx.counters.drop(DropReason::ArpSpoofed);
                }
                let mac = self.conf.ports[in_port].mac;
                let reply = arp::Repr {
                    operation: arp::Operation::Reply,
                    source_hardware_addr: mac,
                    source_protocol_addr: repr.target_protocol_addr,
                    target_hardware_addr: repr.source_hardware_addr,
                    target_protocol_addr: repr.source_protocol_addr,
                };
                if !pkt.set_len(ETH + arp::PACKET_LEN) {
                    return Verdict::Drop(DropReason::NoRoom);
                }
                let d = pkt.data_mut();
                let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
                f.set_dst_addr(repr.source_hardware_addr);
                f.set_src_addr(mac);
                reply.emit(&mut arp::Packet::new_unchecked(&mut d[ETH..]));
                Verdict::tx(in_port)
            }
            _ if refused => Verdict::Drop(DropReason::ArpSpoofed),
            arp::Operation::Reply if target_ours => Verdict::Drop(DropReason::ArpReplyConsumed),
            _ => Verdict::Drop(DropReason::ArpNotForUs),
        }
    }

    /// Answers an ICMP echo request to one of sluice's IPv4 addresses.
    pub(super) fn echo_v4(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        let d = pkt.data_mut();
        let (src_mac, src, dst, hl) = {
            let f = ethernet::Frame::new_unchecked(&d[..]);
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            (
                f.src_addr(),
                ip.src_addr(),
                ip.dst_addr(),
                usize::from(ip.header_len()),
            )
        };
        {
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
                return Verdict::Drop(DropReason::IcmpMalformed);
            };
            if !icmp.verify_checksum() {
                return Verdict::Drop(DropReason::IcmpMalformed);
            }
            if icmp.msg_type() != icmpv4::msg_type::ECHO_REQUEST || icmp.msg_code() != 0 {
                return Verdict::Drop(DropReason::IcmpUnhandled);
            }
        }
        if !src_mac.is_unicast() || src.is_broadcast() || src.is_multicast() || src.is_unspecified()
        {
            return Verdict::Drop(DropReason::LocalUnhandled);
        }
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        let mut ip = ipv4::Packet::new_unchecked(&mut d[ETH..]);
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_ttl(REPLY_TTL);
        ip.fill_checksum();
        let mut icmp = icmpv4::Packet::new_unchecked(ip.payload_mut());
        let c = icmp.checksum();
        icmp.set_type_code(icmpv4::msg_type::ECHO_REPLY, 0);
        icmp.set_checksum(checksum::update16(
            c,
            u16::from(icmpv4::msg_type::ECHO_REQUEST) << 8,
            u16::from(icmpv4::msg_type::ECHO_REPLY) << 8,
        ));
        let _ = hl;
        Verdict::tx(in_port)
    }

    /// Rewrites the packet into an ICMP time exceeded to its sender, out of `in_port`.
    pub(super) fn time_exceeded_v4(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        if self.icmp_error_v4(in_port, pkt, IcmpError::TimeExceeded) {
            Verdict::tx(in_port)
        } else {
            Verdict::Drop(DropReason::TtlExceeded)
        }
    }

    /// Rewrites the packet into an ICMP error of `kind` to its sender, to go out of
    /// `in_port`. `false` (packet unchanged or garbage) when no error may be sent.
    pub(super) fn icmp_error_v4(&self, in_port: usize, pkt: &mut Pkt, kind: IcmpError) -> bool {
        let Some(our) = self.conf.v4_on(in_port) else {
            return false;
        };
        let (src_mac, src, hl, total, no_error) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            // Never answer an ICMP error (or anything not a plain echo) with an error, nor a
            // non-first fragment (RFC 1812 §4.3.2.7).
            let no_error = ip.frag_offset() != 0
                || (ip.protocol() == ip_proto::ICMP
                    && ip
                        .payload()
                        .first()
                        .is_none_or(|&t| t != icmpv4::msg_type::ECHO_REQUEST));
            (
                f.src_addr(),
                ip.src_addr(),
                usize::from(ip.header_len()),
                usize::from(ip.total_len()),
                no_error,
            )
        };
        if no_error
            || !src_mac.is_unicast()
            || src.is_unspecified()
            || src.is_broadcast()
            || src.is_multicast()
        {
            return false;
        }
        let quote = (hl + 8).min(total);
        let shift = ipv4::HEADER_LEN + icmpv4::HEADER_LEN;
        if !pkt.set_len(ETH + shift + quote) {
            return false;
        }
        let d = pkt.data_mut();
        d.copy_within(ETH..ETH + quote, ETH + shift);
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        f.set_ethertype(EtherType::Ipv4);
        let repr = ipv4::Repr {
            src_addr: our,
            dst_addr: src,
            protocol: ip_proto::ICMP,
            payload_len: icmpv4::HEADER_LEN + quote,
            ttl: REPLY_TTL,
        };
        let mut ip = ipv4::Packet::new_unchecked(&mut d[ETH..]);
        repr.emit(&mut ip);
        match kind {
            IcmpError::TimeExceeded => icmpv4::Repr::TimeExceeded {
                code: 0,
                data_len: quote,
            },
            // Code 1: host unreachable (RFC 1812 §5.2.7.1: the next hop does not answer).
            IcmpError::Unreachable => icmpv4::Repr::DstUnreachable {
                code: 1,
                data_len: quote,
            },
        }
        .emit(&mut icmpv4::Packet::new_unchecked(ip.payload_mut()));
        true
    }

    /// ICMPv6 to sluice (or to a multicast group it is in): echo, neighbour solicitations
    /// and advertisements.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn icmpv6_local(
        &self,
        in_port: usize,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        multicast: bool,
    ) -> Verdict {
        let port_mac = self.conf.ports[in_port].mac;
        let (src_mac, repr) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv6::Packet::new_unchecked(&d[ETH..]);
            let repr = match icmpv6::Packet::new_checked(ip.payload())
                .and_then(|p| icmpv6::Repr::parse(&p, src, dst))
            {
                Ok(r) => r,
                Err(crate::wire::Error::Unsupported) => {
                    return Verdict::Drop(DropReason::IcmpUnhandled)
                }
                Err(_) => return Verdict::Drop(DropReason::IcmpMalformed),
            };
            (f.src_addr(), repr)
        };
        match repr {
            icmpv6::Repr::EchoRequest {
                ident,
                seq_no,
                data_len,
            } if !multicast => {
                if !src_mac.is_unicast() || src.is_multicast() || src.is_unspecified() {
                    return Verdict::Drop(DropReason::LocalUnhandled);
                }
                let d = pkt.data_mut();
                let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
                f.set_dst_addr(src_mac);
                f.set_src_addr(port_mac);
                let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
                ip.set_src_addr(dst);
                ip.set_dst_addr(src);
                ip.set_hop_limit(REPLY_TTL);
                icmpv6::Repr::EchoReply {
                    ident,
                    seq_no,
                    data_len,
                }
                .emit(
                    &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
                    dst,
                    src,
                );
                Verdict::tx(in_port)
            }
            icmpv6::Repr::NeighborSolicit { target, source_ll } => {
                // RFC 4861 §7.1.1: hop limit 255, target ours.
                if hop != 255
                    || !self
                        .conf
                        .is_ours_on(in_port, IpAddr::V6(target), ctx.served)
                {
                    return Verdict::Drop(DropReason::NdNotForUs);
                }
                let dad = src.is_unspecified();
                if let (false, Some(mac)) = (dad, source_ll) {
                    if mac.is_unicast()
                        && !self.claim(in_port, IpAddr::V6(src), mac, false, ctx.now_ms, ctx.served)
                    {
                        // Answered all the same (to the asker), counted.
                        ctx.counters.drop(DropReason::ArpSpoofed);
                    }
                }
                let (reply_dst, reply_mac, flags) = if dad {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (
                        all,
                        MacAddr::ipv6_multicast(all),
                        icmpv6::na_flags::OVERRIDE,
                    )
                } else {
                    (
                        src,
                        source_ll.unwrap_or(src_mac),
                        icmpv6::na_flags::SOLICITED | icmpv6::na_flags::OVERRIDE,
                    )
                };
                let na = icmpv6::Repr::NeighborAdvert {
                    flags,
                    target,
                    target_ll: Some(port_mac),
                };
                if !write_na(pkt, (port_mac, reply_mac), (target, reply_dst), &na) {
                    return Verdict::Drop(DropReason::NoRoom);
                }
                Verdict::tx(in_port)
            }
            icmpv6::Repr::NeighborAdvert {
                flags,
                target,
                target_ll,
            } => {
                if hop != 255 {
                    return Verdict::Drop(DropReason::NdNotForUs);
                }
                let answer = flags & icmpv6::na_flags::SOLICITED != 0;
                if let Some(mac) = target_ll.filter(|m| m.is_unicast()) {
                    if !target.is_multicast()
                        && !target.is_unspecified()
                        && !self.claim(
                            in_port,
                            IpAddr::V6(target),
                            mac,
                            answer,
                            ctx.now_ms,
                            ctx.served,
                        )
                    {
                        return Verdict::Drop(DropReason::ArpSpoofed);
                    }
                }
                Verdict::Drop(DropReason::NdAdvertConsumed)
            }
            _ => Verdict::Drop(DropReason::IcmpUnhandled),
        }
    }

    /// Rewrites the packet into an ICMPv6 time exceeded to its sender, out of `in_port`.
    pub(super) fn time_exceeded_v6(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        if self.icmp_error_v6(in_port, pkt, IcmpError::TimeExceeded) {
            Verdict::tx(in_port)
        } else {
            Verdict::Drop(DropReason::TtlExceeded)
        }
    }

    /// Rewrites the packet into an ICMPv6 error of `kind` to its sender, to go out of
    /// `in_port`. `false` (packet unchanged or garbage) when no error may be sent.
    pub(super) fn icmp_error_v6(&self, in_port: usize, pkt: &mut Pkt, kind: IcmpError) -> bool {
        let Some(our) = self.conf.v6_on(in_port) else {
            return false;
        };
        let (src_mac, src, len, no_error) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv6::Packet::new_unchecked(&d[ETH..]);
            let no_error = ip.next_header() == ip_proto::ICMPV6
                && ip.payload().first().is_none_or(|&t| t < 128);
            (f.src_addr(), ip.src_addr(), d.len() - ETH, no_error)
        };
        if no_error || !src_mac.is_unicast() || src.is_multicast() || src.is_unspecified() {
            return false;
        }
        let quote = len.min(ICMPV6_QUOTE_MAX);
        let shift = ipv6::HEADER_LEN + icmpv6::HEADER_LEN;
        if !pkt.set_len(ETH + shift + quote) {
            return false;
        }
        let d = pkt.data_mut();
        d.copy_within(ETH..ETH + quote, ETH + shift);
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        f.set_ethertype(EtherType::Ipv6);
        let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
        ipv6::Repr {
            src_addr: our,
            dst_addr: src,
            next_header: ip_proto::ICMPV6,
            payload_len: icmpv6::HEADER_LEN + quote,
            hop_limit: REPLY_TTL,
        }
        .emit(&mut ip);
        match kind {
            IcmpError::TimeExceeded => icmpv6::Repr::TimeExceeded {
                code: 0,
                data_len: quote,
            },
            // Code 3: address unreachable (RFC 4443 §3.1, for failed resolution).
            IcmpError::Unreachable => icmpv6::Repr::DstUnreachable {
                code: 3,
                data_len: quote,
            },
        }
        .emit(
            &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
            our,
            src,
        );
        true
    }
}
