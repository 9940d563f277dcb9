"""loop.connect_read_pipe / connect_write_pipe: connection, data, EOF, flow control,
closing, errors, cancellation and descriptor hygiene."""

import asyncio
import gc
import os
import socket

import pytest

from conftest import PY

# ReadTransport.is_reading() of the stdlib's pipe transport arrived in 3.11.
HAS_IS_READING = PY >= (3, 11)


def fd_count():
    return len(os.listdir("/proc/self/fd"))


class ReadRecorder(asyncio.Protocol):
    def __init__(self, loop):
        self.events = []
        self.data = bytearray()
        self.transport = None
        self.done = loop.create_future()
        self.got = None  # (future, size): completed once `size` bytes arrived

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("connection_made")

    def data_received(self, data):
        self.data += data
        if self.events[-1] != "data":
            self.events.append("data")
        if self.got is not None and len(self.data) >= self.got[1] and not self.got[0].done():
            self.got[0].set_result(None)

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("connection_lost", exc))
        self.done.set_result(exc)

    def wait_for(self, loop, size):
        self.got = (loop.create_future(), size)
        if len(self.data) >= size:
            self.got[0].set_result(None)
        return self.got[0]


class WriteRecorder(asyncio.BaseProtocol):
    def __init__(self, loop):
        self.events = []
        self.transport = None
        self.done = loop.create_future()
        self.resumed = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("connection_made")

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")
        if not self.resumed.done():
            self.resumed.set_result(None)

    def connection_lost(self, exc):
        self.events.append(("connection_lost", exc))
        self.done.set_result(exc)


@pytest.fixture
def pipe():
    """`(read file, write file)` of a new pipe, closed at teardown if still open."""
    r, w = os.pipe()
    files = (os.fdopen(r, "rb", buffering=0), os.fdopen(w, "wb", buffering=0))
    yield files
    for f in files:
        f.close()


