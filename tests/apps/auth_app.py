"""The sign-in tests' two sides (tests/auth_request.rs), on Python's standard library:

    auth_app.py verifier PORT RECORD   # a verifier, as oauth2-proxy's /oauth2/auth is
    auth_app.py app [PORT NAME]        # an app: a pool's (on $PORT) or an upstream's

The verifier appends one JSON line per question to RECORD (method, path, every field, and
how many body bytes came with it) and answers by the request it is told of
(X-Forwarded-Uri and the fields it was sent):
  - a path under /broken: 500; under /slow: 200 after 3 s;
  - a path under /forbidden: 403 with a body;
  - Cookie session=alice: 200 with X-User: alice and X-Email: alice@example.com;
  - Authorization: Bearer letmein: 204, no identity;
  - Cookie session=expired: 302 to the sign-in page, with a Set-Cookie;
  - anything else: 401 with WWW-Authenticate: Bearer realm="shop" and a body.
The app answers every request with what it was told, one line:
"app=NAME user=X email=Y method=M body=N path=P" (NAME: "pool" for a pool's app), and says
"app NAME took METHOD PATH" on its standard error."""
import http.server
import json
import os
import sys
import time


class Verifier(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with open(RECORD, "a") as f:
            f.write(json.dumps({
                "method": self.command,
                "path": self.path,
                "fields": {k.lower(): v for k, v in self.headers.items()},
                "body": len(body),
            }) + "\n")
        uri = self.headers.get("X-Forwarded-Uri", "")
        cookie = self.headers.get("Cookie", "")
        fields, status, text = [], 401, b"who are you?\n"
        if uri.startswith("/broken"):
            status, text = 500, b"broken\n"
        elif uri.startswith("/slow"):
            time.sleep(3)
            status, text = 200, b""
        elif uri.startswith("/forbidden"):
            status, text = 403, b"not for you\n"
        elif "session=alice" in cookie:
            status, text = 200, b""
            fields = [("X-User", "alice"), ("X-Email", "alice@example.com")]
        elif self.headers.get("Authorization") == "Bearer letmein":
            status, text = 204, b""
        elif "session=expired" in cookie:
            status, text = 302, b"sign in first\n"
            url = self.headers.get("X-Original-URL", "")
            fields = [("Location", "https://sso.example/start?rd=" + url),
                      ("Set-Cookie", "csrf=abc; Path=/; HttpOnly")]
        else:
            fields = [("WWW-Authenticate", 'Bearer realm="shop"'),
                      ("Content-Type", "text/plain")]
        self.send_response(status)
        for name, value in fields:
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if status != 204:
            self.wfile.write(text)

    def log_message(self, *args):
        pass


class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        print(f"app {NAME} took {self.command} {self.path}", file=sys.stderr, flush=True)
        h = self.headers
        text = (f"app={NAME} user={h.get('X-User', '')} email={h.get('X-Email', '')} "
                f"method={self.command} body={len(body)} path={self.path}\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    do_GET = do_POST = do_PUT = answer

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.daemon_threads = True
if sys.argv[1] == "verifier":
    RECORD = sys.argv[3]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Verifier)
else:
    port = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ["PORT"])
    NAME = sys.argv[3] if len(sys.argv) > 3 else "pool"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), App)
server.serve_forever()
