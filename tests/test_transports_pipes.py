"""Pipe transports (`connect_read_pipe` / `connect_write_pipe`) behave like the stdlib's
`_UnixReadPipeTransport` and `_UnixWritePipeTransport`."""

import asyncio
import gc
import os
import socket
import warnings
import weakref

import pytest

from conftest import PY
from transportutil import (
    Rec,
    close_then_drop_writes,
    collapse,
    connect_pipe,
    handler_calls,
    iterations,
    payload,
    read_pipe,
    warnings_from,
    write_pipe,
)


@pytest.fixture
def pipes(loop):
    """`await pipes.read(factory)` / `await pipes.write(factory)`: see read_pipe and
    write_pipe. At teardown the other ends are closed and transports still open are
    closed (read) or aborted (write), so no test leaves one for the GC."""
    made = []
    closed = set()

    class Pipes:
        def close(self, fd):
            """Close the other end (once: its number may be reused afterwards)."""
            os.close(fd)
            closed.add(fd)

        async def read(self, factory):
            tr, pr, w = await read_pipe(loop, factory)
            made.append((tr, w))
            return tr, pr, w

        async def write(self, factory):
            tr, pr, r = await write_pipe(loop, factory)
            made.append((tr, r))
            return tr, pr, r

    yield Pipes()
    for tr, fd in made:
        if fd not in closed:
            os.close(fd)
        if not loop.is_closed() and not tr.is_closing():
            tr.close() if isinstance(tr, asyncio.ReadTransport) else tr.abort()
    if not loop.is_closed() and not loop.is_running():
        loop.run_until_complete(iterations(5))


def write_all(fd, data):
    """Blocking write of everything (in an executor thread)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd):
    """Blocking read to end-of-file (in an executor thread)."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def check_reading(tr, impl, expected):
    if impl == "asyncio" and PY < (3, 11):
        return  # 3.10's read pipe has no is_reading()
    assert tr.is_reading() is expected


# -- read pipes -------------------------------------------------------------------------


@pytest.mark.parametrize("eof_result", [None, True])
def test_read_pipe_data_then_eof_then_connection_lost(loop, run, pipes, eof_result, impl):
    async def main():
        tr, pr, w = await pipes.read(lambda: Rec(eof_result=eof_result))
        assert isinstance(tr, asyncio.ReadTransport)
        pipe = tr.get_extra_info("pipe")
        assert f"fd={pipe.fileno()}" in repr(tr)
        check_reading(tr, impl, True)
        assert not tr.is_closing()
        os.write(w, b"abc")
        assert await pr.received(3) == b"abc"
        data = payload(1 << 20)
        await loop.run_in_executor(None, write_all, w, data)
        pipes.close(w)
        # A pipe's transport closes at end-of-file whatever eof_received returns.
        assert await pr.lost is None
        assert bytes(pr.data) == b"abc" + data
        assert pr.chunk_types == {bytes}
        assert pr.events[0] == "made" and pr.events[-2:] == ["eof", "lost"]
        assert pr.count("eof") == 1
        assert tr.is_closing()
        check_reading(tr, impl, False)

    run(main())


def test_read_pipe_pause_and_resume(loop, run, pipes, impl):
    async def main():
        tr, pr, w = await pipes.read(Rec)
        tr.pause_reading()
        tr.pause_reading()
        check_reading(tr, impl, False)
        os.write(w, b"waiting")
        await iterations(20)
        assert pr.data == b""
        tr.resume_reading()
        tr.resume_reading()
        check_reading(tr, impl, True)
        assert await pr.received(7) == b"waiting"

        tr.pause_reading()
        pipes.close(w)
        await iterations(20)
        assert not pr.eof.done()  # end-of-file waits too
        tr.resume_reading()
        assert await pr.lost is None

    run(main())


def test_read_pipe_paused_in_connection_made(loop, run, pipes, impl):
    class Paused(Rec):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()

    async def main():
        tr, pr, w = await pipes.read(Paused)
        os.write(w, b"early")
        if impl == "asyncio" and PY < (3, 11):
            # 3.10 starts reading after connection_made whatever it did.
            assert await pr.received(5) == b"early"
            return
        await iterations(20)
        assert pr.data == b""
        check_reading(tr, impl, False)
        tr.resume_reading()
        assert await pr.received(5) == b"early"

    run(main())


def test_read_pipe_large_transfer_with_toggled_reads(loop, run, pipes):
    class Toggler(Rec):
        def data_received(self, data):
            super().data_received(data)
            self.transport.pause_reading()
            self.loop.call_soon(self.transport.resume_reading)

    async def main():
        tr, pr, w = await pipes.read(Toggler)
        data = payload(4 << 20)
        writing = loop.run_in_executor(None, write_all, w, data)
        writing.add_done_callback(lambda f: pipes.close(w))
        assert await pr.lost is None
        await writing
        assert len(pr.data) == len(data) and bytes(pr.data) == data
        assert pr.count("data") > 1

    run(main())


