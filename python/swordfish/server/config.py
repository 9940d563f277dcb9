"""Server settings, with the option names uvicorn and granian users know."""

import dataclasses
import importlib
import os
import ssl
import sys


LOG_LEVELS = ["critical", "error", "warning", "info", "debug"]
# --ssl-cert-reqs: whether clients are asked for a certificate, and must present one.
CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# The numeric settings' bounds: (least, most or None, whether the least itself is allowed).
# The CLI checks its options against the same table.
BOUNDS = {
    "port": (0, 65535, True),
    "fd": (0, None, True),
    "workers": (1, None, True),
    "backlog": (0, None, True),
    "limit_concurrency": (1, None, True),
    "limit_request_line": (1, None, True),
    "limit_header_size": (1, None, True),
    "limit_header_count": (1, None, True),
    "limit_body_size": (0, None, True),
    "timeout_header_read": (0, None, False),
    "timeout_keep_alive": (0, None, True),
    "timeout_graceful_shutdown": (0, None, True),
    "max_requests": (1, None, True),
    "max_requests_jitter": (0, None, True),
    "reload_delay": (0, None, False),
}


def out_of_bounds(name, value):
    """Why `value` is not allowed for the numeric setting `name`, or None if it is."""
    low, high, inclusive = BOUNDS[name]
    if (value >= low if inclusive else value > low) and (high is None or value <= high):  # not NaN
        return None
    bound = f"at least {low}" if inclusive else f"more than {low}"
    if high is not None:
        bound += f" and at most {high}"
    return f"must be {bound}, not {value!r}"


@dataclasses.dataclass
class Config:
    app: object
    host: str = "127.0.0.1"
    port: int = 8000
    uds: str | None = None
    fd: int | None = None
    factory: bool = False
    app_dir: str | None = None
    root_path: str = ""
    lifespan: str = "auto"  # auto | on | off
    loop: str = "swordfish"  # swordfish | asyncio | uvloop
    access_log: bool = True
    log_level: str = "info"
    backlog: int = 2048
    limit_concurrency: int | None = None
    limit_request_line: int = 8190
    limit_header_size: int = 32768
    limit_header_count: int = 100
    limit_body_size: int | None = None
    timeout_header_read: float = 10.0
    timeout_keep_alive: float = 5.0
    timeout_graceful_shutdown: float | None = 30.0
    server_header: bool = True
    date_header: bool = True
    headers: list = dataclasses.field(default_factory=list)  # ["name: value", ...] or pairs
    proxy_headers: bool = False
    forwarded_allow_ips: str = "127.0.0.1"
    max_requests: int | None = None
    max_requests_jitter: int = 0
    workers: int = 1
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: str = "none"  # none | optional | required
    ssl_ciphers: str | None = None
    reload: bool = False
    reload_dirs: list = dataclasses.field(default_factory=list)  # default: app_dir, or "."
    reload_includes: list = dataclasses.field(default_factory=list)  # default: *.py
    reload_excludes: list = dataclasses.field(default_factory=list)
    reload_delay: float = 0.25
    _loaded: object = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _ssl: object = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.lifespan not in ("auto", "on", "off"):
            raise ValueError("lifespan must be 'auto', 'on' or 'off'")
        if self.loop not in ("swordfish", "asyncio", "uvloop"):
            raise ValueError("loop must be 'swordfish', 'asyncio' or 'uvloop'")
        self.log_level = str(self.log_level).lower()
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        for name in BOUNDS:
            value = getattr(self, name)
            why = None if value is None else out_of_bounds(name, value)
            if why:
                raise ValueError(f"{name} {why}")
        if self.ssl_cert_reqs not in CERT_REQS:
            raise ValueError(f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, not {self.ssl_cert_reqs!r}")
        if self.ssl_certfile is None:
            for name in ("ssl_keyfile", "ssl_keyfile_password", "ssl_ca_certs", "ssl_ciphers"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs ssl_certfile (HTTPS)")
            if self.ssl_cert_reqs != "none":
                raise ValueError("ssl_cert_reqs needs ssl_certfile (HTTPS)")
        elif self.ssl_cert_reqs != "none" and self.ssl_ca_certs is None:
            raise ValueError(f"ssl_cert_reqs {self.ssl_cert_reqs!r} needs ssl_ca_certs to verify client certificates with")
        if self.timeout_graceful_shutdown == float("inf"):
            self.timeout_graceful_shutdown = None  # no limit (the CLI's spelling is 'inf')

    def load_app(self):
        """The ASGI app: the object itself, or imported from 'module:attribute' (and called
        if it is a factory); loaded once, so a factory runs once."""
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def _load(self):
        app = self.app
        if isinstance(app, str):
            if self.app_dir is not None:
                sys.path.insert(0, os.path.abspath(self.app_dir))
            module_name, sep, attrs = app.partition(":")
            if not sep or not module_name or not attrs:
                raise ValueError(f"app must be given as 'module:attribute', not {app!r}")
            obj = importlib.import_module(module_name)
            try:
                for attr in attrs.split("."):
                    obj = getattr(obj, attr)
            except AttributeError:
                raise ValueError(f"attribute {attrs!r} not found in module {module_name!r}") from None
            app = obj
        if self.factory:
            app = app()
        if not callable(app):
            raise ValueError(f"the ASGI app must be callable, got {app!r}")
        return app

    def ssl_context(self):
        """The server's TLS context (None: plain HTTP), made once. Raises OSError
        (ssl.SSLError, FileNotFoundError, ...) for a certificate or key that cannot be loaded."""
        if self.ssl_certfile is None:
            return None
        if self._ssl is None:
            self._ssl = self._make_ssl_context()
        return self._ssl

    def _make_ssl_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_keyfile_password)
        if self.ssl_ca_certs is not None:
            ctx.load_verify_locations(self.ssl_ca_certs)
        ctx.verify_mode = CERT_REQS[self.ssl_cert_reqs]
        if self.ssl_ciphers is not None:
            ctx.set_ciphers(self.ssl_ciphers)
        # HTTP/1.1 only: a client offering h2 and http/1.1 in ALPN is told which one it gets.
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def default_headers(self):
        pairs = []
        for h in self.headers:
            if isinstance(h, str):
                name, sep, value = h.partition(":")
                if not sep:
                    raise ValueError(f"header must be 'name: value', not {h!r}")
                h = (name.strip(), value.strip())
            name, value = h
            pairs.append((_b(name).lower(), _b(value)))
        return pairs

    def new_event_loop(self):
        if self.loop == "swordfish":
            from .. import new_event_loop

            return new_event_loop()
        if self.loop == "uvloop":
            import uvloop

            return uvloop.new_event_loop()
        import asyncio

        return asyncio.new_event_loop()


def _b(v):
    return v.encode("latin-1") if isinstance(v, str) else bytes(v)
