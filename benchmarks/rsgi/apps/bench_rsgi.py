"""The RSGI app of the RSGI suite (granian's RSGI benchmark routes, and hello):

    GET  /            "Hello, world!"           GET /10k       a 10 KiB body
    GET  /b10 /b1k /b10k /b100k   bytes bodies  GET /s10 ... /s100k   the same as str
    POST /echo        the body read whole and sent back
    POST /echoi       the body read piece by piece and streamed back
    GET  /fp          a 50 KiB file             GET /io10 /io100   10 ms / 100 ms of I/O first
"""

import asyncio

from routes import BYTES, HELLO, MEDIA, TEXT

PLAIN = [("content-type", "text/plain; charset=utf-8")]
BINARY = [("content-type", "application/octet-stream")]


def _bytes(body):
    async def route(scope, protocol):
        protocol.response_bytes(200, PLAIN, body)
    return route


def _text(body):
    async def route(scope, protocol):
        protocol.response_str(200, PLAIN, body)
    return route


async def echo(scope, protocol):
    protocol.response_bytes(200, BINARY, await protocol())


async def echo_iter(scope, protocol):
    transport = protocol.response_stream(200, BINARY)
    async for chunk in protocol:
        await transport.send_bytes(chunk)


async def media(scope, protocol):
    protocol.response_file(200, BINARY, MEDIA)


def _io(ms):
    async def route(scope, protocol):
        await asyncio.sleep(ms / 1000)
        protocol.response_bytes(200, PLAIN, BYTES["10"])
    return route


async def not_found(scope, protocol):
    protocol.response_str(404, PLAIN, "not found")


ROUTES = {"/": _bytes(HELLO), "/10k": _bytes(BYTES["10k"]), "/echo": echo, "/echoi": echo_iter, "/fp": media,
          "/io10": _io(10), "/io100": _io(100)}
ROUTES.update({f"/b{n}": _bytes(body) for n, body in BYTES.items()})
ROUTES.update({f"/s{n}": _text(body) for n, body in TEXT.items()})


def app(scope, protocol):
    return ROUTES.get(scope.path, not_found)(scope, protocol)
