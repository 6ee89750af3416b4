#!/usr/bin/env python3
"""Capture the first bytes a real client sends on a TCP connection.

Usage: first_bytes.py OUT_FILE -- CLIENT_COMMAND...   (the command may use {port})

Listens on 127.0.0.1 (an ephemeral port), runs the client with {port} replaced, reads
what the client sends first (until it pauses or 16 KiB), closes, and writes the bytes
to OUT_FILE. Used by scripts/demo to feed `sluice explain --payload-file` with real
ClientHellos (openssl s_client, curl) and HTTP requests. Loopback only.
"""
import socket
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, cmd = sys.argv[1], sys.argv[3:]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(10)
    port = srv.getsockname()[1]
    cmd = [c.replace("{port}", str(port)) for c in cmd]
    client = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    data = b""
    try:
        conn, _ = srv.accept()
        conn.settimeout(0.5)
        while len(data) < 16384:
            try:
                chunk = conn.recv(16384 - len(data))
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
        conn.close()
    finally:
        srv.close()
        client.kill()
        client.wait()
    with open(out, "wb") as f:
        f.write(data)
    return 0 if data else 1


if __name__ == "__main__":
    sys.exit(main())
