"""The RSGI twin of broadcast.py: every message received on any connection is relayed, as
it came, to every connected client, the sender included."""

clients = set()


async def relay(message):
    send = "send_bytes" if message.kind == 1 else "send_str"
    for client in list(clients):
        try:
            await getattr(client, send)(message.data)
        except Exception:
            # A client that is going away must not end the sender's connection.
            clients.discard(client)


async def app(scope, protocol):
    if scope.proto != "ws":
        protocol.response_str(426, [("content-type", "text/plain"), ("upgrade", "websocket")], "WebSocket only\n")
        return
    transport = await protocol.accept()
    clients.add(transport)
    try:
        while True:
            message = await transport.receive()
            if message.kind == 0:
                return
            await relay(message)
    finally:
        clients.discard(transport)
