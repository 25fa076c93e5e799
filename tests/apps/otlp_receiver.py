"""The tracing tests' two sides (tests/tracing.rs):

    otlp_receiver.py collector PORT RECORD   # an OTLP/HTTP receiver (protobuf), as a
                                             # collector's /v1/traces is
    otlp_receiver.py app                     # an app on $PORT

The collector decodes each ExportTraceServiceRequest with opentelemetry-proto (PyPI) and
appends one JSON line per span to RECORD: its trace, span and parent ids (hex), name, kind,
flags, status code, times, trace state, and its attributes and its resource's as objects.
It answers an empty ExportTraceServiceResponse. The app answers every request with the
trace context it was sent: "traceparent=… tracestate=…"."""
import http.server
import json
import os
import sys


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Collector(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        with open(RECORD, "a") as f:
            for rs in request.resource_spans:
                resource = {a.key: value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        f.write(json.dumps({
                            "path": self.path,
                            "content_type": self.headers.get("Content-Type"),
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "name": s.name,
                            "kind": s.kind,
                            "flags": s.flags,
                            "status": s.status.code,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "trace_state": s.trace_state,
                            "attributes": {a.key: value(a.value) for a in s.attributes},
                            "resource": resource,
                            "scope": ss.scope.name,
                        }) + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        text = (f"traceparent={self.headers.get('traceparent', '')} "
                f"tracestate={self.headers.get('tracestate', '')}\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.daemon_threads = True
if sys.argv[1] == "collector":
    RECORD = sys.argv[3]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Collector)
else:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), App)
server.serve_forever()
