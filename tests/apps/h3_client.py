"""An HTTP/3 client on aioquic (PyPI), for the tests: one request to HOST:PORT.

    h3_client.py PORT METHOD PATH [BODY_FILE]

Trusts nothing but checks nothing either (the test's certificate is self-signed); sends SNI
and :authority `localhost`, or the environment's H3_NAME. The environment's H3_FIELD (`name: value`) adds a header field;
H3_MANY_FIELDS=N adds N small fields; H3_NO_LENGTH=1 sends a body without `content-length`; H3_PAUSE_AT=N with H3_WAIT_FOR=FILE
sends the body's first N bytes, waits (30 s at most) until FILE exists, then the rest.
H3_ZERO_RTT=1 connects twice: a GET of / for a session ticket, then the request in 0-RTT
(sent before the handshake completes, on the resumed session). H3_TICKET_OUT=FILE keeps the
connection's last session ticket in FILE; H3_TICKET_IN=FILE resumes that ticket (another
process's: with H3_ZERO_RTT, in 0-RTT) instead of connecting twice. With H3_HOLD_FINISHED=PATH
too, the client holds back its handshake's end (its Handshake packets) and sends a GET of
PATH beside the request; once that GET is answered it notes whether the request had been,
then lets the handshake end. With H3_GOAWAY_AND_HOLD=SECONDS, once answered it prints
`answered`, sends a GOAWAY of its own and holds the connection open that long, or until the
server closes it. H3_RESERVED_FRAME=N sends, after the request's head, a frame of a reserved
type (RFC 9114 §7.2.8) with N bytes of payload, then ends the request. H3_MIGRATE=N, once
answered, sends a PING from each of N new UDP sockets (other ports: a spoofed or rebound
client) and adds to the JSON the bytes sent from them and the bytes the server sent to
them within 2 s. Prints one JSON line: the status, the header fields, the
body's length and SHA-256, its text when it is short, whether the server took early data,
and with H3_HOLD_FINISHED the probe's text and whether the request was answered first."""
import asyncio
import hashlib
import json
import os
import pickle
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection, encode_frame
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
            (b":authority", os.environ.get("H3_NAME", "localhost").encode()),
            (b":path", path.encode()),
        ]
        if body and not os.environ.get("H3_NO_LENGTH"):
            fields.append((b"content-length", str(len(body)).encode()))
        if os.environ.get("H3_FIELD"):
            name, value = os.environ["H3_FIELD"].split(": ", 1)
            fields.append((name.encode(), value.encode()))
        for k in range(int(os.environ.get("H3_MANY_FIELDS", "0"))):
            fields.append((f"x-f{k}".encode(), b"v"))
        reserved = int(os.environ.get("H3_RESERVED_FRAME", "0"))
        self.h3.send_headers(stream, fields, end_stream=not body and not reserved)
        self.done[stream] = asyncio.get_running_loop().create_future()
        if reserved:
            # Type 0x1f * 7 + 0x21, its payload sent as flow control lets it go.
            head = encode_uint_var(0x1F * 7 + 0x21) + encode_uint_var(reserved)
            self._quic.send_stream_data(stream, head)
            piece = bytes(64 << 10)
            sent = 0
            while sent < reserved:
                n = min(len(piece), reserved - sent)
                self._quic.send_stream_data(stream, piece[:n])
                sent += n
                self.transmit()
                await asyncio.sleep(0)
            if not body:
                self._quic.send_stream_data(stream, b"", end_stream=True)
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


def varint(data, i):
    """A QUIC variable-length integer at data[i]: (value, index after it)."""
    n = 1 << (data[i] >> 6)
    value = data[i] & 0x3F
    for k in range(1, n):
        value = (value << 8) | data[i + k]
    return value, i + n


def has_handshake_packet(data):
    """Whether a datagram's coalesced long-header packets include a Handshake one (type 2)."""
    i = 0
    while i < len(data) and data[i] & 0x80:
        kind = (data[i] >> 4) & 3
        if kind == 2:
            return True
        j = i + 5
        j += 1 + data[j]  # destination connection ID
        j += 1 + data[j]  # source connection ID
        if kind == 0:
            n, j = varint(data, j)  # an Initial's token
            j += n
        n, j = varint(data, j)
        i = j + n
    return False


