"""The app the worker/CLI tests run in `python -m swordfish serve workerapp:app`.

GET /pid            -> this process's pid
GET /pid?block=S    -> the same, after blocking the worker's loop for S seconds (so that
                       concurrent connections go to the other workers)
GET /scope          -> "client-host client-port scheme"
GET /slow?t=S       -> headers and "begin\n" at once, "end\n" S seconds later
GET /stuck          -> headers and "begin\n", then never finishes
GET /blocked        -> headers and "begin\n", then blocks the worker's loop for good
POST /upload        -> headers and "begin PID\n" at once, "end N\n" once the whole body
                       (N bytes) has arrived
"""

import asyncio
import os
import time


async def app(scope, receive, send):
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        return
    path = scope["path"]
    query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if "=" in p)
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    if path == "/pid":
        if "block" in query:
            time.sleep(float(query["block"]))
        await send(start)
        await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
    elif path == "/scope":
        client = scope["client"]
        await send(start)
        await send({"type": "http.response.body", "body": f"{client[0]} {client[1]} {scope['scheme']}".encode()})
    elif path in ("/slow", "/stuck", "/blocked"):
        await send(start)
        await send({"type": "http.response.body", "body": b"begin\n", "more_body": True})
        if path == "/slow":
            await asyncio.sleep(float(query.get("t", "0.5")))
        elif path == "/stuck":
            await asyncio.Event().wait()
        else:
            # Response chunks leave when the app yields to the loop: yield once, then block.
            await asyncio.sleep(0)
            time.sleep(3600)
        await send({"type": "http.response.body", "body": b"end\n"})
    elif path == "/upload":
        await send(start)
        await send({"type": "http.response.body", "body": f"begin {os.getpid()}\n".encode(), "more_body": True})
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.body", "body": f"end {size}\n".encode()})
    else:
        await send({**start, "status": 404})
        await send({"type": "http.response.body", "body": b"not found"})
