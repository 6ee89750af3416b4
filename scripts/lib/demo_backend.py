#!/usr/bin/env python3
"""The demo's backend servers: one TCP server per address given, each on PORT.

A connection that starts with an HTTP request line gets `200 OK` naming the backend, the
peer it saw, and the request's Host and target (so `curl` shows which backend answered,
that sluice source-NATed the connection, and what arrived); anything else is echoed back
byte for byte, prefixed by nothing.
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
            head = first.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            target = head[0].split(" ")[1] if len(head[0].split(" ")) > 1 else "?"
            host = next((h.split(":", 1)[1].strip() for h in head[1:]
                         if h.lower().startswith("host:")), "?")
            body = ("backend %s (peer %s) host %s path %s\n" % (me, peer, host, target)).encode()
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
