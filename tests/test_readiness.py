"""add_reader / remove_reader / add_writer / remove_writer."""

import asyncio
import os
import socket

import pytest

from conftest import run_on


async def wait_for_future(fut, timeout=5):
    return await asyncio.wait_for(fut, timeout)


async def spin(n=10):
    for _ in range(n):
        await asyncio.sleep(0)


def test_add_reader_fires_when_readable(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()

        def on_readable(sock, tag):
            data = sock.recv(100)
            if not fut.done():
                fut.set_result((data, tag))

        loop.add_reader(a, on_readable, a, "tag")
        loop.call_soon(b.send, b"ping")
        result = await wait_for_future(fut)
        assert loop.remove_reader(a) is True
        return result

    assert run_on(loop, main()) == (b"ping", "tag")


def test_add_reader_with_raw_fd_and_remove_by_object(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()
        loop.add_reader(a.fileno(), lambda: fut.done() or fut.set_result(a.recv(10)))
        b.send(b"raw")
        assert await wait_for_future(fut) == b"raw"
        # the same fd registered as an int can be removed via the object
        assert loop.remove_reader(a) is True
        assert loop.remove_reader(a.fileno()) is False

    run_on(loop, main())


def test_remove_unregistered_returns_false(loop, socketpair):
    a, b = socketpair()
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is False
    assert loop.remove_reader(a.fileno()) is False


def test_remove_returns_true_once(loop, socketpair):
    a, b = socketpair()
    loop.add_reader(a, print)
    loop.add_writer(a, print)
    assert loop.remove_reader(a) is True
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is True
    assert loop.remove_writer(a) is False


def test_reader_is_level_triggered(loop, socketpair):
    """Data left unread keeps the fd readable: the callback fires again."""
    a, b = socketpair()

    async def main():
        fut = loop.create_future()
        calls = [0]

        def on_readable():
            calls[0] += 1
            if calls[0] == 3:
                loop.remove_reader(a)
                fut.set_result(a.recv(100))

        loop.add_reader(a, on_readable)
        b.send(b"unread")
        return await wait_for_future(fut), calls[0]

    data, calls = run_on(loop, main())
    assert data == b"unread"
    assert calls == 3


def test_replacing_reader(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()
        old_calls = []
        loop.add_reader(a, old_calls.append, "old")
        loop.add_reader(a, lambda: fut.done() or fut.set_result(a.recv(10)))
        b.send(b"x")
        assert await wait_for_future(fut) == b"x"
        assert old_calls == []
        assert loop.remove_reader(a) is True
        assert loop.remove_reader(a) is False

    run_on(loop, main())


def test_add_writer_fires_when_writable(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()

        def on_writable(arg):
            loop.remove_writer(a)
            fut.set_result(arg)

        loop.add_writer(a, on_writable, "w")
        return await wait_for_future(fut)

    assert run_on(loop, main()) == "w"


def test_replacing_writer(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()
        old = []
        loop.add_writer(a, old.append, 1)
        loop.add_writer(a, lambda: fut.done() or fut.set_result("new"))
        assert await wait_for_future(fut) == "new"
        assert loop.remove_writer(a) is True
        assert old == []

    run_on(loop, main())


def test_reader_and_writer_on_same_fd(loop, socketpair):
    a, b = socketpair()

    async def main():
        reads = loop.create_future()
        wrote = loop.create_future()
        writes = []

        def on_writable():
            writes.append(1)
            if not wrote.done():
                wrote.set_result(None)

        loop.add_writer(a, on_writable)
        loop.add_reader(a, lambda: reads.done() or reads.set_result(a.recv(10)))
        await wait_for_future(wrote)
        assert loop.remove_writer(a) is True
        n = len(writes)
        b.send(b"both")
        assert await wait_for_future(reads) == b"both"
        await asyncio.sleep(0.01)
        assert len(writes) == n  # writer really removed, reader unaffected
        assert loop.remove_reader(a) is True

    run_on(loop, main())


def test_io_is_polled_on_every_iteration(loop, socketpair):
    """The stdlib polls for I/O (with a zero timeout) on every iteration, even
    while callbacks are ready: a ready fd's callback runs within two
    ``await asyncio.sleep(0)`` of being registered, however fast they are."""
    a, b = socketpair()

    async def main():
        fired = []
        loop.add_writer(a, fired.append, "w")
        for _ in range(2):
            await asyncio.sleep(0)
        loop.remove_writer(a)
        got = loop.create_future()
        loop.add_reader(a, lambda: got.done() or got.set_result(True))
        b.send(b"x")
        for _ in range(2):
            await asyncio.sleep(0)
        loop.remove_reader(a)
        return fired[:1], got.done()

    assert run_on(loop, main()) == (["w"], True)


def test_remove_reader_keeps_writer(loop, socketpair):
    a, b = socketpair()

    async def main():
        loop.add_reader(a, print)
        fut = loop.create_future()
        loop.add_writer(a, lambda: fut.done() or fut.set_result(True))
        assert loop.remove_reader(a) is True
        assert await wait_for_future(fut)
        assert loop.remove_writer(a) is True

    run_on(loop, main())


def test_writer_waits_while_buffer_full(loop, socketpair):
    a, b = socketpair()
    try:
        while True:
            a.send(b"x" * 65536)
    except BlockingIOError:
        pass

    async def main():
        fut = loop.create_future()
        loop.add_writer(a, lambda: fut.done() or fut.set_result("writable"))
        await spin(10)
        assert not fut.done()
        while True:  # drain the peer so that the buffer empties
            try:
                if not b.recv(1 << 20):
                    break
            except BlockingIOError:
                break
        res = await wait_for_future(fut)
        loop.remove_writer(a)
        return res

    assert run_on(loop, main()) == "writable"


def test_reader_removes_itself(loop, socketpair):
    a, b = socketpair()

    async def main():
        calls = []

        def once():
            calls.append(1)
            assert loop.remove_reader(a) is True

        loop.add_reader(a, once)
        b.send(b"never read")
        while not calls:
            await asyncio.sleep(0)
        await spin(10)
        assert calls == [1]

    run_on(loop, main())


def test_reader_on_pipe_sees_eof(loop):
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:

        async def main():
            chunks = []
            done = loop.create_future()

            def on_readable():
                data = os.read(r, 100)
                chunks.append(data)
                if not data:
                    loop.remove_reader(r)
                    done.set_result(None)

            loop.add_reader(r, on_readable)
            os.write(w, b"pipe data")
            loop.call_soon(os.close, w)
            await wait_for_future(done)
            return b"".join(chunks)

        assert run_on(loop, main()) == b"pipe data"
    finally:
        os.close(r)
        try:
            os.close(w)
        except OSError:
            pass


def test_reader_sees_peer_close(loop, socketpair):
    a, b = socketpair()

    async def main():
        fut = loop.create_future()
        loop.add_reader(a, lambda: fut.done() or fut.set_result(a.recv(10)))
        b.close()
        res = await wait_for_future(fut)
        loop.remove_reader(a)
        return res

    assert run_on(loop, main()) == b""


def test_many_readers(loop, socketpair):
    pairs = [socketpair() for _ in range(100)]

    async def main():
        futs = []
        for i, (a, b) in enumerate(pairs):
            fut = loop.create_future()
            futs.append(fut)
            loop.add_reader(a, lambda a=a, fut=fut: fut.done() or fut.set_result(a.recv(10)))
        for i, (a, b) in reversed(list(enumerate(pairs))):
            b.send(str(i).encode())
        got = await asyncio.wait_for(asyncio.gather(*futs), 5)
        for a, b in pairs:
            assert loop.remove_reader(a) is True
        return got

    assert run_on(loop, main()) == [str(i).encode() for i in range(100)]


def test_reader_callback_exception_is_reported_and_reader_stays(loop, socketpair):
    a, b = socketpair()
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        fut = loop.create_future()
        calls = [0]

        def on_readable():
            calls[0] += 1
            if calls[0] == 1:
                raise RuntimeError("reader failed")
            loop.remove_reader(a)
            fut.set_result(a.recv(10))

        loop.add_reader(a, on_readable)
        b.send(b"again")
        return await wait_for_future(fut)

    assert run_on(loop, main()) == b"again"
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], RuntimeError)
    assert "Exception in callback" in contexts[0]["message"]
    assert "handle" in contexts[0]


def test_reader_and_writer_callbacks_run_in_registration_context(loop, socketpair):
    import contextvars

    var = contextvars.ContextVar("rw_var", default="default")
    a, b = socketpair()

    async def main():
        seen = loop.create_future()
        seen_w = loop.create_future()
        var.set("at-registration")
        loop.add_reader(a, lambda: seen.done() or seen.set_result(var.get()))
        loop.add_writer(b, lambda: seen_w.done() or seen_w.set_result(var.get()))
        var.set("changed-later")
        b.send(b"x")
        res = await wait_for_future(seen), await wait_for_future(seen_w)
        loop.remove_reader(a)
        loop.remove_writer(b)
        return res

    assert run_on(loop, main()) == ("at-registration", "at-registration")


def test_reader_removed_by_earlier_callback_in_same_iteration(loop, socketpair):
    (a1, b1), (a2, b2) = socketpair(), socketpair()

    async def main():
        ran = []
        done = loop.create_future()

        def make(me, other_sock):
            def cb():
                ran.append(me)
                loop.remove_reader(me)
                loop.remove_reader(other_sock)  # the other one must not run now
                if not done.done():
                    loop.call_later(0.02, done.set_result, None)

            return cb

        loop.add_reader(a1, make(a1, a2))
        loop.add_reader(a2, make(a2, a1))
        b1.send(b"1")
        b2.send(b"2")
        await wait_for_future(done)
        return ran

    assert len(run_on(loop, main())) == 1


def test_busy_reader_does_not_starve_timers_or_callbacks(loop, socketpair):
    a, b = socketpair()

    async def main():
        calls = [0]

        def always_readable():  # never reads: level-triggered, fires every iteration
            calls[0] += 1

        loop.add_reader(a, always_readable)
        b.send(b"never drained")
        t0 = loop.time()
        await asyncio.sleep(0.02)
        elapsed = loop.time() - t0
        for _ in range(5):
            await asyncio.sleep(0)
        loop.remove_reader(a)
        return elapsed, calls[0]

    elapsed, calls = run_on(loop, main())
    assert elapsed < 2
    assert calls > 1


def test_callback_chain_does_not_starve_io_or_timers(loop, socketpair):
    a, b = socketpair()

    async def main():
        stop = [False]

        def spinner():
            if not stop[0]:
                loop.call_soon(spinner)

        loop.call_soon(spinner)
        try:
            got = loop.create_future()
            loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(10)))
            b.send(b"io")
            assert await wait_for_future(got) == b"io"
            loop.remove_reader(a)
            await asyncio.sleep(0.01)  # a timer fires despite the busy chain
        finally:
            stop[0] = True

    run_on(loop, main())


def test_busy_loop_sees_ready_io_within_two_iterations(loop, socketpair):
    # A chain of callbacks keeps every iteration busy; a descriptor that is ready is still
    # seen by the second iteration (the stdlib polls at every one; swordfish may skip
    # every other zero-timeout poll).
    a, b = socketpair()

    async def main():
        spins = [0]
        fired = loop.create_future()

        def spinner():  # one call per iteration
            if not fired.done():
                spins[0] += 1
                loop.call_soon(spinner)

        loop.call_soon(spinner)
        for _ in range(3):
            await asyncio.sleep(0)
        b.send(b"x")
        start = spins[0]
        loop.add_reader(a, lambda: fired.done() or fired.set_result(spins[0] - start))
        try:
            return await wait_for_future(fired)
        finally:
            loop.remove_reader(a)

    assert 1 <= run_on(loop, main()) <= 2


def test_writer_fires_when_pipe_reader_closed(loop):
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.close(r)
    try:

        async def main():
            fut = loop.create_future()
            loop.add_writer(w, lambda: fut.done() or fut.set_result("writable"))
            res = await wait_for_future(fut)
            assert loop.remove_writer(w) is True
            with pytest.raises(BrokenPipeError):
                os.write(w, b"x")
            return res

        assert run_on(loop, main()) == "writable"
    finally:
        os.close(w)


def test_socket_closed_while_sock_recv_pending(loop, socketpair):
    a, b = socketpair()
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        task = loop.create_task(loop.sock_recv(a, 10))
        await spin(3)
        a.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await spin(3)
        # the loop still works
        c, d = socketpair()
        d.send(b"fine")
        return await asyncio.wait_for(loop.sock_recv(c, 10), 5)

    assert run_on(loop, main()) == b"fine"
    assert contexts == []


# ------------------------------------------------------------------ errors


def test_regular_file_is_rejected(loop, tmp_path):
    p = tmp_path / "regular"
    p.write_bytes(b"data")
    with open(p, "rb") as f:
        with pytest.raises(OSError):  # epoll refuses regular files (EPERM)
            loop.add_reader(f, print)
        assert loop.remove_reader(f) is False


def test_negative_fd_is_value_error(loop):
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.add_reader(-1, print)
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.add_writer(-1, print)
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.remove_reader(-1)
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.remove_writer(-1)


@pytest.mark.parametrize("bad", [object(), "3", 1.5, None], ids=["object", "str", "float", "None"])
def test_bad_file_object_is_value_error(loop, bad):
    with pytest.raises(ValueError, match="Invalid file object"):
        loop.add_reader(bad, print)
    with pytest.raises(ValueError, match="Invalid file object"):
        loop.add_writer(bad, print)
    with pytest.raises(ValueError, match="Invalid file object"):
        loop.remove_reader(bad)


def test_object_with_bad_fileno(loop):
    class Weird:
        def fileno(self):
            return "nope"

    with pytest.raises(ValueError, match="Invalid file object"):
        loop.add_reader(Weird(), print)


def test_closed_socket_object_is_value_error(loop):
    s = socket.socket()
    s.close()  # fileno() is now -1
    with pytest.raises(ValueError):
        loop.add_reader(s, print)
    with pytest.raises(ValueError):
        loop.add_writer(s, print)


def test_closed_fd_is_os_error(loop):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        loop.add_reader(r, print)
    with pytest.raises(OSError):
        loop.add_writer(w, print)
    # nothing was left registered
    assert loop.remove_reader(r) is False
    assert loop.remove_writer(w) is False


def test_fd_closed_while_registered_can_still_be_removed(loop):
    r, w = os.pipe()
    try:
        loop.add_reader(r, print)
        os.close(r)
        assert loop.remove_reader(r) is True
    finally:
        os.close(w)


def test_closed_socket_is_removed_by_the_object_it_was_added_with(loop, socketpair):
    # Its fileno() is -1 once closed: the stdlib's selector finds it by identity.
    a, b = socketpair()
    loop.add_reader(a, print)
    a.close()
    assert loop.remove_reader(a) is True
    # Not registered any more: nothing to find it by.
    with pytest.raises(ValueError, match="^Invalid file descriptor: -1$"):
        loop.remove_reader(a)


def test_watchers_of_a_closed_and_reused_descriptor_are_not_carried_over(loop, socketpair):
    # A reader left on a descriptor that was closed: when its number comes back for a new
    # socket, changing the watch fails as in the stdlib (epoll dropped the old file), the
    # old reader is forgotten, and the new socket can be watched afresh.
    a, b = socketpair()
    fired = []
    loop.add_reader(a, fired.append, "stale")
    fd = a.fileno()
    a.close()
    c, d = socketpair()
    new = c if c.fileno() == fd else socket.socket(fileno=os.dup2(c.fileno(), fd))
    try:
        with pytest.raises(FileNotFoundError):
            loop.add_writer(new, fired.append, "writer")
        assert loop.remove_reader(fd) is False
        loop.add_writer(new, fired.append, "writer")
        loop.run_until_complete(asyncio.sleep(0.01))
        assert fired and set(fired) == {"writer"}
        assert loop.remove_writer(new) is True
    finally:
        new.close()


def test_add_reader_on_closed_loop(loop, socketpair):
    a, b = socketpair()
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_reader(a, print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_writer(a, print)
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is False
