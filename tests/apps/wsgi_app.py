"""The plain WSGI app tests/test_wsgi_lifecycle.py runs in `python -m swordfish serve
apps.wsgi_app:app` (every request goes through `wsgiref.validate.validator`, so a
violation of PEP 3333 by the server is a 500).

GET /pid              -> this process's pid
GET /env              -> JSON: the environ's keys and the values the tests look at, and
                         whether the app runs on the main thread (the loop's)
GET /slow?t=S         -> "begin\\n" at once, "end\\n" S seconds later
GET /barrier?n=N      -> "ok" once N requests are in the app at once (a 500 after 10 s)
POST /echo            -> the request body
GET /sched?burn=MS    -> JSON, after MS ms of CPU: the scheduling policy and the timer
                         slack of the thread serving, and the policies of the pool's
                         idle watchers
GET /cpus             -> JSON: this pid and the CPUs the thread serving may run on
"""

import ctypes
import json
import os
import threading
import time
from urllib.parse import parse_qsl
from wsgiref.validate import validator

_libc = ctypes.CDLL(None, use_errno=True)
PR_GET_TIMERSLACK = 30  # linux/prctl.h

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
    if path == "/sched":
        end = time.thread_time() + float(query.get("burn", 0)) / 1e3
        while time.thread_time() < end:
            pass
        body = json.dumps({"policy": os.sched_getscheduler(0), "slack_ns": _libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0),
                           "watchers": _watcher_policies()}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if path == "/cpus":
        body = json.dumps({"pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    start_response("404 Not Found", TEXT)
    return [b"not found"]


def _watcher_policies():
    """The scheduling policies of this process's threads named swordfish-wsgi-idle (their
    names cut to 15 characters, as Linux keeps them)."""
    policies = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "swordfish-wsgi-":
                    policies.append(os.sched_getscheduler(int(tid)))
        except (FileNotFoundError, ProcessLookupError):  # the thread ended
            pass
    return policies


_checked = validator(_routes)


def app(environ, start_response):
    """A plain function of (environ, start_response), as `--interface auto` sees it."""
    return _checked(environ, start_response)