def test_read_pipe_data_and_eof(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = ReadRecorder(loop)
        transport, got = await loop.connect_read_pipe(lambda: proto, rf)
        assert got is proto
        assert proto.events == ["connection_made"]  # before connect_read_pipe returned
        assert proto.transport is transport
        assert isinstance(transport, asyncio.ReadTransport)
        assert transport.get_extra_info("pipe") is rf
        assert transport.get_protocol() is proto
        assert not transport.is_closing()
        if HAS_IS_READING:
            assert transport.is_reading()
        assert os.get_blocking(rf.fileno()) is False
        wf.write(b"hello ")
        await proto.wait_for(loop, 6)
        wf.write(b"pipe")
        await proto.wait_for(loop, 10)
        wf.close()
        assert await proto.done is None
        return transport, proto

    transport, proto = run(main())
    assert bytes(proto.data) == b"hello pipe"
    assert proto.events == ["connection_made", "data", "eof", ("connection_lost", None)]
    assert transport.is_closing()
    assert rf.closed  # the transport closes the pipe after connection_lost


def test_read_pipe_large_transfer(loop, run, pipe):
    rf, wf = pipe
    payload = os.urandom(3 << 20)

    async def main():
        reader = ReadRecorder(loop)
        await loop.connect_read_pipe(lambda: reader, rf)
        writer = WriteRecorder(loop)
        wtransport, _ = await loop.connect_write_pipe(lambda: writer, wf)
        wtransport.write(payload)
        assert "pause" in writer.events  # far above the high-water mark
        assert wtransport.get_write_buffer_size() > 0
        await writer.resumed
        wtransport.close()
        assert await writer.done is None
        await reader.done
        return reader, writer

    reader, writer = run(main())
    assert bytes(reader.data) == payload
    assert reader.events[-2:] == ["eof", ("connection_lost", None)]
    assert writer.events[0] == "connection_made"
    assert writer.events.index("pause") < writer.events.index("resume")
    assert rf.closed and wf.closed


def test_read_pipe_pause_and_resume(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = ReadRecorder(loop)
        transport, _ = await loop.connect_read_pipe(lambda: proto, rf)
        transport.pause_reading()
        if HAS_IS_READING:
            assert not transport.is_reading()
        transport.pause_reading()  # no-op
        wf.write(b"held back")
        for _ in range(10):
            await asyncio.sleep(0)
        assert proto.data == b""
        transport.resume_reading()
        if HAS_IS_READING:
            assert transport.is_reading()
        await proto.wait_for(loop, 9)
        transport.close()
        await proto.done
        return proto

    proto = run(main())
    assert bytes(proto.data) == b"held back"
    assert proto.events[-1] == ("connection_lost", None)


def test_read_pipe_close(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = ReadRecorder(loop)
        transport, _ = await loop.connect_read_pipe(lambda: proto, rf)
        transport.close()
        assert transport.is_closing()
        transport.close()  # idempotent
        assert await proto.done is None
        return proto

    proto = run(main())
    assert proto.events == ["connection_made", ("connection_lost", None)]
    assert rf.closed


def test_read_pipe_on_a_socket(loop, run):
    a, b = socket.socketpair()

    async def main():
        proto = ReadRecorder(loop)
        with a.makefile("rb", buffering=0) as fa:
            transport, _ = await loop.connect_read_pipe(lambda: proto, fa)
            b.sendall(b"over a socket")
            b.close()
            await proto.done
        return proto

    try:
        proto = run(main())
    finally:
        a.close()
        b.close()
    assert bytes(proto.data) == b"over a socket"
    assert "eof" in proto.events


def test_write_pipe_write_and_write_eof(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = WriteRecorder(loop)
        transport, got = await loop.connect_write_pipe(lambda: proto, wf)
        assert got is proto
        assert proto.events == ["connection_made"]
        assert isinstance(transport, asyncio.WriteTransport)
        assert transport.get_extra_info("pipe") is wf
        assert transport.can_write_eof() is True
        assert os.get_blocking(wf.fileno()) is False
        transport.write(b"abc")
        transport.write(bytearray(b"def"))
        transport.write(memoryview(b"ghi"))
        transport.writelines([b"j", b"k"])
        transport.write(b"")
        transport.write_eof()
        assert transport.is_closing()
        assert await proto.done is None
        return proto

    proto = run(main())
    assert proto.events == ["connection_made", ("connection_lost", None)]
    assert wf.closed
    assert rf.read() == b"abcdefghijk"


def test_write_pipe_reader_goes_away(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = WriteRecorder(loop)
        transport, _ = await loop.connect_write_pipe(lambda: proto, wf)
        rf.close()  # the peer closes its end: the transport notices at once
        assert await proto.done is None
        assert transport.is_closing()
        return proto

    proto = run(main())
    assert proto.events == ["connection_made", ("connection_lost", None)]
    assert wf.closed


def test_write_pipe_reader_goes_away_with_data_pending(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = WriteRecorder(loop)
        transport, _ = await loop.connect_write_pipe(lambda: proto, wf)
        transport.write(b"x" * (1 << 20))
        assert transport.get_write_buffer_size() > 0
        rf.close()
        exc = await proto.done
        assert isinstance(exc, BrokenPipeError)
        transport.write(b"after the end")  # ignored
        return transport

    transport = run(main())
    assert transport.get_write_buffer_size() == 0


def test_write_pipe_abort_drops_buffered_data(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = WriteRecorder(loop)
        transport, _ = await loop.connect_write_pipe(lambda: proto, wf)
        transport.write(b"y" * (1 << 20))
        transport.abort()
        assert transport.is_closing()
        assert await proto.done is None
        return transport

    transport = run(main())
    assert transport.get_write_buffer_size() == 0
    assert wf.closed
    assert len(rf.read()) < (1 << 20)


def test_write_pipe_close_flushes_first(loop, run, pipe):
    rf, wf = pipe
    payload = os.urandom(1 << 20)

    async def main():
        proto = WriteRecorder(loop)
        transport, _ = await loop.connect_write_pipe(lambda: proto, wf)
        reader = ReadRecorder(loop)
        await loop.connect_read_pipe(lambda: reader, rf)
        transport.write(payload)
        transport.close()  # the buffered data still goes out
        assert transport.is_closing()
        assert await proto.done is None
        await reader.done
        return reader

    reader = run(main())
    assert bytes(reader.data) == payload


def test_streams_over_pipes(loop, run, pipe):
    rf, wf = pipe

    async def main():
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), rf)
        wtransport, wproto = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wf)
        writer = asyncio.StreamWriter(wtransport, wproto, None, loop)
        for i in range(100):
            writer.write(b"line %d\n" % i)
        await writer.drain()
        writer.close()
        lines = [await reader.readline() for _ in range(100)]
        assert await reader.read() == b""
        return lines

    assert run(main()) == [b"line %d\n" % i for i in range(100)]


def test_regular_files_are_refused(loop, run, tmp_path):
    path = tmp_path / "regular"
    path.write_bytes(b"data")

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="^Pipe transport is for pipes/sockets only.$"):
                await loop.connect_read_pipe(asyncio.Protocol, f)
            assert not f.closed
        with open(path, "wb") as f:
            with pytest.raises(
                ValueError,
                match="^Pipe transport is only for pipes, sockets and character devices$",
            ):
                await loop.connect_write_pipe(asyncio.Protocol, f)
            assert not f.closed

    run(main())


def test_protocol_factory_error_propagates(loop, run, pipe):
    rf, wf = pipe

    def factory():
        raise LookupError("no protocol")

    async def main():
        with pytest.raises(LookupError, match="no protocol"):
            await loop.connect_read_pipe(factory, rf)
        with pytest.raises(LookupError, match="no protocol"):
            await loop.connect_write_pipe(factory, wf)

    run(main())
    assert not rf.closed and not wf.closed


def test_cancelled_connect_closes_the_transport(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = ReadRecorder(loop)
        connecting = asyncio.ensure_future(loop.connect_read_pipe(lambda: proto, rf))
        await asyncio.sleep(0)  # connect_read_pipe made the transport and waits for it
        connecting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await connecting
        assert await proto.done is None
        return proto

    proto = run(main())
    assert proto.events == ["connection_made", ("connection_lost", None)]
    assert rf.closed


def test_unclosed_pipe_transport_warns(loop, run, pipe):
    rf, wf = pipe

    async def main():
        proto = ReadRecorder(loop)
        transport, _ = await loop.connect_read_pipe(lambda: proto, rf)
        proto.transport = None
        return transport

    transport = run(main())
    loop.close()  # the loop lets go of the transport
    with pytest.warns(ResourceWarning, match="unclosed transport"):
        del transport
        gc.collect()
    assert rf.closed


def test_no_fd_leaks(loop, run):
    async def one_round():
        r, w = os.pipe()
        rf, wf = os.fdopen(r, "rb", buffering=0), os.fdopen(w, "wb", buffering=0)
        reader = ReadRecorder(loop)
        await loop.connect_read_pipe(lambda: reader, rf)
        writer = WriteRecorder(loop)
        wtransport, _ = await loop.connect_write_pipe(lambda: writer, wf)
        wtransport.write(b"z" * 100_000)
        wtransport.close()
        await writer.done
        await reader.done
        assert len(reader.data) == 100_000

    async def main():
        await one_round()
        gc.collect()
        before = fd_count()
        for _ in range(20):
            await one_round()
        gc.collect()
        return before, fd_count()

    before, after = run(main())
    assert after == before


def test_debug_mode_logs_connections(loop, run, pipe, caplog):
    rf, wf = pipe
    rfd, wfd = rf.fileno(), wf.fileno()
    loop.set_debug(True)

    async def main():
        rt, _ = await loop.connect_read_pipe(asyncio.Protocol, rf)
        wt, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, wf)
        rt.close()
        wt.close()
        for _ in range(3):
            await asyncio.sleep(0)

    with caplog.at_level("DEBUG", logger="asyncio"):
        run(main())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"Read pipe {rfd} connected" in text
    assert f"Write pipe {wfd} connected" in text
