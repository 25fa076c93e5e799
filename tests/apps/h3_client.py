"""An HTTP/3 client on aioquic (PyPI), for the tests: one request to HOST:PORT.

    h3_client.py PORT METHOD PATH [BODY_FILE]

Trusts nothing but checks nothing either (the test's certificate is self-signed); sends SNI
and :authority `localhost`. The environment's H3_FIELD (`name: value`) adds a header field;
H3_NO_LENGTH=1 sends a body without `content-length`; H3_PAUSE_AT=N with H3_WAIT_FOR=FILE
sends the body's first N bytes, waits (30 s at most) until FILE exists, then the rest. Prints one JSON line: the status, the header fields, the body's
length and SHA-256, and its text when it is short."""
import asyncio
import hashlib
import json
import os
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.done = {}
        self.got = {}

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)):
                r = self.got.setdefault(e.stream_id, {"headers": [], "body": b""})
                if isinstance(e, HeadersReceived):
                    r["headers"] += [(k.decode(), v.decode()) for k, v in e.headers]
                else:
                    r["body"] += e.data
                if e.stream_ended and e.stream_id in self.done:
                    self.done.pop(e.stream_id).set_result(r)

    async def request(self, method, path, body):
        stream = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ]
        if body and not os.environ.get("H3_NO_LENGTH"):
            fields.append((b"content-length", str(len(body)).encode()))
        if os.environ.get("H3_FIELD"):
            name, value = os.environ["H3_FIELD"].split(": ", 1)
            fields.append((name.encode(), value.encode()))
        self.h3.send_headers(stream, fields, end_stream=not body)
        self.done[stream] = asyncio.get_running_loop().create_future()
        pause = int(os.environ.get("H3_PAUSE_AT", "0"))
        if body and pause:
            self.h3.send_data(stream, body[:pause], end_stream=False)
            self.transmit()
            for _ in range(3000):
                if os.path.exists(os.environ["H3_WAIT_FOR"]):
                    break
                await asyncio.sleep(0.01)
            else:
                raise SystemExit("the body's first part never reached the app")
            body = body[pause:]
        if body:
            self.h3.send_data(stream, body, end_stream=True)
        self.transmit()
        return await asyncio.wait_for(self.done[stream], 30)


async def main():
    port, method, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    body = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else b""
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client) as c:
        r = await c.request(method, path, body)
    fields = [(k, v) for k, v in r["headers"] if not k.startswith(":")]
    status = next(int(v) for k, v in r["headers"] if k == ":status")
    text = r["body"].decode("utf-8", "replace") if len(r["body"]) < 4096 else ""
    print(json.dumps({
        "status": status,
        "headers": fields,
        "len": len(r["body"]),
        "sha256": hashlib.sha256(r["body"]).hexdigest(),
        "text": text,
    }))


asyncio.run(main())
