"""Differential tests of swordfish's native ``Task`` against the C type: exceptions from the
coroutine, awaits of the wrong things, introspection (stacks, coroutines, current and all
tasks), and destruction (tests/differential.py runs each scenario on both loops and compares
the transcripts)."""

import asyncio
import gc
import io
import weakref

from conftest import gc_disabled, run_iterations
from differential import (
    attempt, attempt_type, bare_yield, c_future, c_task, chain, differential, exc, never, noop,
    norm, PY, r, record_handler, tb_names, yield_value,
)


# ------------------------------------------------------------------ tasks: exceptions


@differential
def test_task_exception_result_reraises_with_frames(loop):
    def raiser():
        raise ValueError("in task")

    async def body():
        await asyncio.sleep(0)
        raiser()

    t = loop.create_task(body())
    run_iterations(loop, 3)
    out = [t.done(), exc(t.exception())]
    for _ in range(2):
        try:
            t.result()
        except ValueError as e:
            out.append(tb_names(e))
    return out


@differential
def test_awaiting_a_failed_task_shows_its_frames(loop):
    def raiser():
        raise KeyError("deep")

    async def failing():
        raiser()

    async def main():
        t = loop.create_task(failing())
        try:
            await t
        except KeyError as e:
            return [exc(e), tb_names(e), chain(e)]

    return loop.run_until_complete(main())


@differential
def test_task_exception_never_retrieved_is_reported(loop):
    seen = record_handler(loop)

    async def body():
        raise ValueError("unseen")

    with gc_disabled():
        t = loop.create_task(body())
        run_iterations(loop, 2)
        state = t._state
        log = t._log_traceback
        del t
        after_del = list(seen)
        gc.collect()
    return [state, log, after_del, seen]


@differential
def test_task_keyboard_interrupt_propagates(loop):
    async def body():
        await asyncio.sleep(0)
        raise KeyboardInterrupt("ki")

    t = loop.create_task(body())
    out = []
    try:
        loop.run_until_complete(t)
    except KeyboardInterrupt as e:
        out.append(("raised", exc(e)))
    out += [t.done(), exc(t.exception()), loop.is_running()]
    out.append(loop.run_until_complete(asyncio.sleep(0, "still-works")))
    return out


@differential
def test_task_system_exit_propagates_past_its_awaiter(loop):
    async def child():
        raise SystemExit(3)

    async def main():
        c = loop.create_task(child())
        holder.append(c)
        return await c

    holder = []
    m = loop.create_task(main())
    out = []
    try:
        loop.run_until_complete(m)
    except SystemExit as e:
        out.append(("first", exc(e)))
    c = holder[0]
    out += [c.done(), exc(c.exception()), m.done()]
    try:
        loop.run_until_complete(m)
    except SystemExit as e:
        out.append(("second", exc(e)))
    out += [m.done(), exc(m.exception()) if m.done() else None]
    return out


@differential
def test_task_other_base_exception_is_stored_not_raised(loop):
    class Custom(BaseException):
        pass

    async def body():
        raise Custom("base")

    t = loop.create_task(body())
    run_iterations(loop, 2)
    out = [t.done(), exc(t.exception())]
    return out


@differential
def test_task_set_result_and_set_exception_refused(loop):
    t = loop.create_task(noop())
    out = [attempt(t.set_result, 1), attempt(t.set_exception, ValueError()), t.done()]
    loop.run_until_complete(t)
    out.append(attempt(t.set_result, 2))
    return out


# ------------------------------------------------------------------ tasks: bad awaits


@differential
def test_task_awaiting_itself(loop):
    async def body():
        await asyncio.current_task()

    t = loop.create_task(body())
    run_iterations(loop, 3)
    return [t.done(), attempt(t.result), t._asyncio_future_blocking]


@differential
def test_task_yielding_itself_without_await(loop):
    async def body():
        await yield_value(asyncio.current_task())

    t = loop.create_task(body())
    run_iterations(loop, 3)
    return [t.done(), attempt(t.result)]


@differential
def test_task_bare_yield_gives_up_one_iteration(loop):
    got = []

    async def body():
        got.append("task-1")
        await bare_yield()
        got.append("task-2")
        await bare_yield()
        got.append("task-3")

    def tick(n):
        got.append(f"tick-{n}")
        if n < 4:
            loop.call_soon(tick, n + 1)

    t = loop.create_task(body())
    loop.call_soon(tick, 1)
    loop.run_until_complete(t)
    return got


