"""A gRPC client for espalier's tests and bench/upstream.sh (Debian's python3-grpcio).

    grpc_client.py HOST:PORT [--tls ROOT.pem NAME] [--calls N] [--messages N]

Without --calls: one unary call, one that fails, and a bidirectional stream in which each
message is sent only after the answer to the one before arrived (a proxy that held the
request's body until its end would stall it); prints one JSON object of what came back
(`{"failed": [CODE, DETAILS]}` when the first call fails).
With --calls N: N unary calls and a stream of --messages messages, one after another;
prints their wall times (JSON). With --big N: a unary call of N bytes and a lockstep stream
of 1 KiB messages past N bytes; prints how each ended (JSON).
"""
import argparse
import json
import queue
import time

import grpc

parser = argparse.ArgumentParser()
parser.add_argument("addr")
parser.add_argument("--tls", nargs=2, metavar=("ROOT", "NAME"))
parser.add_argument("--calls", type=int, default=0)
parser.add_argument("--messages", type=int, default=1000)
parser.add_argument("--big", type=int, default=0,
                    help="send one unary call of this many bytes, and a stream of 1 KiB messages up to it")
args = parser.parse_args()

if args.tls:
    with open(args.tls[0], "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    channel = grpc.secure_channel(
        args.addr, credentials, options=(("grpc.ssl_target_name_override", args.tls[1]),)
    )
else:
    channel = grpc.insecure_channel(args.addr)
unary = channel.unary_unary("/test.Echo/Unary")
chat = channel.stream_stream("/test.Echo/Chat")


def lockstep(count, prefix=b"m"):
    """A stream whose every message waits for the answer to the one before."""
    outbox = queue.Queue()

    def messages():
        while True:
            m = outbox.get()
            if m is None:
                return
            yield m

    answers = chat(messages(), timeout=60)
    got = []
    for i in range(count):
        outbox.put(prefix + str(i).encode())
        got.append(next(answers).decode())
    outbox.put(None)
    rest = [a.decode() for a in answers]
    return got + rest


if args.big:
    out = {}
    for name, call in (("unary", lambda: unary(b"x" * args.big, timeout=30)),
                       ("stream", lambda: lockstep(args.big // 1024 + 1, prefix=b"y" * 1024))):
        try:
            call()
            out[name] = "answered"
        except grpc.RpcError as e:
            out[name] = [e.code().name, e.details()]
    print(json.dumps(out))
elif args.calls:
    start = time.perf_counter()
    for _ in range(args.calls):
        unary(b"hello", timeout=30)
    unary_s = time.perf_counter() - start
    start = time.perf_counter()
    lockstep(args.messages)
    stream_s = time.perf_counter() - start
    print(json.dumps({"calls": args.calls, "unary_s": unary_s,
                      "messages": args.messages, "stream_s": stream_s}))
else:
    out = {}
    try:
        answer, call = unary.with_call(b"hello", timeout=30)
    except grpc.RpcError as e:
        print(json.dumps({"failed": [e.code().name, e.details()]}))
        raise SystemExit(0)
    out["unary"] = answer.decode()
    out["trailers"] = dict(call.trailing_metadata())
    try:
        unary(b"fail-now", timeout=30)
        out["error"] = None
    except grpc.RpcError as e:
        out["error"] = [e.code().name, e.details()]
    out["bidi"] = lockstep(3)
    print(json.dumps(out))
