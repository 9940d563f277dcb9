"""The server's logging: its setup (`--log-level`, or a `--log-config` file instead), the
reopening of its files on SIGUSR1 (`reopen_files`), and the access log: one line per
request on the `swordfish.access` logger, in swordfish's own format or in one given with
`--access-log-format`, spelled with gunicorn's atoms so that a gunicorn user's format works
as it is.

The native server calls the access logger with (request, status, size, seconds, client): the
request is the ASGI scope, a WSGI request (whose `log_view` gives the same keys), or None
for input refused before it made a request."""

import base64
import binascii
import json
import logging
import logging.config
import os
import re
import time

access_logger = logging.getLogger("swordfish.access")

# A request header's atom: %({name}i)s.
_HEADER = re.compile(r"%\(\{([^}]*)\}i\)")


def _line(view):
    """(method, path with query, protocol) of a request's view."""
    path = view["raw_path"].decode("latin-1")
    if view["query_string"]:
        path += "?" + view["query_string"].decode("latin-1")
    # A websocket scope has no method: its handshake is a GET.
    return view.get("method", "GET"), path, f"HTTP/{view['http_version']}"


def _swordfish_format(request, status, size, seconds, client=None):
    """swordfish's own line: `client - "request line" status size duration`."""
    view = request.log_view() if request is not None and type(request) is not dict else request
    if view is not None:
        client = view.get("client")
    who = f"{client[0]}:{client[1]}" if client else "-"
    if view is None:
        access_logger.info('%s - "-" %d %d %.1fms', who, status, size, seconds * 1000)
        return
    method, path, protocol = _line(view)
    access_logger.info('%s - "%s %s %s" %d %d %.1fms', who, method, path, protocol, status, size, seconds * 1000)


class _Atoms:
    """gunicorn's atoms of one request, each worked out only if the format asks for it."""

    __slots__ = ("view", "status", "size", "seconds", "client", "_headers")

    def __init__(self, view, status, size, seconds, client):
        self.view, self.status, self.size, self.seconds, self.client = view, status, size, seconds, client
        self._headers = None

    def header(self, name):
        if self.view is None:
            return "-"
        if self._headers is None:
            self._headers = {}
            for n, v in self.view.get("headers", ()):
                key = n.decode("latin-1")
                value = v.decode("latin-1")
                self._headers[key] = f"{self._headers[key]}, {value}" if key in self._headers else value
        return self._headers.get(name.lower(), "-")

    def user(self):
        kind, _, credentials = self.header("authorization").partition(" ")
        if kind.lower() != "basic":
            return "-"
        try:
            return base64.b64decode(credentials, validate=True).decode("latin-1").partition(":")[0] or "-"
        except (binascii.Error, ValueError):
            return "-"

    def __getitem__(self, key):
        if key.startswith("{") and key.endswith("}i"):
            return self.header(key[1:-2])
        atom = _ATOMS.get(key)
        return "-" if atom is None else atom(self)


def _request_part(i):
    return lambda a: "-" if a.view is None else _line(a.view)[i]


def _remote(a):
    client = a.view.get("client") if a.view is not None else a.client
    return client[0] if client else "-"


_ATOMS = {
    "h": _remote,
    "l": lambda a: "-",
    "u": _Atoms.user,
    "t": lambda a: time.strftime("[%d/%b/%Y:%H:%M:%S %z]"),
    "r": lambda a: "-" if a.view is None else " ".join(_line(a.view)),
    "m": _request_part(0),
    "U": lambda a: "-" if a.view is None else a.view["raw_path"].decode("latin-1"),
    "q": lambda a: "" if a.view is None else a.view["query_string"].decode("latin-1"),
    "H": _request_part(2),
    "s": lambda a: str(a.status),
    "B": lambda a: str(a.size),
    "b": lambda a: str(a.size) if a.size else "-",
    "f": lambda a: a.header("referer"),
    "a": lambda a: a.header("user-agent"),
    "T": lambda a: str(int(a.seconds)),
    "D": lambda a: str(int(a.seconds * 1_000_000)),
    "M": lambda a: str(int(a.seconds * 1000)),
    "L": lambda a: f"{a.seconds:.6f}",
    "p": lambda a: f"<{os.getpid()}>",
}
ATOM_HELP = ("h remote address, l '-', u user (HTTP Basic), t date, r request line, m method, U path, "
             "q query, H protocol, s status, B size, b size or '-', f referer, a user agent, T seconds, "
             "D microseconds, M milliseconds, L decimal seconds, p pid, {name}i a request header")


def check_format(fmt):
    """`fmt`, if it formats a request; ValueError with the reason if not."""
    try:
        fmt % _Atoms(None, 200, 0, 0.0, None)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"invalid access log format {fmt!r}: {exc}") from None
    return fmt


def access_logger_for(fmt):
    """The function the native server calls after each request: swordfish's format when
    `fmt` is None, else `fmt` with gunicorn's atoms."""
    if fmt is None:
        return _swordfish_format
    headers = bool(_HEADER.search(fmt)) or any(f"%({atom})" in fmt for atom in ("u", "f", "a"))

    def log(request, status, size, seconds, client=None):
        if request is not None and type(request) is not dict:  # a WSGI request
            request = request.log_view(headers)
        access_logger.info(fmt % _Atoms(request, status, size, seconds, client))

    return log


def configure_logging(config):
    """swordfish's own setup at --log-level, or the --log-config file's instead."""
    path = config.log_config
    if path is None:
        level = config.log_level.upper()
        logging.basicConfig(level=level, format="%(levelname)s %(message)s")
        logging.getLogger("swordfish").setLevel(level)  # also when logging was configured before
        return
    if not os.path.isfile(path):
        raise ValueError("no such file")
    if path.endswith((".json", ".yaml", ".yml")):
        with open(path, encoding="utf-8") as f:
            if path.endswith(".json"):
                settings = json.load(f)
            else:
                try:
                    import yaml
                except ImportError:
                    raise ValueError("a YAML logging configuration needs PyYAML: pip install pyyaml") from None
                settings = yaml.safe_load(f)
        logging.config.dictConfig(settings)
    else:
        logging.config.fileConfig(path, disable_existing_loggers=False)


def reopen_files():
    """SIGUSR1: every file a logging handler writes is closed and opened again by its name,
    so that after logrotate (or a `mv`) the lines go to a new file at the configured path
    instead of the renamed one. Returns how many were reopened."""
    loggers = [logging.getLogger()] + [x for x in logging.Logger.manager.loggerDict.values()
                                       if isinstance(x, logging.Logger)]
    handlers = {h for lg in loggers for h in lg.handlers if isinstance(h, logging.FileHandler)}
    for handler in handlers:
        handler.acquire()
        try:
            if handler.stream is not None:
                handler.stream.close()
            # FileHandler's own opener (its mode, encoding and errors), as emit() uses it
            # when the file is not open yet.
            handler.stream = handler._open()
        finally:
            handler.release()
    return len(handlers)
