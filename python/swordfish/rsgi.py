"""RSGI, granian's interface (its docs/spec/RSGI.md, version 1.6), as swordfish serves it:
the types an app meets, for annotations and `isinstance`, and the exceptions it may catch.

    async def app(scope: Scope, protocol: HTTPProtocol):
        body = await protocol()
        protocol.response_bytes(200, [("content-type", "text/plain")], body)

Serve it with `swordfish serve module:app --interface rsgi` (`--interface auto` picks RSGI
for an object with `__rsgi__`). The protocol objects are native (`src/rsgi/`)."""

from enum import IntEnum

from ._native import RsgiProtocolClosed as ProtocolClosed
from ._native import RsgiProtocolError as ProtocolError
from ._native import Headers, HTTPProtocol, HTTPStreamTransport, Scope, WebsocketMessage
from ._native import WebsocketProtocol, WebsocketTransport

RSGI_VERSION = "1.6"


class WebsocketMessageType(IntEnum):
    """`WebsocketMessage.kind`."""

    close = 0
    bytes = 1
    string = 2


__all__ = [
    "RSGI_VERSION",
    "Headers",
    "HTTPProtocol",
    "HTTPStreamTransport",
    "ProtocolClosed",
    "ProtocolError",
    "Scope",
    "WebsocketMessage",
    "WebsocketMessageType",
    "WebsocketProtocol",
    "WebsocketTransport",
]
