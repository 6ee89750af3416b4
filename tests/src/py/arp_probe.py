"""ARP through a raw socket, for sluice's served-address tests.

`arp_probe.py watch IFACE SECONDS`: prints "ready" once capturing, then one JSON line per
ARP frame IFACE receives during SECONDS ({"dst", "src", "op", "sha", "sender", "tha",
"target"}: MACs as aa:bb:..., addresses dotted), then "done". Frames this host sends are
left out.

`arp_probe.py ask IFACE SENDER TARGET SECONDS`: sends an ARP request for TARGET from
IFACE's MAC and SENDER (twice, half the time apart) and prints the MAC that answers for
TARGET within SECONDS, or "none".
"""

import json
import socket
import struct
import sys
import time

ETH_P_ARP = 0x0806
PACKET_OUTGOING = 4


def mac(b):
    return ":".join(f"{x:02x}" for x in b)


def arp_socket(iface):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    s.bind((iface, ETH_P_ARP))
    return s


def frames(s, seconds):
    """(frame, fields) of each ARP frame received within `seconds`."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            f, addr = s.recvfrom(2048)
        except socket.timeout:
            return
        if addr[2] == PACKET_OUTGOING or len(f) < 42 or f[12:14] != b"\x08\x06":
            continue
        yield {
            "dst": mac(f[0:6]),
            "src": mac(f[6:12]),
            "op": struct.unpack("!H", f[20:22])[0],
            "sha": mac(f[22:28]),
            "sender": socket.inet_ntoa(f[28:32]),
            "tha": mac(f[32:38]),
            "target": socket.inet_ntoa(f[38:42]),
        }


def watch(iface, seconds):
    s = arp_socket(iface)
    print("ready", flush=True)
    for fields in frames(s, seconds):
        print(json.dumps(fields), flush=True)
    print("done", flush=True)


def ask(iface, sender, target, seconds):
    s = arp_socket(iface)
    me = s.getsockname()[4][:6]
    request = (
        b"\xff" * 6
        + me
        + b"\x08\x06"
        + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
        + me
        + socket.inet_aton(sender)
        + b"\x00" * 6
        + socket.inet_aton(target)
    )
    for _ in range(2):
        s.send(request)
        for f in frames(s, seconds / 2):
            if f["op"] == 2 and f["sender"] == target:
                print(f["sha"], flush=True)
                return
    print("none", flush=True)


def main():
    if sys.argv[1] == "watch":
        watch(sys.argv[2], float(sys.argv[3]))
    else:
        ask(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))


main()