async def migrate_from(c, port, n):
    """PINGs of the connection `c` sent from `n` new UDP sockets: the bytes sent from them,
    and those the server sent back to them within 2 s."""
    import socket
    import time

    socks = []
    sent = 0
    for k in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        socks.append(s)
        c._quic.send_ping(k)
        for data, _addr in c._quic.datagrams_to_send(now=time.time()):
            s.sendto(data, ("127.0.0.1", port))
            sent += len(data)
    received = 0
    until = time.time() + 2
    while time.time() < until:
        for s in socks:
            try:
                while True:
                    received += len(s.recv(65536))
            except BlockingIOError:
                pass
        await asyncio.sleep(0.02)
    for s in socks:
        s.close()
    return {"migrated_sent": sent, "migrated_received": received}


async def last_ticket(tickets):
    """The last session ticket the connection took, waiting up to 3 s for one."""
    for _ in range(300):
        if tickets:
            return tickets[-1]
        await asyncio.sleep(0.01)
    raise SystemExit("the server sent no session ticket")


async def main():
    port, method, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    body = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else b""
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = os.environ.get("H3_NAME", "localhost")
    early = bool(os.environ.get("H3_ZERO_RTT"))
    ticket_in, ticket_out = os.environ.get("H3_TICKET_IN"), os.environ.get("H3_TICKET_OUT")
    if ticket_in:
        # Another process's ticket: this connection may land on another worker.
        with open(ticket_in, "rb") as f:
            config.session_ticket = pickle.load(f)
    elif early:
        tickets = []
        async with connect("127.0.0.1", port, configuration=config, create_protocol=Client,
                           session_ticket_handler=tickets.append) as c:
            await c.request("GET", "/", b"")
            config.session_ticket = await last_ticket(tickets)
    held = {}
    kept = []
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client,
                       session_ticket_handler=kept.append, wait_connected=not early) as c:
        probe = os.environ.get("H3_HOLD_FINISHED")
        if probe:
            send = c._transport.sendto
            hold = [True]

            def sendto(data, addr):
                # A datagram with a Handshake packet carries the client's Finished: dropped
                # while held (the client sends it again later).
                if hold[0] and has_handshake_packet(data):
                    return
                send(data, addr)

            c._transport.sendto = sendto
            main = asyncio.ensure_future(c.request(method, path, body))
            await asyncio.sleep(0)
            answered = await c.request("GET", probe, b"")
            held["probe"] = answered["body"].decode()
            held["answered_first"] = main.done()
            hold[0] = False
            r = await main
        else:
            r = await c.request(method, path, body)
        migrate = int(os.environ.get("H3_MIGRATE", "0"))
        if migrate:
            held.update(await migrate_from(c, port, migrate))
        hold_open = os.environ.get("H3_GOAWAY_AND_HOLD")
        if hold_open:
            print("answered", flush=True)
            goaway = encode_frame(FrameType.GOAWAY, encode_uint_var(0))
            c._quic.send_stream_data(c.h3._local_control_stream_id, goaway)
            c.transmit()
            try:
                await asyncio.wait_for(c.wait_closed(), float(hold_open))
            except asyncio.TimeoutError:
                pass
        early_accepted = c._quic.tls.early_data_accepted
        if ticket_out:
            ticket = await last_ticket(kept)
            with open(ticket_out, "wb") as f:
                pickle.dump(ticket, f)
    fields = [(k, v) for k, v in r["headers"] if not k.startswith(":")]
    status = next((int(v) for k, v in r["headers"] if k == ":status"), None)
    if status is None:
        raise SystemExit(f"no status: {r} {held}")
    text = r["body"].decode("utf-8", "replace") if len(r["body"]) < 4096 else ""
    print(json.dumps({
        "status": status,
        "headers": fields,
        "len": len(r["body"]),
        "sha256": hashlib.sha256(r["body"]).hexdigest(),
        "text": text,
        "early_data": early_accepted,
        **held,
    }))


asyncio.run(main())
