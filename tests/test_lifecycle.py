"""Loop lifecycle: run_forever, run_until_complete, stop, close, asyncgens,
default executor shutdown, and the errors for misuse."""

import asyncio
import concurrent.futures
import gc
import os
import sys
import threading
import warnings

import pytest

from conftest import run_on, skip_asyncio_before


async def _noop():
    return None


# --------------------------------------------------------------- basic state


def test_new_loop_state(loop):
    assert not loop.is_running()
    assert not loop.is_closed()
    assert isinstance(loop, asyncio.AbstractEventLoop)


def test_run_until_complete_returns_coroutine_result(loop):
    async def main():
        await asyncio.sleep(0)
        return 42

    assert loop.run_until_complete(main()) == 42
    assert not loop.is_running()


def test_run_until_complete_accepts_future_and_task(loop):
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "fut")
    assert loop.run_until_complete(fut) == "fut"
    task = loop.create_task(asyncio.sleep(0, "task"))
    assert loop.run_until_complete(task) == "task"


def test_run_until_complete_accepts_awaitable(loop):
    class Awaitable:
        def __await__(self):
            yield from asyncio.sleep(0).__await__()
            return "awaited"

    assert loop.run_until_complete(Awaitable()) == "awaited"


def test_run_until_complete_done_future(loop):
    fut = loop.create_future()
    fut.set_result(7)
    assert loop.run_until_complete(fut) == 7


def test_run_until_complete_rejects_non_awaitable(loop):
    with pytest.raises(TypeError):
        loop.run_until_complete(42)
    assert not loop.is_running()


def test_run_until_complete_future_of_other_loop(loop, loop_factory):
    other = loop_factory()
    try:
        fut = other.create_future()
        with pytest.raises(ValueError):
            loop.run_until_complete(fut)
    finally:
        other.close()


def test_run_until_complete_propagates_exception(loop):
    class Boom(Exception):
        pass

    async def main():
        await asyncio.sleep(0)
        raise Boom("x")

    with pytest.raises(Boom, match="x"):
        loop.run_until_complete(main())
    assert not loop.is_running()
    # the loop remains usable
    assert loop.run_until_complete(asyncio.sleep(0, 1)) == 1


def test_run_until_complete_stopped_before_done(loop):
    async def main():
        loop.stop()
        await asyncio.sleep(10)

    task = loop.create_task(main())
    with pytest.raises(RuntimeError, match="Event loop stopped before Future completed."):
        loop.run_until_complete(task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)


def test_run_until_complete_twice(loop):
    assert loop.run_until_complete(asyncio.sleep(0, "a")) == "a"
    assert loop.run_until_complete(asyncio.sleep(0, "b")) == "b"


def test_is_running_inside_callbacks_and_coroutines(loop):
    seen = []
    loop.call_soon(lambda: seen.append(loop.is_running()))

    async def main():
        seen.append(loop.is_running())
        seen.append(asyncio.get_running_loop() is loop)
        seen.append(asyncio.get_event_loop() is loop)

    loop.run_until_complete(main())
    assert seen == [True, True, True, True]
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


# ---------------------------------------------------------------- stop()


def test_stop_from_callback_ends_run_forever(loop):
    calls = []
    loop.call_soon(calls.append, 1)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1]
    assert not loop.is_running()


def test_stop_before_run_forever_runs_one_iteration(loop):
    calls = []

    def first():
        calls.append("first")
        loop.call_soon(calls.append, "later")

    loop.call_soon(first)
    loop.stop()
    loop.run_forever()
    # callbacks already scheduled ran; those they scheduled did not
    assert calls == ["first"]
    loop.stop()
    loop.run_forever()
    assert calls == ["first", "later"]


def test_stop_runs_rest_of_current_batch(loop):
    calls = []

    def a():
        calls.append("a")
        loop.stop()
        loop.call_soon(calls.append, "c")

    loop.call_soon(a)
    loop.call_soon(calls.append, "b")
    loop.run_forever()
    assert calls == ["a", "b"]
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["a", "b", "c"]


