"""Server settings, with the option names uvicorn and granian users know."""

import dataclasses
import importlib
import os
import sys


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

    def __post_init__(self):
        if self.lifespan not in ("auto", "on", "off"):
            raise ValueError("lifespan must be 'auto', 'on' or 'off'")
        if self.loop not in ("swordfish", "asyncio", "uvloop"):
            raise ValueError("loop must be 'swordfish', 'asyncio' or 'uvloop'")

    def load_app(self):
        """The ASGI app: the object itself, or imported from 'module:attribute'."""
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
