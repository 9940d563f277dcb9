"""Helpers for the HTTP server tests: a server on the test's loop and a timed run of it, raw
connections, a small response reader (written for the tests, strict about framing), and
two ASGI apps (an echo, a responder of given messages)."""

import asyncio
import contextlib
import socket

from swordfish.server import Config, Server


def run(loop, coro, timeout=20):
    """Run ``coro`` on ``loop`` to its end, failing after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def serving(app, sockets=None, **options):
    options.setdefault("lifespan", "off")
    options.setdefault("port", 0)
    options.setdefault("access_log", False)
    server = Server(Config(app, **options))
    task = asyncio.ensure_future(server.serve(sockets))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    try:
        yield server
    finally:
        server.shutdown()
        await asyncio.wait_for(task, 10)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (for a server started with it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_of(server):
    return server.sockets[0].getsockname()[1]


async def connect(server):
    return await asyncio.open_connection("127.0.0.1", port_of(server))


class Response:
    def __init__(self, status, headers, body, trailers=()):
        self.status = status
        self.headers = headers
        self.body = body
        self.trailers = list(trailers)

    def header(self, name):
        values = [v for n, v in self.headers if n == name]
        return values[0] if values else None

    def __repr__(self):
        return f"<Response {self.status} {self.headers} {self.body[:60]!r}>"


async def read_until_closed(server, raw, timeout=5):
    """Everything the server sends on a new connection for ``raw``, up to its closing."""
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


async def read_response(reader, head_request=False):
    """One response; None if the connection closed before any byte of it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise
    lines = head[:-4].split(b"\r\n")
    version, status, *_ = lines[0].split(b" ", 2)
    assert version == b"HTTP/1.1", lines[0]
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.decode().lower(), value.strip().decode()))
    status = int(status)
    names = [n for n, _ in headers]
    trailers = []
    if head_request or status in (204, 304) or status < 200:
        body = b""
    elif "transfer-encoding" in names:
        assert "content-length" not in names
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                break
            body += await reader.readexactly(size)
            assert await reader.readexactly(2) == b"\r\n"
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line[:-2].partition(b":")
            trailers.append((name.decode(), value.strip().decode()))
    elif "content-length" in names:
        n = int(dict(headers)["content-length"])
        body = await reader.readexactly(n)
    else:
        body = await reader.read()
    return Response(status, headers, body, trailers)


async def closed(reader, timeout=3):
    """Whether the server closes the connection (EOF or reset) without sending more."""
    try:
        data = await asyncio.wait_for(reader.read(), timeout)
    except ConnectionResetError:
        return True
    except asyncio.TimeoutError:
        return False
    assert data == b"", data
    return True


async def request(server, raw, head_request=False):
    """Send raw bytes on a new connection; (first response or None, closed afterwards)."""
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        resp = await asyncio.wait_for(read_response(reader, head_request), 5)
        return resp, await closed(reader, 0.5)
    finally:
        writer.close()


async def echo_app(scope, receive, send):
    """Answers with the request body, and the method and path in headers."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += message["body"]
        if not message["more_body"]:
            break
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"x-method", scope["method"].encode()), (b"x-path", scope["path"].encode())],
    })
    await send({"type": "http.response.body", "body": body})


def responder(*messages, status=200, headers=()):
    """An ASGI app that starts a response of ``status`` and ``headers`` and sends ``messages``."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status, "headers": list(headers)})
        for m in messages:
            await send(m)
    return app
