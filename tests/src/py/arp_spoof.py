"""ARP spoofer for sluice's kernel tests: `arp_spoof.py IFACE COUNT RATE FAKE_MAC GW_MAC GW_IP IP...`.

Sends COUNT ARP frames out of IFACE (AF_PACKET: needs CAP_NET_RAW, meant for the
test's own client namespace) at about RATE per second, each claiming that one of the
IPs (in turn) is at FAKE_MAC, in four forms in turn: a reply to the gateway (GW_IP at
GW_MAC, unicast), a gratuitous request and a gratuitous reply (broadcast), and a
request for GW_IP from the claimed address (unicast to GW_MAC). Prints "started" when
the first frame is out and one JSON line when done: {"sent", "errors", "seconds"}.
"""

import json
import socket
import struct
import sys
import time

BROADCAST = b"\xff" * 6
ZERO = b"\x00" * 6


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def arp(eth_dst, op, sha, spa, tha, tpa):
    eth = eth_dst + sha + struct.pack("!H", 0x0806)
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + sha + spa + tha + tpa
    return eth + body


def main():
    iface, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    fake, gw_mac, gw_ip = mac(sys.argv[4]), mac(sys.argv[5]), socket.inet_aton(sys.argv[6])
    ips = [socket.inet_aton(a) for a in sys.argv[7:]]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    sent = errors = 0
    t0 = time.monotonic()
    for i in range(count):
        ip = ips[i % len(ips)]
        kind = (i // len(ips)) % 4
        if kind == 0:
            f = arp(gw_mac, 2, fake, ip, gw_mac, gw_ip)
        elif kind == 1:
            f = arp(BROADCAST, 1, fake, ip, ZERO, ip)
        elif kind == 2:
            f = arp(BROADCAST, 2, fake, ip, BROADCAST, ip)
        else:
            f = arp(gw_mac, 1, fake, ip, ZERO, gw_ip)
        try:
            s.send(f)
            sent += 1
        except OSError:
            errors += 1
        if i == 0:
            print("started", flush=True)
        ahead = t0 + (i + 1) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    print(json.dumps({"sent": sent, "errors": errors,
                      "seconds": round(time.monotonic() - t0, 3)}), flush=True)


main()
