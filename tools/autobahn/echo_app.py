"""ASGI echo app for Autobahn|Testsuite's fuzzingclient: accept every WebSocket and send each
message back, text as text and bytes as bytes, until the client disconnects."""


async def app(scope, receive, send):
    if scope["type"] == "websocket":
        await _echo(receive, send)
    elif scope["type"] == "lifespan":
        await _lifespan(receive, send)
    else:
        # The testsuite only opens WebSockets; plain HTTP is told where to go.
        await send({"type": "http.response.start", "status": 426,
                    "headers": [(b"content-type", b"text/plain"), (b"upgrade", b"websocket")]})
        await send({"type": "http.response.body", "body": b"WebSocket echo only\n"})


async def _echo(receive, send):
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        # One of the two keys is absent or None, depending on the frame's opcode.
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
