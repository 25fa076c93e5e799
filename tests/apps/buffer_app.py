"""A WSGI app for the buffering tests (gunicorn, sync workers): /big?mb=N answers N MiB with
a Content-Length, /small answers "ok", POST /upload answers "got N" for its body's N bytes, /events answers one server-sent event and then holds
its stream open until the client goes (each later write fails)."""
import time

PIECE = b"b" * (64 << 10)


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/big":
        mb = int(environ.get("QUERY_STRING", "mb=1").split("=")[1])
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(mb << 20))])
        return (PIECE for _ in range(mb * 16))
    if path == "/upload":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        got = len(environ["wsgi.input"].read(length))
        body = f"got {got}".encode()
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if path == "/events":
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def events():
            yield b"data: one\n\n"
            # Bounded: the test reads the first event and goes.
            for _ in range(600):
                time.sleep(0.1)
                yield b": still here\n\n"
        return events()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
