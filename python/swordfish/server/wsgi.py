"""The Python side of the WSGI interface (the native side is `src/wsgi/`): which interface an
app speaks (`--interface auto`: ASGI, WSGI or RSGI), the constant part of every environ, `wsgi.errors`, and
`--proxy-headers` for WSGI apps."""

import functools
import inspect
import logging

from .. import _native
from .proxy import TrustedHosts, comma_items, forwarded_client

errors_logger = logging.getLogger("swordfish.wsgi")


def _is_coroutine_callable(obj):
    """An `async def` function, through partials and decorators that keep `__wrapped__`,
    or an object whose `__call__` is one."""
    while True:
        while isinstance(obj, functools.partial):
            obj = obj.func
        if inspect.iscoroutinefunction(obj):
            return True
        inner = getattr(obj, "__wrapped__", None) if inspect.isfunction(obj) else None
        if inner is None:
            break
        obj = inner
    call = getattr(obj, "__call__", None)  # noqa: B004 - a class instance's own __call__
    return call is not None and not inspect.isfunction(obj) and inspect.iscoroutinefunction(call)


def _takes(obj, count):
    """Whether obj can be called with `count` positional arguments (None if its signature
    cannot be read). The callable's own signature, not a decorated function's: a decorator
    taking `*args` (Werkzeug's `Request.application`) is called with what it takes."""
    try:
        sig = inspect.signature(obj, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*range(count))
    except TypeError:
        return False
    return True


def detect_interface(app):
    """'asgi', 'wsgi' or 'rsgi' for `--interface auto`. An object with `__rsgi__` (an
    Emmett app) is RSGI. An `async def` app (function, or a class's `__call__`; through
    partials and decorators) is ASGI, or RSGI if it takes two arguments but not three. Otherwise an app that can be
    called with two positional arguments (environ, start_response) is WSGI, and one that
    takes three but not two (scope, receive, send: a function returning the coroutine) is
    ASGI. Anything else is served as ASGI, with a warning to pass `--interface`."""
    if hasattr(app, "__rsgi__"):
        return "rsgi"
    if _is_coroutine_callable(app):
        # RSGI's app is `async def app(scope, protocol)`; ASGI's takes three.
        return "rsgi" if _takes(app, 2) and not _takes(app, 3) else "asgi"
    if _takes(app, 2):
        return "wsgi"
    if not _takes(app, 3):
        logging.getLogger("swordfish.error").warning(
            "cannot tell whether %r is an ASGI or a WSGI app: serving it as ASGI (pass --interface to choose)", app)
    return "asgi"


class WsgiErrors:
    """`wsgi.errors`: what the app writes becomes log records of `swordfish.wsgi` (level
    ERROR), a line each; a line without its end waits for `flush()` or the next write."""

    def __init__(self, logger=errors_logger):
        self._logger = logger
        self._partial = ""

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"wsgi.errors takes str, not {type(text).__name__}")
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._logger.error("%s", line)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._partial:
            self._logger.error("%s", self._partial)
            self._partial = ""


def environ_template(config, multiprocess):
    """The keys every request's environ starts with; `multiprocess`: other processes serve
    the same app (a supervisor's workers)."""
    return {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": WsgiErrors(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
        "wsgi.file_wrapper": _native.FileWrapper,
        "SCRIPT_NAME": config.root_path,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "QUERY_STRING": "",
    }


class WsgiProxyHeaders:
    """`--proxy-headers` for a WSGI app: `REMOTE_ADDR` and `wsgi.url_scheme` from
    `X-Forwarded-For` and `X-Forwarded-Proto` when the peer is trusted, read as the ASGI
    middleware (proxy.ProxyHeaders) reads them."""

    def __init__(self, app, trusted="127.0.0.1"):
        self.app = app
        self.trusted = trusted if isinstance(trusted, TrustedHosts) else TrustedHosts(trusted)

    def __call__(self, environ, start_response):
        if environ.get("REMOTE_ADDR") in self.trusted:
            proto = comma_items([environ.get("HTTP_X_FORWARDED_PROTO", "")])
            if proto and proto[-1].lower() in ("http", "https"):
                environ["wsgi.url_scheme"] = proto[-1].lower()
            hosts = comma_items([environ.get("HTTP_X_FORWARDED_FOR", "")])
            if hosts:
                environ["REMOTE_ADDR"] = forwarded_client(hosts, self.trusted)
                environ["REMOTE_PORT"] = "0"
        return self.app(environ, start_response)
