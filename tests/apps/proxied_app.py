"""The ASGI app tests/test_nginx.py serves behind a real nginx.

GET  /where           -> JSON: the scope's client, scheme and server
GET  /stream          -> "one\\n" at once, "two\\n" once GET /release has been served
GET  /release         -> lets /stream go on
GET  /endless         -> chunks until the client is gone; then counted
GET  /gone            -> how many /endless responses saw their client go
GET  /slow?t=S        -> "done" after S seconds
GET  /inflight        -> how many /slow requests are in the app now
POST /digest          -> JSON: the body's length and SHA-256
WS   /ws              -> echo (apps.ws_echo_app's)
"""
import asyncio
import hashlib
import json
from urllib.parse import parse_qsl

from swordfish.server import ClientDisconnected

from .ws_echo_app import websocket as ws_echo

_state = {"release": None, "gone": 0, "inflight": 0}


async def _respond(send, body, status=200, content_type=b"text/plain"):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    if scope["type"] == "websocket":
        await ws_echo(scope, receive, send, None)
        return
    path, query = scope["path"], dict(parse_qsl(scope["query_string"].decode()))
    if path == "/where":
        body = json.dumps({"client": scope["client"], "scheme": scope["scheme"], "server": scope["server"]})
        await _respond(send, body.encode(), content_type=b"application/json")
    elif path == "/stream":
        release = _state["release"] = asyncio.Event()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"one\n", "more_body": True})
        await release.wait()
        await send({"type": "http.response.body", "body": b"two\n"})
    elif path == "/release":
        if _state["release"] is not None:
            _state["release"].set()
        await _respond(send, b"released")
    elif path == "/endless":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        except ClientDisconnected:
            _state["gone"] += 1
    elif path == "/gone":
        await _respond(send, str(_state["gone"]).encode())
    elif path == "/slow":
        _state["inflight"] += 1
        try:
            await asyncio.sleep(float(query.get("t", "0.5")))
        finally:
            _state["inflight"] -= 1
        await _respond(send, b"done")
    elif path == "/inflight":
        await _respond(send, str(_state["inflight"]).encode())
    elif path == "/digest":
        digest, size = hashlib.sha256(), 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            digest.update(chunk)
            size += len(chunk)
            if not message.get("more_body"):
                break
        await _respond(send, json.dumps({"size": size, "sha256": digest.hexdigest()}).encode(),
                       content_type=b"application/json")
    else:
        await _respond(send, b"not found", status=404)
