"""Differential tests of swordfish's native ``Future`` and ``Task`` against the C types under
asyncio's own APIs (TaskGroup, timeouts, wait_for, shield, gather, wait, queues, locks and
events, executors, the runner) and mixed with the C types (tests/differential.py runs each
scenario on both loops and compares the transcripts)."""

import asyncio
import concurrent.futures
import gc

from conftest import run_iterations
from differential import (
    attempt, c_future, c_task, cancellation, chain, ctx_summary, differential, exc, never, noop,
    PY, r, record_handler, since,
)


# ------------------------------------------------------------------ mixing native and C types


def awaited_across_types(loop, make_task, fut, value):
    """A task of one kind awaiting a future of the other, to its result."""

    async def body(fut):
        return ("got", await fut)

    t = make_task(body(fut))
    run_iterations(loop, 2)
    out = [t._fut_waiter is fut, len(fut._callbacks), fut._asyncio_future_blocking]
    fut.set_result(value)
    out.append(loop.run_until_complete(t))
    return out


def cancelled_across_types(loop, make_task, fut, msg):
    """A task of one kind cancelled while it awaits a future of the other."""

    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            seen.append(exc(e))
            raise

    seen = []
    t = make_task(body(fut))
    run_iterations(loop, 2)
    out = [t.cancel(msg), fut.cancelled(), fut._cancel_message]
    run_iterations(loop, 3)
    out += [seen, t.cancelled()]
    out.append(cancellation(t.result))
    return out


@differential
def test_c_task_awaiting_loop_future(loop):
    return awaited_across_types(loop, lambda c: c_task(loop, c), loop.create_future(), "from-loop-future")


@differential
def test_c_task_awaiting_loop_future_cancelled(loop):
    return cancelled_across_types(loop, lambda c: c_task(loop, c), loop.create_future(), "c-task-msg")


@differential
def test_loop_task_awaiting_c_future(loop):
    return awaited_across_types(loop, loop.create_task, c_future(loop), "from-c-future")


@differential
def test_loop_task_awaiting_c_future_cancelled(loop):
    return cancelled_across_types(loop, loop.create_task, c_future(loop), "loop-task-msg")


@differential
def test_c_future_cancelled_under_a_loop_task(loop):
    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            return ("caught", exc(e))

    f = c_future(loop)
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    f.cancel("future-side")
    return [loop.run_until_complete(t), t.cancelled()]


@differential
def test_c_task_and_loop_task_awaiting_each_other(loop):
    async def leaf(tag):
        await asyncio.sleep(0)
        return tag

    async def via(t):
        return ("via", await t)

    native_leaf = loop.create_task(leaf("native-leaf"))
    c_outer = c_task(loop, via(native_leaf))
    c_leaf = c_task(loop, leaf("c-leaf"))
    native_outer = loop.create_task(via(c_leaf))
    return loop.run_until_complete(asyncio.gather(c_outer, native_outer))


@differential
def test_c_task_and_loop_task_cancellation_across(loop):
    async def leaf():
        await loop.create_future()

    async def via(t):
        try:
            await t
        except asyncio.CancelledError as e:
            return ("via-caught", chain(e))

    native_leaf = loop.create_task(leaf())
    c_outer = c_task(loop, via(native_leaf))
    c_leaf = c_task(loop, leaf())
    native_outer = loop.create_task(via(c_leaf))
    run_iterations(loop, 3)
    native_leaf.cancel("native-leaf")
    c_leaf.cancel("c-leaf")
    res = loop.run_until_complete(asyncio.gather(c_outer, native_outer))
    c_outer2 = c_task(loop, via(native_leaf))
    native_outer2 = loop.create_task(via(c_leaf))
    res2 = loop.run_until_complete(asyncio.gather(c_outer2, native_outer2))
    return [res, res2]


