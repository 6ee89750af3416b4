#!/usr/bin/env python3
"""The demo's backend servers: one TCP server per address given, each on PORT.

A connection that starts with an HTTP request line gets `200 OK` naming the backend and
the peer it saw (so `curl` shows which backend answered and that sluice source-NATed the
connection); anything else is echoed back byte for byte, prefixed by nothing.
Usage: demo_backend.py PORT ADDR...
"""
import socket
import sys
import threading


def serve_conn(conn, me):
    with conn:
        peer = "%s:%d" % conn.getpeername()[:2]
        first = conn.recv(65536)
        if first.startswith((b"GET ", b"HEAD ", b"POST ")):
            body = ("backend %s (peer %s)\n" % (me, peer)).encode()
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            return
        data = first
        while data:
            conn.sendall(data)
            data = conn.recv(65536)


def serve(addr, port):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(512)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve_conn, args=(conn, addr), daemon=True).start()


def main():
    port = int(sys.argv[1])
    for a in sys.argv[2:]:
        threading.Thread(target=serve, args=(a, port), daemon=True).start()
    print("backends listening on port %d: %s" % (port, ", ".join(sys.argv[2:])), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
