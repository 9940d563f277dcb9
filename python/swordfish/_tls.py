"""TLS transports: `ssl=` on connections and servers, and `loop.start_tls`.

The TLS state machine is native (`_native.TlsCore`, on `ssl.MemoryBIO`, or on rustls for a
server's `RustlsContext`); it is the protocol of a plain socket transport and drives the
application's protocol. `SSLTransport` is what the application holds: an `asyncio.Transport`
that delegates to the core.
"""

import asyncio
import ssl
import warnings
from asyncio import constants
from asyncio.log import logger

from . import _native

__all__ = ["RustlsContext", "SSLTransport", "TlsMixin"]


class RustlsContext(ssl.SSLContext):
    """A server's `SSLContext` that swordfish's loop serves with rustls instead: `rustls` is
    the `_native.RustlsServerConfig` made from the same files and settings. Other loops (and
    client-side uses) take it as the OpenSSL context it also is."""

    rustls = None


def _default_context(server_side, server_hostname):
    if server_side:
        raise ValueError("Server side SSL needs a valid SSLContext")
    context = ssl.create_default_context()
    if not server_hostname:
        context.check_hostname = False
    return context


def _check_timeout(name, value, default):
    if value is None:
        return default
    if value <= 0:
        raise ValueError(f"{name} should be a positive number, got {value}")
    return value


class SSLTransport(asyncio.Transport):
    """The application's side of a TLS connection."""

    _start_tls_compatible = True

    def __init__(self, loop, core, sslcontext):
        super().__init__({"sslcontext": sslcontext})
        self._loop = loop
        self._core = core
        self._closed = False
        for name in ("write", "writelines", "is_reading", "pause_reading", "resume_reading"):
            setattr(self, name, getattr(core, name))
        core._set_app_transport(self)

    # -- application API ------------------------------------------------------------------

    def get_extra_info(self, name, default=None):
        if name in self._extra:
            return self._extra[name]
        raw = self._core._raw_transport()
        if raw is not None:
            return raw.get_extra_info(name, default)
        return default

    def set_protocol(self, protocol):
        self._core._set_app_protocol(protocol, isinstance(protocol, asyncio.BufferedProtocol))

    def get_protocol(self):
        return self._core._get_app_protocol()

    def is_closing(self):
        return self._core.is_closing()

    def close(self):
        self._core.close()

    def abort(self):
        self._core._force_close(None)

    def _force_close(self, exc):
        self._core._force_close(exc)

    def write_eof(self):
        raise NotImplementedError()  # as the stdlib's SSL transport: TLS has no half-close

    def can_write_eof(self):
        return False

    def set_write_buffer_limits(self, high=None, low=None):
        self._core.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self):
        return self._core.get_write_buffer_limits()

    def get_write_buffer_size(self):
        return self._core.get_write_buffer_size()

    def set_read_buffer_limits(self, high=None, low=None):
        self._core.set_read_buffer_limits(high, low)

    def get_read_buffer_limits(self):
        return self._core.get_read_buffer_limits()

    def get_read_buffer_size(self):
        return self._core.get_read_buffer_size()

    @property
    def _protocol_paused(self):
        return self._core._app_writing_paused

    @property
    def _ssl_protocol(self):
        # The stdlib's name for the TLS layer; some code (and CPython's tests) reach for it.
        return self._core

    def _test__append_write_backlog(self, data):
        # CPython's test hook: queue data without writing it yet.
        self._core._append_backlog(data)

    def __repr__(self):
        raw = self._core._raw_transport()
        state = "closed" if self._core.is_closing() else "open"
        return f"<SSLTransport {state} over {raw!r}>"

    def __del__(self, _warn=warnings.warn):
        core = getattr(self, "_core", None)
        if core is not None and not core.is_closing():
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            # After the loop closed, the socket's transport closes the socket when it is
            # collected in turn (and warns, as the stdlib's does).
            if not self._loop.is_closed():
                core._force_close(None)

    # -- called by the core ---------------------------------------------------------------

    def _handshake_done(self, peercert):
        sslobj = self._sslobj  # None under rustls, which has no SSLObject to show
        self._extra.update(
            peercert=peercert,
            cipher=self._core.cipher(),
            compression=None if sslobj is None else sslobj.compression(),
            ssl_object=sslobj,
        )
        if self._loop.get_debug():
            logger.debug("%r: SSL handshake done", self)

    def _fatal_error(self, exc, message="Fatal error on transport"):
        raw = self._core._raw_transport()
        if raw is not None:
            raw._force_close(exc)
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        elif not isinstance(exc, asyncio.CancelledError):
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": raw,
                    "protocol": self._core,
                }
            )

    def _report_flow_error(self, message, exc):
        self._loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": self,
                "protocol": self.get_protocol(),
            }
        )

    def _connection_lost(self):
        self._closed = True


