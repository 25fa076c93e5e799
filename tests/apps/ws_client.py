"""A WebSocket client over HTTP/2 (RFC 8441, on the `h2` package) or HTTP/3 (RFC 9220, on
aioquic), for the tests: one WebSocket to 127.0.0.1:PORT.

    ws_client.py h2|h2c|h3 PORT PATH [MESSAGE...]

h2 is TLS with ALPN h2, h2c cleartext with prior knowledge, h3 QUIC; the server's certificate
is not checked (the tests' is self-signed). The `:authority` (and SNI) is the environment's
WS_NAME, else `localhost`. The client sends `:method CONNECT`, `:protocol websocket` and
`sec-websocket-version: 13`, and once answered 200 each MESSAGE as a masked text frame,
reading its echo; then a close frame, after which it waits for the server to end its stream,
and ends its own. Prints one JSON line: `settings` (the server's
SETTINGS_ENABLE_CONNECT_PROTOCOL, 0 when it sent none), `status`, `headers`, `echoes` (the
texts of the frames received back), `body` (the answer's text when it is no tunnel) and
`ended`: how the server's side of the stream ended — "end", "reset", or "open" when it had
not within 10 s. With WS_IDLE=1 the client sends nothing once answered (no message, no
close) and waits up to 60 s for the server to end the stream: an idle tunnel's bound."""
import asyncio
import json
import os
import socket
import ssl
import sys
import time

NAME = os.environ.get("WS_NAME", "localhost")
IDLE = bool(os.environ.get("WS_IDLE"))
CONNECT_PROTOCOL = 0x8


def masked(opcode, text):
    """A client's frame (RFC 6455 §5.2): FIN, `opcode`, masked, a payload under 126 bytes."""
    payload = text.encode()
    mask = bytes([0x12, 0x34, 0x56, 0x78])
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + bytes(
        b ^ mask[i % 4] for i, b in enumerate(payload)
    )


def frames(buf):
    """The whole frames at the start of `buf` (unmasked, as a server sends them) and the rest."""
    out = []
    while len(buf) >= 2 and len(buf) >= 2 + (buf[1] & 0x7F):
        n = buf[1] & 0x7F
        out.append((buf[0] & 0x0F, buf[2 : 2 + n].decode(errors="replace")))
        buf = buf[2 + n :]
    return out, buf


def request_fields(scheme, path):
    return [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", scheme),
        (":path", path),
        (":authority", NAME),
        ("sec-websocket-version", "13"),
    ]


def over_h2(tls, port, path, messages):
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock, server_hostname=NAME)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    got = {"settings": None, "status": None, "headers": [], "data": b"", "ended": "open"}

    def read_until(done, seconds=10):
        until = time.time() + seconds
        while not done() and time.time() < until:
            sock.settimeout(max(0.01, until - time.time()))
            try:
                data = sock.recv(65536)
            except (socket.timeout, ssl.SSLError):
                return
            if not data:
                return
            for e in conn.receive_data(data):
                if isinstance(e, h2.events.RemoteSettingsChanged):
                    got["settings"] = conn.remote_settings.get(CONNECT_PROTOCOL, 0)
                elif isinstance(e, h2.events.ResponseReceived):
                    fields = dict(e.headers)
                    got["status"] = int(fields.pop(":status"))
                    got["headers"] = sorted(fields.items())
                elif isinstance(e, h2.events.DataReceived):
                    got["data"] += e.data
                    conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    got["ended"] = "end"
                elif isinstance(e, h2.events.StreamReset):
                    got["ended"] = "reset"
            sock.sendall(conn.data_to_send())

    read_until(lambda: got["settings"] is not None)
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, request_fields("https" if tls else "http", path))
    sock.sendall(conn.data_to_send())
    read_until(lambda: got["status"] is not None or got["ended"] != "open")
    echoes = []
    if got["status"] == 200 and not IDLE:
        for text in messages:
            conn.send_data(stream, masked(0x1, text))
            sock.sendall(conn.data_to_send())
            read_until(lambda: frames(got["data"])[0])
            (received, got["data"]) = frames(got["data"])
            echoes += [t for _, t in received]
        conn.send_data(stream, masked(0x8, ""))
        sock.sendall(conn.data_to_send())
    read_until(lambda: got["ended"] != "open", 60 if IDLE else 10)
    if got["ended"] == "end":
        # Ours ends in turn; a refusal's stream the server closed whole takes nothing more.
        try:
            conn.end_stream(stream)
            sock.sendall(conn.data_to_send())
        except h2.exceptions.StreamClosedError:
            pass
    sock.close()
    return got, echoes


async def over_h3(port, path, messages):
    from aioquic.asyncio.client import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import StreamReset

    got = {"settings": None, "status": None, "headers": [], "data": b"", "ended": "open"}

    class Client(QuicConnectionProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.h3 = H3Connection(self._quic)
            self.changed = asyncio.Event()

        def quic_event_received(self, event):
            if isinstance(event, StreamReset):
                got["ended"] = "reset"
            for e in self.h3.handle_event(event):
                if isinstance(e, HeadersReceived):
                    fields = {k.decode(): v.decode() for k, v in e.headers}
                    got["status"] = int(fields.pop(":status"))
                    got["headers"] = sorted(fields.items())
                elif isinstance(e, DataReceived):
                    got["data"] += e.data
                if getattr(e, "stream_ended", False):
                    got["ended"] = "end"
            self.changed.set()

        async def until(self, done, seconds=10):
            until = time.time() + seconds
            while not done() and time.time() < until:
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), max(0.01, until - time.time()))
                except asyncio.TimeoutError:
                    return

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = NAME
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client) as c:
        stream = c._quic.get_next_available_stream_id()
        fields = [(k.encode(), v.encode()) for k, v in request_fields("https", path)]
        c.h3.send_headers(stream, fields, end_stream=False)
        c.transmit()
        await c.until(lambda: got["status"] is not None or got["ended"] != "open")
        settings = c.h3.received_settings or {}
        got["settings"] = settings.get(CONNECT_PROTOCOL, 0)
        echoes = []
        if got["status"] == 200 and not IDLE:
            for text in messages:
                c.h3.send_data(stream, masked(0x1, text), end_stream=False)
                c.transmit()
                await c.until(lambda: frames(got["data"])[0])
                (received, got["data"]) = frames(got["data"])
                echoes += [t for _, t in received]
            c.h3.send_data(stream, masked(0x8, ""), end_stream=False)
            c.transmit()
        await c.until(lambda: got["ended"] != "open", 60 if IDLE else 10)
        if got["ended"] == "end":
            # Ours ends in turn; a refusal's stream the server stopped takes nothing more.
            try:
                c._quic.send_stream_data(stream, b"", end_stream=True)
                c.transmit()
            except (RuntimeError, ValueError):
                pass
    return got, echoes


def main():
    kind, port, path, messages = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if kind == "h3":
        got, echoes = asyncio.run(over_h3(port, path, messages))
    else:
        got, echoes = over_h2(kind == "h2", port, path, messages)
    body = "" if got["status"] == 200 else got["data"].decode(errors="replace")
    print(
        json.dumps(
            {
                "settings": got["settings"],
                "status": got["status"],
                "headers": got["headers"],
                "echoes": echoes,
                "body": body,
                "ended": got["ended"],
            }
        )
    )


main()
