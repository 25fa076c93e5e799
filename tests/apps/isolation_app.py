"""A test app that tries what a tenant's code might, and says what happened: GET
/write?PATH writes a line to PATH, /read?PATH reads it, /list?DIR lists a folder,
/bind?PORT binds TCP 127.0.0.1:PORT (and lets it go), /connect?PORT connects to it, /alloc?MIB allocates and keeps that
much memory, /fill?MIB writes that much to a file in /tmp (as far as it goes), /io?MIB writes
that much into its working directory, /spawn?N starts up to N `sleep` processes and says how many started (then ends
them). Each answers `ok …` or the OS's
error (`PermissionError: …`, `FileNotFoundError: …`), always 200. Listens on the unix
socket its first argument names (`{socket}`), else on 127.0.0.1:$PORT; /healthz answers ok."""
import http.server
import os
import socket
import socketserver
import subprocess
import sys
import urllib.parse


# What /alloc took, kept.
KEPT = []


def attempt(path, arg):
    if path == "/write":
        with open(arg, "w") as f:
            f.write(f"written by {os.environ.get('ESPALIER_POOL')}\n")
        return "ok"
    if path == "/read":
        with open(arg) as f:
            return "ok " + f.read()
    if path == "/list":
        return "ok " + " ".join(sorted(os.listdir(arg)))
    if path == "/alloc":
        KEPT.append(bytearray(int(arg) << 20))
        return "ok"
    if path == "/spawn":
        started = []
        try:
            for _ in range(int(arg)):
                started.append(subprocess.Popen(["sleep", "60"]))
        except OSError as e:
            why = f" ({type(e).__name__})"
        else:
            why = ""
        for p in started:
            p.kill()
            p.wait()
        return f"ok spawned {len(started)}{why}"
    if path == "/fill":
        # MIB of one file in /tmp, as far as it goes (its size is the private /tmp's bound).
        written = 0
        try:
            with open("/tmp/espalier-fill", "ab") as f:
                for _ in range(int(arg)):
                    f.write(b"\0" * (1 << 20))
                    written += 1
        finally:
            os.unlink("/tmp/espalier-fill")
        return f"ok {written}"
    if path == "/io":
        # MIB written through the page cache into its own folder, then dropped.
        with open("espalier-io", "wb") as f:
            for _ in range(int(arg)):
                f.write(os.urandom(1 << 20))
        os.unlink("espalier-io")
        return "ok"
    if path == "/connect":
        with socket.create_connection(("127.0.0.1", int(arg)), timeout=5):
            return "ok"
    if path == "/bind":
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", int(arg)))
        finally:
            s.close()
        return "ok"
    return "ok"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Its head and body go in two writes: without this, Nagle's algorithm holds the body for
    # the peer's delayed ACK (40 ms), which would be all a latency measure sees.
    disable_nagle_algorithm = True

    def do_GET(self):
        path, _, arg = self.path.partition("?")
        try:
            text = attempt(path, urllib.parse.unquote(arg))
        except OSError as e:
            text = f"{type(e).__name__}: {e.strerror}"
        body = (text + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # A POST does the same (a proxy sends a failed GET again, not a POST).
    do_POST = do_GET

    def log_message(self, *args):
        pass


class UnixHandler(Handler):
    # A unix socket has no Nagle to turn off.
    disable_nagle_algorithm = False


class UnixServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", 0


if len(sys.argv) > 1:
    UnixServer(sys.argv[1], UnixHandler).serve_forever()
else:
    http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
