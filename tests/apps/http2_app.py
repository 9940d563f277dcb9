"""The ASGI app tests/test_http2_attacks.py serves in a subprocess:

    GET /          "hello"
    GET /big       1 MiB, in 64 KiB parts (`?parts=N`: N of them)
    GET /drip      1 MiB, one byte a part (`?parts=N`: N of them)
    GET /dripped   "<parts /drip has sent, all streams together>"
    GET /cut       "<responses of /big cut short>" (the client went, or its stream was reset)
    GET /wait      waits until cancelled (counted in /count)
    POST /echo     the body sent back
    GET /count     "<apps running> <apps cancelled>"
    GET /version   the scope's http_version
"""

import asyncio

RUNNING = 0
CANCELLED = 0
CUT = 0
DRIPPED = 0


async def app(scope, receive, send):
    global RUNNING, CANCELLED, CUT, DRIPPED
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/big":
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            parts = int(scope["query_string"].partition(b"parts=")[2] or 16)
            for _ in range(parts):
                await send({"type": "http.response.body", "body": b"b" * 65536, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except (asyncio.CancelledError, OSError):
            CUT += 1
            raise
        return
    if path == "/drip":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        parts = int(scope["query_string"].partition(b"parts=")[2] or 1024 * 1024)
        for _ in range(parts):
            await send({"type": "http.response.body", "body": b"d", "more_body": True})
            DRIPPED += 1
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/wait":
        RUNNING += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            CANCELLED += 1
            raise
        finally:
            RUNNING -= 1
    if path == "/echo":
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
    elif path == "/count":
        body = f"{RUNNING} {CANCELLED}".encode()
    elif path == "/dripped":
        body = str(DRIPPED).encode()
    elif path == "/cut":
        body = str(CUT).encode()
    elif path == "/version":
        body = scope["http_version"].encode()
    else:
        body = b"hello"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