@differential
def test_c_task_cancelling_a_loop_task_it_awaits(loop):
    async def leaf():
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            return "leaf-swallowed"

    async def via(t):
        return await t

    native_leaf = loop.create_task(leaf())
    c_outer = c_task(loop, via(native_leaf))
    run_iterations(loop, 3)
    out = [c_outer.cancel("outer")]
    if PY >= (3, 11):
        out += [native_leaf.cancelling(), c_outer.cancelling()]
    run_iterations(loop, 4)
    out += [native_leaf.result(), c_outer.done(), c_outer.cancelled()]
    if c_outer.done() and not c_outer.cancelled():
        out.append(attempt(c_outer.result))
    return out


# ------------------------------------------------------------------ asyncio APIs on top


@since(3, 11)
@differential
def test_taskgroup_child_failure_cancels_siblings(loop):
    async def ok(tag):
        await asyncio.sleep(0)
        return tag

    async def boom():
        await asyncio.sleep(0)
        raise ValueError("child failed")

    async def sleeper():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("sleeper-cancelled")
            raise

    events = []

    async def main():
        children = []
        try:
            async with asyncio.TaskGroup() as tg:
                children.append(tg.create_task(ok("a"), name="ok"))
                children.append(tg.create_task(boom(), name="boom"))
                children.append(tg.create_task(sleeper(), name="sleeper"))
        except BaseExceptionGroup as eg:  # noqa: F821 (3.11+)
            events.append(("eg", type(eg).__name__, [exc(e) for e in eg.exceptions]))
        me = asyncio.current_task()
        events.append(("states", [c._state for c in children], me.cancelling()))
        return events

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_taskgroup_cancelled_from_outside(loop):
    async def child(i):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError as e:
            children.append((i, exc(e)))
            raise

    events = []
    children = []

    async def main():
        async with asyncio.TaskGroup() as tg:
            tg.create_task(child(1))
            tg.create_task(child(2))
            await asyncio.sleep(3600)

    t = loop.create_task(main())
    run_iterations(loop, 3)
    t.cancel("outside")
    try:
        loop.run_until_complete(t)
    except asyncio.CancelledError as e:
        events.append(("caller", chain(e)))
    events.append((t.cancelled(), t.cancelling()))
    return [sorted(children), events]


@since(3, 11)
@differential
def test_taskgroup_all_succeed(loop):
    async def child(i):
        for _ in range(i):
            await asyncio.sleep(0)
        return i * 10

    async def main():
        async with asyncio.TaskGroup() as tg:
            ts = [tg.create_task(child(i)) for i in range(4)]
        return [t.result() for t in ts]

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_timeout_expiring(loop):
    async def main():
        out = []
        try:
            async with asyncio.timeout(0) as cm:
                await loop.create_future()
        except TimeoutError as e:
            out.append((exc(e), [link[0] for link in chain(e)[1:]], cm.expired()))
        me = asyncio.current_task()
        out.append((me.cancelling(), me._must_cancel))
        return out

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_timeout_not_expiring(loop):
    async def main():
        async with asyncio.timeout(3600) as cm:
            await asyncio.sleep(0)
            value = "in-time"
        me = asyncio.current_task()
        return [value, cm.expired(), me.cancelling()]

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_nested_timeouts_inner_expires(loop):
    async def main():
        out = []
        async with asyncio.timeout(3600) as outer:
            try:
                async with asyncio.timeout(0) as inner:
                    await loop.create_future()
            except TimeoutError:
                out.append(("inner", inner.expired(), outer.expired()))
            out.append(asyncio.current_task().cancelling())
            await asyncio.sleep(0)
        out.append(("outer", outer.expired()))
        return out

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_nested_timeouts_outer_expires(loop):
    async def main():
        out = []
        try:
            async with asyncio.timeout(0) as outer:
                async with asyncio.timeout(3600) as inner:
                    await loop.create_future()
        except TimeoutError:
            out.append(("outer", inner.expired(), outer.expired()))
        out.append(asyncio.current_task().cancelling())
        return out

    return loop.run_until_complete(main())


