"""A Django Channels application for tests/test_ws_frameworks.py: a `ProtocolTypeRouter` sending
http to Django's ASGI handler (the project of tests/apps/django_app.py, which configures Django's
settings on first use) and websocket to a `URLRouter` of one `AsyncWebsocketConsumer`:

ws/echo/<room>/    accepts (with "echo.v1" if offered), echoes text and bytes; "info" answers
                   JSON with the room, the query string and a header; "close" closes with 4001;
                   ?deny=1 closes in connect(), before accepting: the handshake is refused (403)

Consumers report disconnect codes to the module's PROBE (a WsProbe; reset() makes a fresh one)."""

import json
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import ProtocolTypeRouter, URLRouter
from django.urls import path

from . import django_app
from .ws_echo_app import WsProbe

PROBE = WsProbe()


def reset():
    global PROBE
    PROBE = WsProbe()
    return PROBE


class EchoConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        if "deny" in parse_qs(self.scope["query_string"].decode()):
            await self.close()
            return
        await self.accept("echo.v1" if "echo.v1" in self.scope["subprotocols"] else None)

    async def receive(self, text_data=None, bytes_data=None):
        if text_data == "info":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.scope["headers"]}
            await self.send(text_data=json.dumps({
                "room": self.scope["url_route"]["kwargs"]["room"],
                "query": parse_qs(self.scope["query_string"].decode()),
                "x_test": headers.get("x-test"),
                "path": self.scope["path"],
            }))
        elif text_data == "close":
            await self.close(code=4001, reason="channels says bye")
        elif text_data is not None:
            await self.send(text_data=text_data)
        else:
            await self.send(bytes_data=bytes_data)

    async def disconnect(self, code):
        PROBE.note(code=code)


def get_application():
    """The ProtocolTypeRouter (configures Django on the first call, as django_app does)."""
    http = django_app.get_application()
    return ProtocolTypeRouter({
        "http": http,
        "websocket": URLRouter([path("ws/echo/<str:room>/", EchoConsumer.as_asgi())]),
    })
