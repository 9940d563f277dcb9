"""The datagram transport: UDP (IPv4/IPv6), Unix datagram sockets and any other non-stream
socket, with the stdlib `_SelectorDatagramTransport`'s behaviour on each Python version.

`DatagramTransport` is an `asyncio.DatagramTransport` (and, as the stdlib's is, an
`asyncio.Transport`) around a native `DatagramCore`, which owns the descriptor's
registration, the reads, the sends, the queue, flow control and the closing state. The hot
methods are the core's own bound methods, set on the instance; this module keeps
construction, extra info, limits validation, error reporting and `connection_lost`.
"""

import asyncio
import warnings
from asyncio import futures, trsock
from asyncio.log import logger

from . import _native
from ._compat import PY311, PY313
from ._transports import CoreReports

__all__ = ["DatagramTransport", "DatagramTransportMixin"]

# The core's methods called often enough to skip a Python-level wrapper.
_FAST_METHODS = ("sendto", "get_write_buffer_size", "is_closing")

# 3.13 counts 8 bytes per queued datagram besides its data (so that empty datagrams, which
# it sends, count for flow control) and sends empty datagrams; earlier versions drop them.
_HEADER_SIZE = 8 if PY313 else 0
_DROP_EMPTY = not PY313


class DatagramTransport(CoreReports, asyncio.DatagramTransport, asyncio.Transport):
    """A datagram socket's transport (`loop.create_datagram_endpoint`)."""

    max_size = 256 * 1024  # the largest datagram a read takes, as the stdlib's

    def __init__(self, loop, sock, protocol, address=None, waiter=None, extra=None):
        asyncio.BaseTransport.__init__(self, extra)
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        self._loop = loop
        self._sock = sock
        self._sock_fd = sock.fileno()
        self._address = address
        self._low_water = 16 * 1024
        self._high_water = 64 * 1024
        self._core = None
        core = _native.DatagramCore(
            loop, sock, self._sock_fd, sock.family, self, address if address else None,
            bool(self._extra["peername"]), _HEADER_SIZE, _DROP_EMPTY,
        )
        self._core = core
        for name in _FAST_METHODS:
            setattr(self, name, getattr(core, name))
        core.set_protocol(protocol)
        core._attach()
        loop.call_soon(protocol.connection_made, self)
        # Reading starts once connection_made() has been called.
        loop.call_soon(core._start)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    # -- the public interface (the fast methods are replaced per instance) -----------------

    def sendto(self, data, addr=None):
        self._core.sendto(data, addr)

    def get_write_buffer_size(self):
        return self._core.get_write_buffer_size()

    def is_closing(self):
        return self._core.is_closing()

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def set_protocol(self, protocol):
        self._core.set_protocol(protocol)

    def get_protocol(self):
        return self._core.get_protocol()

    def close(self):
        self._core.close()

    def abort(self):
        self._core.abort()

    def get_write_buffer_limits(self):
        return (self._low_water, self._high_water)

    def set_write_buffer_limits(self, high=None, low=None):
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._core._set_limits(float(high), float(low))
        self._high_water = high
        self._low_water = low
        self._core._maybe_pause_protocol()

    if PY311:
        # The stdlib's datagram transport reads like a stream one from 3.11 on.

        def is_reading(self):
            return self._core.is_reading()

        def pause_reading(self):
            if self._core.pause_reading() and self._loop.get_debug():
                logger.debug("%r pauses reading", self)

        def resume_reading(self):
            if self._core.resume_reading() and self._loop.get_debug():
                logger.debug("%r resumes reading", self)

    # -- what the stdlib has under these private names --------------------------------------

    @property
    def _protocol(self):
        return self._core.get_protocol()

    @property
    def _closing(self):
        return self._core.is_closing()

    @property
    def _conn_lost(self):
        return self._core._conn_lost

    def _force_close(self, exc):
        self._core._force_close(exc)

    # -- called by the core -----------------------------------------------------------------

    def _report_callback_error(self, exc, method):
        # Where the stdlib's reader/writer handle reports an exception from a protocol
        # callback (`Exception in callback _SelectorDatagramTransport._read_ready()`).
        self._report(f"Exception in callback {type(self).__name__}.{method}()", exc)

    def _call_connection_lost(self, exc):
        core = self._core
        if not core._lose():
            return
        protocol = core.get_protocol()
        # Out of the loop's table before the descriptor number can be reused.
        core._detach()
        try:
            if protocol is not None:
                protocol.connection_lost(exc)
        finally:
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()
            self._loop = None

    # -- repr and finalization --------------------------------------------------------------

    def __repr__(self):
        core = self._core
        info = [type(self).__name__]
        if core is None:  # construction failed
            return f"<{info[0]} fd={self._sock_fd}>"
        if self._sock is None:
            info.append("closed")
        elif core.is_closing():
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            reading, writing, size = core._state()
            info.append("read=polling" if reading else "read=idle")
            info.append(f"write=<{'polling' if writing else 'idle'}, bufsize={size}>")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn=warnings.warn):
        sock = getattr(self, "_sock", None)
        if sock is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            core = getattr(self, "_core", None)
            if core is not None:
                core._detach()
            sock.close()


class DatagramTransportMixin:
    """The loop's datagram transport factory, with the stdlib loop's private signature."""

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        return DatagramTransport(self, sock, protocol, address, waiter, extra)
