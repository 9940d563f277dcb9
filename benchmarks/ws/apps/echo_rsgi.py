"""The RSGI twin of echo.py: every message goes back on its connection as it came, text as
text and bytes as bytes."""


async def app(scope, protocol):
    if scope.proto != "ws":
        protocol.response_str(426, [("content-type", "text/plain"), ("upgrade", "websocket")], "WebSocket only\n")
        return
    transport = await protocol.accept()
    while True:
        message = await transport.receive()
        if message.kind == 0:
            return
        if message.kind == 1:
            await transport.send_bytes(message.data)
        else:
            await transport.send_str(message.data)
