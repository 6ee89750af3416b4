"""A bounded SYN flood for sluice's kernel tests: `syn_flood.py DST PORT COUNT RATE SRC...`.

Sends COUNT TCP SYNs (IPv4, raw socket: needs CAP_NET_RAW, meant for the test's own
client namespace) to DST:PORT at about RATE per second, each from a source address drawn
from SRC... (spoofed ones included) and a random source port in 1024..29999, with a
random sequence number and the options a Linux SYN carries (MSS 1460, SACK permitted,
window scale 7). Nothing is ever acknowledged. Prints one JSON line when done:
{"sent", "errors", "seconds"}.
"""

import json
import random
import socket
import struct
import sys
import time


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def syn(src, dst, sport, dport, seq):
    opts = struct.pack("!BBH", 2, 4, 1460) + bytes([4, 2, 1, 3, 3, 7])  # MSS, SACKOK, NOP, WS 7
    off = (20 + len(opts)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, off << 4, 0x02, 64240, 0, 0) + opts
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    c = checksum(pseudo + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    total = 20 + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, random.getrandbits(16), 0, 64,
                     socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return ip + tcp


def main():
    dst, port, count, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    srcs = [socket.inet_aton(a) for a in sys.argv[5:]]
    d = socket.inet_aton(dst)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sent = errors = 0
    t0 = time.monotonic()
    for i in range(count):
        pkt = syn(random.choice(srcs), d, random.randint(1024, 29999), port,
                  random.getrandbits(32))
        try:
            s.sendto(pkt, (dst, 0))
            sent += 1
        except OSError:
            errors += 1
        if i % 64 == 63:
            ahead = t0 + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    print(json.dumps({"sent": sent, "errors": errors,
                      "seconds": round(time.monotonic() - t0, 3)}), flush=True)


main()
