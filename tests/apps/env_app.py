"""An ASGI app that answers GET /NAME with the value of the environment variable NAME (as
the app's process sees it), or 404: for the --env-file, socket activation, logging and
gunicorn worker tests. Also GET /where (the scope's client and server, as JSON), GET /pid
(this process's pid), GET /block?t=S, which blocks
the event loop for S seconds (an app that calls time.sleep in a coroutine), and GET
/grow?mib=N, which keeps N more MiB alive (a leak)."""
import json
import os
import time
from urllib.parse import parse_qsl

_kept = []  # what /grow keeps alive


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/where":
        status, body = 200, json.dumps({"client": scope["client"], "server": scope["server"]}).encode()
    elif path == "/pid":
        status, body = 200, str(os.getpid()).encode()
    elif path == "/grow":
        _kept.append(b"x" * (int(dict(parse_qsl(scope["query_string"].decode()))["mib"]) << 20))
        status, body = 200, str(os.getpid()).encode()
    elif path == "/block":
        time.sleep(float(dict(parse_qsl(scope["query_string"].decode()))["t"]))
        status, body = 200, b"unblocked"
    else:
        value = os.environ.get(path.lstrip("/"))
        status, body = (200, value.encode()) if value is not None else (404, b"unset")
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
