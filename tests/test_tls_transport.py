"""TLS stream transports (`create_server(ssl=)` / `create_connection(ssl=)`) behave like the
stdlib's `_SSLProtocolTransport`: the data path with `Protocol` and `BufferedProtocol`, write
and read flow control, closing and aborting, writes after close, peer resets, failing
protocol callbacks, close_notify, extra info and finalization after the loop closed.

The plain-socket versions of these tests are test_transports*.py; start_tls, sendfile, SNI,
ALPN, client certificates and handshake timeouts are in test_tls_api.py.
"""

import array
import asyncio
import gc
import os
import random
import socket
import ssl
import struct
import sys
import warnings
import weakref

import pytest

from conftest import skip_asyncio_before
from netutil import first_protocol, tls, tls_files  # noqa: F401 (fixtures)
from transportutil import (
    BufRec,
    Rec,
    close_then_drop_writes,
    collapse,
    digest,
    fill_until_queued,
    handler_calls,
    iterations,
    payload,
    warnings_from,
)

TIMEOUT = 5  # seconds for one test's coroutine


@pytest.fixture(autouse=True)
def _stdlib_tls_from_311(impl):
    """The behaviour these tests encode is the stdlib's TLS transport as rewritten in 3.11
    (which swordfish follows on every version). 3.10's older one differs in many of them
    (no BufferedProtocol, no eof_received on close_notify, other flow control) and spins
    forever on a memoryview of wide items, so its side is not run there."""
    skip_asyncio_before(impl, (3, 11), "the stdlib's TLS transport of 3.11")


