"""RSGI echo app for Autobahn|Testsuite's fuzzingclient: accept every WebSocket and send each
message back, text as text and bytes as bytes, until the client disconnects."""


async def app(scope, protocol):
    if scope.proto != "ws":
        # The testsuite only opens WebSockets; plain HTTP is told where to go.
        protocol.response_str(426, [("content-type", "text/plain"), ("upgrade", "websocket")], "WebSocket echo only\n")
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
