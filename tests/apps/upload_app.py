"""A test app that takes uploads as they come: POST bodies framed by Content-Length or
chunked are read piece by piece; once X-Mark-After bytes of a body have arrived it creates
the file $MARKS/<path> (so a test can see the body reach the app before it has all been
sent), and answers the body's length, SHA-256 and framing. /early answers at once, its
body unread; /early-data answers its Early-Data field (`-` without one).
Listens on 127.0.0.1:$PORT; /healthz answers ok."""
import hashlib
import http.server
import os


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/early-data":
            return self.answer(f"early-data={self.headers.get('Early-Data', '-')}\n".encode())
        self.answer(b"ok\n")

    def do_POST(self):
        if self.path == "/early-data":
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            return self.answer(f"early-data={self.headers.get('Early-Data', '-')}\n".encode())
        if self.path == "/early":
            # Answers without reading the body, as an app refusing an upload may.
            self.close_connection = True
            return self.answer(b"early\n")
        mark_after = int(self.headers.get("X-Mark-After", "0") or 0)
        digest, got, marked = hashlib.sha256(), 0, False

        def took(piece):
            nonlocal got, marked
            digest.update(piece)
            got += len(piece)
            if mark_after and got >= mark_after and not marked:
                open(os.path.join(os.environ["MARKS"], self.path.strip("/")), "w").close()
                marked = True

        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            framing = "chunked"
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                while size:
                    piece = self.rfile.read1(min(size, 16384))
                    took(piece)
                    size -= len(piece)
                self.rfile.readline()  # the CRLF after the chunk's data
        else:
            framing = "length"
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                piece = self.rfile.read1(min(left, 16384))
                if not piece:
                    break
                took(piece)
                left -= len(piece)
        self.answer(f"len={got} sha256={digest.hexdigest()} framing={framing}\n".encode())

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
