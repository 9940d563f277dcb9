"""The ASGI twin of bench_rsgi.py: the same routes and bodies (str bodies encoded by the
app, as ASGI has no str body; the file by `http.response.pathsend` where the server offers
it)."""

import asyncio

from routes import BYTES, HELLO, MEDIA, TEXT

PLAIN = [(b"content-type", b"text/plain; charset=utf-8")]
BINARY = [(b"content-type", b"application/octet-stream")]
START = {"type": "http.response.start", "status": 200, "headers": PLAIN}
START_BINARY = {"type": "http.response.start", "status": 200, "headers": BINARY}


def _bytes(body):
    async def route(scope, receive, send):
        await send(START)
        await send({"type": "http.response.body", "body": body})
    return route


def _text(body):
    async def route(scope, receive, send):
        await send(START)
        await send({"type": "http.response.body", "body": body.encode()})
    return route


async def _body(receive):
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def echo(scope, receive, send):
    body = await _body(receive)
    await send(START_BINARY)
    await send({"type": "http.response.body", "body": body})


async def echo_iter(scope, receive, send):
    await send(START_BINARY)
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return
        more = message.get("more_body", False)
        if message.get("body"):
            await send({"type": "http.response.body", "body": message["body"], "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def media(scope, receive, send):
    await send({**START_BINARY, "headers": BINARY + [(b"content-length", str(len(_MEDIA)).encode())]})
    if "http.response.pathsend" in scope.get("extensions", {}):
        await send({"type": "http.response.pathsend", "path": MEDIA})
    else:
        await send({"type": "http.response.body", "body": _MEDIA})


def _io(ms):
    async def route(scope, receive, send):
        await asyncio.sleep(ms / 1000)
        await send(START)
        await send({"type": "http.response.body", "body": BYTES["10"]})
    return route


async def not_found(scope, receive, send):
    await send({"type": "http.response.start", "status": 404, "headers": PLAIN})
    await send({"type": "http.response.body", "body": b"not found"})


with open(MEDIA, "rb") as _f:
    _MEDIA = _f.read()
ROUTES = {"/": _bytes(HELLO), "/10k": _bytes(BYTES["10k"]), "/echo": echo, "/echoi": echo_iter, "/fp": media,
          "/io10": _io(10), "/io100": _io(100)}
ROUTES.update({f"/b{n}": _bytes(body) for n, body in BYTES.items()})
ROUTES.update({f"/s{n}": _text(body) for n, body in TEXT.items()})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await ROUTES.get(scope["path"], not_found)(scope, receive, send)
