"""A test app that says who it runs as and what it may read: its uid, gid, groups and
NoNewPrivs (from /proc/self/status), whether it can open the file named by SECRET, and the
X-Forwarded-Proto it was sent. /own-hsts sets its own Strict-Transport-Security.
Listens on 127.0.0.1:$PORT; /healthz answers ok."""
import http.server
import os


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return " ".join(line.split()[1:])
    return "?"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            body = b"ok\n"
        else:
            try:
                with open(os.environ["SECRET"]) as f:
                    f.read()
                secret = "readable"
            except PermissionError:
                secret = "denied"
            body = (
                f"uid={os.getuid()} gid={os.getgid()} groups={status('Groups')} "
                f"no_new_privs={status('NoNewPrivs')} secret={secret} "
                f"proto={self.headers.get('X-Forwarded-Proto')}\n"
            ).encode()
        self.send_response(200)
        if self.path == "/own-hsts":
            self.send_header("Strict-Transport-Security", "max-age=1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
