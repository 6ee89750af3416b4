"""TLS client agent for sluice's kernel tests: `tls_client.py SRC VIP CAFILE`.

Reads one command per line on stdin and answers each with one JSON line on stdout:

- `tls PORT SNI N PARALLEL TIMEOUT FIRST_SPORT`: N TLS connections to VIP:PORT naming
  SNI, PARALLEL at a time; each from source port FIRST_SPORT + i (consecutive, so the
  5-tuples and thus Maglev's picks are reproducible; 0: the kernel's choice). Each
  handshake must verify against CAFILE (the backends' self-signed certificates; the host
  name is not checked: the test asserts which certificate came back), then the server's
  first line names it. Answers {"ok", "errors": {kind: n}, "certs": {subject CN: n},
  "bodies": {name: n}, "mismatch": n (body and certificate disagree)}.
- `bulk PORT SNI BYTES TIMEOUT`: one TLS connection naming SNI; after the server's first
  line, BYTES random bytes are sent in 64 KiB writes (at most 1 MiB ahead of the echo)
  while the echo is read back. Answers {"cert", "body", "sent", "echoed", "echo_ok",
  "seconds", "error"}.
- `replay PORT TIMEOUT PAUSE_MS HEX...`: one plain TCP connection to VIP:PORT with
  TCP_NODELAY that sends each HEX chunk as its own segment (PAUSE_MS apart), then reads
  the server's
  identify line "<local> <peer>" and the echo of everything sent. Answers {"line",
  "sent", "echoed" (bytes echoed back), "echo_ok", "error"}.

- `resume PORT SNI TIMEOUT`: two TLS connections naming SNI with one context, the
  second offering the first's session (a ticket, read after the server's first line).
  Answers {"first_reused", "second_reused", "version", "body", "error"}.

Every socket operation has a timeout, so every command answers. Exits at EOF.
"""

import json
import os
import socket
import ssl
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SRC, VIP, CAFILE = sys.argv[1], sys.argv[2], sys.argv[3]


def kind(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ConnectionResetError):
        return "reset"
    if isinstance(e, ssl.SSLError):
        return "ssl:" + (e.reason or "?")
    if isinstance(e, OSError):
        return f"oserror:{e.errno}"
    return type(e).__name__


def context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(CAFILE)
    return ctx


def subject_cn(cert):
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                return v
    return None


def read_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        d = s.recv(4096)
        if not d:
            raise EOFError("eof before a line")
        buf += d
    return buf.decode().strip()


def one_tls(ctx, port, sni, sport, timeout):
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        raw.settimeout(timeout)
        raw.bind((SRC, sport))
        raw.connect((VIP, port))
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            cn = subject_cn(s.getpeercert())
            body = read_line(s).split()[0]
        return (cn, body)
    except Exception as e:  # noqa: BLE001 - every failure is a result
        return kind(e)
    finally:
        raw.close()


def tls(port, sni, n, par, timeout, first):
    ctx = context()
    ports = [first + i if first else 0 for i in range(n)]
    with ThreadPoolExecutor(par) as ex:
        res = list(ex.map(lambda p: one_tls(ctx, port, sni, p, timeout), ports))
    out = {"ok": 0, "errors": {}, "certs": {}, "bodies": {}, "mismatch": 0}
    for r in res:
        if isinstance(r, tuple):
            out["ok"] += 1
            out["certs"][r[0]] = out["certs"].get(r[0], 0) + 1
            out["bodies"][r[1]] = out["bodies"].get(r[1], 0) + 1
            if not r[0] or not r[0].startswith(r[1] + "."):
                out["mismatch"] += 1
        else:
            out["errors"][r] = out["errors"].get(r, 0) + 1
    return out


def bulk(port, sni, n, timeout):
    out = {"cert": None, "body": None, "sent": 0, "echoed": 0, "echo_ok": False,
           "seconds": None, "error": None}
    data = os.urandom(n)
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t0 = time.monotonic()
    try:
        raw.settimeout(timeout)
        raw.bind((SRC, 0))
        raw.connect((VIP, port))
        with context().wrap_socket(raw, server_hostname=sni) as s:
            out["cert"] = subject_cn(s.getpeercert())
            out["body"] = read_line(s).split()[0]
            got = bytearray()
            while len(got) < n:
                if out["sent"] < n and out["sent"] - len(got) < (1 << 20):
                    chunk = data[out["sent"]:out["sent"] + 65536]
                    s.sendall(chunk)
                    out["sent"] += len(chunk)
                    continue
                d = s.recv(65536)
                if not d:
                    break
                got += d
            out["echoed"] = len(got)
            out["echo_ok"] = bytes(got) == data
    except Exception as e:  # noqa: BLE001
        out["error"] = kind(e)
    finally:
        raw.close()
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def replay(port, timeout, pause, chunks):
    out = {"line": None, "sent": sum(len(c) for c in chunks), "echoed": 0, "echo_ok": False,
           "error": None}
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.bind((SRC, 0))
        s.connect((VIP, port))
        for i, c in enumerate(chunks):
            if i:
                time.sleep(pause)
            s.sendall(c)
        line = b""
        while b"\n" not in line:
            d = s.recv(4096)
            if not d:
                raise EOFError("eof before the identify line")
            line += d
        first, rest = line.split(b"\n", 1)
        out["line"] = first.decode()
        got = rest
        want = b"".join(chunks)
        while len(got) < len(want):
            d = s.recv(65536)
            if not d:
                break
            got += d
        out["echoed"] = len(got)
        out["echo_ok"] = got == want
    except Exception as e:  # noqa: BLE001
        out["error"] = kind(e)
    finally:
        s.close()
    return out


def resume(port, sni, timeout):
    out = {"first_reused": None, "second_reused": None, "version": None, "body": None,
           "error": None}
    ctx = context()
    session = None
    try:
        for key in ("first_reused", "second_reused"):
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.settimeout(timeout)
            raw.bind((SRC, 0))
            raw.connect((VIP, port))
            with ctx.wrap_socket(raw, server_hostname=sni, session=session) as s:
                out["body"] = read_line(s).split()[0]
                out[key] = s.session_reused
                out["version"] = s.version()
                session = s.session
    except Exception as e:  # noqa: BLE001
        out["error"] = kind(e)
    return out


def main():
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "tls":
            answer = tls(int(cmd[1]), cmd[2], int(cmd[3]), int(cmd[4]), float(cmd[5]),
                         int(cmd[6]))
        elif cmd[0] == "bulk":
            answer = bulk(int(cmd[1]), cmd[2], int(cmd[3]), float(cmd[4]))
        elif cmd[0] == "resume":
            answer = resume(int(cmd[1]), cmd[2], float(cmd[3]))
        elif cmd[0] == "replay":
            answer = replay(int(cmd[1]), float(cmd[2]), float(cmd[3]) / 1000,
                            [bytes.fromhex(h) for h in cmd[4:]])
        else:
            answer = {"error": f"unknown command {cmd[0]!r}"}
        print(json.dumps(answer), flush=True)


main()
