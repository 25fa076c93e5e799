# A server espalier did not start, for the upstream tests: python3 upstream_backend.py HOST
# PORT NAME RECORD [CERT KEY [CLIENT_CA]] — over TLS with CERT and KEY, asking clients for a
# certificate CLIENT_CA signed when given. Every request appends "METHOD PATH" to RECORD. /health answers 503 while
# RECORD.sick exists, else 200; /drop reads the request's body and closes without answering;
# every other path answers "NAME PATH" with X-Server: NAME.
import http.server, os, ssl, sys

host, port, name, record = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with open(record, "a") as f:
            f.write(f"{self.command} {self.path}\n")
        if self.path == "/drop":
            self.close_connection = True
            return
        status = 200
        if self.path == "/health" and os.path.exists(record + ".sick"):
            status = 503
        body = f"{name} {self.path}\n".encode()
        self.send_response(status)
        self.send_header("X-Server", name)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = answer

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.daemon_threads = True
server = http.server.ThreadingHTTPServer((host, port), Handler)
if len(sys.argv) > 6:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    if len(sys.argv) > 7:
        context.load_verify_locations(sys.argv[7])
        context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