@differential
def test_task_bad_yield(loop):
    out = []
    for value in (42, "text", [1]):
        async def body(v=value):
            await yield_value(v)

        t = loop.create_task(body())
        run_iterations(loop, 3)
        out.append(attempt(t.result))
    return out


@differential
def test_task_yielding_a_generator(loop):
    def gen():
        yield

    async def body():
        await yield_value(gen())

    t = loop.create_task(body())
    run_iterations(loop, 3)
    return [attempt(t.result)]


@differential
def test_task_yield_of_pending_future_without_await(loop):
    out = []
    for make in (loop.create_future, lambda: c_future(loop)):
        fut = make()

        async def body(f=fut):
            await yield_value(f)

        t = loop.create_task(body())
        run_iterations(loop, 3)
        out.append((attempt(t.result), fut.done(), fut._callbacks))
    return out


@differential
def test_task_awaiting_future_of_another_loop(loop, factory):
    other = factory()
    try:
        out = []
        for make in (other.create_future, lambda: c_future(other)):
            fut = make()

            async def body(f=fut):
                await f

            t = loop.create_task(body())
            run_iterations(loop, 3)
            out.append((attempt(t.result), fut._callbacks))
        return out
    finally:
        other.close()


@differential
def test_task_yielding_future_like_object_with_broken_loop(loop):
    class FakeFuture:
        _asyncio_future_blocking = True

        def get_loop(self):
            raise ZeroDivisionError("no loop")

        def __repr__(self):
            return "<FakeFuture>"

    async def body():
        await yield_value(FakeFuture())

    seen = record_handler(loop)
    t = loop.create_task(body())
    run_iterations(loop, 3)
    for ctx in seen:  # the handle's repr is the loop's own
        ctx["message"] = ctx["message"].split(" in callback ")[0]
    out = [t.done(), seen]
    # The task is stuck (its step failed): forget it quietly.
    t._log_destroy_pending = False
    asyncio.tasks._unregister_task(t)
    t.get_coro().close()
    return out


@differential
def test_task_awaiting_duck_typed_future(loop):
    class Duck:
        _asyncio_future_blocking = False

        def __init__(self):
            self.callbacks = []
            self.cancelled_with = []

        def get_loop(self):
            return loop

        def add_done_callback(self, fn, *, context=None):
            self.callbacks.append((fn, context))

        def cancel(self, msg=None):
            self.cancelled_with.append(msg)
            return False

        def result(self):
            return "duck-result"

        def __await__(self):
            self._asyncio_future_blocking = True
            yield self
            return "duck-await"

        def __repr__(self):
            return "<Duck>"

    d = Duck()

    async def body():
        return await d

    t = loop.create_task(body())
    run_iterations(loop, 2)
    out = [len(d.callbacks), d._asyncio_future_blocking, t._fut_waiter is d,
           type(d.callbacks[0][1]).__name__]
    out.append(t.cancel("duck-msg"))
    out.append(d.cancelled_with)
    out.append(t._must_cancel)
    fn, ctx = d.callbacks[0]
    ctx.run(fn, d) if ctx is not None else fn(d)
    run_iterations(loop, 2)
    out += [t.done(), attempt(t.result)]
    return out


# ------------------------------------------------------------------ tasks: introspection


@differential
def test_current_task_in_tasks_and_callbacks(loop):
    got = []

    async def body():
        me = asyncio.current_task()
        got.append(("task", me is task))
        fut = loop.create_future()
        fut.add_done_callback(lambda f: got.append(("callback", asyncio.current_task())))
        loop.call_soon(fut.set_result, None)
        await fut
        got.append(("after-await", asyncio.current_task() is task))

    task = loop.create_task(body())
    loop.run_until_complete(task)
    got.append(("outside", asyncio.current_task(loop)))
    return got


@differential
def test_all_tasks(loop):
    async def waiter(fut):
        await fut

    f = loop.create_future()
    t1 = loop.create_task(waiter(f), name="w1")
    t2 = loop.create_task(waiter(f), name="w2")
    t3 = c_task(loop, waiter(f), name="w3")

    async def main():
        return sorted(t.get_name() for t in asyncio.all_tasks())

    inside = loop.run_until_complete(loop.create_task(main(), name="main"))
    outside = sorted(t.get_name() for t in asyncio.all_tasks(loop))
    f.set_result(None)
    loop.run_until_complete(asyncio.gather(t1, t2, t3))
    after = sorted(t.get_name() for t in asyncio.all_tasks(loop))
    return [inside, outside, after]


