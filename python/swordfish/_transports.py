"""Stream transports: TCP and Unix sockets, read and write pipes.

Each transport is an `asyncio.Transport` subclass (code checks `isinstance`) around a native
`StreamCore`, which owns the descriptor's registration, reading, writing, flow control and
closing state. This module keeps construction, extra info, error reporting and `connection_lost`; the
instances have slots, not a `__dict__` (an idle connection should cost little memory).
"""

import asyncio
import errno
import os
import socket
import stat
import warnings
from asyncio import futures, trsock
from asyncio.log import logger

from . import _native

__all__ = ["SocketTransport", "ReadPipeTransport", "WritePipeTransport", "TransportsMixin"]

# "__dict__" costs one pointer until something is set on the instance (as tests do when they
# mock a method), and keeps the stdlib transports' openness to that.
_SLOTS = ("_loop", "_server", "_core", "__weakref__", "__dict__")
_UNSET = object()


_recent = {}  # kind of value -> the last one seen


def _shared(kind, value):
    """`value`, or an equal value of the same type kept from the previous call for `kind`:
    the connections a server accepts mostly repeat their neighbours' addresses, and an idle
    connection costs less memory when they share one object."""
    last = _recent.get(kind)
    if type(value) is type(last) and value == last:
        return last
    _recent[kind] = value
    return value


def shared_address(addr):
    """A local address: the same for every connection of a server (about 140 bytes saved
    per connection)."""
    return _shared("address", addr)


def shared_host(addr):
    """A peer address whose host string is shared when it repeats (most clients of a server
    come from a few hosts): about 60 bytes less per idle connection."""
    if type(addr) is not tuple or not addr or type(addr[0]) is not str:
        return addr
    host = _shared("host", addr[0])
    return addr if host is addr[0] else (host, *addr[1:])


def _set_nodelay(sock):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        if sock.proto == socket.IPPROTO_TCP or sock.proto == 0:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class CoreReports:
    """How a native core's errors reach the loop: fatal errors close the transport, the
    rest go to the exception handler (with the stdlib's context keys)."""

    __slots__ = ()

    def _report(self, message, exc):
        self._loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": self,
                "protocol": self._core.get_protocol(),
            }
        )

    def _fatal_error(self, exc, message="Fatal error on transport"):
        if isinstance(exc, OSError) and self._quiet_error(exc):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._report(message, exc)
        self._core._force_close(exc)

    def _quiet_error(self, exc):
        # OSErrors (resets, broken pipes) are the peer's doing: logged in debug mode only.
        return True

    def _report_flow_error(self, message, exc):
        self._report(message, exc)


