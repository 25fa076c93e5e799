"""A test app that answers each path with a canned raw HTTP response, framing mistakes
included, so the proxy's handling of what apps send can be checked byte for byte.
Listens on 127.0.0.1:$PORT; one request per connection is enough for every case. With
CLOSE_UNANSWERED set, a connection's second request is read and the connection closed without
an answer: what an app does that closes a kept connection just as a request goes out."""
import os
import socketserver

CASES = {
    b"/gzip-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"/chunked-and-length": b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"/two-lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    b"/garbage": b"this is not http\r\n\r\n",
    b"/until-close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello until close",
    b"/interim": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal",
    b"/hop": b"HTTP/1.1 200 OK\r\nConnection: X-Private\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok",
    b"/huge-head": b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"b" * (80 << 10) + b"\r\nContent-Length: 2\r\n\r\nok",
    b"/many-headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"Content-Length: 2\r\n\r\nok",
    b"/healthz": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n",
    b"/branded": b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nX-Powered-By: Django\r\nX-Frame-Options: SAMEORIGIN\r\nX-App: kept\r\nContent-Length: 2\r\n\r\nok",
    b"/crash": b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\nContent-Length: 38\r\n\r\n<pre>Traceback: secret internals</pre>",
    b"/missing": b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\napp says 404\n",
}
# Compressible answers: a 20 KB page with a length and an ETag, the same chunked in pieces,
# one that must not be transformed, and one an image.
PAGE = b"".join(b"<p>line %d of a page worth compressing</p>\n" % i for i in range(500))
CASES[b"/big-text"] = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nETag: \"v1\"\r\nContent-Length: %d\r\n\r\n" % len(PAGE) + PAGE
CASES[b"/big-chunked"] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
    b"%x\r\n%s\r\n" % (len(PAGE[i:i + 3000]), PAGE[i:i + 3000]) for i in range(0, len(PAGE), 3000)) + b"0\r\n\r\n"
CASES[b"/no-transform"] = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-transform\r\nContent-Length: %d\r\n\r\n" % len(PAGE) + PAGE
CASES[b"/big-image"] = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n" % len(PAGE) + PAGE


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1]
        self.request.sendall(CASES.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
        if os.environ.get("CLOSE_UNANSWERED"):
            self.request.recv(4096)


socketserver.ThreadingTCPServer.allow_reuse_address = True
with socketserver.ThreadingTCPServer(("127.0.0.1", int(os.environ["PORT"])), Handler) as server:
    server.serve_forever()
