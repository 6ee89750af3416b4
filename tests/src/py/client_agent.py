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

Every socket operation has a timeout, so every command answers. Exits at EOF.
"""

import json
import socket
import sys
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
