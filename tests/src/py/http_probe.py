"""HTTP/1.1 probe for sluice's per-request proxy tests.

`http_probe.py pipeline ADDR PORT HOST PATH...`: sends a GET for every PATH at once on one
connection (pipelined), reads the responses in order and prints one line per response:
"<status> <body first line>". Exits non-zero if a response is missing.

`http_probe.py ws ADDR PORT HOST N`: upgrades `/ws` to a WebSocket, sends N masked frames
of growing size (up to 70000 bytes), checks each echo, sends a close frame; prints "ok N".
"""

import os
import socket
import sys


def read_response(f):
    line = f.readline()
    if not line:
        raise EOFError("no response")
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                f.readline()
                break
            body += f.read(size)
            f.readline()
    return status, headers, body


def pipeline(addr, port, host, paths):
    s = socket.create_connection((addr, port), timeout=10)
    reqs = b"".join(
        f"GET {p} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() for p in paths
    )
    s.sendall(reqs)
    f = s.makefile("rb")
    for _ in paths:
        status, _, body = read_response(f)
        print(status, body.decode(errors="replace").splitlines()[0] if body else "", flush=True)
    s.close()


def ws(addr, port, host, n):
    s = socket.create_connection((addr, port), timeout=10)
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    s.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    f = s.makefile("rb")
    status, headers, _ = read_response(f)
    assert status == 101, status
    assert headers.get("sec-websocket-accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", headers
    for i in range(n):
        data = os.urandom(1 + (i * 7919) % 70000)
        mask = os.urandom(4)
        hdr = bytes([0x82])
        if len(data) < 126:
            hdr += bytes([0x80 | len(data)])
        elif len(data) < 65536:
            hdr += bytes([0x80 | 126]) + len(data).to_bytes(2, "big")
        else:
            hdr += bytes([0x80 | 127]) + len(data).to_bytes(8, "big")
        s.sendall(hdr + mask + bytes(b ^ mask[j % 4] for j, b in enumerate(data)))
        h = f.read(2)
        ln = h[1] & 0x7F
        if ln == 126:
            ln = int.from_bytes(f.read(2), "big")
        elif ln == 127:
            ln = int.from_bytes(f.read(8), "big")
        echo = f.read(ln)
        assert echo == data, f"frame {i}: echo differs"
    s.sendall(b"\x88\x80" + os.urandom(4))
    assert f.read(2) == b"\x88\x00"
    print("ok", n, flush=True)
    s.close()


def main():
    mode = sys.argv[1]
    if mode == "pipeline":
        pipeline(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])
    elif mode == "ws":
        ws(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(f"unknown mode {mode}")


main()
