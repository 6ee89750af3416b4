"""HTTP/1.1 keep-alive server for sluice's per-request proxy tests:
`http11_server.py PORT ADDR...`.

Listens on PORT at every ADDR. Answers:
- GET/HEAD: `200` with the body "backend <ADDR> host <Host> path <target> xff <X-Forwarded-For>
  xfp <X-Forwarded-Proto>[ xfcc <X-Forwarded-Client-Cert>]" (one line; the last part only
  when the header came) and `X-Backend: <ADDR>`;
- POST/PUT: reads the body (Content-Length or chunked, decoded here) and answers
  "backend <ADDR> length <n> sha256 <hex>";
- GET /ws with `Upgrade: websocket`: `101 Switching Protocols` (RFC 6455 accept key), then
  echoes every text or binary frame back unmasked until a close frame.
Prints "ready" once listening; then, for each mirrored copy (a Host whose name ends in
`-shadow`), one line "mirror <ADDR> <Host> <target> <Connection> <sha256 of the body>" once
it is answered. Exits when stdin closes (the test that started it has gone).
"""

import base64
import hashlib
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # HTTPServer's own looks the address up in DNS (getfqdn), which hangs in a
        # namespace without a resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def read_exact(f, n):
    out = bytearray()
    while len(out) < n:
        b = f.read(n - len(out))
        if not b:
            raise EOFError("short read")
        out += b
    return bytes(out)


def handler_for(addr):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def note_mirror(self, digest):
            host = self.headers.get("Host", "")
            if host.split(":")[0].endswith("-shadow"):
                conn = self.headers.get("Connection", "-")
                print(f"mirror {addr} {host} {self.path} {conn} {digest}", flush=True)

        def send_body(self, body, with_body=True):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", addr)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - the http.server API
            if self.headers.get("Upgrade", "").lower() == "websocket":
                return self.websocket()
            h = self.headers
            xfcc = h.get("X-Forwarded-Client-Cert")
            body = (
                f"backend {addr} host {h.get('Host')} path {self.path} "
                f"xff {h.get('X-Forwarded-For')} xfp {h.get('X-Forwarded-Proto')}"
                + (f" xfcc {xfcc}" if xfcc is not None else "")
                + "\n"
            ).encode()
            self.send_body(body)
            self.note_mirror(hashlib.sha256(b"").hexdigest())

        def do_HEAD(self):  # noqa: N802
            self.send_body(b"x" * 10, with_body=False)

        def do_POST(self):  # noqa: N802
            digest = hashlib.sha256()
            n = 0
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                while True:
                    line = self.rfile.readline(65537)
                    size = int(line.split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    data = read_exact(self.rfile, size)
                    digest.update(data)
                    n += size
                    read_exact(self.rfile, 2)
            else:
                left = int(self.headers.get("Content-Length", "0"))
                while left > 0:
                    data = self.rfile.read(min(left, 1 << 16))
                    if not data:
                        break
                    digest.update(data)
                    n += len(data)
                    left -= len(data)
            self.send_body(f"backend {addr} length {n} sha256 {digest.hexdigest()}\n".encode())
            self.note_mirror(digest.hexdigest())

        do_PUT = do_POST  # noqa: N815

        def websocket(self):
            key = self.headers.get("Sec-WebSocket-Key", "")
            accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            while True:
                hdr = read_exact(self.rfile, 2)
                op = hdr[0] & 0x0F
                ln = hdr[1] & 0x7F
                if ln == 126:
                    ln = int.from_bytes(read_exact(self.rfile, 2), "big")
                elif ln == 127:
                    ln = int.from_bytes(read_exact(self.rfile, 8), "big")
                mask = read_exact(self.rfile, 4) if hdr[1] & 0x80 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(read_exact(self.rfile, ln)))
                if op == 8:
                    self.wfile.write(b"\x88\x00")
                    self.wfile.flush()
                    self.close_connection = True
                    return
                out = bytes([0x80 | op])
                if len(data) < 126:
                    out += bytes([len(data)])
                elif len(data) < 65536:
                    out += bytes([126]) + len(data).to_bytes(2, "big")
                else:
                    out += bytes([127]) + len(data).to_bytes(8, "big")
                self.wfile.write(out + data)
                self.wfile.flush()

        def log_message(self, *args):
            pass

    return Handler


def main():
    port = int(sys.argv[1])
    for addr in sys.argv[2:]:
        srv = Server((addr, port), handler_for(addr))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


main()
