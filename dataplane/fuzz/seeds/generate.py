#!/usr/bin/env python3
"""Writes the checked-in seed corpus of the stage and manifest fuzz targets.

    dataplane/fuzz/seeds/generate.py        (from anywhere; rewrites seeds/<target>/)

- balance_frames: hand-written record sequences in the target's encoding (see
  fuzz_targets/balance_frames.rs): an L4 TCP connection through NAT, a UDP exchange, a
  reject, delayed binding on 443 / 80 / 8080, IPv6; plus the frames of the real captures
  in ../shared/testdata/tls/*.pcap as raw records (when that directory is present).
- splice_segments: scripted connections (see fuzz_targets/splice_segments.rs): TLS and
  HTTP spliced, first bytes in pieces, an HTTPS redirect, a silent backend, IPv6.
- manifest: the small example configurations of configs/ and the fuzz appliance.

The parser targets' seeds (ClientHellos) come from ../shared/testdata/tls at run time.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
TESTDATA = os.path.normpath(os.path.join(REPO, "..", "..", "shared", "testdata", "tls"))
if not os.path.isdir(TESTDATA):
    TESTDATA = "/work/shared/testdata/tls"


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- balance_frames: records -------------------------------------------------------
# flags indexes of the target's table
SYN, ACK, PSH_ACK, FIN_ACK, RST, SYN_ACK = 0, 1, 2, 4, 5, 7


def fresh(client, dest, sport, flags, payload=(0, 0, 1), opts=0x07, port=0, clock=0):
    which, off, ln = payload
    return bytes([port | (1 << 1) | (clock << 3), client, dest, sport, flags]) + struct.pack(
        ">II", 1000, 0) + bytes([opts, which, off, ln])


def answer(k, flags, payload=(0xF0, 0, 0), isn=5000, opts=0x07, clock=0):
    which, off, ln = payload
    return bytes([(2 << 1) | (clock << 3), k, flags, 0, 0]) + struct.pack(">I", isn) + bytes(
        [opts, which, off, ln])


def raw(frame, port=0):
    return bytes([port]) + struct.pack(">H", len(frame)) + frame


NONE = (0xF0, 0, 0)
seeds = {
    # client 10.77.0.1 -> VIP:7000 (NAT to a:7000), backend answers, data, FIN both ways
    "l4_tcp": fresh(0, 0, 1, SYN) + answer(0, SYN_ACK) + answer(0, ACK, NONE)
    + fresh(0, 0, 1, PSH_ACK, (6, 0, 0)) + answer(0, PSH_ACK, (6, 0, 10))
    + answer(0, FIN_ACK, NONE) + answer(0, FIN_ACK, NONE) + answer(0, ACK, NONE, clock=20),
    "l4_udp": fresh(0, 1, 2, 0, (8, 0, 0)) + answer(0, 0, (8, 0, 5)) + fresh(3, 1, 2, 0, (8, 0, 0)),
    "reject": fresh(0, 2, 3, SYN) + fresh(0, 3, 3, 0, (8, 0, 0)),
    # 443: cookie, ACK with the ClientHello, backend SYN-ACK, spliced data both ways
    "splice_tls": fresh(0, 4, 4, SYN) + answer(0, ACK, (0, 0, 0)) + answer(0, SYN_ACK)
    + answer(0, PSH_ACK, (9, 0, 0)) + answer(0, PSH_ACK, (8, 0, 0)) + answer(0, FIN_ACK, NONE),
    "splice_http": fresh(0, 5, 5, SYN) + answer(0, ACK, (5, 0, 20)) + answer(0, ACK, (5, 20, 0))
    + answer(0, SYN_ACK) + answer(0, ACK, NONE),
    "redirect": fresh(0, 6, 6, SYN) + answer(0, ACK, (7, 0, 0)) + answer(0, FIN_ACK, NONE),
    "silent": fresh(0, 4, 7, SYN) + answer(0, ACK, (3, 0, 0)) + answer(0, ACK, NONE, clock=20)
    + answer(0, ACK, NONE, clock=21) + answer(0, ACK, NONE, clock=22),
    "v6": fresh(3, 0, 8, SYN) + answer(0, SYN_ACK) + fresh(3, 4, 9, SYN) + answer(0, ACK, (1, 0, 0)),
    "routed": fresh(1, 7, 10, SYN) + fresh(0, 8, 11, SYN) + fresh(2, 0, 12, SYN),
}
for name, data in seeds.items():
    write("balance_frames", name, data)


def pcap_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


if os.path.isdir(TESTDATA):
    for name in sorted(os.listdir(TESTDATA)):
        if name.endswith(".pcap"):
            frames = pcap_frames(os.path.join(TESTDATA, name))[:6]
            write("balance_frames", "capture-" + name[:-5], b"".join(raw(f) for f in frames))

# ---- splice_segments: steps ---------------------------------------------------------


def syn(conn, listener, first, v6=False):
    return bytes([conn << 6 | (0x20 if v6 else 0), listener, first]) + struct.pack(">I", 7777) + b"\x07"


def step(conn, s, *fields):
    return bytes([conn << 6 | s]) + bytes(fields)


def backend_synack(conn):
    return bytes([conn << 6 | 2]) + struct.pack(">I", 424242) + b"\x07"


def data(conn, s, payload):
    return bytes([conn << 6 | s, len(payload)]) + payload


splice = {
    "tls": syn(0, 0, 0) + step(0, 1, 0, 0, 0) + backend_synack(0) + step(0, 11)
    + data(0, 3, b"server hello") + data(0, 4, b"finished") + step(0, 5) + step(0, 7) + step(0, 11),
    "http_pieces": syn(0, 1, 5) + step(0, 1, 0, 10, 0) + step(0, 1, 20, 0, 0) + step(0, 1, 10, 10, 0)
    + backend_synack(0) + step(0, 11) + data(0, 3, b"HTTP/1.1 200 OK\r\n\r\n") + step(0, 8),
    "redirect": syn(1, 2, 7) + step(1, 1, 0, 0, 0) + step(1, 5) + step(1, 11),
    "silent": syn(0, 0, 3) + step(0, 1, 0, 0, 0) + step(0, 9, 16) + step(0, 9, 17) + step(0, 9, 18)
    + step(0, 9, 19) + step(0, 9, 20) + step(0, 6),
    "failover_reset": syn(2, 0, 2) + step(2, 1, 0, 0, 0) + step(2, 8) + backend_synack(2) + step(2, 11),
    "v6_two": syn(0, 0, 1, True) + syn(1, 1, 6) + step(0, 1, 0, 0, 0) + step(1, 1, 0, 0, 0)
    + backend_synack(0) + backend_synack(1) + step(0, 10) + step(1, 11) + step(0, 9, 25),
}
for name, d in splice.items():
    write("splice_segments", name, d)

# ---- manifest ----------------------------------------------------------------------
for rel in ["configs/gateway-api/routes.yaml", "configs/demo/appliance.yaml",
            "configs/consul/tcproute.json", "configs/netpol/ligato-policy.json",
            "configs/istio-bookinfo/gateway.yaml", "configs/netpol/policies.yaml",
            "dataplane/fuzz/appliance.yaml"]:
    with open(os.path.join(REPO, rel), "rb") as f:
        write("manifest", rel.replace("/", "_"), f.read())
write("manifest", "aliases.yaml", b"a: &a [x, y]\nb: &b [*a, *a]\nc: [*b, *b]\n---\n"
      b"apiVersion: v1\nkind: Namespace\nmetadata: {name: n, labels: &l {k: v}}\n")
sys.exit(0)