def test_read_pipe_close(loop, run, pipes, impl):
    async def main():
        tr, pr, w = await pipes.read(Rec)
        tr.close()
        assert tr.is_closing()
        check_reading(tr, impl, False)
        tr.close()
        assert await pr.lost is None
        assert pr.events == ["made", "lost"]
        with pytest.raises(BrokenPipeError):
            os.write(w, b"x")

    run(main())


def test_read_pipe_data_received_raising_is_reported_and_reading_goes_on(loop, run, pipes):
    class Bad(Rec):
        def data_received(self, data):
            super().data_received(data)
            if len(self.data) == 3:
                raise ZeroDivisionError("bad")

    async def main():
        with handler_calls(loop) as calls:
            tr, pr, w = await pipes.read(Bad)
            os.write(w, b"one")
            await pr.received(3)
            await iterations(3)
            assert len(calls) == 1
            assert calls[0]["message"].startswith("Exception in callback")
            assert type(calls[0]["exception"]) is ZeroDivisionError
            assert not tr.is_closing()
            os.write(w, b"two")
            assert await pr.received(6) == b"onetwo"
            tr.close()
            await pr.lost

    run(main())


def test_pipe_reprs(loop, run, pipes):
    async def main():
        rt, rp, w = await pipes.read(Rec)
        wt, wp, r = await pipes.write(Rec)
        rname, rfd = type(rt).__name__, rt.get_extra_info("pipe").fileno()
        wname, wfd = type(wt).__name__, wt.get_extra_info("pipe").fileno()
        assert repr(rt) == f"<{rname} fd={rfd} polling>"
        assert repr(wt) == f"<{wname} fd={wfd} idle bufsize=0>"
        rt.pause_reading()
        wt.write(payload(1 << 20))
        size = wt.get_write_buffer_size()
        assert repr(rt) == f"<{rname} fd={rfd} idle>"
        assert repr(wt) == f"<{wname} fd={wfd} polling bufsize={size}>"
        rt.close()
        wt.close()
        assert repr(rt) == f"<{rname} closing fd={rfd} idle>"
        assert repr(wt) == f"<{wname} closing fd={wfd} polling bufsize={size}>"
        wt.abort()
        await rp.lost
        await wp.lost
        assert repr(rt) == f"<{rname} closed fd={rfd} closed>"
        assert repr(wt) == f"<{wname} closed fd={wfd} closed>"

    run(main())


def test_read_pipe_refuses_a_regular_file(loop, run, tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"data")

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match=r"^Pipe transport is for pipes/sockets only\.$"):
                await connect_pipe(loop, "read", asyncio.Protocol, f)

    run(main())


# -- write pipes ------------------------------------------------------------------------


