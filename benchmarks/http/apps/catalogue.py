"""The server-comparison app: `/` renders a Jinja2 page of about 26 KB (CPU-bound), `/api`
fetches a number from the fake database server (an HTTP server with a set latency, at
127.0.0.1:$BENCH_DB_PORT) over kept-alive connections and returns it as JSON."""

import asyncio
import json
import os

import jinja2
from lifespan import lifespan

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")),
    autoescape=True,
)
_page = _env.get_template("page.html")
_ROWS = [
    {"id": i, "name": f"item {i}", "price": (i * 7919) % 10000 / 100, "tags": ["red", "green", "blue"][: i % 3 + 1]}
    for i in range(120)
]
_DB_PORT = int(os.environ.get("BENCH_DB_PORT", "0"))
_HTML = [(b"content-type", b"text/html; charset=utf-8")]
_JSON = [(b"content-type", b"application/json")]


class _DbPool:
    """Kept-alive HTTP/1.1 connections to the fake database, one request at a time each."""

    def __init__(self, port):
        self.port = port
        self.idle = []

    async def fetch(self):
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /number HTTP/1.1\r\nHost: db\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        self.idle.append((reader, writer))
        return int(body)


_pool = _DbPool(_DB_PORT)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    status = 200
    if scope["path"] == "/api":
        number = await _pool.fetch()
        body, headers = json.dumps({"number": number}).encode(), _JSON
    elif scope["path"] == "/":
        body, headers = _page.render(title="Catalogue", rows=_ROWS).encode(), _HTML
    else:
        status, body, headers = 404, b"{}", _JSON
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