@since(3, 11)
@differential
def test_timeout_and_outside_cancel_together(loop):
    async def main():
        try:
            async with asyncio.timeout(0):
                asyncio.current_task().cancel("outside")
                await loop.create_future()
        except TimeoutError:
            return "timeout"
        except asyncio.CancelledError as e:
            return ("cancelled", exc(e), asyncio.current_task().cancelling())

    return loop.run_until_complete(main())


@differential
def test_wait_for(loop):
    async def main():
        out = []
        f = loop.create_future()
        loop.call_soon(f.set_result, "fast")
        out.append(await asyncio.wait_for(f, 3600))
        g = loop.create_future()
        try:
            await asyncio.wait_for(g, 0)
        except asyncio.TimeoutError as e:
            out.append((type(e).__name__, g.cancelled()))

        async def slow():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                out.append("slow-cancelled")
                raise

        try:
            await asyncio.wait_for(slow(), 0)
        except asyncio.TimeoutError as e:
            out.append(type(e).__name__)
        out.append(await asyncio.wait_for(asyncio.sleep(0, "coro-result"), None))
        return out

    return loop.run_until_complete(main())


@differential
def test_wait_for_cancelled_from_outside(loop):
    inner_fut = []

    async def main():
        f = loop.create_future()
        inner_fut.append(f)
        try:
            await asyncio.wait_for(f, 3600)
        except asyncio.CancelledError as e:
            return ("cancelled", exc(e), f.cancelled())

    t = loop.create_task(main())
    run_iterations(loop, 3)
    t.cancel("wf")
    return [loop.run_until_complete(t), t.cancelled()]


@differential
def test_shield(loop):
    events = []

    async def inner(fut):
        value = await fut
        events.append(("inner-done", value))
        return value

    async def outer(t):
        try:
            return await asyncio.shield(t)
        except asyncio.CancelledError as e:
            events.append(("outer-cancelled", exc(e)))
            raise

    f = loop.create_future()
    ti = loop.create_task(inner(f))
    to = loop.create_task(outer(ti))
    run_iterations(loop, 3)
    to.cancel("shielded")
    run_iterations(loop, 3)
    events.append((to.cancelled(), ti.done()))
    f.set_result("kept")
    events.append(loop.run_until_complete(ti))
    return events


@differential
def test_gather_return_exceptions_with_cancelled_children(loop):
    async def ok():
        await asyncio.sleep(0)
        return "ok"

    async def fails():
        await asyncio.sleep(0)
        raise KeyError("gathered")

    async def waits():
        await loop.create_future()

    async def main():
        c = loop.create_task(waits())
        await asyncio.sleep(0)
        c.cancel("child-msg")
        results = await asyncio.gather(ok(), fails(), c, return_exceptions=True)
        return [r(x) if not isinstance(x, BaseException) else chain(x) for x in results]

    return loop.run_until_complete(main())


@differential
def test_gather_without_return_exceptions_cancelled_child(loop):
    async def waits():
        await loop.create_future()

    async def main():
        c = loop.create_task(waits())
        other = loop.create_task(waits())
        await asyncio.sleep(0)
        c.cancel("child-msg")
        try:
            await asyncio.gather(c, other)
        except asyncio.CancelledError as e:
            result = ("cancelled", chain(e), other.done())
        other.cancel()
        return result

    return loop.run_until_complete(main())


@differential
def test_gather_cancelled_parent(loop):
    async def child(i):
        try:
            await loop.create_future()
        except asyncio.CancelledError as e:
            events.append((i, exc(e)))
            raise

    events = []

    async def main():
        g = asyncio.gather(child(1), child(2))
        await asyncio.sleep(0)
        g.cancel("gather-cancel")
        try:
            await g
        except asyncio.CancelledError as e:
            events.append(("awaiter", chain(e)))
        return sorted(map(repr, events))

    return loop.run_until_complete(main())


