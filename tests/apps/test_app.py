# The tests' small HTTP app: `/slow…` is answered after a second (SLOW_SECONDS when set; a
# request in flight while others are routed), `/endless…` streams without end, anything else at once; with RECORD
# set, every path it is asked for is appended to that file (which requests reached it, in
# what order); START_DELAY (seconds) delays its start, as a slow app's imports do;
# `/whoami…` answers the X-Remote-User it was sent (who signed in, as espalier says), and
# `…/subject…` the X-Client-Subject (whose client certificate).
import http.server, os, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if "RECORD" in os.environ:
            with open(os.environ["RECORD"], "a") as f:
                f.write(self.path + "\n")
        if self.path.startswith("/endless"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = b"x" * 65536
            while True:
                self.wfile.write(b"10000\r\n" + piece + b"\r\n")
        if self.path.startswith("/slow"):
            time.sleep(float(os.environ.get("SLOW_SECONDS", "1")))
        body = b"app\n"
        if self.path.startswith("/whoami") or "/whoami" in self.path:
            body = ("user=%s\n" % self.headers.get("X-Remote-User", "")).encode()
        if "/subject" in self.path:
            body = ("subject=%s\n" % self.headers.get("X-Client-Subject", "")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
time.sleep(float(os.environ.get("START_DELAY", "0")))
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
