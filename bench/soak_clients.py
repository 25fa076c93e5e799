#!/usr/bin/env python3
"""Slow and hostile clients for bench/soak.sh: slowloris heads, slow bodies, chunk-extension
floods and the crafted requests of the hardening issue, kept coming at the given ports for
the given number of seconds. Prints one line of counts: what was sent and how it was answered.

    soak_clients.py SECONDS PORT [PORT…]
"""
import asyncio
import collections
import sys
import time

CRAFTED = (
    b"POST /dyn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"1\r\na\r\nffffffffffffffff\r\nxxxxxxxxxxxxxxxxxxxxxxxx\r\n0\r\n\r\n"
)
AMBIGUOUS = [
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"POST /dyn HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET //big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
]
counts = collections.Counter()


async def answer(reader, limit=1 << 16):
    """The status of the first response, or 'closed'."""
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
        parts = line.split()
        return parts[1].decode() if len(parts) > 1 else "closed"
    except asyncio.TimeoutError:
        return "timeout"
    except ConnectionError:
        # A client still writing after its answer may get a reset that overtakes the answer
        # (past the server's lingering-close allowance): refused, but unread.
        return "reset"


async def trickle(port, end, head, byte, label):
    """Sends `head`, then one byte a second until the server answers (or closes)."""
    while time.time() < end:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(head)
            reading = asyncio.ensure_future(answer(r))
            while not reading.done() and time.time() < end:
                w.write(byte)
                await asyncio.sleep(1)
            counts[f"{label} {await reading}"] += 1
            w.close()
        except ConnectionError:
            counts[f"{label} refused"] += 1
            await asyncio.sleep(1)


def slow_head(port, end):
    return trickle(port, end, b"GET / HTTP/1.1\r\nHost: x\r\n", b"X", "slowloris")


def slow_body(port, end):
    head = b"POST /dyn HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    return trickle(port, end, head, b"b", "slow body")


async def one_shot(port, data, label):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(data)
        await w.drain()
        counts[f"{label} {await answer(r)}"] += 1
        w.close()
    except ConnectionError:
        counts[f"{label} reset"] += 1


async def flood(port, end):
    piece = b"a" * 65536
    while time.time() < end:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST /dyn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=")
            reading = asyncio.ensure_future(answer(r))
            for _ in range(64):  # up to 4 MiB of one extension
                if reading.done():
                    break
                w.write(piece)
                try:
                    await asyncio.wait_for(w.drain(), 5)
                except (asyncio.TimeoutError, ConnectionError):
                    break
            counts[f"extension flood {await reading}"] += 1
            w.close()
        except ConnectionError:
            counts["extension flood reset"] += 1
        await asyncio.sleep(10)


async def crafted(port, end):
    i = 0
    while time.time() < end:
        await one_shot(port, CRAFTED, "crafted chunk")
        await one_shot(port, AMBIGUOUS[i % len(AMBIGUOUS)], "ambiguous")
        i += 1
        await asyncio.sleep(1)


async def main():
    seconds, ports = float(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    end = time.time() + seconds - 10
    tasks = []
    for port in ports:
        tasks += [slow_head(port, end) for _ in range(10)]
        tasks += [slow_body(port, end) for _ in range(5)]
        tasks += [flood(port, end), crafted(port, end)]
    await asyncio.gather(*tasks)
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


asyncio.run(main())
