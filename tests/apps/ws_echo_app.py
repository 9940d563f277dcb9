"""A plain ASGI WebSocket echo app for tests/test_ws_lifecycle.py, in process (`create_app(probe)`)
and in `python -m swordfish serve apps.ws_echo_app:app` (the module-level `app`, without a probe).

websocket, any path but /deny: accepted (with the first subprotocol offered, if any); then every
message is echoed in kind, except these text commands:
    "pid"        -> this process's pid
    "block S"    -> the pid, after blocking the loop S seconds (so that concurrent connections
                    go to the other workers)
    "scope"      -> the scope's scheme, path, query string and http_version as JSON
    "stats"      -> JSON: the number of objects the cyclic GC tracks, and of live asyncio tasks
    "close"      -> the app closes with 1000 "bye" and returns
websocket /deny -> the app closes before accepting (the client gets 403)
http /pid        -> 200 and this process's pid
http /raise      -> the app raises (a 500)
http             -> 200 "ok" (to show that plain requests share the server's limits)"""

import asyncio
import gc
import json
import os
import threading
import time


class WsProbe:
    """What the apps saw, for a test in another thread: how many websocket calls have ended, and
    the code of every websocket.disconnect they received, in order."""

    def __init__(self):
        self.cond = threading.Condition()
        self.ended = 0
        self.disconnect_codes = []

    def note(self, ended=0, code=None):
        with self.cond:
            self.ended += ended
            if code is not None:
                self.disconnect_codes.append(code)
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """Whether predicate(probe) became true within timeout seconds."""
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self), timeout)


def create_app(probe=None):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] == "http":
            if scope["path"] == "/raise":
                raise RuntimeError("asked to raise")
            body = str(os.getpid()).encode() if scope["path"] == "/pid" else b"ok"
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return
        try:
            await websocket(scope, receive, send, probe)
        finally:
            if probe is not None:
                probe.note(ended=1)

    return app


async def websocket(scope, receive, send, probe):
    message = await receive()
    assert message["type"] == "websocket.connect", message
    if scope["path"] == "/deny":
        await send({"type": "websocket.close", "code": 1008})
        return
    offered = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": offered[0] if offered else None})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            if probe is not None:
                probe.note(code=message.get("code", 1005))  # the spec's default: no code received
            return
        text = message.get("text")
        if text == "pid":
            await send({"type": "websocket.send", "text": str(os.getpid())})
        elif text is not None and text.startswith("block "):
            time.sleep(float(text.split()[1]))  # blocks the loop: that is the point
            await send({"type": "websocket.send", "text": str(os.getpid())})
        elif text == "scope":
            info = {
                "scheme": scope["scheme"],
                "path": scope["path"],
                "query_string": scope["query_string"].decode("latin-1"),
                "http_version": scope["http_version"],
            }
            await send({"type": "websocket.send", "text": json.dumps(info)})
        elif text == "stats":
            # For the leak test: objects the cyclic GC tracks (scopes, coroutines, tasks, protocol
            # objects: anything a connection leaks on the Python side shows here) and live tasks.
            gc.collect()
            stats = {"objects": len(gc.get_objects()), "tasks": len(asyncio.all_tasks())}
            await send({"type": "websocket.send", "text": json.dumps(stats)})
        elif text == "close":
            await send({"type": "websocket.close", "code": 1000, "reason": "bye"})
            return
        elif text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


app = create_app()