async def open_pair(loop, contexts, client=Rec, server=Rec):
    """A TLS connection on 127.0.0.1 made through the public API: (client transport, client
    protocol, server transport, server protocol). The listening server is closed once it
    accepted; the connection stays open."""
    server_ctx, client_ctx = contexts
    factory, accepted = first_protocol(loop, server)
    srv = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_ctx)
    try:
        port = srv.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(
            client, "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        ppr = await accepted
        ptr = await ppr.made
    finally:
        srv.close()
    return tr, pr, ptr, ppr


@pytest.fixture
def pair(loop, tls):  # noqa: F811 (fixture)
    """`await pair(client_factory, server_factory)`: see `open_pair`; both transports are
    aborted at teardown."""
    made = []

    async def _pair(client=Rec, server=Rec):
        p = await open_pair(loop, tls, client, server)
        made.append(p)
        return p

    yield _pair
    if loop.is_closed() or loop.is_running():
        return
    for tr, _, ptr, _ in made:
        for t in (tr, ptr):
            if not t.is_closing():
                t.abort()
    loop.run_until_complete(iterations(5))


async def arrived(protocol, n, timeout=2):
    """Wait until `protocol` received `n` bytes; return them (fail with the count if they
    do not all come)."""
    try:
        return await asyncio.wait_for(protocol.received(n), timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"{len(protocol.data)} of {n} bytes arrived, then nothing for {timeout}s")


def reset(transport):
    """Abort `transport` so that its peer sees ECONNRESET."""
    transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    transport.abort()


# -- the data path ----------------------------------------------------------------------


def test_small_and_large_writes_arrive_in_order_both_ways(loop, run, pair):
    def messages(seed):
        rnd = random.Random(seed)
        small = [payload(rnd.randrange(1, 300), seed=seed * 1000 + i) for i in range(400)]
        return small[:200] + [payload(4 << 20, seed=seed)] + small[200:] + [b"end"]

    async def main():
        tr, pr, peer, ppr = await pair()
        up, down = messages(1), messages(2)
        for a, b in zip(up, down):
            tr.write(a)
            peer.write(b)
        up, down = b"".join(up), b"".join(down)
        got_up = await arrived(ppr, len(up))
        got_down = await arrived(pr, len(down))
        assert len(got_up) == len(up) and digest(got_up) == digest(up)
        assert len(got_down) == len(down) and digest(got_down) == digest(down)
        assert pr.chunk_types == ppr.chunk_types == {bytes}
        tr.write(b"")  # nothing, and no error
        await iterations(10)
        assert len(ppr.data) == len(up) and tr.get_write_buffer_size() == 0

    run(main(), TIMEOUT)


def test_writelines_with_bytes_like_objects(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        tr.writelines([b"ab", bytearray(b"cd"), memoryview(b"xefx")[1:3], b""])
        tr.writelines(iter([b"g", bytearray(b"h"), memoryview(bytearray(b"i"))]))
        tr.writelines([])
        assert await ppr.received(9) == b"abcdefghi"

        # Large parts of every type, mutable ones changed after the call: the data is
        # taken at the call (the stdlib encrypts it at once).
        big = [payload(3 << 20, seed=3), bytearray(payload(70_000, seed=4)),
               memoryview(bytearray(payload(2 << 20, seed=5)))]
        expected = b"abcdefghi" + b"".join(bytes(p) for p in big)
        peer.writelines(iter([memoryview(b"back")]))
        tr.writelines(big)
        big[1][:] = b"X" * len(big[1])
        big[2][:] = b"Y" * len(big[2])
        got = await arrived(ppr, len(expected))
        assert len(got) == len(expected) and digest(got) == digest(expected)
        assert await pr.received(4) == b"back"

    run(main(), TIMEOUT)


def test_memoryviews_of_wide_items_are_sent_as_their_bytes(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        wide = memoryview(array.array("i", [1, 2, 3]))
        tr.write(wide)
        tr.writelines([wide])
        expected = wide.tobytes() * 2
        assert await ppr.received(len(expected)) == expected

    run(main(), TIMEOUT)


@pytest.mark.parametrize("size", [1024, 256 * 1024], ids=["1KiB", "256KiB"])
def test_buffered_protocol_receives_everything(loop, run, pair, size):
    async def main():
        tr, pr, peer, ppr = await pair(lambda: BufRec(size), lambda: BufRec(size))
        up, down = payload(3 << 20, seed=8), payload(3 << 20, seed=9)
        tr.write(up)
        for i in range(0, len(down), 100_000):
            peer.write(down[i:i + 100_000])
        got_down = await arrived(pr, len(down))
        got_up = await arrived(ppr, len(up))
        assert len(got_down) == len(down) and digest(got_down) == digest(down)
        assert len(got_up) == len(up) and digest(got_up) == digest(up)
        assert pr.count("data") >= len(down) // size
        peer.close()
        assert await pr.lost is None
        assert collapse(pr.events) == ["made", "data", "eof", "lost"]
        assert len(pr.data) == len(down)

    run(main(), TIMEOUT)


# -- flow control -----------------------------------------------------------------------


def test_write_buffer_limits(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        # The stdlib's TLS defaults (FLOW_CONTROL_HIGH_WATER_SSL_WRITE = 512 KiB).
        assert tr.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        tr.set_write_buffer_limits(high=100_000)
        assert tr.get_write_buffer_limits() == (25_000, 100_000)
        tr.set_write_buffer_limits(high=100_000, low=10)
        assert tr.get_write_buffer_limits() == (10, 100_000)
        with pytest.raises(ValueError, match=r"^high \(10\) must be >= low \(20\) must be >= 0$"):
            tr.set_write_buffer_limits(high=10, low=20)
        # low defaults to high // 4, rounded down as Python does
        with pytest.raises(ValueError, match=r"^high \(-1\) must be >= low \(-1\) must be >= 0$"):
            tr.set_write_buffer_limits(high=-1)
        assert tr.get_write_buffer_limits() == (10, 100_000)
        tr.set_write_buffer_limits()
        assert tr.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        assert tr.get_write_buffer_size() == 0

    run(main(), TIMEOUT)


@pytest.mark.parametrize("writer", ["client", "server"])
def test_pause_writing_while_the_peer_does_not_read(loop, run, pair, writer):
    async def main():
        tr, pr, peer, ppr = await pair()
        if writer == "server":
            tr, pr, peer, ppr = peer, ppr, tr, pr
        high, low = 100_000, 20_000
        tr.set_write_buffer_limits(high=high, low=low)
        peer.pause_reading()
        written = bytearray()
        block = payload(64 * 1024, seed=3)
        while not pr.pauses:
            tr.write(block)
            written += block
            assert len(written) < 64 << 20, "pause_writing() never came"
            await iterations(1)
        assert pr.pauses[0] >= high
        await iterations(20)
        # The peer does not read: nothing delivered to it, nothing drained here.
        assert ppr.data == b"" and pr.resumes == [] and len(pr.pauses) == 1
        assert tr.get_write_buffer_size() >= high
        tr.write(b"while paused")  # still accepted and queued
        written += b"while paused"

        peer.resume_reading()
        await pr.until(lambda: pr.resumes)
        assert pr.resumes[0] <= low
        got = await arrived(ppr, len(written))
        assert len(got) == len(written) and digest(got) == digest(written)
        await iterations(5)
        assert tr.get_write_buffer_size() == 0
        assert pr.count("pause") == pr.count("resume")

    run(main(), TIMEOUT)


def test_pause_and_resume_reading(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        states = [tr.is_reading()]
        for _ in range(2):  # pausing twice is pausing once
            tr.pause_reading()
            states.append(tr.is_reading())
        data = b"while paused" + payload(1 << 20, seed=6)
        peer.write(data)
        await iterations(30)
        assert pr.events == ["made"] and pr.data == b""  # nothing while paused
        for _ in range(2):
            tr.resume_reading()
            states.append(tr.is_reading())
        assert states == [True, False, False, True, True]
        got = await arrived(pr, len(data))
        assert digest(got) == digest(data)

        # Paused with close_notify pending: eof_received waits for resume_reading.
        tr.pause_reading()
        peer.write(b"last")
        peer.close()
        await iterations(30)
        assert len(pr.data) == len(data) and not pr.eof.done() and not pr.lost.done()
        tr.resume_reading()
        assert await pr.lost is None
        assert bytes(pr.data) == data + b"last"
        assert pr.events[-3:] == ["data", "eof", "lost"]

    run(main(), TIMEOUT)


class Toggler(Rec):
    """Pauses reading in every data callback and resumes from the next loop iteration;
    `reading` holds is_reading() as each callback found it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.reading = []

    def _note(self, event):
        if event == "data":
            self.reading.append(self.transport.is_reading())
            self.transport.pause_reading()
            self.loop.call_soon(self.transport.resume_reading)
        super()._note(event)


class BufToggler(Toggler, BufRec):
    pass


@pytest.mark.parametrize("factory", [Toggler, lambda: BufToggler(1000)],
                         ids=["plain", "buffered"])
def test_toggling_reads_loses_nothing(loop, run, pair, factory):
    async def main():
        tr, pr, peer, ppr = await pair(factory)
        data = payload(2 << 20)
        peer.write(data)
        got = await arrived(pr, len(data))
        assert len(got) == len(data) and digest(got) == digest(data)
        assert len(pr.reading) >= 2 and all(pr.reading)  # never a callback while paused

    run(main(), TIMEOUT)


# -- closing ----------------------------------------------------------------------------


def test_close_flushes_queued_data_before_connection_lost(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        peer.pause_reading()
        written = fill_until_queued(tr)
        assert tr.get_write_buffer_size() > 0
        tr.close()
        assert tr.is_closing()
        tr.write(b"late")  # dropped: the stdlib's TLS transport is already shutting down
        await iterations(20)
        assert not pr.lost.done()  # the peer has not read anything: no close_notify yet
        peer.resume_reading()
        assert await ppr.lost is None
        assert await pr.lost is None
        assert bytes(ppr.data) == written
        assert collapse(ppr.events) == ["made", "data", "eof", "lost"]
        # The stdlib calls eof_received() once the peer's close_notify completed the shutdown.
        assert pr.events == ["made", "eof", "lost"]
        assert tr.get_protocol() is None  # dropped after connection_lost
        tr.close()  # again: nothing happens
        await iterations(5)
        assert pr.count("lost") == 1

    run(main(), TIMEOUT)


def test_abort_drops_queued_data(loop, run, pair):
    async def main():
        tr, pr, peer, ppr = await pair()
        written = fill_until_queued(tr)
        tr.abort()
        assert tr.is_closing()
        assert await pr.lost is None
        # The peer sees the end of the stream, or a reset if this side had unread data.
        assert await ppr.lost is None or isinstance(ppr.lost.result(), ConnectionResetError)
        got = bytes(ppr.data)
        assert len(got) < len(written) and got == written[:len(got)]
        assert pr.events == ["made", "lost"]
        tr.abort()
        tr.close()
        await iterations(5)
        assert pr.count("lost") == 1

    run(main(), TIMEOUT)


def test_writes_after_close_are_dropped_then_logged(loop, run, pair, caplog):
    # The stdlib's TLS layer counts the dropped writes (not close() itself) and warns from
    # the sixth one on, with its own message.
    message = "SSL connection is closed"

    async def main():
        tr, pr, peer, ppr = await pair()
        close_then_drop_writes(tr, caplog, message)
        assert await pr.lost is None
        tr.write(b"dropped")
        tr.writelines([b"dropped"])
        assert len(warnings_from(caplog, message)) == 3
        assert warnings_from(caplog, "socket.send() raised exception.") == []
        assert await ppr.lost is None
        assert ppr.data == b""

    run(main(), TIMEOUT)


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("queued", [False, True], ids=["idle", "queued"])
def test_peer_reset_loses_the_connection(loop, run, pair, queued):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer, ppr = await pair()
            peer.write(b"x")
            await arrived(pr, 1)
            if queued:
                fill_until_queued(tr)
            reset(peer)
            errors = (ConnectionResetError, BrokenPipeError) if queued else ConnectionResetError
            assert isinstance(await pr.lost, errors)  # never None: not a clean close
            await iterations(5)
            assert tr.is_closing() and tr.get_write_buffer_size() == 0
            assert pr.events == ["made", "data", "lost"]  # no eof_received
            assert calls == []  # an OSError is not reported

    run(main(), TIMEOUT)


@pytest.mark.parametrize("event, message", [
    ("data", "Fatal error on SSL protocol"),
    ("eof", "Error calling eof_received()"),
])
def test_protocol_callback_raising_is_reported_and_closes(loop, run, pair, event, message):
    class Failing(Rec):
        def _note(self, what):
            super()._note(what)
            if what == event:
                raise ZeroDivisionError(what)

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer, ppr = await pair(Failing)
            peer.write(b"data")
            if event == "eof":
                peer.close()
            exc = await pr.lost
            assert type(exc) is ZeroDivisionError and str(exc) == event
            assert [(c["message"], c["exception"]) for c in calls] == [(message, exc)]
            assert tr.is_closing()
            await ppr.lost
            assert pr.count("data") == 1 and pr.count("lost") == 1
            assert ppr.data == b""

    run(main(), TIMEOUT)


# -- end-of-file ------------------------------------------------------------------------


@pytest.mark.parametrize("result", [None, True])
def test_close_notify_from_the_peer(loop, run, pair, caplog, result):
    async def main():
        tr, pr, peer, ppr = await pair(lambda: Rec(eof_result=result))
        assert tr.can_write_eof() is False
        with pytest.raises(NotImplementedError):
            tr.write_eof()
        assert not tr.is_closing()
        peer.write(b"bye")
        peer.close()
        assert await pr.lost is None
        assert bytes(pr.data) == b"bye"
        assert collapse(pr.events) == ["made", "data", "eof", "lost"]
        assert tr.is_closing()
        assert await ppr.lost is None
        # Returning True cannot keep a TLS connection half-open: the stdlib warns.
        logged = warnings_from(
            caplog, "returning true from eof_received() has no effect when using ssl")
        assert len(logged) == (1 if result else 0)

    run(main(), TIMEOUT)


# -- extra info -------------------------------------------------------------------------


def test_extra_info(loop, run, pair, tls):  # noqa: F811 (fixture)
    server_ctx, client_ctx = tls

    async def main():
        tr, pr, peer, ppr = await pair()
        assert isinstance(tr, asyncio.Transport) and isinstance(peer, asyncio.Transport)
        for t, ctx, side in ((tr, client_ctx, False), (peer, server_ctx, True)):
            sock = t.get_extra_info("socket")
            assert isinstance(sock, asyncio.trsock.TransportSocket)
            assert sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
            assert t.get_extra_info("sockname") == sock.getsockname()
            assert t.get_extra_info("peername") == sock.getpeername()
            assert t.get_extra_info("sslcontext") is ctx
            sslobj = t.get_extra_info("ssl_object")
            if side and sslobj is None and getattr(ctx, "rustls", None) is not None:
                # rustls has no SSLObject; the cipher is told as SSLObject.cipher() tells it.
                assert sslobj is None and t.get_extra_info("compression") is None
                assert t.get_extra_info("cipher") == tr.get_extra_info("cipher")
                continue
            assert isinstance(sslobj, ssl.SSLObject) and sslobj.server_side is side
            assert sslobj.context is ctx
            assert t.get_extra_info("cipher") == sslobj.cipher() is not None
            assert t.get_extra_info("compression") == sslobj.compression()
            assert t.get_extra_info("no such key") is None
            assert t.get_extra_info("no such key", "dflt") == "dflt"
        assert tr.get_extra_info("peername") == peer.get_extra_info("sockname")
        assert tr.get_extra_info("sockname") == peer.get_extra_info("peername")
        assert tr.get_extra_info("ssl_object").server_hostname == "localhost"
        cert = tr.get_extra_info("peercert")
        assert cert == tr.get_extra_info("ssl_object").getpeercert()
        assert (("commonName", "localhost"),) in cert["subject"]
        assert ("IP Address", "127.0.0.1") in cert["subjectAltName"]
        assert peer.get_extra_info("peercert") is None  # no client certificate

    run(main(), TIMEOUT)


# -- finalization -----------------------------------------------------------------------


def test_unclosed_transport_warns_when_collected_after_loop_close(
    loop, tls, monkeypatch,  # noqa: F811 (fixture)
):
    """Both ends of a TLS connection left open, the loop closed, then collected: each
    transport warns (ResourceWarning) and closes its socket, with no other error."""

    async def make():
        tr, pr, peer, ppr = await open_pair(loop, tls)
        await iterations(3)
        return [(weakref.ref(t), t.get_extra_info("socket").fileno()) for t in (tr, peer)]

    made = loop.run_until_complete(asyncio.wait_for(make(), TIMEOUT))
    loop.close()
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            gc.collect()
    monkeypatch.undo()
    assert [ref() for ref, _ in made] == [None, None]
    errors = [(u.exc_type, str(u.exc_value), u.err_msg, u.object) for u in unraisable]
    assert errors == []  # e.g. no "Exception ignored in ...: Event loop is closed"
    resource = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert sum(m.startswith("unclosed transport <") for m in resource) >= 2
    assert all(m.startswith(("unclosed transport <", "unclosed <socket")) for m in resource)
    for _, fd in made:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
