"""The apps of the soak run (soak/run.py), ASGI `app` and WSGI `wsgi_app`:

    GET  /         "Hello, world!"
    POST /upload   the body read whole; answers its size
    GET  /error    raises: the injected 500s
    WS   /ws       (ASGI) echoes every message back
"""

HELLO = b"Hello, world!"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
            else:
                await send({"type": "websocket.send", "text": message["text"]})
    path = scope["path"]
    if path == "/error":
        raise RuntimeError("injected")
    body = HELLO
    if path == "/upload":
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = str(size).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def wsgi_app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/error":
        raise RuntimeError("injected")
    body = HELLO
    if path == "/upload":
        body = str(len(environ["wsgi.input"].read())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
