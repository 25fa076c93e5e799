# A WSGI app for the backpressure tests: every request but /healthz appends "start" to
# $RECORD, waits until the file $RELEASE exists (at most a minute) or, for /work?S, S
# seconds, then appends "end" — so the record shows how many requests the app had at once.
import os, time


def note(word):
    with open(os.environ["RECORD"], "a") as f:
        f.write(word + "\n")


def app(environ, start_response):
    if environ["PATH_INFO"] == "/healthz":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]
    note("start")
    if environ["PATH_INFO"] == "/work":
        time.sleep(float(environ.get("QUERY_STRING") or "0.1"))
    else:
        deadline = time.time() + 60
        while not os.path.exists(os.environ["RELEASE"]) and time.time() < deadline:
            time.sleep(0.02)
    note("end")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"done\n"]
