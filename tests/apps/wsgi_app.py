"""The plain WSGI app tests/test_wsgi_lifecycle.py runs in `python -m swordfish serve
apps.wsgi_app:app` (every request goes through `wsgiref.validate.validator`, so a
violation of PEP 3333 by the server is a 500).

GET /pid              -> this process's pid
GET /env              -> JSON: the environ's keys and the values the tests look at, and
                         whether the app runs on the main thread (the loop's)
GET /slow?t=S         -> "begin\\n" at once, "end\\n" S seconds later
GET /barrier?n=N      -> "ok" once N requests are in the app at once (a 500 after 10 s)
POST /echo            -> the request body
"""

import json
import os
import threading
import time
from urllib.parse import parse_qsl
from wsgiref.validate import validator

_barriers = {}
_lock = threading.Lock()

TEXT = [("Content-Type", "text/plain")]


def _routes(environ, start_response):
    path = environ["PATH_INFO"]
    query = dict(parse_qsl(environ["QUERY_STRING"]))
    if path == "/pid":
        body = str(os.getpid()).encode()
        start_response("200 OK", TEXT + [("Content-Length", str(len(body)))])
        return [body]
    if path == "/env":
        body = json.dumps({
            "keys": sorted(environ),
            "pid": os.getpid(),
            "main_thread": threading.current_thread() is threading.main_thread(),
            "wsgi": {k: environ[k] for k in ("wsgi.multithread", "wsgi.multiprocess", "wsgi.run_once",
                                             "wsgi.url_scheme")},
            "cgi": {k: v for k, v in environ.items() if "." not in k},
        }).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/slow":
        start_response("200 OK", TEXT)

        def body():
            yield b"begin\n"
            time.sleep(float(query.get("t", "0.5")))  # a slow app
            yield b"end\n"

        return body()
    if path == "/barrier":
        n = int(query["n"])
        with _lock:
            barrier = _barriers.setdefault(n, threading.Barrier(n, timeout=10))
        barrier.wait()
        start_response("200 OK", TEXT)
        return [b"ok"]
    if path == "/echo":
        data = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(data)))])
        return [data]
    start_response("404 Not Found", TEXT)
    return [b"not found"]


_checked = validator(_routes)


def app(environ, start_response):
    """A plain function of (environ, start_response), as `--interface auto` sees it."""
    return _checked(environ, start_response)
