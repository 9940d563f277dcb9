"""Flow control on stream transports, as the stdlib's socket transport does it: the write
buffer limits and pause_writing/resume_writing, and pause_reading/resume_reading/is_reading.
"""

import asyncio
import logging
import re
import socket

import pytest

from conftest import PY
from transportutil import (
    KINDS,
    BufRec,
    Rec,
    conn,  # noqa: F401 (fixture)
    digest,
    fill_until_queued,
    handler_calls,
    iterations,
    payload,
    recv_all,
    recv_exactly,
)

kinds = pytest.mark.parametrize("kind", KINDS)


# -- write buffer limits ----------------------------------------------------------------


def test_write_buffer_limits(loop, run, conn):
    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        tr.set_write_buffer_limits(high=100)
        assert tr.get_write_buffer_limits() == (25, 100)
        tr.set_write_buffer_limits(low=10)
        assert tr.get_write_buffer_limits() == (10, 40)
        tr.set_write_buffer_limits(high=50, low=50)
        assert tr.get_write_buffer_limits() == (50, 50)
        tr.set_write_buffer_limits(high=0)
        assert tr.get_write_buffer_limits() == (0, 0)
        tr.set_write_buffer_limits()
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        assert tr.get_write_buffer_size() == 0

    run(main())


@pytest.mark.parametrize("kwargs, message", [
    (dict(high=10, low=20), "high (10) must be >= low (20) must be >= 0"),
    (dict(high=-1), "high (-1) must be >= low (-1) must be >= 0"),
    (dict(low=-4), "high (-16) must be >= low (-4) must be >= 0"),
    (dict(high=3, low=-1), "high (3) must be >= low (-1) must be >= 0"),
])
def test_write_buffer_limits_validation(loop, run, conn, kwargs, message):
    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        tr.set_write_buffer_limits(high=1000, low=10)
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            tr.set_write_buffer_limits(**kwargs)
        assert tr.get_write_buffer_limits() == (10, 1000)  # unchanged

    run(main())


