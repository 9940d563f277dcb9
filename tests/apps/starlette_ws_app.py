"""A Starlette app with WebSocket routes for tests/test_ws_frameworks.py:

/ws/echo               WebSocketRoute: picks a subprotocol (its own preference among those offered),
                       echoes text and bytes; "close CODE REASON" closes with that code and reason;
                       "info" answers JSON with the query parameters and a header
/ws/items/{id:int}     WebSocketRoute with a path convertor: one JSON message, then close 1000
/ws/json               WebSocketEndpoint (encoding="json"): answers {"got": message}
/deny                  closes before accepting: the handshake is refused (403)

The probe (a WsProbe) records every disconnect code an endpoint saw."""

from starlette.applications import Starlette
from starlette.endpoints import WebSocketEndpoint
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocketDisconnect

from .ws_echo_app import WsProbe

PREFERRED = ["echo.v2", "echo.v1"]  # the server's order, whatever the client's


def choose(offered):
    return next((p for p in PREFERRED if p in offered), None)


def create_app(probe=None):
    probe = probe or WsProbe()

    async def echo(websocket):
        await websocket.accept(subprotocol=choose(websocket.scope.get("subprotocols", [])))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    raise WebSocketDisconnect(message.get("code", 1005))
                text = message.get("text")
                if text is not None and text.startswith("close "):
                    _, code, reason = text.split(" ", 2)
                    await websocket.close(code=int(code), reason=reason)
                    return
                if text == "info":
                    await websocket.send_json({
                        "q": websocket.query_params.get("q"),
                        "tags": websocket.query_params.getlist("tag"),
                        "x_test": websocket.headers.get("x-test"),
                        "path": websocket.url.path,
                        "scheme": websocket.url.scheme,
                    })
                elif text is not None:
                    await websocket.send_text(text)
                else:
                    await websocket.send_bytes(message["bytes"])
        except WebSocketDisconnect as exc:
            probe.note(code=exc.code)

    async def item(websocket):
        await websocket.accept()
        await websocket.send_json({"item_id": websocket.path_params["item_id"]})
        await websocket.close()

    class Json(WebSocketEndpoint):
        encoding = "json"

        async def on_receive(self, websocket, data):
            await websocket.send_json({"got": data})

        async def on_disconnect(self, websocket, close_code):
            probe.note(code=close_code)

    async def deny(websocket):
        await websocket.close(code=1008)

    app = Starlette(routes=[
        WebSocketRoute("/ws/echo", echo),
        WebSocketRoute("/ws/items/{item_id:int}", item),
        WebSocketRoute("/ws/json", Json),
        WebSocketRoute("/deny", deny),
    ])
    app.probe = probe
    return app
