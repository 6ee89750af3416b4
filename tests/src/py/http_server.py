"""HTTP server for sluice's kernel tests: `http_server.py PORT ADDR...`.

Listens on PORT at every ADDR and answers every GET/HEAD with `200 OK` and the body
"backend <ADDR> host <Host header> path <request target>" (one line), so a client sees
which backend its Host and path were routed to. Prints "ready" once listening; exits when
stdin closes (the test that started it has gone).
"""

import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # HTTPServer's own looks the address up in DNS (getfqdn), which hangs in a
        # namespace without a resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def handler_for(addr):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def answer(self, with_body):
            body = f"backend {addr} host {self.headers.get('Host')} path {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", addr)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - the http.server API
            self.answer(True)

        def do_HEAD(self):  # noqa: N802
            self.answer(False)

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
