"""`Config`: a server's settings (its fields are settings.SETTINGS, with the option names
uvicorn and granian users know), checked when made, and what they give: the app, the TLS
context, the default headers, the event loop."""

import dataclasses
import importlib
import logging
import os
import ssl
import sys

from .. import _native
from .._tls import RustlsContext
from .settings import SETTINGS, parse_headers

logger = logging.getLogger("swordfish.error")

# The verify modes of the choices of --ssl-cert-reqs (settings.CERT_REQS).
CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class _ConfigMethods:
    """What `Config` does with its settings; its fields come from settings.SETTINGS."""

    def __post_init__(self):
        for s in SETTINGS:
            value = s.normalised(getattr(self, s.name))
            why = s.check(value)
            if why:
                raise ValueError(f"{s.name} {why}")
            setattr(self, s.name, value)
        if self.static_path_dir is not None and not os.path.isdir(self.static_path_dir):
            raise ValueError(f"static_path_dir {self.static_path_dir!r} is not a directory")
        if self.ssl_certfile is None:
            for name in ("ssl_keyfile", "ssl_keyfile_password", "ssl_ca_certs", "ssl_ciphers"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs ssl_certfile (HTTPS)")
            if self.ssl_cert_reqs != "none":
                raise ValueError("ssl_cert_reqs needs ssl_certfile (HTTPS)")
            if self.ssl_engine != "auto":
                raise ValueError("ssl_engine needs ssl_certfile (HTTPS)")
        elif self.proxy_protocol:
            # The header would come before the TLS handshake, which the loop's TLS transport
            # reads first.
            raise ValueError("proxy_protocol does not go with ssl_certfile: let the proxy terminate TLS")
        elif self.ssl_cert_reqs != "none" and self.ssl_ca_certs is None:
            raise ValueError(f"ssl_cert_reqs {self.ssl_cert_reqs!r} needs ssl_ca_certs to verify client certificates with")
        refusal = self._rustls_refusal() if self.ssl_engine == "rustls" else None
        if refusal:
            raise ValueError(f"ssl_engine 'rustls' does not serve {refusal}: use 'openssl' or 'auto'")

    def _rustls_refusal(self):
        """Which settings rustls does not serve (None: it does). Under 'auto', client
        certificates too: webpki, which verifies them under rustls, refuses chains OpenSSL
        takes (a self-signed certificate that is its own CA), so only 'rustls' says so."""
        if self.ssl_engine == "auto" and self.ssl_cert_reqs != "none":
            return "client certificates under 'auto'"
        if self.loop != "swordfish":
            return f"loop {self.loop!r} (its own TLS is OpenSSL's)"
        if self.ssl_keyfile_password is not None:
            return "an encrypted key (ssl_keyfile_password)"
        if self.ssl_ciphers is not None:
            return "an OpenSSL cipher list (ssl_ciphers)"
        return None

    def load_app(self):
        """The app: the object itself, or imported from 'module:attribute' (and called
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
        if not callable(app) and not hasattr(app, "__rsgi__"):
            raise ValueError(f"the app must be callable (or an RSGI app with __rsgi__), got {app!r}")
        return app

    def ssl_context(self, http2=False):
        """The server's TLS context (None: plain HTTP), made once for each ALPN offer:
        `http2`, the app is served HTTP/2 (see `serves_http2`). Raises OSError (ssl.SSLError,
        FileNotFoundError, ...) for a certificate or key that cannot be loaded."""
        if self.ssl_certfile is None:
            return None
        if self._ssl is None:
            self._ssl = {}
        if http2 not in self._ssl:
            self._ssl[http2] = self._make_ssl_context(http2)
        return self._ssl[http2]

    def serves_http2(self):
        """Whether HTTP/2 is served (by the loop: the WSGI thread engine serves HTTP/1.1)."""
        return self.http != "1"

    def http2_settings(self, websockets=True):
        """The HTTP/2 settings as the native server state takes them; `websockets`: the
        interface serves WebSockets (not WSGI), so the extended CONNECT is offered."""
        return (self.http2_max_concurrent_streams, self.http2_initial_stream_window_size,
                self.http2_initial_connection_window_size, self.http2_max_frame_size,
                self.http2_max_headers_size, self.http2_max_send_buffer_size,
                self.http2_keep_alive_interval, self.http2_keep_alive_timeout, self.http2_stall_timeout,
                self.http == "2",
                websockets and self.ws != "none")  # WebSockets over HTTP/2 (RFC 8441)

    def _make_ssl_context(self, http2):
        rustls = self.ssl_engine != "openssl" and self._rustls_refusal() is None
        ctx = (RustlsContext if rustls else ssl.SSLContext)(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_keyfile_password)
        if self.ssl_ca_certs is not None:
            ctx.load_verify_locations(self.ssl_ca_certs)
        ctx.verify_mode = CERT_REQS[self.ssl_cert_reqs]
        if self.ssl_ciphers is not None:
            ctx.set_ciphers(self.ssl_ciphers)
        # A client that offers both gets h2 where the app is served HTTP/2 (RFC 7301: the
        # server's order decides).
        alpn = ["http/1.1"] if not http2 else ["h2"] if self.http == "2" else ["h2", "http/1.1"]
        ctx.set_alpn_protocols(alpn)
        if rustls:
            # The files loaded above, so a bad one fails as it always did; what rustls alone
            # refuses (a certificate webpki will not take, a key type it lacks) is an error
            # under ssl_engine 'rustls', and leaves OpenSSL serving under 'auto'.
            try:
                ctx.rustls = _native.RustlsServerConfig(self.ssl_certfile, self.ssl_keyfile, self.ssl_ca_certs,
                                                        self.ssl_cert_reqs, [p.encode() for p in alpn])
            except (OSError, ValueError) as exc:
                if self.ssl_engine == "rustls":
                    raise
                logger.warning("TLS served by OpenSSL: rustls refused the certificate or key (%s)", exc)
        return ctx

    def default_headers(self):
        """The default response headers as (name, value) bytes pairs, names in lower case."""
        return parse_headers(self.headers)

    def new_event_loop(self):
        if self.loop == "swordfish":
            from .. import new_event_loop

            return new_event_loop()
        if self.loop == "uvloop":
            import uvloop

            return uvloop.new_event_loop()
        import asyncio

        return asyncio.new_event_loop()


_PRIVATE = [  # the loaded app and the TLS context, each made once
    ("_loaded", object, dataclasses.field(default=None, init=False, repr=False, compare=False)),
    ("_ssl", object, dataclasses.field(default=None, init=False, repr=False, compare=False)),
]
Config = dataclasses.make_dataclass(
    "Config", [("app", object), *(s.field() for s in SETTINGS), *_PRIVATE], bases=(_ConfigMethods,),
    namespace={"__module__": __name__, "__doc__": (
        "The server's settings: `Config(app, **settings)` with the names of settings.SETTINGS "
        "(app: an ASGI app, or 'module:attribute'); checked and normalised when made.")})