def _wrap(loop, protocol, sslcontext, waiter, server_side, server_hostname,
          handshake_timeout, shutdown_timeout, call_connection_made):
    """The TLS core and the application's transport for one connection."""
    handshake_timeout = _check_timeout(
        "ssl_handshake_timeout", handshake_timeout, constants.SSL_HANDSHAKE_TIMEOUT
    )
    shutdown_timeout = _check_timeout(
        "ssl_shutdown_timeout", shutdown_timeout, getattr(constants, "SSL_SHUTDOWN_TIMEOUT", 30.0)
    )
    if not sslcontext:
        sslcontext = _default_context(server_side, server_hostname)
    buffered = isinstance(protocol, asyncio.BufferedProtocol)
    if server_side and isinstance(sslcontext, RustlsContext) and sslcontext.rustls is not None:
        core = _native.TlsCore.rustls_server(loop, protocol, buffered, sslcontext.rustls, waiter,
                                             handshake_timeout, shutdown_timeout, call_connection_made)
        app = SSLTransport(loop, core, sslcontext)
        app._sslobj = None
        return core, app
    server_hostname = server_hostname if (server_hostname and not server_side) else None
    incoming = ssl.MemoryBIO()
    outgoing = ssl.MemoryBIO()
    sslobj = sslcontext.wrap_bio(
        incoming, outgoing, server_side=server_side, server_hostname=server_hostname
    )
    core = _native.TlsCore(
        loop,
        protocol,
        buffered,
        sslobj,
        incoming,
        outgoing,
        waiter,
        handshake_timeout,
        shutdown_timeout,
        call_connection_made,
    )
    app = SSLTransport(loop, core, sslcontext)
    app._sslobj = sslobj
    return core, app


class TlsMixin:
    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None, *,
                            server_side=False, server_hostname=None, extra=None,
                            server=None, ssl_handshake_timeout=None,
                            ssl_shutdown_timeout=None, call_connection_made=True):
        core, app = _wrap(self, protocol, sslcontext, waiter, server_side, server_hostname,
                          ssl_handshake_timeout, ssl_shutdown_timeout, call_connection_made)
        self._make_socket_transport(rawsock, core, extra=extra, server=server)
        return app

    async def start_tls(self, transport, protocol, sslcontext, *, server_side=False,
                        server_hostname=None, ssl_handshake_timeout=None,
                        ssl_shutdown_timeout=None):
        if not isinstance(sslcontext, ssl.SSLContext):
            raise TypeError(
                f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}"
            )
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(f"transport {transport!r} is not supported by start_tls()")
        waiter = self.create_future()
        core, app = _wrap(self, protocol, sslcontext, waiter, server_side, server_hostname,
                          ssl_handshake_timeout, ssl_shutdown_timeout, False)
        # Stop reading until the TLS core is the protocol and has seen connection_made.
        transport.pause_reading()
        transport.set_protocol(core)
        made = self.call_soon(core.connection_made, transport)
        resumed = self.call_soon(transport.resume_reading)
        try:
            await waiter
        except BaseException:
            transport.close()
            made.cancel()
            resumed.cancel()
            raise
        # As in the stdlib: a connection lost before this point (a transport that was already
        # closing, say) leaves no TLS transport to return.
        return None if app._closed else app
