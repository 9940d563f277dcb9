"""A Starlette app exercising what the server has to get right for it: path and query
parameters, JSON, streaming in both directions, forms, files (http.response.pathsend),
headers and cookies, errors, lifespan state and background tasks.

`create_app(probe)` builds one; `python -m swordfish serve --factory
apps.starlette_app:create_app` serves one without a probe."""

import asyncio
import contextlib
import hashlib
import os
import threading

import anyio
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from . import Probe, RecordSends


def chunk(i):
    """The i-th piece of /stream: distinct pieces of different sizes."""
    return f"{i:04d}:".encode() + bytes([65 + i % 26]) * (100 * (i % 7) + 1) + b"\n"


def create_app(probe=None):
    probe = probe or Probe()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        probe.loop_thread = threading.get_ident()
        probe.events.append("startup")
        app.state.started = "app.state set at startup"
        yield {"greeting": "hello from lifespan", "counter": 0}
        probe.events.append("shutdown")

    async def item(request):
        return JSONResponse({
            "item_id": request.path_params["item_id"],
            "name": request.path_params["name"],
            "q": request.query_params.get("q"),
            "tags": request.query_params.getlist("tag"),
        })

    async def body(request):
        data = await request.body()
        return JSONResponse({
            "length": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "transfer_encoding": request.headers.get("transfer-encoding"),
        })

    async def stream_in(request):
        digest, length, pieces = hashlib.sha256(), 0, 0
        async for piece in request.stream():
            if piece:
                pieces += 1
                length += len(piece)
                digest.update(piece)
        return JSONResponse({"length": length, "sha256": digest.hexdigest(), "pieces": pieces})

    async def form(request):
        async with request.form() as data:
            return JSONResponse({key: data.getlist(key) for key in data})

    async def stream(request):
        n = int(request.query_params["n"])

        async def pieces():
            for i in range(n):
                yield chunk(i)
                await asyncio.sleep(0)

        return StreamingResponse(pieces(), media_type="text/plain")

    async def gated(request):
        # "first", then nothing until the test has read it and opens the gate.
        async def pieces():
            yield b"first|"
            if not await anyio.to_thread.run_sync(probe.gate.wait, 10):
                yield b"gate timed out|"
            yield b"second"

        return StreamingResponse(pieces(), media_type="text/plain")

    async def endless(request):
        async def pieces():
            try:
                i = 0
                while True:
                    yield b"%08d" % i + b"x" * 8184
                    i += 1
                    await asyncio.sleep(0)
            finally:
                probe.stream_closed.set()

        return StreamingResponse(pieces(), media_type="application/octet-stream")

    async def file(request):
        return FileResponse(os.path.join(probe.file_dir, request.path_params["name"]))

    async def headers(request):
        response = JSONResponse({
            "x-custom": request.headers.getlist("x-custom"),
            "cookies": request.cookies,
            "user-agent": request.headers.get("user-agent"),
        }, headers={"x-reply": "replied"})
        response.set_cookie("session", "abc123", httponly=True)
        response.set_cookie("theme", "dark", path="/")
        return response

    async def boom(request):
        raise RuntimeError("boom from the endpoint")

    async def state(request):
        seen = {
            "app_state": request.app.state.started,
            "greeting": request.state.greeting,
            "counter": request.state.counter,
        }
        # Each request gets its own (shallow) copy of the lifespan state.
        request.state.greeting = "changed by a request"
        request.state.counter += 1
        return JSONResponse(seen)

    async def background(request):
        async def task():
            # Runs after the response is sent: waits until the test has the response.
            if await anyio.to_thread.run_sync(probe.gate.wait, 10):
                probe.events.append("background ran")
            probe.background_done.set()

        return PlainTextResponse("queued", background=BackgroundTask(task))

    async def refuse(request):
        # Refuses an upload without reading its body, once the test opens the gate.
        if not await anyio.to_thread.run_sync(probe.gate.wait, 10):
            return PlainTextResponse("gate timed out", status_code=500)
        return PlainTextResponse("too large", status_code=413)

    async def client(request):
        host, port = request.client
        return JSONResponse({"host": host, "port": port})

    async def loop(request):
        running = type(asyncio.get_running_loop())
        return PlainTextResponse(f"{running.__module__}.{running.__qualname__}")

    async def thread(request):
        return JSONResponse({"in_loop_thread": threading.get_ident() == probe.loop_thread})

    def sync_thread(request):  # a sync endpoint: Starlette runs it in its threadpool
        return JSONResponse({"in_loop_thread": threading.get_ident() == probe.loop_thread})

    async def empty(request):
        return Response(status_code=204)

    routes = [
        Route("/items/{item_id:int}/{name}", item),
        Route("/body", body, methods=["POST"]),
        Route("/stream-in", stream_in, methods=["POST"]),
        Route("/form", form, methods=["POST"]),
        Route("/stream", stream),
        Route("/gated", gated),
        Route("/endless", endless),
        Route("/file/{name}", file, methods=["GET", "HEAD"]),
        Route("/headers", headers),
        Route("/boom", boom, methods=["GET", "POST"]),
        Route("/state", state),
        Route("/background", background),
        Route("/refuse", refuse, methods=["POST"]),
        Route("/client", client),
        Route("/loop", loop),
        Route("/thread", thread),
        Route("/sync-thread", sync_thread),
        Route("/empty", empty),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(RecordSends, probe=probe)])
    app.probe = probe
    return app
