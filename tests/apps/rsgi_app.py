"""An RSGI app with the routes of granian's own RSGI tests (info, echo, echo stream,
stream, file, file range, WebSocket reject/info/echo/push, an app that raises), as an
object with `__rsgi__`, `__rsgi_init__` and `__rsgi_del__` (`app`; `routes` is the
plain function) (which write to the files named
by RSGI_INIT_FILE and RSGI_DEL_FILE, if set, whether the loop was running)."""

import asyncio
import json
import os
import pathlib

from swordfish.rsgi import WebsocketMessageType

HERE = pathlib.Path(__file__).parent


def scope_info(scope):
    return {
        "proto": scope.proto,
        "http_version": scope.http_version,
        "rsgi_version": scope.rsgi_version,
        "scheme": scope.scheme,
        "method": scope.method,
        "path": scope.path,
        "query_string": scope.query_string,
        "headers": dict(scope.headers.items()),
        "authority": scope.authority,
        "client": scope.client,
        "server": scope.server,
    }


async def info(scope, protocol):
    protocol.response_bytes(200, [("content-type", "application/json")], json.dumps(scope_info(scope)).encode())


async def echo(scope, protocol):
    msg = await protocol()
    protocol.response_bytes(200, [("content-type", "text/plain; charset=utf-8")], msg)


async def echo_stream(scope, protocol):
    trx = protocol.response_stream(200, [("content-type", "text/plain; charset=utf-8")])
    async for msg in protocol:
        await trx.send_bytes(msg)


async def stream(scope, protocol):
    trx = protocol.response_stream(200, [("content-type", "text/plain; charset=utf-8")])
    for _ in range(3):
        await trx.send_bytes(b"test")


async def file(scope, protocol):
    protocol.response_file(200, [("content-type", "text/x-python")], str(HERE / "rsgi_app.py"))


async def file_range(scope, protocol):
    path = scope.headers.get("file-path")
    start, end = (int(v) for v in scope.headers.get("range").removeprefix("bytes=").split("-"))
    size = os.stat(path).st_size
    if start >= size:
        return protocol.response_empty(416, [("content-range", f"bytes */{size}"), ("x-reason", "out")])
    end = min(end, size - 1)
    headers = [("content-length", f"{end - start + 1}"), ("content-range", f"bytes {start}-{end}/{size}")]
    try:
        protocol.response_file_range(206, headers, path, start, end + 1)
    except ValueError:
        protocol.response_empty(416, [("content-range", f"bytes */{size}"), ("x-reason", "invalid")])


async def ws_reject(scope, protocol):
    protocol.close(403)


async def ws_info(scope, protocol):
    trx = await protocol.accept()
    await trx.send_str(json.dumps(scope_info(scope)))
    while (await trx.receive()).kind != WebsocketMessageType.close:
        pass
    protocol.close()


async def ws_echo(scope, protocol):
    trx = await protocol.accept()
    while True:
        message = await trx.receive()
        if message.kind == WebsocketMessageType.close:
            break
        if message.kind == WebsocketMessageType.bytes:
            await trx.send_bytes(message.data)
        else:
            await trx.send_str(message.data)
    protocol.close()


async def ws_push(scope, protocol):
    trx = await protocol.accept()
    try:
        while True:
            await trx.send_str("ping")
    except Exception:
        pass
    protocol.close()


async def err_app(scope, protocol):
    1 / 0


ROUTES = {
    "/info": info,
    "/echo": echo,
    "/echos": echo_stream,
    "/file": file,
    "/file_range": file_range,
    "/stream": stream,
    "/ws_reject": ws_reject,
    "/ws_info": ws_info,
    "/ws_echo": ws_echo,
    "/ws_push": ws_push,
    "/err_app": err_app,
}


def _mark(variable, loop):
    path = os.environ.get(variable)
    if path:
        with open(path, "w") as f:
            f.write(f"running={loop.is_running()} closed={loop.is_closed()}")


class App:
    def __rsgi_init__(self, loop):
        # The loop is not running yet: the app may run it until something completes.
        loop.run_until_complete(asyncio.sleep(0))
        _mark("RSGI_INIT_FILE", loop)

    def __rsgi_del__(self, loop):
        _mark("RSGI_DEL_FILE", loop)

    def __rsgi__(self, scope, protocol):
        return routes(scope, protocol)

    async def __call__(self, scope, receive, send):
        # As Emmett's App, callable as ASGI too (gunicorn loads only callables): a server
        # that picked ASGI gets this answer, which no RSGI route gives.
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 418, "headers": []})
            await send({"type": "http.response.body", "body": b"served as ASGI"})


def routes(scope, protocol):
    """The routes alone, for a server started on a running loop (the tests' own)."""
    return ROUTES[scope.path](scope, protocol)


app = App()
