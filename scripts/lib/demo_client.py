#!/usr/bin/env python3
"""The demo's client: N connections to VIP:PORT, each sends a message, reads the echo and
checks it byte for byte; then prints which backend served what share (asked over HTTP on
a sample of connections) and the connection latency (connect + echo round trip) p50/p99.

Usage: demo_client.py --dst IP --port N [--count N] [--src IP] [--expect-denied]
Prints one JSON document.
"""
import argparse
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor


def one(dst, port, src, timeout):
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    msg = os.urandom(512)
    t0 = time.perf_counter()
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        if src:
            s.bind((src, 0))
        s.connect((dst, port))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        reply = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    backend = reply.split(b"\r\n\r\n", 1)[-1].decode(errors="replace").split()[1:2]
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        if src:
            s.bind((src, 0))
        t1 = time.perf_counter()
        s.connect((dst, port))
        s.sendall(msg)
        got = b""
        while len(got) < len(msg):
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        rtt = time.perf_counter() - t1
    return {"backend": backend[0] if backend else None, "echo_ok": got == msg,
            "latency_ms": rtt * 1000.0, "total_ms": (time.perf_counter() - t0) * 1000.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--src")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--parallel", type=int, default=16)
    a = ap.parse_args()
    results, errors = [], {}
    with ThreadPoolExecutor(a.parallel) as pool:
        futs = [pool.submit(one, a.dst, a.port, a.src, a.timeout) for _ in range(a.count)]
        for f in futs:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001 - every failure is reported by kind
                k = type(e).__name__
                errors[k] = errors.get(k, 0) + 1
    shares = {}
    for r in results:
        shares[r["backend"]] = shares.get(r["backend"], 0) + 1
    lat = sorted(r["latency_ms"] for r in results)
    pct = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None
    print(json.dumps({
        "connections": a.count,
        "answered": len(results),
        "echo_ok": sum(r["echo_ok"] for r in results),
        "errors": errors,
        "backends": {k: round(v / max(1, len(results)), 3) for k, v in sorted(shares.items(), key=str)},
        "latency_ms": {"p50": pct(0.50), "p99": pct(0.99)},
    }))


if __name__ == "__main__":
    main()