def test_write_pipe_writes_and_close_flushes(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        assert isinstance(tr, asyncio.WriteTransport)
        assert tr.can_write_eof() is True
        tr.write(b"abc")
        tr.writelines([bytearray(b"de"), memoryview(b"f")])
        assert os.read(r, 100) == b"abcdef"
        data = payload(1 << 20)
        tr.write(data)
        assert tr.get_write_buffer_size() > 0  # more than the pipe holds
        reading = loop.run_in_executor(None, read_all, r)
        tr.close()
        assert tr.is_closing()
        assert await reading == data
        assert await pr.lost is None
        assert tr.get_write_buffer_size() == 0

    run(main())


def test_write_pipe_many_small_writes_behind_a_full_pipe(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        tr.set_write_buffer_limits(high=1 << 30)
        head = payload(1 << 20)
        tr.write(head)
        assert tr.get_write_buffer_size() > 0
        small = [bytes([i % 251]) * (1 + i % 5) for i in range(5000)]
        for chunk in small:
            tr.write(chunk)
        tr.writelines(small)
        reading = loop.run_in_executor(None, read_all, r)
        tr.close()
        assert await reading == head + b"".join(small) * 2
        assert await pr.lost is None

    run(main())


def test_write_pipe_write_eof_closes(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        tr.write(b"last")
        tr.write_eof()
        assert tr.is_closing()
        assert await pr.lost is None
        assert await loop.run_in_executor(None, read_all, r) == b"last"

    run(main())


def test_write_pipe_reader_closed_without_pending_data(loop, run, pipes):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, r = await pipes.write(Rec)
            tr.write(b"unread")
            pipes.close(r)
            assert await pr.lost is None
            assert tr.is_closing()
            assert calls == []

    run(main())


def test_write_pipe_reader_closed_with_pending_data(loop, run, pipes):
    async def main():
        with handler_calls(loop) as calls:
            tr, pr, r = await pipes.write(Rec)
            tr.write(payload(1 << 20))
            assert tr.get_write_buffer_size() > 0
            pipes.close(r)
            exc = await pr.lost
            assert isinstance(exc, BrokenPipeError)
            assert tr.get_write_buffer_size() == 0
            await iterations(5)
            assert calls == []  # OSErrors are not reported

    run(main())


def test_write_pipe_abort_drops_pending_data(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        data = payload(1 << 20)
        tr.write(data)
        tr.abort()
        assert tr.is_closing() and tr.get_write_buffer_size() == 0
        assert await pr.lost is None
        got = await loop.run_in_executor(None, read_all, r)
        assert len(got) < len(data) and got == data[:len(got)]

    run(main())


def test_write_pipe_flow_control(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        with pytest.raises(ValueError, match=r"^high \(1\) must be >= low \(2\) must be >= 0$"):
            tr.set_write_buffer_limits(high=1, low=2)
        data = payload(300_000)
        for i in range(0, len(data), 10_000):
            tr.write(data[i:i + 10_000])
        assert len(pr.pauses) == 1 and pr.pauses[0] > 1000 and pr.resumes == []
        reading = loop.run_in_executor(None, read_all, r)
        await pr.until(lambda: pr.resumes)
        assert len(pr.resumes) == 1 and pr.resumes[0] <= 250
        tr.close()
        assert await reading == data
        assert await pr.lost is None

    run(main())


def test_write_pipe_writes_after_close_are_dropped_then_logged(loop, run, pipes, caplog):
    message = "pipe closed by peer or os.write(pipe, data) raised exception."

    async def main():
        tr, pr, r = await pipes.write(Rec)
        close_then_drop_writes(tr, caplog, message)
        assert await pr.lost is None
        tr.write(b"dropped")
        assert len(warnings_from(caplog, message)) == 2
        assert await loop.run_in_executor(None, read_all, r) == b""

    run(main())


@pytest.mark.parametrize("how", ["close-flushing", "abort", "reader-closed"])
def test_write_pipe_writes_after_connection_lost_never_reach_a_reused_descriptor(
        loop, run, pipes, how):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        fd = tr.get_extra_info("pipe").fileno()
        if how == "close-flushing":
            data = payload(1 << 20)
            tr.write(data)
            reading = loop.run_in_executor(None, read_all, r)
            tr.close()
            assert await reading == data
        elif how == "abort":
            tr.abort()
        else:
            pipes.close(r)
        await pr.lost
        # The descriptor number is free again: another pipe's write end takes it.
        r2, w2 = os.pipe()
        if r2 == fd:  # the read end got it: move the read end elsewhere first
            r2, old = os.dup(r2), r2
            os.close(old)
        dup = None if w2 == fd else os.dup2(w2, fd)
        try:
            tr.write(b"leak")
            tr.writelines([b"leak"])
            await iterations(5)
            os.set_blocking(r2, False)
            with pytest.raises(BlockingIOError):
                os.read(r2, 100)
        finally:
            for x in {r2, w2, fd} if dup is not None else {r2, w2}:
                os.close(x)

    run(main())


def test_pipe_transports_on_sockets(loop, run):
    async def main():
        a, b = socket.socketpair()
        c, d = socket.socketpair()
        try:
            wt, wp = await loop.connect_write_pipe(Rec, a)
            rt, rp = await loop.connect_read_pipe(Rec, c)
            wt.write(b"to the socket")
            assert b.recv(100) == b"to the socket"
            b.close()  # the reader went away: seen through the socket's end-of-file
            assert await wp.lost is None
            d.sendall(b"from the socket")
            d.close()
            assert await rp.lost is None
            assert bytes(rp.data) == b"from the socket"
            assert collapse(rp.events) == ["made", "data", "eof", "lost"]
        finally:
            for s in (a, b, c, d):
                s.close()

    run(main())


def test_write_pipe_on_a_character_device(loop, run):
    async def main():
        with open(os.devnull, "wb", buffering=0) as f:
            tr, pr = await loop.connect_write_pipe(Rec, f)
            tr.write(b"x" * (1 << 20))
            assert tr.get_write_buffer_size() == 0
            tr.close()
            assert await pr.lost is None

    run(main())


def test_write_pipe_refuses_str(loop, run, pipes):
    async def main():
        tr, pr, r = await pipes.write(Rec)
        with pytest.raises(AssertionError):
            tr.write("text")
        tr.close()
        await pr.lost

    run(main())


@pytest.mark.parametrize("which", ["read", "write"])
def test_unclosed_pipe_transport_warns_when_collected_after_loop_close(loop, which):
    async def make():
        if which == "read":
            tr, pr, other = await read_pipe(loop, Rec)
        else:
            tr, pr, other = await write_pipe(loop, Rec)
        return weakref.ref(tr), tr.get_extra_info("pipe").fileno(), other

    ref, fd, other = loop.run_until_complete(make())
    loop.close()
    os.close(other)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
        gc.collect()
    assert ref() is None
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert len([m for m in messages if m.startswith("unclosed transport <")]) == 1
    # The pipe's file object is garbage in the same collection: it may warn first.
    assert all(m.startswith(("unclosed transport <", "unclosed file <")) for m in messages)
    with pytest.raises(OSError):
        os.fstat(fd)