@differential
def test_wait_first_completed(loop):
    async def main():
        a = loop.create_future()
        b = loop.create_task(asyncio.sleep(0, "b"))
        c = loop.create_task(never(loop))
        done, pending = await asyncio.wait({a, b, c}, return_when=asyncio.FIRST_COMPLETED)
        out = [sorted(r(x.result()) for x in done), len(pending), a in pending, c in pending]
        a.set_result("a")
        done2, pending2 = await asyncio.wait({a, c}, timeout=0)
        out += [len(done2), len(pending2), a._callbacks, c._callbacks]
        c.cancel()
        return out

    return loop.run_until_complete(main())


@differential
def test_as_completed(loop):
    async def delayed(n, value):
        for _ in range(n):
            await asyncio.sleep(0)
        return value

    async def main():
        out = []
        for nxt in asyncio.as_completed([delayed(3, "c"), delayed(1, "a"), delayed(2, "b")]):
            out.append(await nxt)
        return out

    return loop.run_until_complete(main())


@differential
def test_queue_get_cancelled_then_put(loop):
    async def main():
        q = asyncio.Queue()
        g1 = loop.create_task(q.get())
        g2 = loop.create_task(q.get())
        await asyncio.sleep(0)
        g1.cancel("q")
        await asyncio.sleep(0)
        q.put_nowait("item")
        got = await g2
        return [g1.cancelled(), got, q.qsize(), q.empty()]

    return loop.run_until_complete(main())


@differential
def test_queue_put_cancelled_on_full_queue(loop):
    async def main():
        q = asyncio.Queue(maxsize=1)
        q.put_nowait(1)
        p1 = loop.create_task(q.put(2))
        p2 = loop.create_task(q.put(3))
        await asyncio.sleep(0)
        p1.cancel()
        await asyncio.sleep(0)
        items = [q.get_nowait()]
        await asyncio.sleep(0)
        items.append(q.get_nowait())
        return [p1.cancelled(), p2.done(), items, q.qsize()]

    return loop.run_until_complete(main())


@differential
def test_lock_waiter_cancelled(loop):
    order = []

    async def worker(lock, i):
        try:
            async with lock:
                order.append(i)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            order.append(("cancelled", i))
            raise

    async def main():
        lock = asyncio.Lock()
        await lock.acquire()
        ts = [loop.create_task(worker(lock, i)) for i in range(3)]
        await asyncio.sleep(0)
        ts[1].cancel()
        lock.release()
        await asyncio.gather(*ts, return_exceptions=True)
        return [order, lock.locked(), [t.cancelled() for t in ts]]

    return loop.run_until_complete(main())


@differential
def test_lock_cancelled_right_after_being_woken(loop):
    async def main():
        lock = asyncio.Lock()
        await lock.acquire()
        a = loop.create_task(lock.acquire())
        b = loop.create_task(lock.acquire())
        await asyncio.sleep(0)
        lock.release()
        a.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        out = [a.cancelled(), b.done(), lock.locked()]
        if b.done():
            lock.release()
        return out

    return loop.run_until_complete(main())


@differential
def test_event_wait_cancelled(loop):
    async def main():
        ev = asyncio.Event()
        w1 = loop.create_task(ev.wait())
        w2 = loop.create_task(ev.wait())
        await asyncio.sleep(0)
        w1.cancel("ev")
        await asyncio.sleep(0)
        ev.set()
        r2 = await w2
        return [w1.cancelled(), r2, ev.is_set(), await ev.wait()]

    return loop.run_until_complete(main())


