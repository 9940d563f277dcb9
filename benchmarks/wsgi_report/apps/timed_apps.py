"""The report's two apps with the CPU time the app itself spends on each request, for
app_cpu.py: `wsgi` wraps werkzeug_app.app, `asgi` starlette_app.app. Each request's time
is the serving thread's CPU time (time.thread_time) while the app's own code runs: the
WSGI call and the iteration of its body; for ASGI, each step of the app's coroutine
(what its awaits wait for is not counted, what its sends do before they yield is). At
exit the medians and means by path go to the JSON file named by $APP_CPU_OUT."""
import atexit
import json
import os
import statistics
import time

from starlette_app import app as starlette_app
from werkzeug_app import app as werkzeug_app

_times = {}


def _record(path, ns):
    # list.append is atomic under the GIL: the app threads need no lock for it.
    _times.setdefault(path, []).append(ns / 1e3)


def wsgi(environ, start_response):
    t0 = time.thread_time_ns()
    body = werkzeug_app(environ, start_response)
    try:
        parts = list(body)
    finally:
        if hasattr(body, "close"):
            body.close()
    _record(environ["PATH_INFO"], time.thread_time_ns() - t0)
    return parts


class _Steps:
    """Awaits a coroutine, adding up the thread CPU time of each of its steps."""

    def __init__(self, coro, path):
        self.coro, self.path = coro, path

    def __await__(self):
        steps, total, value, error = self.coro.__await__(), 0, None, None
        while True:
            t0 = time.thread_time_ns()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                _record(self.path, total + time.thread_time_ns() - t0)
                return stop.value
            total += time.thread_time_ns() - t0
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001  (thrown into the app's coroutine)
                value, error = None, exc


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return await starlette_app(scope, receive, send)
    return await _Steps(starlette_app(scope, receive, send), scope["path"])


@atexit.register
def _dump():
    out = os.environ.get("APP_CPU_OUT")
    if not out:
        return
    summary = {path: {"n": len(us), "median_us": statistics.median(us), "mean_us": statistics.fmean(us)}
               for path, us in _times.items() if us}
    with open(out, "w") as f:
        json.dump(summary, f)
