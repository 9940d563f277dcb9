"""`loop.sendfile(transport, file, ...)`: zero-copy `os.sendfile` for plain socket
transports, a read-and-write fallback (through the transport, with its flow control) for the
rest, such as TLS."""

import asyncio
from asyncio import constants

__all__ = ["SendfileMixin"]

_NATIVE = "native"
_FALLBACK = "fallback"


def _sendfile_mode(transport):
    # Our own transports say what they can do; anything else is treated like the stdlib
    # treats a transport without `_sendfile_compatible`.
    from ._tls import SSLTransport
    from ._transports import SocketTransport

    if isinstance(transport, SocketTransport):
        return _NATIVE
    if isinstance(transport, SSLTransport):
        return _FALLBACK
    mode = getattr(transport, "_sendfile_compatible", None)
    if mode is not None and mode.name == "TRY_NATIVE":
        return _FALLBACK  # a foreign transport: never touch its socket behind its back
    if mode is not None and mode.name == "FALLBACK":
        return _FALLBACK
    return None


class _DrainProtocol(asyncio.Protocol):
    """Stands in for the transport's protocol while the fallback writes: it waits for the
    transport's write buffer to drain, and puts the original protocol back afterwards."""

    def __init__(self, transport):
        self._transport = transport
        self._proto = transport.get_protocol()
        self._resume_reading = transport.is_reading()
        self._resume_writing = transport._protocol_paused
        transport.pause_reading()
        transport.set_protocol(self)
        self._ready = transport._loop.create_future() if self._resume_writing else None

    async def drain(self):
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        if self._ready is not None:
            await self._ready

    def pause_writing(self):
        if self._ready is None:
            self._ready = self._transport._loop.create_future()

    def resume_writing(self):
        fut, self._ready = self._ready, None
        if fut is not None:
            fut.set_result(False)

    def data_received(self, data):
        raise RuntimeError("Invalid state: connection should have been established already.")

    def eof_received(self):
        raise RuntimeError("Invalid state: connection should have been established already.")

    def connection_lost(self, exc):
        if self._ready is not None:
            self._ready.set_exception(
                exc if exc is not None else ConnectionError("Connection is closed by peer")
            )
        # The original protocol must still learn that the connection is gone.
        self._proto.connection_lost(exc)

    async def restore(self):
        self._transport.set_protocol(self._proto)
        if self._resume_reading:
            self._transport.resume_reading()
        if self._ready is not None:
            self._ready.cancel()
        if self._resume_writing:
            self._proto.resume_writing()


class SendfileMixin:
    async def sendfile(self, transport, file, offset=0, count=None, *, fallback=True):
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        mode = _sendfile_mode(transport)
        if mode is None:
            raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
        if mode is _NATIVE:
            try:
                return await self._sendfile_native(transport, file, offset, count)
            except asyncio.SendfileNotAvailableError:
                if not fallback:
                    raise
        if not fallback:
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not supported for transport {transport!r}"
            )
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_native(self, transport, file, offset, count):
        core = transport._core
        was_reading = transport.is_reading()
        transport.pause_reading()
        # Everything written before must leave first; writes are refused meanwhile.
        await core._make_empty_waiter()
        core._lend()
        try:
            return await self.sock_sendfile(transport._sock, file, offset, count, fallback=False)
        finally:
            core._reclaim()
            core._reset_empty_waiter()
            if was_reading:
                transport.resume_reading()

    async def _sendfile_fallback(self, transport, file, offset, count):
        if offset:
            file.seek(offset)
        limit = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        blocksize = min(count, limit) if count else limit
        buf = bytearray(blocksize)
        total = 0
        proto = _DrainProtocol(transport)
        try:
            while True:
                if count:
                    blocksize = min(count - total, blocksize)
                    if blocksize <= 0:
                        return total
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    return total
                await proto.drain()
                transport.write(view[:read])
                total += read
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset + total)
            await proto.restore()