@differential
def test_condition_wait_cancelled_and_notify(loop):
    events = []

    async def waiter(cond, i):
        async with cond:
            try:
                await cond.wait()
                events.append(("woken", i, cond.locked()))
            except asyncio.CancelledError:
                events.append(("cancelled", i, cond.locked()))
                raise

    async def main():
        cond = asyncio.Condition()
        ts = [loop.create_task(waiter(cond, i)) for i in range(3)]
        for _ in range(3):
            await asyncio.sleep(0)
        ts[0].cancel()
        async with cond:
            cond.notify(1)
        await asyncio.gather(*ts[:2], return_exceptions=True)
        async with cond:
            cond.notify_all()
        await asyncio.gather(*ts, return_exceptions=True)
        return [events, [t.cancelled() for t in ts]]

    return loop.run_until_complete(main())


@differential
def test_semaphore_waiter_cancelled(loop):
    async def main():
        sem = asyncio.Semaphore(1)
        await sem.acquire()
        a = loop.create_task(sem.acquire())
        b = loop.create_task(sem.acquire())
        await asyncio.sleep(0)
        a.cancel()
        sem.release()
        for _ in range(3):
            await asyncio.sleep(0)
        return [a.cancelled(), b.done(), sem.locked(), sem._value]

    return loop.run_until_complete(main())


@differential
def test_run_in_executor_results_and_exceptions(loop):
    def work(x):
        return x * 2

    def fail():
        raise KeyError("in thread")

    async def main():
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            fut = loop.run_in_executor(pool, work, 21)
            out = [type(fut).__name__, isinstance(fut, asyncio.Future), await fut]
            try:
                await loop.run_in_executor(pool, fail)
            except KeyError as e:
                out.append(exc(e))
        return out

    return loop.run_until_complete(main())


@differential
def test_run_until_complete_of_a_loop_future(loop):
    f = loop.create_future()
    loop.call_soon(f.set_result, "ruc")
    out = [loop.run_until_complete(f), f._callbacks]
    g = loop.create_future()
    loop.call_soon(g.set_exception, ValueError("ruc-fail"))
    out.append(attempt(loop.run_until_complete, g))
    return out


@since(3, 11)
@differential
def test_runner_cancels_leftover_tasks(loop, factory):
    events = []

    async def leftover_clean():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("clean-cancelled")
            raise

    async def leftover_fails():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed")

    async def main():
        lp = asyncio.get_running_loop()
        lp.set_exception_handler(lambda l, ctx: events.append(ctx_summary(ctx)))
        kept.append(lp.create_task(leftover_clean(), name="clean"))
        kept.append(lp.create_task(leftover_fails(), name="fails"))
        await asyncio.sleep(0)
        return "main-result"

    kept = []
    with asyncio.Runner(loop_factory=factory) as runner:
        events.append(runner.run(main()))
    events.append([t._state for t in kept])
    return events


@since(3, 11)
@differential
def test_runner_run_cancelled_main(loop, factory):
    async def main():
        asyncio.current_task().cancel("main-cancel")
        await asyncio.sleep(0)

    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            runner.run(main())
        except asyncio.CancelledError as e:
            return chain(e)


# ------------------------------------------------------------------ more task behaviour


@differential
def test_task_result_and_exception_before_done(loop):
    t = loop.create_task(noop())
    out = [attempt(t.result), attempt(t.exception), t.done(), t.cancelled()]
    loop.run_until_complete(t)
    out += [attempt(t.result), attempt(t.exception)]
    return out


@differential
def test_task_done_callbacks(loop):
    got = []

    async def body():
        await asyncio.sleep(0)
        return "tv"

    def cb(name):
        return lambda task: got.append((name, task is t, task.result(), asyncio.current_task()))

    t = loop.create_task(body())
    first, second, third = cb("a"), cb("b"), cb("c")
    t.add_done_callback(first)
    t.add_done_callback(second)
    t.add_done_callback(third)
    out = [t.remove_done_callback(second), len(t._callbacks)]
    loop.run_until_complete(t)
    run_iterations(loop, 2)
    t.add_done_callback(cb("late"))
    run_iterations(loop, 2)
    return out + [got]


