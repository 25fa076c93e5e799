"""A gRPC server for espalier's tests and bench/upstream.sh, on Debian's python3-grpcio:
generic handlers on raw bytes (no generated code, no protobuf).

    grpc_backend.py HOST:PORT NAME [CERT KEY]

`test.Echo/Unary` answers `echo:<request>` with the trailer `x-served-by: NAME` (a request
starting with `fail` gets FAILED_PRECONDITION and a message); `test.Echo/Chat` answers each
message of a stream as it comes (`re:<message>`). `grpc.health.v1.Health/Check` answers
SERVING (bytes 08 01) for the service "" or "test.Echo", NOT_SERVING (08 02) for "sick",
and NOT_FOUND for any other, as grpc's health servicer does. A plain HTTP/2 `GET` is not
gRPC: grpcio answers it with no gRPC status. With CERT and KEY it speaks TLS (h2 by ALPN).
Prints `ready` once listening.
"""
import sys
from concurrent import futures

import grpc

ADDR = sys.argv[1]
NAME = sys.argv[2]


def unary(request, context):
    if request.startswith(b"fail"):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "asked to fail: " + request.decode())
    context.set_trailing_metadata((("x-served-by", NAME),))
    return b"echo:" + request


def chat(requests, context):
    for message in requests:
        yield b"re:" + message


def health_check(request, context):
    # HealthCheckRequest: field 1 (tag 0x0a), the service's name, length-prefixed.
    service = request[2:].decode() if request[:1] == b"\x0a" else ""
    if service in ("", "test.Echo"):
        return b"\x08\x01"
    if service == "sick":
        return b"\x08\x02"
    context.abort(grpc.StatusCode.NOT_FOUND, "unknown service " + service)


health = grpc.method_handlers_generic_handler(
    "grpc.health.v1.Health",
    {"Check": grpc.unary_unary_rpc_method_handler(health_check)},
)
handlers = grpc.method_handlers_generic_handler(
    "test.Echo",
    {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
    },
)
server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
server.add_generic_rpc_handlers((handlers, health))
if len(sys.argv) > 4:
    with open(sys.argv[3], "rb") as c, open(sys.argv[4], "rb") as k:
        credentials = grpc.ssl_server_credentials([(k.read(), c.read())])
    server.add_secure_port(ADDR, credentials)
else:
    server.add_insecure_port(ADDR)
server.start()
print("ready", flush=True)
server.wait_for_termination()
