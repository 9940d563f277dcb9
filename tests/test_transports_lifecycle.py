"""Stream transports' lifecycle, like the stdlib's `_SelectorSocketTransport`: closing and
aborting, writes after close, peer resets and failing protocol callbacks (what reaches the
exception handler), extra info, repr, descriptor ownership, finalization and the context
protocol callbacks run in."""

import asyncio
import contextvars
import gc
import os
import socket
import sys
import warnings
import weakref

import pytest

from conftest import reset_close
from transportutil import (
    KINDS,
    Rec,
    conn,  # noqa: F401 (fixture)
    connect,
    fill_until_queued,
    handler_calls,
    iterations,
    payload,
    peer_sees_close,
    recv_all,
    warnings_from,
)

kinds = pytest.mark.parametrize("kind", KINDS)

# -- closing ----------------------------------------------------------------------------


@kinds
def test_close_flushes_queued_data_before_connection_lost(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        written = fill_until_queued(tr)
        tr.close()
        assert tr.is_closing()
        tr.close()  # again: nothing happens
        # Writes while the queue drains still go out (the stdlib counts a lost
        # connection only once the queue is empty).
        tr.write(b"late")
        await iterations(20)
        assert not pr.lost.done()  # the peer has not read anything yet
        sizes = []
        pr.connection_lost = lambda exc, f=pr.connection_lost: (
            sizes.append(tr.get_write_buffer_size()), f(exc))
        assert await recv_all(loop, peer) == written + b"late"
        assert await pr.lost is None
        assert sizes == [0] and pr.count("lost") == 1
        assert tr.get_protocol() is None  # dropped after connection_lost

    run(main())


@kinds
def test_abort_drops_queued_data(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        written = fill_until_queued(tr)
        tr.abort()
        assert tr.is_closing() and tr.get_write_buffer_size() == 0
        assert await pr.lost is None
        got = await recv_all(loop, peer)
        assert len(got) < len(written) and got == written[:len(got)]
        tr.abort()
        tr.close()
        await iterations(5)
        assert pr.count("lost") == 1

    run(main())


@kinds
def test_writes_after_close_are_dropped_then_logged(loop, run, conn, kind, caplog):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        tr.close()
        for _ in range(4):
            tr.write(b"dropped")
        assert warnings_from(caplog, "socket.send() raised exception.") == []
        tr.write(b"dropped")
        assert len(warnings_from(caplog, "socket.send() raised exception.")) == 1
        assert await pr.lost is None
        tr.write(b"dropped")
        tr.write(b"dropped")
        assert len(warnings_from(caplog, "socket.send() raised exception.")) == 3
        assert await recv_all(loop, peer) == b""

    run(main())


@kinds
@pytest.mark.parametrize("how", ["close", "abort"])
def test_close_inside_data_received_stops_delivery(loop, run, conn, kind, how):
    class Closer(Rec):
        def data_received(self, data):
            super().data_received(data)
            getattr(self.transport, how)()
            self.transport.write(b"dropped")

    async def main():
        tr, pr, peer = await conn(Closer, kind)
        sending = asyncio.ensure_future(loop.sock_sendall(peer, payload(4 << 20)))
        assert await pr.lost is None
        await iterations(10)
        assert pr.count("data") == 1 and pr.events[-1] == "lost"
        assert await peer_sees_close(loop, peer) == b""
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)

    run(main())


def test_close_inside_connection_made(loop, run, conn):
    class Closer(Rec):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.close()

    async def main():
        tr, pr, peer = await conn(Closer, "tcp")
        await loop.sock_sendall(peer, b"unread")
        assert await pr.lost is None
        assert pr.events == ["made", "lost"]
        assert await peer_sees_close(loop, peer) == b""

    run(main())


@kinds
def test_repr_shows_the_state(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        fd = tr.get_extra_info("socket").fileno()
        name = type(tr).__name__
        assert repr(tr) == f"<{name} fd={fd} read=polling write=<idle, bufsize=0>>"
        tr.pause_reading()
        assert repr(tr) == f"<{name} fd={fd} read=idle write=<idle, bufsize=0>>"
        tr.resume_reading()
        fill_until_queued(tr)
        size = tr.get_write_buffer_size()
        assert repr(tr) == f"<{name} fd={fd} read=polling write=<polling, bufsize={size}>>"
        tr.close()
        assert repr(tr) == f"<{name} closing fd={fd} read=idle write=<polling, bufsize={size}>>"
        tr.abort()
        await pr.lost
        assert repr(tr) == f"<{name} closed fd={fd}>"

    run(main())


# -- errors -----------------------------------------------------------------------------


def test_peer_reset_loses_the_connection_quietly(loop, run, conn):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Rec, "tcp")
            await loop.sock_sendall(peer, b"x")
            await pr.received(1)
            reset_close(peer)
            exc = await pr.lost
            assert isinstance(exc, ConnectionResetError)
            assert "eof" not in pr.events
            assert tr.is_closing()
            await iterations(5)
            assert calls == []

    run(main())


def test_peer_reset_with_queued_data(loop, run, conn):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Rec, "tcp")
            fill_until_queued(tr)
            reset_close(peer)
            exc = await pr.lost
            assert isinstance(exc, (ConnectionResetError, BrokenPipeError))
            assert tr.get_write_buffer_size() == 0
            await iterations(5)
            assert calls == []

    run(main())


