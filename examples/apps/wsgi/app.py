"""A WSGI app for gunicorn under espalier: who answered, and where it runs.

Run by examples/apps/gunicorn.toml (socket activation: gunicorn finds the pool's sockets in
LISTEN_FDS by itself, so no --bind).
"""
import os


def _status_field(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return "?"


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/healthz":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]
    body = (
        "hello from gunicorn pid %d, espalier worker %s, node %s, cpus %s, mems %s\n"
        % (
            os.getpid(),
            os.environ.get("ESPALIER_WORKER", "-"),
            os.environ.get("ESPALIER_NODE", "-"),
            _status_field("Cpus_allowed_list"),
            _status_field("Mems_allowed_list"),
        )
    ).encode()
    start_response(
        "200 OK",
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("X-App-Pid", str(os.getpid())),
        ],
    )
    return [body]
