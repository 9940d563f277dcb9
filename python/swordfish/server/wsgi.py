"""The Python side of the WSGI interface (the native side is `src/wsgi/`): which interface an
app speaks (`--interface auto`), the constant part of every environ, `wsgi.errors`, and
`--proxy-headers` for WSGI apps."""

import functools
import inspect
import logging

from .. import _native
from .proxy import TrustedHosts, forwarded_client

errors_logger = logging.getLogger("swordfish.wsgi")


def _is_coroutine_callable(obj):
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - a class instance's own __call__
    return call is not None and not inspect.isfunction(obj) and inspect.iscoroutinefunction(call)


def _positional_count(obj):
    """How many positional arguments `obj` takes (None if it cannot be told)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    return len(params)


def detect_interface(app):
    """'asgi' or 'wsgi' for `--interface auto`: an `async def` (function, or a class's
    `__call__`) is ASGI; otherwise a callable taking two positional arguments (environ,
    start_response) is WSGI and one taking three (scope, receive, send) is ASGI. Anything
    else (say `*args`) is ambiguous and served as ASGI, with a warning to pass
    `--interface`."""
    if _is_coroutine_callable(app):
        return "asgi"
    count = _positional_count(app)
    if count == 2:
        return "wsgi"
    if count != 3:
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
            proto = [s.strip() for s in environ.get("HTTP_X_FORWARDED_PROTO", "").split(",") if s.strip()]
            if proto and proto[-1].lower() in ("http", "https"):
                environ["wsgi.url_scheme"] = proto[-1].lower()
            hosts = [s.strip() for s in environ.get("HTTP_X_FORWARDED_FOR", "").split(",") if s.strip()]
            if hosts:
                environ["REMOTE_ADDR"] = forwarded_client(hosts, self.trusted)
                environ["REMOTE_PORT"] = "0"
        return self.app(environ, start_response)