@kinds
@pytest.mark.parametrize("callback", ["data_received", "eof_received"])
def test_protocol_callback_raising_is_reported_and_closes(loop, run, conn, kind, callback):
    class Bad(Rec):
        def data_received(self, data):
            super().data_received(data)
            if callback == "data_received":
                raise ZeroDivisionError("bad data")

        def eof_received(self):
            super().eof_received()
            raise ZeroDivisionError("bad eof")

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Bad, kind)
            await loop.sock_sendall(peer, b"data")
            if callback == "eof_received":
                peer.shutdown(socket.SHUT_WR)
            exc = await pr.lost
            assert type(exc) is ZeroDivisionError
            assert len(calls) == 1
            ctx = calls[0]
            assert ctx["message"] == f"Fatal error: protocol.{callback}() call failed."
            assert ctx["exception"] is exc
            assert ctx["transport"] is tr and ctx["protocol"] is pr
            assert tr.is_closing()
            assert await peer_sees_close(loop, peer) == b""
            assert pr.count("data") == 1 and pr.count("lost") == 1

    run(main())


@kinds
def test_writing_to_a_peer_that_went_away(loop, run, conn, kind):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(lambda: Rec(eof_result=True), kind)
            peer.close()
            await pr.eof  # half-closed: no longer reading, still writing
            for _ in range(100):  # the first write may still be accepted by the kernel
                tr.write(b"x" * 1000)
                await iterations(2)
                if pr.lost.done():
                    break
            exc = pr.lost.result()
            assert isinstance(exc, (BrokenPipeError, ConnectionResetError))
            assert calls == []

    run(main())


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_exit_exceptions_from_data_received_leave_the_loop(loop, conn, exc_type):
    class Raiser(Rec):
        def data_received(self, data):
            super().data_received(data)
            if len(self.data) == 1:
                raise exc_type()

    tr, pr, peer = loop.run_until_complete(conn(Raiser, "unix"))
    with handler_calls(loop) as calls:
        peer.send(b"1")
        with pytest.raises(exc_type):
            loop.run_until_complete(pr.received(2))
        assert bytes(pr.data) == b"1" and not tr.is_closing()
        peer.send(b"2")
        assert loop.run_until_complete(pr.received(2)) == b"12"
        assert calls == []


@pytest.mark.parametrize("queued", [False, True], ids=["idle", "flushing"])
def test_connection_lost_raising_is_reported(loop, run, conn, queued):
    """connection_lost() comes from a scheduled callback, or (the stdlib's write path)
    straight from the flush that emptied the queue of a closing transport: either way an
    exception goes to the exception handler and the socket is closed."""

    class Bad(Rec):
        def connection_lost(self, exc):
            super().connection_lost(exc)
            raise ValueError("bad lost")

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Bad, "unix")
            written = fill_until_queued(tr) if queued else b""
            tr.close()
            assert await recv_all(loop, peer) == written  # then EOF: the socket is closed
            assert await pr.lost is None
            await iterations(5)
            assert len(calls) == 1
            assert calls[0]["message"].startswith("Exception in callback")
            assert type(calls[0]["exception"]) is ValueError

    run(main())


@pytest.mark.parametrize("how", ["close", "close-flushing", "abort", "peer-reset"])
def test_writes_after_connection_lost_never_reach_a_reused_descriptor(loop, run, conn, impl, how):
    async def main():
        tr, pr, peer = await conn(Rec, "tcp" if how == "peer-reset" else "unix")
        fd = tr.get_extra_info("socket").fileno()
        if how == "close-flushing":
            written = fill_until_queued(tr)
            tr.close()
            assert await recv_all(loop, peer) == written
        elif how == "peer-reset":
            reset_close(peer)
        else:
            getattr(tr, how)()
        await pr.lost
        # The descriptor number is free again: another socket takes it.
        a, b = socket.socketpair()
        b.setblocking(False)
        if b.fileno() == fd:
            a, b = b, a
        dup = None if a.fileno() == fd else os.dup2(a.fileno(), fd)
        b.setblocking(False)
        try:
            for write in (tr.write, lambda d: tr.writelines([d]), tr.write):
                try:
                    write(b"leak")
                except (AttributeError, TypeError):
                    # The stdlib's own bugs: once the connection is lost its write()
                    # fails if the flush of a closing transport lost it, and from 3.12
                    # its writelines() fails whatever lost it.
                    assert impl == "asyncio"
            tr.write_eof()
            tr.close()
            await iterations(5)
            with pytest.raises(BlockingIOError):
                b.recv(100)
        finally:
            if dup is not None:
                os.close(dup)
            a.close()
            b.close()

    run(main())


