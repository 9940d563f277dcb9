"""A FastAPI app with `@app.websocket` routes for tests/test_ws_frameworks.py:

/ws/echo               picks a subprotocol, echoes text and bytes; "close" closes with 4000 and a
                       reason; "info" answers JSON with query and header parameters
/ws/items/{item_id}    item_id: int, q: query, x-test: header, and a token dependency that raises
                       WebSocketException (1008) unless ?token=secret: the handshake is refused
                       before accept; a path that is not an int is refused by FastAPI's validation

The probe (a WsProbe) records every disconnect code the echo route saw."""

from fastapi import Depends, FastAPI, Header, Query, WebSocket, WebSocketDisconnect, WebSocketException, status

from .starlette_ws_app import choose
from .ws_echo_app import WsProbe


def create_app(probe=None):
    probe = probe or WsProbe()
    app = FastAPI()
    app.probe = probe

    def token(token: str | None = Query(None)):
        if token != "secret":
            raise WebSocketException(code=status.WS_1008_POLICY_VIOLATION, reason="bad token")
        return token

    @app.websocket("/ws/echo")
    async def echo(websocket: WebSocket, q: str | None = None, x_test: str | None = Header(None)):
        await websocket.accept(subprotocol=choose(websocket.scope.get("subprotocols", [])))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    raise WebSocketDisconnect(message.get("code", 1005))
                text = message.get("text")
                if text == "close":
                    await websocket.close(code=4000, reason="fastapi says bye")
                    return
                if text == "info":
                    await websocket.send_json({"q": q, "x_test": x_test})
                elif text is not None:
                    await websocket.send_text(text)
                else:
                    await websocket.send_bytes(message["bytes"])
        except WebSocketDisconnect as exc:
            probe.note(code=exc.code)

    @app.websocket("/ws/items/{item_id}")
    async def item(websocket: WebSocket, item_id: int, q: str = "none", x_test: str | None = Header(None),
                   _: str = Depends(token)):
        await websocket.accept()
        await websocket.send_json({"item_id": item_id, "q": q, "x_test": x_test})
        await websocket.close(code=1000)

    return app