@differential
def test_task_done_callback_raising_is_reported(loop):
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(
        (sorted(ctx), exc(ctx.get("exception")), ctx["message"].split(" ")[:3])))

    def bad(fut):
        raise KeyError("in callback")

    f = loop.create_future()
    f.add_done_callback(bad)
    t = loop.create_task(noop())
    t.add_done_callback(bad)
    f.set_result(None)
    loop.run_until_complete(t)
    run_iterations(loop, 2)
    return seen


@differential
def test_task_cancel_after_awaited_future_failed_before_resume(loop):
    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            return ("cancelled", chain(e))
        except ValueError as e:
            return ("value-error", exc(e))

    seen = record_handler(loop)
    f = loop.create_future()
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    f.set_exception(ValueError("lost to cancel"))
    out = [t.cancel("wins"), loop.run_until_complete(t), f._log_traceback]
    del f
    gc.collect()
    return out + [seen]


@differential
def test_loop_future_cancelled_under_a_task(loop):
    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            return ("caught", chain(e), asyncio.current_task()._must_cancel)

    f = loop.create_future()
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    f.cancel("future-side")
    out = [loop.run_until_complete(t), t.cancelled()]
    if PY >= (3, 11):
        out.append(t.cancelling())
    return out


@differential
def test_await_done_task_inside_except_block(loop):
    async def fails():
        raise ValueError("done-task")

    async def main():
        t = loop.create_task(fails())
        await asyncio.sleep(0)
        out = [t.done()]
        try:
            raise KeyError("handling")
        except KeyError:
            try:
                await t
            except ValueError as e:
                out.append([link[0] for link in chain(e)])
        return out

    return loop.run_until_complete(main())


@differential
def test_await_task_results(loop):
    async def value(v):
        await asyncio.sleep(0)
        return v

    async def main():
        t = loop.create_task(value("x"))
        first = await t
        second = await t
        third = await asyncio.ensure_future(t)
        return [first, second, third, t.result()]

    return loop.run_until_complete(main())


@differential
def test_run_coroutine_threadsafe(loop):
    async def work(v):
        await asyncio.sleep(0)
        return ("work", v, type(asyncio.current_task()).__name__ == type(holder[0]).__name__)

    async def fails():
        raise KeyError("threadsafe")

    def in_thread():
        ok = asyncio.run_coroutine_threadsafe(work(1), loop).result(10)
        try:
            asyncio.run_coroutine_threadsafe(fails(), loop).result(10)
        except KeyError as e:
            bad = exc(e)
        return [ok, bad]

    holder = []

    async def main():
        holder.append(asyncio.current_task())
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return await loop.run_in_executor(pool, in_thread)

    return loop.run_until_complete(main())


@differential
def test_wrap_concurrent_future(loop):
    async def main():
        cf = concurrent.futures.Future()
        wrapped = asyncio.wrap_future(cf, loop=loop)
        out = [isinstance(wrapped, asyncio.Future), wrapped.get_loop() is loop]
        cf.set_result("cf")
        out.append(await wrapped)
        cf2 = concurrent.futures.Future()
        wrapped2 = asyncio.wrap_future(cf2, loop=loop)
        wrapped2.cancel()
        await asyncio.sleep(0)
        out.append(cf2.cancelled())
        return out

    return loop.run_until_complete(main())


@differential
def test_shield_inner_fails_after_outer_cancelled(loop):
    seen = record_handler(loop)

    async def inner(fut):
        await fut
        raise ValueError("inner failed")

    async def outer(t):
        await asyncio.shield(t)

    f = loop.create_future()
    ti = loop.create_task(inner(f))
    to = loop.create_task(outer(ti))
    run_iterations(loop, 3)
    to.cancel()
    run_iterations(loop, 2)
    f.set_result(None)
    run_iterations(loop, 4)
    out = [to.cancelled(), ti.done(), exc(ti.exception())]
    return out + [seen]