def test_stop_via_timer(loop):
    loop.call_later(0.01, loop.stop)
    t0 = loop.time()
    loop.run_forever()
    assert loop.time() - t0 >= 0.01


def test_run_forever_can_restart(loop):
    for i in range(3):
        calls = []
        loop.call_soon(calls.append, i)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert calls == [i]


# ------------------------------------------------------- misuse errors


def test_run_forever_while_running(loop):
    errors = []

    def cb():
        try:
            loop.run_forever()
        except RuntimeError as e:
            errors.append(str(e))
        loop.stop()

    loop.call_soon(cb)
    loop.run_forever()
    assert errors == ["This event loop is already running"]


def test_run_until_complete_while_running(loop):
    async def main():
        coro = _noop()
        try:
            with pytest.raises(RuntimeError, match="This event loop is already running"):
                loop.run_until_complete(coro)
        finally:
            coro.close()

    run_on(loop, main())


@pytest.mark.parametrize("outer_is_impl", [True, False], ids=["impl-outer", "impl-inner"])
def test_cannot_run_while_another_loop_runs(loop_factory, outer_is_impl):
    a = loop_factory()
    b = asyncio.new_event_loop()
    outer, inner = (a, b) if outer_is_impl else (b, a)
    msg = "Cannot run the event loop while another loop is running"
    try:

        async def main():
            coro = _noop()
            try:
                with pytest.raises(RuntimeError, match=msg):
                    inner.run_until_complete(coro)
            finally:
                coro.close()
            assert asyncio.get_running_loop() is outer
            with pytest.raises(RuntimeError, match=msg):
                inner.run_forever()
            assert not inner.is_running()
            if asyncio.events._get_running_loop() is not outer:
                # CPython 3.13.0's run_forever() clears the running loop even
                # when it refuses to start; only tolerate that from the stdlib.
                assert type(inner).__module__.startswith("asyncio."), type(inner)
                asyncio.events._set_running_loop(outer)

        outer.run_until_complete(main())
        # the inner loop is still usable afterwards
        assert inner.run_until_complete(asyncio.sleep(0, 5)) == 5
    finally:
        a.close()
        b.close()


