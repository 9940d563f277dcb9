"""Pipes on the loop: `connect_read_pipe` and `connect_write_pipe`.

The transports themselves come from the loop (`_make_read_pipe_transport`,
`_make_write_pipe_transport`); these coroutines create the protocol, wait until the transport
has called its `connection_made`, and close the transport if that wait is interrupted.
"""

from asyncio.log import logger

__all__ = ["PipesMixin"]


class PipesMixin:
    async def connect_read_pipe(self, protocol_factory, pipe):
        return await self._connect_pipe(self._make_read_pipe_transport, "Read", protocol_factory, pipe)

    async def connect_write_pipe(self, protocol_factory, pipe):
        return await self._connect_pipe(self._make_write_pipe_transport, "Write", protocol_factory, pipe)

    async def _connect_pipe(self, make_transport, kind, protocol_factory, pipe):
        protocol = protocol_factory()
        connected = self.create_future()
        transport = make_transport(pipe, protocol, connected)
        try:
            await connected
        except BaseException:
            transport.close()
            raise
        if self.get_debug():
            logger.debug("%s pipe %r connected: (%r, %r)", kind, pipe.fileno(), transport, protocol)
        return transport, protocol
