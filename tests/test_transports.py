"""Stream transports (TCP and Unix sockets) behave like the stdlib's
`_SelectorSocketTransport`: the data path with `Protocol` and `BufferedProtocol`, writes,
end-of-file and half-close, failures of the buffered protocol's callbacks.

Closing, errors, extra info and finalization are in test_transports_lifecycle.py, flow
control in test_transports_flow.py, pipes in test_transports_pipes.py, descriptor and memory
leaks in test_transports_leaks.py.
"""

import asyncio
import re
import socket

import pytest

from conftest import PY, nb_socketpair, tcp_pair
from transportutil import (
    KINDS,
    BufRec,
    Rec,
    collapse,
    conn,  # noqa: F401 (fixture)
    digest,
    fill_until_queued,
    handler_calls,
    iterations,
    payload,
    peer_sees_close,
    recv_all,
    recv_exactly,
)

kinds = pytest.mark.parametrize("kind", KINDS)


# -- the data path ----------------------------------------------------------------------


@kinds
def test_protocol_receives_everything_in_order(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        assert pr.made.result() is tr
        data = payload(3 << 20)
        sending = asyncio.ensure_future(loop.sock_sendall(peer, data))
        assert await pr.received(len(data)) == data
        await sending
        assert pr.chunk_types == {bytes}
        assert pr.events[0] == "made"
        tr.write(b"hello")
        assert await recv_exactly(loop, peer, 5) == b"hello"
        tr.write(b"")  # nothing, and no error
        assert tr.get_write_buffer_size() == 0

    run(main())


@kinds
def test_small_and_large_messages_alternating(loop, run, conn, kind):
    # Small reads are copied out of a buffer the loop reuses, large ones get their own
    # object: every chunk handed to data_received must keep its contents.
    class Keep(Rec):
        def __init__(self):
            super().__init__()
            self.chunks = []

        def data_received(self, data):
            self.chunks.append(data)
            super().data_received(data)

    async def main():
        tr, pr, peer = await conn(Keep, kind)
        sent = b""
        for i, size in enumerate([10, 200_000, 3, 40_000, 1, 300_000, 16 * 1024, 7]):
            message = bytes([i + 1]) * size
            await loop.sock_sendall(peer, message)
            sent += message
            await pr.received(len(sent))
        assert b"".join(pr.chunks) == sent
        assert all(type(c) is bytes for c in pr.chunks)

    run(main())


@kinds
@pytest.mark.parametrize("buffered", [False, True], ids=["plain", "buffered"])
@pytest.mark.parametrize("size", [1000, 8 << 20], ids=["with-eof", "in-flight"])
def test_data_and_eof_waiting_before_the_transport_exists(loop, run, kind, buffered, size):
    """Readiness that predates the transport (the descriptor is already readable when it
    is registered) is not lost: small data and the EOF are both waiting, or a large
    send is still in flight."""
    mine, peer = tcp_pair() if kind == "tcp" else nb_socketpair()
    data = payload(size)

    async def main():
        sending = asyncio.ensure_future(loop.sock_sendall(peer, data))
        await iterations(5)
        eof_first = sending.done()
        assert eof_first == (size == 1000)
        if eof_first:
            peer.shutdown(socket.SHUT_WR)
        factory = (lambda: BufRec(1000)) if buffered else Rec
        if kind == "tcp":
            tr, pr = await loop.connect_accepted_socket(factory, mine)
        else:
            tr, pr = await loop.create_unix_connection(factory, sock=mine)
        await sending
        if not eof_first:
            peer.shutdown(socket.SHUT_WR)
        assert await pr.lost is None
        assert bytes(pr.data) == data and pr.count("eof") == 1

    try:
        run(main())
    finally:
        mine.close()
        peer.close()


@kinds
@pytest.mark.parametrize("size", [1, 1000, 1 << 20])
def test_buffered_protocol_receives_everything_in_order(loop, run, conn, kind, size):
    async def main():
        tr, pr, peer = await conn(lambda: BufRec(size), kind)
        data = payload(512 * 1024 if size > 1 else 20_000)
        sending = asyncio.ensure_future(loop.sock_sendall(peer, data))
        assert await pr.received(len(data)) == data
        await sending
        assert set(pr.hints) == {-1}  # the stdlib asks for "any size"
        peer.shutdown(socket.SHUT_WR)
        assert await pr.lost is None
        assert collapse(pr.events) == ["made", "data", "eof", "lost"]

    run(main())


class Streamer(asyncio.Protocol):
    """Sends `out` with flow control, then write_eof(); hashes what it receives.
    `done` resolves once both directions are finished."""

    CHUNK = 256 * 1024

    def __init__(self, out):
        self.loop = asyncio.get_running_loop()
        self.out = memoryview(out)
        self.pos = 0
        self.paused = False
        self.received = bytearray()
        self.got_eof = False
        self.done = self.loop.create_future()
        self.lost = self.loop.create_future()

    def connection_made(self, tr):
        self.tr = tr
        self.pump()

    def pump(self):
        while not self.paused and self.pos < len(self.out):
            self.tr.write(self.out[self.pos:self.pos + self.CHUNK])
            self.pos += self.CHUNK
        if self.pos >= len(self.out) and not self.tr.is_closing():
            self.tr.write_eof()  # a second call is a no-op
        self.check()

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False
        self.pump()

    def data_received(self, data):
        self.received += data

    def eof_received(self):
        self.got_eof = True
        self.check()
        return True  # keep writing

    def check(self):
        if self.got_eof and self.pos >= len(self.out) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


class BufStreamer(Streamer, asyncio.BufferedProtocol):
    def __init__(self, out):
        super().__init__(out)
        self.buf = bytearray(100_003)  # odd size: reads end mid-chunk

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.received += memoryview(self.buf)[:nbytes]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("client_cls, server_cls", [
    (Streamer, BufStreamer), (BufStreamer, Streamer)
], ids=["plain-buffered", "buffered-plain"])
def test_large_transfer_both_directions_at_once(loop, run, kind, client_cls, server_cls, tmp_path):
    size = 20 << 20
    up, down = payload(size, seed=1), payload(size + 12345, seed=2)

    async def main():
        servers = []

        def make_server_proto():
            p = server_cls(down)
            servers.append(p)
            return p

        if kind == "tcp":
            server = await loop.create_server(make_server_proto, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            tr, client = await loop.create_connection(lambda: client_cls(up), "127.0.0.1", port)
        else:
            path = str(tmp_path / "s")
            server = await loop.create_unix_server(make_server_proto, path)
            tr, client = await loop.create_unix_connection(lambda: client_cls(up), path)
        try:
            await client.done
            (srv,) = servers
            await srv.done
            assert len(srv.received) == len(up) and digest(srv.received) == digest(up)
            assert len(client.received) == len(down) and digest(client.received) == digest(down)
            tr.close()
            srv.tr.close()
            assert await client.lost is None
            assert await srv.lost is None
        finally:
            server.close()
            await server.wait_closed()

    run(main(), timeout=60)


@kinds
def test_set_protocol_switches_between_plain_and_buffered(loop, run, conn, kind):
    async def main():
        tr, first, peer = await conn(Rec, kind)
        await loop.sock_sendall(peer, b"one")
        assert await first.received(3) == b"one"

        second = BufRec(size=7)
        tr.set_protocol(second)
        assert tr.get_protocol() is second
        data = payload(100_000)
        await loop.sock_sendall(peer, data)
        assert await second.received(len(data)) == data

        third = Rec()
        tr.set_protocol(third)
        await loop.sock_sendall(peer, b"three")
        assert await third.received(5) == b"three"
        peer.shutdown(socket.SHUT_WR)
        assert await third.lost is None
        assert bytes(first.data) == b"one" and bytes(second.data) == data
        assert first.events == ["made", "data"] and "made" not in second.events
        assert collapse(third.events) == ["data", "eof", "lost"]

    run(main())


def test_set_protocol_inside_data_received(loop, run, conn):
    class Switcher(Rec):
        def data_received(self, data):
            super().data_received(data)
            self.transport.set_protocol(self.next)

    async def main():
        tr, pr, peer = await conn(Switcher, "tcp")
        pr.next = BufRec(size=3)
        await loop.sock_sendall(peer, b"first")
        await pr.received(5)
        await loop.sock_sendall(peer, b"second")
        assert await pr.next.received(6) == b"second"
        assert bytes(pr.data) == b"first"

    run(main())


class BadBuffer(BufRec):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def get_buffer(self, sizehint):
        return self.make()


def _raise_value_error():
    raise ValueError("no buffer")


@kinds
@pytest.mark.parametrize("make, exc_type, message", [
    (lambda: bytearray(0), RuntimeError, "Fatal error: protocol.get_buffer() call failed."),
    (lambda: memoryview(bytearray(8))[:0], RuntimeError,
     "Fatal error: protocol.get_buffer() call failed."),
    (_raise_value_error, ValueError, "Fatal error: protocol.get_buffer() call failed."),
    # A read-only buffer fails in the read itself (recv_into refuses it).
    (lambda: bytes(16), TypeError, "Fatal read error on socket transport"),
    (lambda: memoryview(bytes(16)), TypeError, "Fatal read error on socket transport"),
    (lambda: [0] * 16, TypeError, "Fatal read error on socket transport"),
    # len() is part of get_buffer's checks.
    (object, TypeError, "Fatal error: protocol.get_buffer() call failed."),
], ids=["empty", "empty-view", "raises", "bytes", "readonly-view", "list", "no-len"])
def test_get_buffer_failures_are_fatal(loop, run, conn, kind, make, exc_type, message):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(lambda: BadBuffer(make), kind)
            await loop.sock_sendall(peer, b"data")
            exc = await pr.lost
            assert type(exc) is exc_type
            if exc_type is RuntimeError:
                assert str(exc) == "get_buffer() returned an empty buffer"
            elif message.startswith("Fatal read error"):
                name = type(make()).__name__
                assert str(exc) == (
                    f"recv_into() argument 1 must be read-write bytes-like object, not {name}")
            assert len(calls) == 1
            ctx = calls[0]
            assert ctx["message"] == message
            assert ctx["exception"] is exc
            assert ctx["transport"] is tr and ctx["protocol"] is pr
            assert tr.is_closing()
            assert await peer_sees_close(loop, peer) == b""  # closed, nothing sent
            assert pr.data == b""

    run(main())


@kinds
def test_buffer_updated_raising_is_fatal(loop, run, conn, kind):
    class Bad(BufRec):
        def buffer_updated(self, nbytes):
            super().buffer_updated(nbytes)
            raise KeyError("bad")

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Bad, kind)
            await loop.sock_sendall(peer, b"data")
            exc = await pr.lost
            assert type(exc) is KeyError
            assert [c["message"] for c in calls] == [
                "Fatal error: protocol.buffer_updated() call failed."
            ]
            assert calls[0]["exception"] is exc
            assert pr.count("data") == 1

    run(main())


# -- writes -----------------------------------------------------------------------------


@kinds
def test_writelines_with_bytes_like_objects(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        tr.writelines([b"ab", bytearray(b"cd"), memoryview(b"xefx")[1:3], b""])
        tr.writelines(iter([b"g", bytearray(b"h")]))
        tr.writelines([])
        assert await recv_exactly(loop, peer, 8) == b"abcdefgh"

        # Behind queued data: still in order.
        written = fill_until_queued(tr)
        parts = [payload(70_000, seed=3), bytearray(b"-middle-"), memoryview(payload(5000))]
        tr.writelines(parts)
        expected = written + b"".join(bytes(p) for p in parts)
        assert await recv_exactly(loop, peer, len(expected)) == expected

    run(main())


@kinds
@pytest.mark.parametrize("wrap", [bytearray, lambda b: memoryview(bytearray(b))],
                         ids=["bytearray", "memoryview"])
def test_write_of_mutable_buffer_changed_after_the_call(loop, run, conn, impl, kind, wrap):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        original = payload(10_000, seed=5)
        changed = b"X" * len(original)

        # Sent at once: trivially the original.
        buf = wrap(original)
        tr.write(buf)
        buf[:] = changed
        assert await recv_exactly(loop, peer, len(original)) == original

        # Queued behind other data, then changed in place before it is sent.
        written = fill_until_queued(tr)
        buf = wrap(original)
        tr.write(buf)
        buf[:] = changed
        got = await recv_exactly(loop, peer, len(written) + len(original))
        assert got[:len(written)] == written
        # swordfish copies what it queues. The stdlib does too up to 3.11; from 3.12 it
        # queues a reference to the caller's buffer and sends what the buffer holds then.
        if impl == "swordfish" or PY < (3, 12):
            assert got[len(written):] == original
        else:
            assert got[len(written):] == changed

    run(main())


@kinds
def test_large_single_writes_and_many_small_ones(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        big = payload(8 << 20, seed=11)
        parts = [big, bytearray(payload(3 << 20, seed=12)), memoryview(payload(3 << 20, seed=13))]
        # Many small writes of every type behind queued data (coalesced or not, they
        # must keep their order), and a writelines longer than one vectored write takes.
        small = [bytes([i % 251]) * (1 + i % 7) for i in range(3000)]
        for i, chunk in enumerate(small):
            parts.append((bytes, bytearray, memoryview)[i % 3](chunk))
        parts.append(b"".join(small))
        reading = asyncio.ensure_future(recv_exactly(
            loop, peer, sum(len(p) for p in parts) + sum(len(c) for c in small)))
        for p in parts:
            tr.write(p)
        tr.writelines(small)
        got = await reading
        expected = b"".join(bytes(p) for p in parts) + b"".join(small)
        assert len(got) == len(expected) and digest(got) == digest(expected)
        assert tr.get_write_buffer_size() == 0

    run(main())


def test_write_of_a_typed_memoryview_sends_its_bytes(loop, run, conn):
    import array

    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        values = array.array("i", [1, 2, 3, -1])
        tr.write(memoryview(values))
        assert await recv_exactly(loop, peer, 16) == values.tobytes()

    run(main())


@pytest.mark.parametrize("value, name", [("text", "str"), (1234, "int"), ([b"a"], "list")])
def test_write_of_non_bytes_is_a_type_error(loop, run, conn, value, name):
    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        with pytest.raises(TypeError) as info:
            tr.write(value)
        assert str(info.value) == f"data argument must be a bytes-like object, not '{name}'"
        with pytest.raises(TypeError):
            tr.writelines([b"ok", value])
        assert tr.get_write_buffer_size() == 0
        assert not tr.is_closing()

    run(main())


# -- end-of-file and half-close ---------------------------------------------------------


@kinds
def test_eof_received_true_keeps_the_transport_open_for_writing(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(lambda: Rec(eof_result=True), kind)
        await loop.sock_sendall(peer, b"request")
        peer.shutdown(socket.SHUT_WR)
        await pr.eof
        await iterations(10)
        assert not tr.is_closing() and not pr.lost.done()
        assert bytes(pr.data) == b"request"
        tr.write(b"response")
        assert await recv_exactly(loop, peer, 8) == b"response"
        tr.close()
        assert await recv_all(loop, peer) == b""
        assert await pr.lost is None
        assert collapse(pr.events) == ["made", "data", "eof", "lost"]

    run(main())


@kinds
@pytest.mark.parametrize("result", [None, False])
def test_eof_received_false_closes_the_transport(loop, run, conn, kind, result):
    async def main():
        tr, pr, peer = await conn(lambda: Rec(eof_result=result), kind)
        await loop.sock_sendall(peer, b"bye")
        peer.shutdown(socket.SHUT_WR)
        assert await pr.lost is None
        assert tr.is_closing()
        assert collapse(pr.events) == ["made", "data", "eof", "lost"]
        assert await recv_all(loop, peer) == b""

    run(main())


def test_resume_reading_after_a_kept_open_eof_reads_the_eof_again(loop, run, conn):
    """After eof_received() returned True the transport stops reading, but not as a
    pause: pause_reading() + resume_reading() start reading again, and the end-of-file is
    reported a second time (the stdlib's behaviour)."""

    async def main():
        tr, pr, peer = await conn(lambda: Rec(eof_result=True), "unix")
        peer.shutdown(socket.SHUT_WR)
        await pr.eof
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        await iterations(5)
        assert pr.count("eof") == 1
        tr.resume_reading()
        await pr.until(lambda: pr.count("eof") == 2)
        assert not tr.is_closing()

    run(main())


@kinds
def test_write_eof_sends_end_of_file_and_keeps_reading(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        assert tr.can_write_eof() is True
        tr.write(b"data")
        tr.write_eof()
        assert await recv_all(loop, peer) == b"data"
        assert not tr.is_closing()

        with pytest.raises(RuntimeError, match=re.escape("Cannot call write() after write_eof()")):
            tr.write(b"more")
        # 3.10 and 3.11 have no writelines of their own: it goes through write().
        name = "writelines" if PY >= (3, 12) else "write"
        with pytest.raises(RuntimeError, match=re.escape(f"Cannot call {name}() after write_eof()")):
            tr.writelines([b"more"])
        tr.write_eof()  # again: nothing happens

        await loop.sock_sendall(peer, b"back")
        assert await pr.received(4) == b"back"
        peer.shutdown(socket.SHUT_WR)
        assert await pr.lost is None

    run(main())


@kinds
def test_write_eof_after_queued_data(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        written = fill_until_queued(tr)
        tr.write_eof()
        assert tr.get_write_buffer_size() > 0
        assert await recv_all(loop, peer) == written
        assert tr.get_write_buffer_size() == 0 and not tr.is_closing()

    run(main())


def test_half_close_through_streams(loop, run):
    async def handle(reader, writer):
        request = await reader.read()  # to EOF; the writer stays usable
        writer.write(request.upper())
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert isinstance(writer.transport, asyncio.Transport)
        writer.write(b"hello " * 10_000)
        writer.write_eof()
        assert await reader.read() == b"HELLO " * 10_000
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    run(main())
