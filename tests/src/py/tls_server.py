"""TLS server for sluice's kernel tests: `tls_server.py PORT CERTDIR NAME=ADDR...`.

Listens on PORT at every ADDR with the certificate CERTDIR/NAME.crt (key NAME.key), so a
client tells the backends apart by the certificate it receives. Each connection: the TLS
handshake, then one line "<NAME> <ADDR>" (the body names the backend too), then whatever
the client sends is echoed back until it closes. Prints "ready" once listening;
exits when stdin closes (the test that started it has gone).
"""

import os
import socket
import ssl
import sys
import threading


def serve(ctx, conn, name, addr):
    try:
        conn.settimeout(20)
        with ctx.wrap_socket(conn, server_side=True) as s:
            s.sendall(f"{name} {addr}\n".encode())
            while True:
                data = s.recv(65536)
                if not data:
                    break
                s.sendall(data)
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def accept_loop(listener, ctx, name, addr):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(ctx, conn, name, addr), daemon=True).start()


def main():
    port, certdir = int(sys.argv[1]), sys.argv[2]
    for spec in sys.argv[3:]:
        name, addr = spec.split("=", 1)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(certdir, name + ".crt"), os.path.join(certdir, name + ".key"))
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(1024)
        threading.Thread(target=accept_loop, args=(s, ctx, name, addr), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


main()
