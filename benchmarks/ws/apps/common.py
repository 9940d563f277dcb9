"""What the WebSocket benchmark apps do outside WebSocket scopes: the lifespan
protocol (so no server logs a missing one) and 426 for plain HTTP requests."""


async def not_websocket(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 426,
                    "headers": [(b"content-type", b"text/plain"), (b"upgrade", b"websocket")]})
        await send({"type": "http.response.body", "body": b"WebSocket only\n"})