# -- extra info, repr, descriptor ownership ---------------------------------------------


@kinds
def test_extra_info_and_type(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        sock = tr.get_extra_info("socket")
        assert isinstance(sock, asyncio.trsock.TransportSocket)
        assert sock.family == peer.family and sock.type == socket.SOCK_STREAM
        assert tr.get_extra_info("sockname") == peer.getpeername() == sock.getsockname()
        assert tr.get_extra_info("peername") == peer.getsockname()
        assert tr.get_extra_info("no such key") is None
        assert tr.get_extra_info("no such key", "dflt") == "dflt"
        assert isinstance(tr, asyncio.Transport)
        assert isinstance(tr, asyncio.ReadTransport) and isinstance(tr, asyncio.WriteTransport)
        fd = sock.fileno()
        assert f"fd={fd}" in repr(tr)
        if kind == "tcp":
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        tr.close()
        await pr.lost
        assert "closed" in repr(tr)
        assert tr.get_extra_info("peername") == peer.getsockname()  # kept

    run(main())


@kinds
def test_reader_callbacks_refused_on_a_transport_descriptor(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        fd = tr.get_extra_info("socket").fileno()
        for method in (loop.add_reader, loop.add_writer):
            with pytest.raises(RuntimeError, match=f"^File descriptor {fd} is used by transport"):
                method(fd, lambda: None)
        # Still working.
        await loop.sock_sendall(peer, b"ping")
        assert await pr.received(4) == b"ping"

    run(main())


@kinds
def test_removing_callbacks_refused_on_a_transport_descriptor(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        fd = tr.get_extra_info("socket").fileno()
        for method in (loop.remove_reader, loop.remove_writer):
            with pytest.raises(RuntimeError, match=f"^File descriptor {fd} is used by transport"):
                method(fd)
        await loop.sock_sendall(peer, b"ping")
        assert await pr.received(4) == b"ping"

    run(main())


def test_unclosed_transport_warns_when_collected_after_loop_close(loop):
    async def make():
        tr, pr, peer = await connect(loop, Rec, "unix")
        return weakref.ref(tr), tr.get_extra_info("socket").fileno(), peer

    ref, fd, peer = loop.run_until_complete(make())
    loop.run_until_complete(iterations(3))
    loop.close()
    peer.close()
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
            gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert ref() is None
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert len([m for m in messages if m.startswith("unclosed transport <")]) == 1
    # The socket is garbage in the same collection: its own finalizer may come first.
    assert all(m.startswith(("unclosed transport <", "unclosed <socket")) for m in messages)
    assert unraisable == []
    with pytest.raises(OSError):
        os.fstat(fd)  # the transport closed its socket


def test_transport_whose_close_failed_on_a_closed_loop_still_warns_and_closes(loop):
    async def make():
        tr, pr, peer = await connect(loop, Rec, "unix")
        return tr, peer

    tr, peer = loop.run_until_complete(make())
    loop.close()
    peer.close()
    with pytest.raises(RuntimeError, match="^Event loop is closed$"):
        tr.close()
    assert tr.is_closing()
    fd = tr.get_extra_info("socket").fileno()
    ref = weakref.ref(tr)
    del tr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert ref() is None
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert [m for m in messages if m.startswith("unclosed transport <")]
    with pytest.raises(OSError):
        os.fstat(fd)


@kinds
def test_protocol_callbacks_run_in_a_copy_of_the_creation_context(loop, run, conn, kind):
    var = contextvars.ContextVar("var", default="unset")

    class CtxRec(Rec):
        def __init__(self):
            super().__init__(eof_result=None)
            self.seen = {}

        def _note(self, event):
            self.seen.setdefault(event, var.get())
            if event == "data":
                var.set("set by data_received")
            super()._note(event)

    async def main():
        var.set("at creation")
        tr, pr, peer = await conn(CtxRec, kind)
        var.set("later")
        await loop.sock_sendall(peer, b"x")
        await pr.received(1)
        peer.shutdown(socket.SHUT_WR)
        await pr.lost
        assert pr.seen["made"] == "at creation"
        assert pr.seen["data"] == "at creation"
        assert var.get() == "later"

    run(main())
