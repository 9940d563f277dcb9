"""The ASGI app of the throughput workloads (one app for every server):

    GET  /      "Hello, world!" in plain text
    GET  /10k   a 10 KiB body
    POST /echo  the request body sent back chunk by chunk as it arrives (chunked response)
"""

from lifespan import lifespan

HELLO = b"Hello, world!"
TEN_K = b"x" * 10240
TEXT = [(b"content-type", b"text/plain")]
BINARY = [(b"content-type", b"application/octet-stream")]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    path = scope["path"]
    if path == "/echo":
        await send({"type": "http.response.start", "status": 200, "headers": BINARY})
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            more = message.get("more_body", False)
            body = message.get("body", b"")
            if body:
                await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/10k":
        body, headers = TEN_K, BINARY
    elif path == "/":
        body, headers = HELLO, TEXT
    else:
        await send({"type": "http.response.start", "status": 404, "headers": TEXT})
        await send({"type": "http.response.body", "body": b"not found"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
