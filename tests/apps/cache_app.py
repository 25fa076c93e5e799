"""A WSGI app for the response cache tests (gunicorn): every request is written as
"METHOD PATH?QUERY" to the file CACHE_APP_RECORD names, and answered
"N PATH ae=ACCEPT-ENCODING", N its path's requests so far — so that an answer given again
by the cache shows the N of the request the app saw. The query says the answer's fields:
cc (Cache-Control), vary, etag, tag (a Cache-Tag), cookie=1 (a Set-Cookie), expires=N (an Expires N seconds
after its Date), chunked=1 (no Content-Length: gunicorn sends it chunked), sleep=S (it
thinks S seconds first, after writing the request down). The app answers
200 whatever the request's conditional fields — a 304 comes from the cache alone — but with
revalidate=1, where it answers 304 to an If-None-Match naming its etag. While the file
CACHE_APP_RECORD.fail exists it answers every request 500."""
import os
import urllib.parse
from email.utils import formatdate
import time

RECORD = os.environ["CACHE_APP_RECORD"]


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    query = environ.get("QUERY_STRING", "")
    with open(RECORD, "a") as f:
        f.write(f"{environ['REQUEST_METHOD']} {path}?{query}\n")
    with open(RECORD) as f:
        seen = sum(1 for line in f if line.split(" ")[1].split("?")[0] == path)
    ask = dict(urllib.parse.parse_qsl(query))
    if os.path.exists(RECORD + ".fail"):
        start_response("500 Internal Server Error", [("Content-Length", "7")])
        return [b"failed\n"]
    if "sleep" in ask:
        time.sleep(float(ask["sleep"]))
    ae = environ.get("HTTP_ACCEPT_ENCODING", "")
    if ask.get("revalidate") == "1" and environ.get("HTTP_IF_NONE_MATCH") == f'"{ask.get("etag")}"':
        start_response("304 Not Modified", [("ETag", f'"{ask["etag"]}"'), ("Cache-Control", ask.get("cc", ""))])
        return [b""]
    body = f"{seen} {path} ae={ae}\n".encode()
    now = time.time()
    fields = [("Content-Type", "text/plain"), ("Date", formatdate(now, usegmt=True))]
    if "cc" in ask:
        fields.append(("Cache-Control", ask["cc"]))
    if "vary" in ask:
        fields.append(("Vary", ask["vary"]))
    if "tag" in ask:
        fields.append(("Cache-Tag", ask["tag"]))
    if "etag" in ask:
        fields.append(("ETag", f'"{ask["etag"]}"'))
    if ask.get("cookie") == "1":
        fields.append(("Set-Cookie", "session=1"))
    if "expires" in ask:
        fields.append(("Expires", formatdate(now + int(ask["expires"]), usegmt=True)))
    if ask.get("chunked") != "1":
        fields.append(("Content-Length", str(len(body))))
    start_response("200 OK", fields)
    return [body]