def test_closed_loop_rejects_everything(loop):
    loop.close()
    assert loop.is_closed()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_forever()
    coro = _noop()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_until_complete(coro)
    coro.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon(print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_later(1, print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_at(loop.time() + 1, print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon_threadsafe(print)
    coro = _noop()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.create_task(coro)
    coro.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_in_executor(None, print)


def test_stop_from_other_thread(loop):
    started = threading.Event()

    def stopper():
        started.wait(5)
        loop.call_soon_threadsafe(loop.stop)

    th = threading.Thread(target=stopper)
    th.start()
    loop.call_soon(started.set)
    loop.call_later(30, loop.stop)  # never reached unless the wake-up is lost
    t0 = loop.time()
    loop.run_forever()
    th.join()
    assert loop.time() - t0 < 5


def test_unclosed_loop_warns_when_collected(loop_factory):
    lp = loop_factory()
    with pytest.warns(ResourceWarning, match="unclosed event loop"):
        del lp
        gc.collect()


def test_coroutine_origin_tracking_in_debug(loop):
    loop.set_debug(True)
    before = sys.get_coroutine_origin_tracking_depth()
    seen = []

    async def main():
        seen.append(sys.get_coroutine_origin_tracking_depth())

    loop.run_until_complete(main())
    assert seen[0] > 0
    assert sys.get_coroutine_origin_tracking_depth() == before


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_loops_do_not_leak_file_descriptors(loop_factory):
    lp = loop_factory()  # warm up anything created once per process
    lp.run_until_complete(asyncio.sleep(0))
    lp.close()
    before = _open_fds()
    for _ in range(50):
        lp = loop_factory()
        lp.call_soon_threadsafe(lambda: None)
        lp.run_until_complete(asyncio.sleep(0.0001))
        lp.close()
    assert _open_fds() - before <= 2


def test_close_leaves_registered_fds_open(loop, socketpair):
    a, b = socketpair()
    loop.add_reader(a, print)
    loop.add_writer(b, print)
    loop.close()
    assert a.fileno() >= 0 and b.fileno() >= 0
    b.send(b"still open")
    assert a.recv(100) == b"still open"


def test_close_is_idempotent(loop):
    loop.close()
    loop.close()
    assert loop.is_closed()
    # introspection still works on a closed loop
    assert isinstance(loop.time(), float)
    assert loop.is_running() is False
    assert loop.get_debug() in (True, False)


def test_close_running_loop_raises(loop):
    async def main():
        with pytest.raises(RuntimeError, match="Cannot close a running event loop"):
            loop.close()
        assert not loop.is_closed()

    run_on(loop, main())


def test_close_drops_pending_callbacks(loop):
    calls = []
    loop.call_soon(calls.append, 1)
    loop.call_later(0, calls.append, 2)
    loop.close()
    assert calls == []


def test_loops_in_two_threads(loop_factory):
    results = {}
    barrier = threading.Barrier(2, timeout=10)

    def worker(n):
        lp = loop_factory()
        try:

            async def main():
                barrier.wait()  # both loops are running now
                await asyncio.sleep(0.01)
                return asyncio.get_running_loop() is lp

            results[n] = lp.run_until_complete(main())
        finally:
            lp.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert results == {0: True, 1: True}


# ------------------------------------------------- BaseException propagation


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("source", ["call_soon", "call_later", "reader", "threadsafe"])
def test_base_exception_in_callback_propagates(loop, socketpair, exc, source):
    calls = []
    hooks_before = sys.get_asyncgen_hooks()

    def raiser():
        raise exc()

    a, b = socketpair()
    loop.call_soon(calls.append, 1)
    if source == "call_soon":
        loop.call_soon(raiser)
    elif source == "call_later":
        loop.call_later(0.001, raiser)
    elif source == "threadsafe":
        loop.call_soon_threadsafe(raiser)
    else:
        loop.add_reader(a, raiser)
        b.send(b"x")
    loop.call_later(5, loop.stop)  # safety net
    with pytest.raises(exc):
        loop.run_forever()
    assert not loop.is_running()
    assert calls == [1]
    assert asyncio.events._get_running_loop() is None
    assert sys.get_asyncgen_hooks() == hooks_before
    loop.remove_reader(a)
    # the loop can run again afterwards
    assert loop.run_until_complete(asyncio.sleep(0, "ok")) == "ok"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_base_exception_in_task_propagates(loop, exc):
    async def main():
        await asyncio.sleep(0)
        raise exc()

    with pytest.raises(exc):
        loop.run_until_complete(main())
    assert not loop.is_running()


# ------------------------------------------------------------- asyncgens


def test_asyncgen_hooks_installed_only_while_running(loop):
    before = sys.get_asyncgen_hooks()
    seen = []

    async def main():
        seen.append(sys.get_asyncgen_hooks())

    loop.run_until_complete(main())
    hooks = seen[0]
    assert hooks.firstiter is not None
    assert hooks.finalizer is not None
    assert sys.get_asyncgen_hooks() == before


def test_shutdown_asyncgens_closes_suspended_generators(loop):
    events = []

    async def agen():
        try:
            events.append("start")
            yield 1
            yield 2
        finally:
            events.append("finally")

    gens = []

    async def main():
        g = agen()
        gens.append(g)  # keep it alive so that only shutdown can close it
        assert await g.__anext__() == 1

    loop.run_until_complete(main())
    assert events == ["start"]
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert events == ["start", "finally"]


def test_asyncgen_finalized_by_loop_when_collected(loop):
    async def main():
        done = asyncio.Event()

        async def agen():
            try:
                yield 1
                yield 2
            finally:
                done.set()

        g = agen()
        assert await g.__anext__() == 1
        del g
        gc.collect()
        await asyncio.wait_for(done.wait(), 5)

    run_on(loop, main())


def test_shutdown_asyncgens_reports_errors(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class Boom(Exception):
        pass

    async def agen():
        try:
            yield 1
        finally:
            raise Boom()

    gens = []

    async def main():
        g = agen()
        gens.append(g)
        await g.__anext__()

    loop.run_until_complete(main())
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert len(contexts) == 1
    ctx = contexts[0]
    assert isinstance(ctx["exception"], Boom)
    assert ctx["asyncgen"] is gens[0]
    assert "an error occurred during closing of asynchronous generator" in ctx["message"]


def test_asyncgen_after_shutdown_warns(loop):
    loop.run_until_complete(loop.shutdown_asyncgens())

    async def agen():
        yield 1

    async def main():
        g = agen()
        with pytest.warns(ResourceWarning, match="shutdown_asyncgens"):
            await g.__anext__()
        await g.aclose()

    loop.run_until_complete(main())


# ------------------------------------------------------ default executor


def test_shutdown_default_executor_without_executor(loop):
    loop.run_until_complete(loop.shutdown_default_executor())


def test_shutdown_default_executor(loop):
    idents = []

    async def main():
        await loop.run_in_executor(None, lambda: idents.append(threading.get_ident()))
        await loop.shutdown_default_executor()

    run_on(loop, main())
    assert idents and idents[0] != threading.get_ident()
    with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
        loop.run_in_executor(None, print)


def test_shutdown_default_executor_waits_for_running_work(loop):
    release = threading.Event()
    finished = []

    def work():
        release.wait(10)
        finished.append(True)

    async def main():
        fut = loop.run_in_executor(None, work)
        loop.call_later(0.05, release.set)
        await loop.shutdown_default_executor()
        assert finished == [True]
        await fut

    run_on(loop, main())


def _stdlib_timeout_bounds_the_wait():
    # Early 3.12 releases only applied the timeout to a thread.join() *after*
    # waiting for the executor without a bound; the documented behaviour
    # (warn and stop waiting once the timeout expires) came later.
    import inspect

    try:
        src = inspect.getsource(asyncio.BaseEventLoop.shutdown_default_executor)
    except (OSError, TypeError):
        return False
    return "timeouts.timeout" in src


def test_shutdown_default_executor_timeout(loop, impl):
    # The stdlib only grew the timeout parameter in 3.12; swordfish takes it
    # on every version.
    skip_asyncio_before(impl, (3, 12), "shutdown_default_executor(timeout)")
    if impl == "asyncio" and not _stdlib_timeout_bounds_the_wait():
        pytest.skip("this stdlib's shutdown_default_executor does not bound the wait")
    release = threading.Event()

    async def main():
        fut = loop.run_in_executor(None, release.wait, 10)
        t0 = loop.time()
        with pytest.warns(RuntimeWarning, match="within 0.05 seconds"):
            await loop.shutdown_default_executor(timeout=0.05)
        elapsed = loop.time() - t0
        release.set()
        await fut
        return elapsed

    try:
        elapsed = run_on(loop, main())
    finally:
        release.set()
    assert 0.05 <= elapsed < 5


def test_shutdown_default_executor_timeout_not_reached(loop, impl):
    skip_asyncio_before(impl, (3, 12), "shutdown_default_executor(timeout)")

    async def main():
        await loop.run_in_executor(None, lambda: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            await loop.shutdown_default_executor(5)  # positional, as asyncio.Runner passes it

    run_on(loop, main())


def test_close_shuts_down_default_executor_without_waiting(loop):
    calls = []

    class Recorder(concurrent.futures.ThreadPoolExecutor):
        def shutdown(self, wait=True, **kwargs):
            calls.append(wait)
            super().shutdown(wait=wait, **kwargs)

    ex = Recorder(1)
    loop.set_default_executor(ex)
    loop.run_until_complete(loop.run_in_executor(None, lambda: None))
    loop.close()
    assert calls == [False]
    ex.shutdown(wait=True)
