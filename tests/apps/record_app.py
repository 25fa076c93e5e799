# Answers every GET with 200 and appends its path to the file named by RECORD (for tests
# that check which requests reached the application, and in what order).
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with open(os.environ["RECORD"], "a") as f:
            f.write(self.path + "\n")
        body = b"recorded\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
