"""The echo app of the WebSocket benchmark: every message goes back on its
connection as it came, text as text and bytes as bytes."""
from common import not_websocket


async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return await not_websocket(scope, receive, send)
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return  # websocket.disconnect
        text = message.get("text")
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes")})