@differential
def test_task_private_attributes(loop):
    async def body(fut):
        return await fut

    f = loop.create_future()
    t = loop.create_task(body(f))
    out = [t._state, t._must_cancel, t._fut_waiter, t._log_destroy_pending,
           t._asyncio_future_blocking, t._callbacks, t._result, t._exception]
    run_iterations(loop, 2)
    out += [t._fut_waiter is f, t._state]
    f.set_result("r")
    out.append(t._fut_waiter is f)
    run_iterations(loop, 2)
    out += [t._fut_waiter, t._state, t._result, t._must_cancel]
    t._log_destroy_pending = 0
    out.append(t._log_destroy_pending)
    out.append(attempt(delattr, t, "_log_destroy_pending"))
    out.append(attempt_type(setattr, t, "_must_cancel", True))
    out.append(attempt_type(setattr, t, "_fut_waiter", None))
    out.append(attempt_type(setattr, t, "_coro", None))
    return out


@differential
def test_future_callbacks_while_tasks_wait_on_it(loop):
    async def waiter(fut):
        await fut

    def plain(fut):
        pass

    f = loop.create_future()
    t1 = loop.create_task(waiter(f))
    f.add_done_callback(plain)
    t2 = c_task(loop, waiter(f))
    run_iterations(loop, 2)
    cbs = f._callbacks
    out = [len(cbs), [type(ctx).__name__ for fn, ctx in cbs]]
    out.append([getattr(fn, "__self__", None) is t for (fn, ctx), t in zip([cbs[0], cbs[2]], [t1, t2])])
    out.append([getattr(fn, "__qualname__", None) for fn, ctx in cbs])
    out.append(r(f))
    if PY >= (3, 12):
        out.append([cbs[0][1] is t1.get_context(), cbs[2][1] is t2.get_context()])
    f.set_result(None)
    loop.run_until_complete(asyncio.gather(t1, t2))
    return out


@differential
def test_remove_done_callback_of_a_waiting_task(loop):
    class AlwaysEqual:
        def __eq__(self, other):
            return True

        __hash__ = None

    async def waiter(fut):
        await fut

    f = loop.create_future()
    t = loop.create_task(waiter(f))
    run_iterations(loop, 2)
    wake = f._callbacks[0][0]
    out = [f.remove_done_callback(lambda fut: None), f.remove_done_callback(wake), f._callbacks]
    g = loop.create_future()
    u = loop.create_task(waiter(g))
    run_iterations(loop, 2)
    out += [g.remove_done_callback(AlwaysEqual()), g._callbacks and len(g._callbacks)]
    for task in (t, u):  # a task whose wake-up was removed never wakes: let it go
        task._log_destroy_pending = False
        asyncio.tasks._unregister_task(task)
    return out


@differential
def test_task_wakeup_order_with_callbacks_and_call_soon(loop):
    got = []

    async def waiter(name, fut):
        await fut
        got.append(name)

    f = loop.create_future()
    t1 = loop.create_task(waiter("native-1", f))
    t2 = c_task(loop, waiter("c-task", f))
    run_iterations(loop, 2)
    f.add_done_callback(lambda fut: got.append("callback"))
    t3 = loop.create_task(waiter("native-2", f))
    run_iterations(loop, 2)
    loop.call_soon(got.append, "soon-before")
    f.set_result(None)
    loop.call_soon(got.append, "soon-after")
    loop.run_until_complete(asyncio.gather(t1, t2, t3))
    return got


@differential
def test_task_repr_in_every_state(loop):
    async def waits(fut):
        await fut

    async def fails():
        raise ValueError("repr-fail")

    async def returns():
        return [1, 2]

    out = []
    f = loop.create_future()
    t = loop.create_task(waits(f), name="waiter")
    out.append(r(t))
    run_iterations(loop, 2)
    out.append(r(t))
    out.append(r(f))
    t.cancel()
    out.append(r(t))
    run_iterations(loop, 2)
    out.append(r(t))
    t2 = loop.create_task(fails(), name="fails")
    t3 = loop.create_task(returns(), name="returns")
    run_iterations(loop, 2)
    out += [r(t2), r(t3)]
    t2.exception()
    if PY >= (3, 11):
        t4 = loop.create_task(waits(loop.create_future()), name="cancelling")
        run_iterations(loop, 2)
        t4.cancel()
        out.append(r(t4))
        run_iterations(loop, 2)
    if PY < (3, 11):
        out.append([norm(s) for s in t3._repr_info()])
    return out


@differential
def test_task_repr_while_running(loop):
    got = []

    async def body():
        got.append(r(asyncio.current_task()))

    loop.create_task(body(), name="running")
    run_iterations(loop, 2)
    return got


