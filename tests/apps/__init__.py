"""ASGI apps built with real frameworks (Starlette, FastAPI, Django) for
tests/test_http_frameworks.py. Each module builds its app in a function, so that a test
gets a fresh app and a `Probe` to observe what happened inside it from the test's thread."""

import threading


class Probe:
    """What an app reports to the test: threading events (the app runs on the server's
    loop thread, the test waits on its own), and a log of lifespan steps and sent messages."""

    def __init__(self, file_dir=None):
        self.file_dir = file_dir  # where FileResponse endpoints read from
        self.events = []  # lifespan steps, in order
        self.sent = []  # (path, ASGI message type) of each message the app sent
        self.loop_thread = None  # threading.get_ident() of the server's loop
        self.gate = threading.Event()  # the test lets a waiting endpoint go on
        self.stream_closed = threading.Event()  # an endless stream's generator ended
        self.background_done = threading.Event()
        self.app_returned = threading.Event()  # an http request's app call ended (Watched)
        self.app_errors = []  # the types of what it raised (Watched)


class RecordSends:
    """Pure ASGI middleware: records the type of every message the app sends."""

    def __init__(self, app, probe):
        self.app = app
        self.probe = probe

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def recording_send(message):
            self.probe.sent.append((scope["path"], message["type"]))
            await send(message)

        await self.app(scope, receive, recording_send)


class Watched:
    """Pure ASGI wrapper around a whole app: records when an http request's call returns
    and what it raised, before the server sees it."""

    def __init__(self, app, probe):
        self.app = app
        self.probe = probe

    async def __call__(self, scope, receive, send):
        try:
            await self.app(scope, receive, send)
        except BaseException as exc:
            if scope["type"] == "http":
                self.probe.app_errors.append(type(exc))  # not exc: it would keep its frames alive
            raise
        finally:
            if scope["type"] == "http":
                self.probe.app_returned.set()
