"""The ASGI lifespan protocol: startup before the first connection, shutdown after the last."""

import asyncio
import logging

logger = logging.getLogger("swordfish.error")


class LifespanFailed(RuntimeError):
    """The app's startup failed; the server does not start."""


class Lifespan:
    def __init__(self, app, mode):
        self.app = app
        self.mode = mode
        self.state = {}
        self.supported = mode != "off"
        self._queue = None
        self._events = {}
        self._failure = None
        self._task = None

    async def startup(self):
        if self.mode == "off":
            return
        loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        for name in ("startup", "shutdown"):
            self._events[name] = asyncio.Event()
        self._task = loop.create_task(self._main())
        await self._exchange("startup")

    async def shutdown(self):
        if not self.supported or self._task is None:
            return
        if self._task.done():
            return
        await self._exchange("shutdown")
        if self._failure is not None:
            logger.error("lifespan shutdown failed: %s", self._failure)

    async def _exchange(self, phase):
        self._failure = None
        self._queue.put_nowait({"type": f"lifespan.{phase}"})
        done = asyncio.ensure_future(self._events[phase].wait())
        try:
            await asyncio.wait([done, self._task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
        if phase == "startup":
            if self._failure is not None:
                raise LifespanFailed(f"application startup failed: {self._failure}")
            if not self._events[phase].is_set() and self.supported:
                raise LifespanFailed("application startup failed: the lifespan task ended early")

    async def _main(self):
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self._receive, self._send)
        except BaseException as exc:  # noqa: BLE001 - reported, never re-raised
            started = self._events["startup"].is_set()
            if self.mode == "auto" and not started:
                self.supported = False
                logger.info("ASGI 'lifespan' protocol appears unsupported.")
            else:
                self._failure = repr(exc)
                logger.error("Exception in 'lifespan' protocol", exc_info=exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            for ev in self._events.values():
                ev.set()

    async def _receive(self):
        return await self._queue.get()

    async def _send(self, message):
        kind = message.get("type")
        if kind == "lifespan.startup.complete":
            self._events["startup"].set()
        elif kind == "lifespan.startup.failed":
            self._failure = message.get("message", "") or "lifespan.startup.failed"
            self._events["startup"].set()
        elif kind == "lifespan.shutdown.complete":
            self._events["shutdown"].set()
        elif kind == "lifespan.shutdown.failed":
            self._failure = message.get("message", "") or "lifespan.shutdown.failed"
            self._events["shutdown"].set()
        else:
            raise RuntimeError(f"Unexpected ASGI lifespan message type {kind!r}")