class _StreamTransport(CoreReports):
    """What the three stream transports share; mixed into `asyncio` transport classes."""

    __slots__ = ()
    _kind = None

    def _setup(self, loop, fd, protocol):
        self._loop = loop
        self._server = None
        core = _native.StreamCore(loop, fd, self._kind, self)
        self._core = core
        self.set_protocol(protocol)
        core._attach()

    def _schedule_start(self, protocol, waiter, watch_reads=True):
        loop = self._loop
        loop.call_soon(protocol.connection_made, self)
        loop.call_soon(self._core._start, watch_reads)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def set_protocol(self, protocol):
        self._core.set_protocol(protocol, isinstance(protocol, asyncio.BufferedProtocol))

    def get_protocol(self):
        return self._core.get_protocol()

    def is_closing(self):
        return self._core.is_closing()

    def close(self):
        self._core.close()

    def abort(self):
        self._core.abort()

    def get_write_buffer_size(self):
        return self._core.get_write_buffer_size()

    def get_write_buffer_limits(self):
        return self._core.get_write_buffer_limits()

    @property
    def _protocol_paused(self):
        return self._core._protocol_paused

    def set_write_buffer_limits(self, high=None, low=None):
        self._core.set_write_buffer_limits(high, low)

    # -- called by the core ---------------------------------------------------------------

    def _debug_log(self, fmt):
        logger.debug(fmt, self)

    def _log_eof(self):
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)

    def _call_connection_lost(self, exc):
        core = self._core
        protocol = core.get_protocol()
        core._detach()
        try:
            if protocol is not None:
                protocol.connection_lost(exc)
        finally:
            self._close_fileobj()
            server = self._server
            if server is not None:
                self._server = None
                server._detach(self)
            self._loop = None

    def _lose_connection_now(self, exc):
        """`_call_connection_lost` straight from the flush that emptied a closing
        transport's queue (the stdlib does it there, not on a later iteration). What it
        raises goes to the exception handler, as from any callback the loop runs."""
        loop = self._loop
        try:
            self._call_connection_lost(exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as err:
            loop.call_exception_handler(
                {
                    "message": f"Exception in callback "
                    f"{type(self).__name__}._call_connection_lost({exc!r})",
                    "exception": err,
                    "transport": self,
                }
            )

    # -- repr and finalization ------------------------------------------------------------

    def _repr_parts(self):
        core = self._core
        info = [type(self).__name__]
        if core._closed and self._loop is None:
            info.append("closed")
        elif core.is_closing():
            info.append("closing")
        info.append(f"fd={core.fileno()}")
        if self._loop is not None:
            reading, writing, size = core._state()
            info.append("read=polling" if reading else "read=idle")
            if self._kind != "read-pipe":
                state = "polling" if writing else "idle"
                info.append(f"write=<{state}, bufsize={size}>")
        return info

    def __repr__(self):
        return "<{}>".format(" ".join(self._repr_parts()))

    def __del__(self, _warn=warnings.warn):
        # The stdlib's condition: the socket or pipe is still open. (The closing state
        # may say otherwise: a close() that a closed loop refused leaves it open.)
        core = getattr(self, "_core", None)
        fileobj = getattr(self, "_sock" if self._kind == "socket" else "_pipe", None)
        if core is not None and fileobj is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            core._detach()
            self._close_fileobj()


class _Writes:
    """The write half, for the transports that have one."""

    __slots__ = ()

    def write(self, data):
        self._core.write(data)

    def writelines(self, list_of_data):
        self._core.writelines(list_of_data)

    def write_eof(self):
        self._core.write_eof()

    def can_write_eof(self):
        return True


class _Reads:
    """The read half's flow control, for the transports that read."""

    __slots__ = ()

    def pause_reading(self):
        self._core.pause_reading()

    def resume_reading(self):
        self._core.resume_reading()

    def is_reading(self):
        return self._core.is_reading()


class SocketTransport(_Writes, _Reads, _StreamTransport, asyncio.Transport):
    """A TCP or Unix stream socket."""

    __slots__ = _SLOTS + ("_sock", "_sockname", "_peername")
    _kind = "socket"
    _start_tls_compatible = True

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None):
        peername = _UNSET
        if extra is not None and len(extra) == 1 and "peername" in extra:
            # What an accepted connection gets: kept in its slot, the extra dict left empty.
            peername = extra["peername"]
            extra = None
        asyncio.Transport.__init__(self, extra)
        try:
            sockname = shared_address(sock.getsockname())
        except OSError:
            sockname = None
        if peername is _UNSET:
            peername = self._extra.get("peername", _UNSET)
        if peername is _UNSET:
            try:
                peername = sock.getpeername()
            except OSError:
                peername = None
        # Kept out of the extra dict (and the 'socket' wrapper made on first use): an idle
        # connection then costs a few hundred bytes less.
        self._sockname = sockname
        self._peername = peername
        self._sock = sock
        self._setup(loop, sock.fileno(), protocol)
        self._server = server
        if server is not None:
            server._attach(self)
        _set_nodelay(sock)
        self._schedule_start(protocol, waiter)

    def get_extra_info(self, name, default=None):
        extra = self._extra
        if name in extra:
            return extra[name]
        if name == "sockname":
            return self._sockname
        if name == "peername":
            return self._peername
        if name == "socket":
            wrapper = extra["socket"] = trsock.TransportSocket(self._sock)
            return wrapper
        return default

    @property
    def _sock_fd(self):
        # The stdlib transport's attribute, derived rather than stored (memory per connection).
        return self._core.fileno()

    def _force_close(self, exc):
        self._core._force_close(exc)

    def _make_empty_waiter(self):
        return self._core._make_empty_waiter()

    def _reset_empty_waiter(self):
        self._core._reset_empty_waiter()

    def _close_fileobj(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            if "socket" not in self._extra:
                self._extra["socket"] = trsock.TransportSocket(sock)
            sock.close()


class _PipeTransport(_StreamTransport):
    __slots__ = ()
    def _init_pipe(self, loop, pipe, protocol, waiter):
        self._extra["pipe"] = pipe
        self._pipe = pipe
        self._fileno = pipe.fileno()
        mode = os.fstat(self._fileno).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise ValueError(self._mode_error)
        os.set_blocking(self._fileno, False)
        self._setup(loop, self._fileno, protocol)
        # A write pipe watches for reads only to learn that the other end is gone, which
        # works for FIFOs and sockets (a character device may have data to read).
        watch = self._kind == "read-pipe" or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        self._schedule_start(protocol, waiter, watch)

    def _close_fileobj(self):
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()

    def _repr_parts(self):
        # The stdlib's pipe format, not the socket one: "polling"/"idle" for the direction
        # the pipe serves (a write pipe adds its queue size); "closed" twice once it is gone.
        core = self._core
        info = [type(self).__name__]
        if self._pipe is None:
            info.append("closed")
        elif core.is_closing():
            info.append("closing")
        info.append(f"fd={core.fileno()}")
        if self._pipe is None:
            info.append("closed")
        elif self._loop is None or self._loop.is_closed():
            info.append("open")
        else:
            reading, writing, size = core._state()
            if self._kind == "read-pipe":
                info.append("polling" if reading else "idle")
            else:
                info.append("polling" if writing else "idle")
                info.append(f"bufsize={size}")
        return info


class ReadPipeTransport(_Reads, _PipeTransport, asyncio.ReadTransport):
    """The read end of a pipe, FIFO, socket or character device."""

    __slots__ = _SLOTS + ("_pipe", "_fileno")
    _kind = "read-pipe"

    _mode_error = "Pipe transport is for pipes/sockets only."

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None):
        asyncio.ReadTransport.__init__(self, extra)
        self._init_pipe(loop, pipe, protocol, waiter)

    def _quiet_error(self, exc):
        return exc.errno == errno.EIO

    def _schedule_eof_received(self):
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._loop.call_soon(self._core.get_protocol().eof_received)

    def _report_callback_error(self, exc):
        protocol = self._core.get_protocol()
        self._report(f"Exception in callback {protocol.data_received!r}", exc)


class WritePipeTransport(_Writes, _PipeTransport, asyncio.WriteTransport):
    """The write end of a pipe, FIFO, socket or character device."""

    __slots__ = _SLOTS + ("_pipe", "_fileno")
    _kind = "write-pipe"

    _mode_error = "Pipe transport is only for pipes, sockets and character devices"

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None):
        asyncio.WriteTransport.__init__(self, extra)
        self._init_pipe(loop, pipe, protocol, waiter)


class TransportsMixin:
    """The loop's transport factories, with the stdlib loop's private signatures (the
    networking code and some third-party code call them)."""

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return SocketTransport(self, sock, protocol, waiter, extra, server)

    def _make_read_pipe_transport(self, pipe, protocol, waiter=None, extra=None):
        return ReadPipeTransport(self, pipe, protocol, waiter, extra)

    def _make_write_pipe_transport(self, pipe, protocol, waiter=None, extra=None):
        return WritePipeTransport(self, pipe, protocol, waiter, extra)
