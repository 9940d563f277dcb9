"""The RSGI twin of bench.py (for the RSGI servers of the multi-core suite):

    GET  /      "Hello, world!" in plain text
    GET  /10k   a 10 KiB body
    POST /echo  the request body sent back piece by piece as it arrives (a streamed response)
"""

HELLO = b"Hello, world!"
TEN_K = b"x" * 10240
TEXT = [("content-type", "text/plain")]
BINARY = [("content-type", "application/octet-stream")]


async def app(scope, protocol):
    path = scope.path
    if path == "/":
        protocol.response_bytes(200, TEXT, HELLO)
    elif path == "/10k":
        protocol.response_bytes(200, BINARY, TEN_K)
    elif path == "/echo":
        transport = protocol.response_stream(200, BINARY)
        async for chunk in protocol:
            await transport.send_bytes(chunk)
    else:
        protocol.response_bytes(404, TEXT, b"not found")