@kinds
def test_pause_and_resume_writing_at_the_limits(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        tr.set_write_buffer_limits(high=1 << 40)
        total = len(fill_until_queued(tr, chunk=4096))
        # From here on every write is queued (nothing is sent until the loop runs).
        base = tr.get_write_buffer_size()
        high, low = base + 1000, base // 2
        tr.set_write_buffer_limits(high=high, low=low)
        assert pr.pauses == []
        tr.write(b"a" * 999)
        tr.writelines([b"b"])
        assert tr.get_write_buffer_size() == high  # at the limit: not above it
        assert pr.pauses == []
        tr.write(b"c")
        assert pr.pauses == [high + 1]
        tr.write(b"d" * 100_000)
        tr.writelines([b"e" * 1000, b"f"])
        total += 999 + 1 + 1 + 100_000 + 1001
        assert pr.pauses == [high + 1] and pr.resumes == []
        assert tr.get_write_buffer_size() == high + 1 + 100_000 + 1001

        draining = asyncio.ensure_future(recv_exactly(loop, peer, total))
        await pr.until(lambda: pr.resumes)
        assert len(pr.resumes) == 1 and pr.resumes[0] <= low
        await draining
        assert pr.events.count("pause") == 1 and pr.events.count("resume") == 1

        # Lowering the high-water mark below the queued size pauses at once.
        tr.set_write_buffer_limits(high=1 << 40)
        total = len(fill_until_queued(tr))
        size = tr.get_write_buffer_size()
        tr.set_write_buffer_limits(high=size - 1, low=0)
        assert pr.pauses == [high + 1, size]
        draining = asyncio.ensure_future(recv_exactly(loop, peer, total))
        await pr.until(lambda: len(pr.resumes) == 2)
        assert pr.resumes[1] == 0  # low=0: resumed only once everything went out
        await draining

    run(main())


def test_writes_while_paused_are_still_delivered(loop, run, conn):
    async def main():
        tr, pr, peer = await conn(Rec, "tcp")
        tr.set_write_buffer_limits(high=0)
        data = payload(5 << 20)
        for i in range(0, len(data), 50_000):
            tr.write(data[i:i + 50_000])
        assert len(pr.pauses) == 1 and not pr.resumes
        assert await recv_exactly(loop, peer, len(data)) == data
        await pr.until(lambda: pr.resumes)
        assert pr.resumes == [0] and tr.get_write_buffer_size() == 0

    run(main())


@kinds
def test_writes_from_pause_and_resume_writing(loop, run, conn, kind):
    """The flow-control callbacks may write (the stdlib: "may append to buffer")."""

    class Writer(Rec):
        def pause_writing(self):
            super().pause_writing()
            self.transport.write(b"<paused>")

        def resume_writing(self):
            super().resume_writing()
            self.transport.write(b"<resumed>")

    async def main():
        tr, pr, peer = await conn(Writer, kind)
        tr.set_write_buffer_limits(high=1 << 40)
        written = fill_until_queued(tr) + b"z" * 100_000
        tr.set_write_buffer_limits(high=tr.get_write_buffer_size() + 50_000)
        tr.write(b"z" * 100_000)
        assert len(pr.pauses) == 1
        total = len(written) + len(b"<paused>") + len(b"<resumed>")
        got = await recv_exactly(loop, peer, total)
        assert pr.count("pause") == 1 and pr.count("resume") == 1
        # "<paused>" is queued after the write that crossed the limit.
        assert got == written + b"<paused><resumed>"
        await iterations(5)
        assert tr.get_write_buffer_size() == 0 and not tr.is_closing()

    run(main())


@pytest.mark.parametrize("which", ["pause_writing", "resume_writing"])
def test_flow_callback_raising_is_reported(loop, run, conn, which):
    class Bad(Rec):
        def pause_writing(self):
            super().pause_writing()
            if which == "pause_writing":
                raise ValueError("no pause")

        def resume_writing(self):
            super().resume_writing()
            if which == "resume_writing":
                raise ValueError("no resume")

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, peer = await conn(Bad, "tcp")
            written = fill_until_queued(tr)
            tr.write(b"x" * 100_000)
            assert len(pr.pauses) == 1
            tr.write(b"y")
            assert len(pr.pauses) == 1  # still paused: not called again
            if which == "pause_writing":
                assert len(calls) == 1
            got = await recv_exactly(loop, peer, len(written) + 100_001)
            assert got == written + b"x" * 100_000 + b"y"
            await pr.until(lambda: pr.resumes)
            assert len(calls) == 1
            ctx = calls[0]
            assert ctx["message"] == f"protocol.{which}() failed"
            assert type(ctx["exception"]) is ValueError
            assert ctx["transport"] is tr and ctx["protocol"] is pr
            assert not tr.is_closing()  # not fatal
            tr.write(b"still open")
            assert await recv_exactly(loop, peer, 10) == b"still open"

    run(main())


# -- pausing reads ----------------------------------------------------------------------


@kinds
def test_pause_and_resume_reading(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        tr.pause_reading()  # idempotent
        assert not tr.is_reading()
        await loop.sock_sendall(peer, b"while paused")
        await iterations(20)
        assert pr.data == b""
        tr.resume_reading()
        assert tr.is_reading()
        tr.resume_reading()  # idempotent
        assert await pr.received(12) == b"while paused"

        # Paused with end-of-file pending: eof_received waits for resume_reading.
        tr.pause_reading()
        await loop.sock_sendall(peer, b"last")
        peer.shutdown(socket.SHUT_WR)
        await iterations(20)
        assert bytes(pr.data) == b"while paused" and not pr.eof.done()
        tr.resume_reading()
        assert await pr.lost is None
        assert bytes(pr.data) == b"while paused" + b"last"
        assert pr.events[-2:] == ["eof", "lost"]

    run(main())


def test_pause_reading_in_connection_made(loop, run, conn, impl):
    class Paused(Rec):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()

    async def main():
        tr, pr, peer = await conn(Paused, "tcp")
        await loop.sock_sendall(peer, b"early")
        await iterations(20)
        assert not tr.is_reading()
        if impl == "asyncio" and PY < (3, 11):
            # 3.10 starts reading after connection_made whatever it did.
            assert await pr.received(5) == b"early"
            return
        assert pr.data == b""
        tr.resume_reading()
        assert await pr.received(5) == b"early"

    run(main())


@kinds
def test_reading_calls_on_a_closing_transport(loop, run, conn, kind):
    async def main():
        tr, pr, peer = await conn(Rec, kind)
        tr.pause_reading()
        tr.close()
        assert not tr.is_reading()
        tr.resume_reading()  # no-ops on a closing transport
        tr.pause_reading()
        assert not tr.is_reading()
        assert await pr.lost is None
        assert not tr.is_reading()
        tr.pause_reading()
        tr.resume_reading()
        assert await recv_all(loop, peer) == b""

    run(main())


@kinds
@pytest.mark.parametrize("buffered", [False, True], ids=["plain", "buffered"])
def test_toggling_reads_loses_nothing(loop, run, conn, kind, buffered):
    """Pause after every chunk and resume from a later callback, with the kernel holding
    more data each time: everything still arrives, in order."""

    base = BufRec if buffered else Rec

    class Toggler(base):
        def __init__(self):
            super().__init__(*((1000,) if buffered else ()))
            self.paused_reads = 0
            self.data_while_paused = 0

        def _note(self, event):
            if event == "data":
                self.data_while_paused += not self.transport.is_reading()
                self.transport.pause_reading()
                self.paused_reads += 1
                self.loop.call_soon(self.transport.resume_reading)
            super()._note(event)

    async def main():
        tr, pr, peer = await conn(Toggler, kind)
        data = payload(2 << 20)
        sending = asyncio.ensure_future(loop.sock_sendall(peer, data))
        got = await pr.received(len(data))
        await sending
        assert len(got) == len(data) and digest(got) == digest(data)
        assert pr.paused_reads >= 2 and pr.data_while_paused == 0
        peer.shutdown(socket.SHUT_WR)
        assert await pr.lost is None

    run(main())


def _debug_messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def test_debug_mode_logs_paused_and_resumed_reading(loop, run, conn, caplog):
    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        loop.set_debug(True)
        caplog.set_level(logging.DEBUG, logger="asyncio")
        tr.pause_reading()
        tr.resume_reading()
        messages = _debug_messages(caplog)
        assert any(m.endswith(" pauses reading") for m in messages)
        assert any(m.endswith(" resumes reading") for m in messages)

    run(main())


def test_debug_mode_logs_the_end_of_file(loop, run, conn, caplog):
    async def main():
        tr, pr, peer = await conn(Rec, "unix")
        loop.set_debug(True)
        caplog.set_level(logging.DEBUG, logger="asyncio")
        peer.shutdown(socket.SHUT_WR)
        await pr.lost
        assert any(m.endswith(" received EOF") and "fd=" in m for m in _debug_messages(caplog))

    run(main())
