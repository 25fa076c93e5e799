"""An ASGI app for uvicorn under espalier (socket activation: `uvicorn --fd 3`)."""
import os


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/healthz":
        body = b"ok\n"
    else:
        body = ("hello from uvicorn pid %d, espalier worker %s, node %s\n" % (
            os.getpid(), os.environ.get("ESPALIER_WORKER", "-"), os.environ.get("ESPALIER_NODE", "-"))).encode()
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"x-app-pid", str(os.getpid()).encode()),
        ],
    })
    await send({"type": "http.response.body", "body": body})