@differential
def test_task_get_stack_and_print_stack(loop):
    def raiser():
        raise ValueError("stack")

    async def waits(fut):
        await fut

    async def fails():
        raiser()

    out = []
    f = loop.create_future()
    t = loop.create_task(waits(f), name="stacked")
    out.append([fr.f_code.co_name for fr in t.get_stack()])
    run_iterations(loop, 2)
    out.append([fr.f_code.co_name for fr in t.get_stack()])
    out.append(len(t.get_stack(limit=1)))
    buf = io.StringIO()
    t.print_stack(file=buf)
    out.append(norm(buf.getvalue()))
    buf = io.StringIO()
    t.print_stack(limit=1, file=buf)
    out.append(norm(buf.getvalue()))
    out.append(attempt(t.get_stack, 1))
    f.set_result(None)
    run_iterations(loop, 2)
    out.append([fr.f_code.co_name for fr in t.get_stack()])
    t2 = loop.create_task(fails(), name="failed")
    run_iterations(loop, 2)
    out.append([fr.f_code.co_name for fr in t2.get_stack()])
    buf = io.StringIO()
    t2.print_stack(file=buf)
    out.append(norm(buf.getvalue()))
    t2.exception()
    return out


# ------------------------------------------------------------------ tasks: destruction


@differential
def test_task_destroyed_but_pending_is_reported(loop):
    seen = record_handler(loop)
    with gc_disabled():
        task = loop.create_task(never(loop), name="doomed")
        run_iterations(loop, 2)
        ref = weakref.ref(task)
        del task
        alive_before = ref() is not None
        gc.collect()
        dead_after = ref() is None
    return [alive_before, dead_after, seen]


@differential
def test_task_log_destroy_pending_false_silences_the_report(loop):
    seen = record_handler(loop)
    with gc_disabled():
        task = loop.create_task(never(loop))
        run_iterations(loop, 2)
        task._log_destroy_pending = False
        ref = weakref.ref(task)
        del task
        gc.collect()
    return [ref() is None, seen]


@differential
def test_gc_pending_task_and_its_unreferenced_future_are_collected(loop):
    seen = record_handler(loop)
    finals = []

    async def waits():
        fut = loop.create_future()
        refs.append(weakref.ref(fut))
        try:
            await fut
        finally:
            finals.append("finally")

    refs = []
    with gc_disabled():
        task = loop.create_task(waits())
        run_iterations(loop, 2)
        refs.append(weakref.ref(task))
        refs.append(weakref.ref(task.get_coro()))
        del task
        before = [ref() is None for ref in refs]
        gc.collect()
        after = [ref() is None for ref in refs]
    return [before, after, finals, seen]


@differential
def test_gc_done_task_and_coroutine_freed_by_refcount(loop):
    async def via_native_future():
        fut = loop.create_future()
        loop.call_soon(fut.set_result, 1)
        return await fut

    async def via_c_future():
        fut = c_future(loop)
        loop.call_soon(fut.set_result, 2)
        return await fut

    async def via_sleep():
        await asyncio.sleep(0)
        return 3

    async def via_task():
        return await loop.create_task(via_sleep())

    async def via_gather():
        return await asyncio.gather(via_sleep(), via_native_future())

    out = []
    with gc_disabled():
        for fn in (via_native_future, via_c_future, via_sleep, via_task, via_gather):
            t = loop.create_task(fn())
            loop.run_until_complete(t)
            refs = (weakref.ref(t), weakref.ref(t.get_coro()))
            result = t.result()
            del t
            out.append((fn.__name__, r(result), [ref() is None for ref in refs]))
    return out


@differential
def test_gc_cancelled_task_freed_by_refcount(loop):
    out = []
    with gc_disabled():
        for make in (loop.create_future, lambda: c_future(loop)):
            fut = make()

            async def waits(f=fut):
                await f

            t = loop.create_task(waits())
            run_iterations(loop, 2)
            t.cancel("bye")
            run_iterations(loop, 3)
            refs = (weakref.ref(t), weakref.ref(t.get_coro()), weakref.ref(fut))
            state = t._state
            del t, waits, fut
            out.append((state, [ref() is None for ref in refs]))
    return out


@differential
def test_gc_failed_task_freed_by_refcount_after_retrieval(loop):
    async def fails():
        await asyncio.sleep(0)
        raise ValueError("freed")

    seen = record_handler(loop)
    with gc_disabled():
        t = loop.create_task(fails())
        run_iterations(loop, 3)
        err = exc(t.exception())
        ref = weakref.ref(t)
        del t
        freed = ref() is None
    return [err, freed, seen]
