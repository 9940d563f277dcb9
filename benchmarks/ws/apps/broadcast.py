"""The broadcast app of the WebSocket benchmark (granian's published
scenario): every message received on any connection is relayed, as it came,
to every connected client, the sender included."""
from common import not_websocket

clients = set()


async def relay(message):
    for client in list(clients):
        try:
            await client(message)
        except Exception:
            # A client that is going away must not end the sender's connection.
            clients.discard(client)


async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return await not_websocket(scope, receive, send)
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    clients.add(send)
    try:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return  # websocket.disconnect
            text = message.get("text")
            if text is not None:
                await relay({"type": "websocket.send", "text": text})
            else:
                await relay({"type": "websocket.send", "bytes": message.get("bytes")})
    finally:
        clients.discard(send)
