"""TCP server for sluice's kernel tests: `identify_server.py PORT ADDR...`.

Listens on PORT at every ADDR. Each connection is first answered with one line
"<local address> <peer address>:<peer port>", then everything received is echoed back
until the peer closes. Prints "ready" once listening; exits when stdin closes (the test
that started it has gone).

Every connection is logged: the command `log` on stdin answers one JSON line, a list of
[local address, peer address, peer port, accepted, closed] (monotonic seconds; closed is
null while open) in the order accepted.
"""

import json
import socket
import sys
import threading
import time

log = []
log_lock = threading.Lock()


def serve(conn, local, peer, entry):
    try:
        conn.sendall(f"{local} {peer[0]}:{peer[1]}\n".encode())
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()
        with log_lock:
            entry[4] = time.monotonic()


def accept_loop(listener, local):
    while True:
        conn, peer = listener.accept()
        entry = [local, peer[0], peer[1], time.monotonic(), None]
        with log_lock:
            log.append(entry)
        threading.Thread(target=serve, args=(conn, local, peer, entry), daemon=True).start()


def main():
    port = int(sys.argv[1])
    for addr in sys.argv[2:]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(1024)
        threading.Thread(target=accept_loop, args=(s, addr), daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "log":
            with log_lock:
                print(json.dumps(log), flush=True)


main()
