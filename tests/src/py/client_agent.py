"""TCP client agent for sluice's kernel tests: `client_agent.py SRC VIP PORT`.

Reads one command per line on stdin and answers each with one JSON line on stdout:

- `burst N PARALLEL TIMEOUT`: N fresh connections, PARALLEL at a time, each from its
  own source port (consecutive, so the 5-tuples and thus the backends chosen are
  reproducible): connect, read the server's identify line, send a line, expect it
  echoed, close. Answers {"ok", "errors": {kind: n}, "backends": {addr: n},
  "peers": {addr: n}}.
- `open N TIMEOUT`: N long-lived connections kept open (identify line read). Answers
  {"ok", "errors", "backends", "peers"}.
- `echo TIMEOUT`: every long-lived connection sends a fresh line and expects it back.
  A connection that failed once stays dead. Answers {"alive", "dead", "errors"}.
- `close`: closes the long-lived connections. Answers {"closed"}.
- `paced N RATE TIMEOUT HOST`: N connections started RATE per second (each at its own
  time, whatever the others do), from ports the kernel picks, for an HTTP listener that
  routes by Host (delayed binding): connect, send `GET / HTTP/1.1` with `Host: HOST`,
  read the server's identify line and the echo of the request, close (the client closes
  first). Each is timed from the start of its connect to its end, success or failure.
  Answers {"ok", "errors": {kind: n}, "peers": {addr: n}, "max_ok_s", "max_failed_s",
  "seconds"}.

Every socket operation has a timeout, so every command answers. Exits at EOF.
"""

import json
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SRC, VIP, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
next_port = 20000
live = []  # [socket or None]
rounds = 0


def kind(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ConnectionResetError):
        return "reset"
    if isinstance(e, OSError):
        return f"oserror:{e.errno}"
    return type(e).__name__


class Mismatch(Exception):
    pass


def read_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        d = s.recv(4096)
        if not d:
            raise Mismatch("eof")
        buf += d
    return buf.decode()


def exchange(s, msg):
    s.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = s.recv(4096)
        if not d:
            raise Mismatch("eof")
        got += d
    if got != msg:
        raise Mismatch(f"echo {got!r} != {msg!r}")


def connect(sport, timeout):
    """A connection from SRC:sport; returns (socket, backend, peer address)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.settimeout(timeout)
        s.bind((SRC, sport))
        s.connect((VIP, PORT))
        backend, peer = read_line(s).split()
        return s, backend, peer.rsplit(":", 1)[0]
    except BaseException:
        s.close()
        raise


def tally(results):
    out = {"ok": 0, "errors": {}, "backends": {}, "peers": {}}
    for r in results:
        if isinstance(r, tuple):
            out["ok"] += 1
            out["backends"][r[0]] = out["backends"].get(r[0], 0) + 1
            out["peers"][r[1]] = out["peers"].get(r[1], 0) + 1
        else:
            out["errors"][r] = out["errors"].get(r, 0) + 1
    return out


def one_shot(sport, timeout):
    try:
        s, backend, peer = connect(sport, timeout)
        try:
            exchange(s, f"hello from {sport}\n".encode())
        finally:
            s.close()
        return (backend, peer)
    except Exception as e:  # noqa: BLE001 - every failure is a result
        return str(e) if isinstance(e, Mismatch) else kind(e)


def long_lived(sport, timeout):
    try:
        s, backend, peer = connect(sport, timeout)
        return (s, backend, peer)
    except Exception as e:  # noqa: BLE001
        return str(e) if isinstance(e, Mismatch) else kind(e)


def ping(i, timeout):
    s = live[i]
    if s is None:
        return "dead"
    try:
        s.settimeout(timeout)
        exchange(s, f"round {rounds} conn {i}\n".encode())
        return True
    except Exception as e:  # noqa: BLE001
        s.close()
        live[i] = None
        return str(e) if isinstance(e, Mismatch) else kind(e)


def paced_one(start, host, timeout):
    """One `paced` connection begun at `start` (monotonic): (result, seconds)."""
    delay = start - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.bind((SRC, 0))
        s.connect((VIP, PORT))
        req = f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        s.sendall(req)
        # The identify line and the echo may come in one segment.
        buf = b""
        while b"\n" not in buf:
            d = s.recv(4096)
            if not d:
                raise Mismatch("eof")
            buf += d
        line, got = buf.split(b"\n", 1)
        backend, peer = line.decode().split()
        while len(got) < len(req):
            d = s.recv(4096)
            if not d:
                raise Mismatch("eof")
            got += d
        if got != req:
            raise Mismatch(f"echo {got!r} != {req!r}")
        r = (backend, peer.rsplit(":", 1)[0])
    except Exception as e:  # noqa: BLE001 - every failure is a result
        r = str(e) if isinstance(e, Mismatch) else kind(e)
    finally:
        s.close()
    return r, time.monotonic() - t0


def paced(n, rate, timeout, host):
    t0 = time.monotonic()
    starts = [t0 + i / rate for i in range(n)]
    # Enough threads that no connection waits for another's end to begin.
    with ThreadPoolExecutor(max(1, min(n, int(rate * (timeout + 1)) + 1, 256))) as ex:
        res = list(ex.map(lambda st: paced_one(st, host, timeout), starts))
    out = tally([r for r, _ in res])
    ok = [d for r, d in res if isinstance(r, tuple)]
    failed = [d for r, d in res if not isinstance(r, tuple)]
    out["max_ok_s"] = round(max(ok, default=0.0), 3)
    out["max_failed_s"] = round(max(failed, default=0.0), 3)
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def ports(n):
    global next_port
    p = list(range(next_port, next_port + n))
    next_port += n
    return p


def main():
    global rounds
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "burst":
            n, par, timeout = int(cmd[1]), int(cmd[2]), float(cmd[3])
            with ThreadPoolExecutor(par) as ex:
                res = list(ex.map(lambda p: one_shot(p, timeout), ports(n)))
            answer = tally(res)
        elif cmd[0] == "open":
            n, timeout = int(cmd[1]), float(cmd[2])
            with ThreadPoolExecutor(min(n, 32)) as ex:
                res = list(ex.map(lambda p: long_lived(p, timeout), ports(n)))
            for r in res:
                if isinstance(r, tuple):
                    live.append(r[0])
            answer = tally([r[1:] if isinstance(r, tuple) else r for r in res])
        elif cmd[0] == "echo":
            timeout = float(cmd[1])
            rounds += 1
            with ThreadPoolExecutor(max(1, min(len(live), 32))) as ex:
                res = list(ex.map(lambda i: ping(i, timeout), range(len(live))))
            errors = {}
            for r in res:
                if r is not True:
                    errors[r] = errors.get(r, 0) + 1
            answer = {
                "alive": sum(1 for r in res if r is True),
                "dead": sum(1 for r in res if r is not True),
                "errors": errors,
            }
        elif cmd[0] == "paced":
            n, rate, timeout = int(cmd[1]), float(cmd[2]), float(cmd[3])
            answer = paced(n, rate, timeout, cmd[4])
        elif cmd[0] == "close":
            n = sum(1 for s in live if s is not None)
            for s in live:
                if s is not None:
                    s.close()
            live.clear()
            answer = {"closed": n}
        else:
            answer = {"error": f"unknown command {cmd[0]!r}"}
        print(json.dumps(answer), flush=True)


main()
