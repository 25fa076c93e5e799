"""An `ask` service for espalier's on-demand certificates (tests/acme.rs): GET /check?domain=NAME
answers 200 for names starting with "ok" or "slow", 403 for any other; a "slow" name is held
until GET /release. GET /asked lists the names asked about so far, one per line, so the test
waits for what it can observe. Usage: acme_ask.py PORT"""
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

released = threading.Event()
asked = []
lock = threading.Lock()


class Ask(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/release":
            released.set()
            return self.answer(200, "released\n")
        if url.path == "/asked":
            with lock:
                return self.answer(200, "".join(n + "\n" for n in asked))
        name = parse_qs(url.query).get("domain", [""])[0]
        with lock:
            asked.append(name)
        if name.startswith("slow"):
            released.wait(60)
        ok = name.startswith("ok") or name.startswith("slow")
        self.answer(200 if ok else 403, "yes\n" if ok else "no\n")

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Ask).serve_forever()
