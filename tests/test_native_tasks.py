"""Differential tests of swordfish's native ``Task`` against the C type: identity and names,
contexts, and cancellation (tests/differential.py runs each scenario on both loops and
compares the transcripts)."""

import asyncio
import collections.abc
import contextvars
import gc
import inspect
import re
import weakref

from conftest import require_swordfish, run_iterations
from differential import (
    attempt, c_future, c_task, cancellation, chain, differential, exc, noop, norm, PY,
    record_handler, scenario_on, since, tb_names, var,
)


# ------------------------------------------------------------------ tasks: identity and names


@differential
def test_task_isinstance_and_isfuture(loop):
    t = loop.create_task(noop())
    out = [isinstance(t, asyncio.Task), isinstance(t, asyncio.Future), asyncio.isfuture(t),
           t.__class__ is asyncio.Task, inspect.isawaitable(t),
           asyncio.ensure_future(t) is t, type(t).__name__]
    loop.run_until_complete(t)
    return out


@differential
def test_task_default_names_follow_the_counter(loop):
    tasks = [loop.create_task(noop()) for _ in range(3)]
    names = [t.get_name() for t in tasks]
    numbers = [int(n.split("-")[1]) for n in names]
    loop.run_until_complete(asyncio.gather(*tasks))
    return [[bool(re.fullmatch(r"Task-\d+", n)) for n in names],
            [b - a for a, b in zip(numbers, numbers[1:])]]


def test_task_names_unique_across_native_and_c_tasks():
    """Native tasks count their own "Task-N" numbers: a C task made in between does not
    advance them, and the C task's number comes from the C counter."""

    def scenario(loop):
        first = loop.create_task(noop())
        middle = c_task(loop, noop())
        last = loop.create_task(noop())
        numbers = [int(t.get_name().split("-")[1]) for t in (first, middle, last)]
        loop.run_until_complete(asyncio.gather(first, middle, last))
        return [numbers[1] - numbers[0], numbers[2] - numbers[1], len(set(numbers))]

    stdlib = scenario_on(asyncio.new_event_loop, scenario)
    assert stdlib == [1, 1, 3]
    native = scenario_on(require_swordfish().new_event_loop, scenario)
    assert native[0] + native[1] == 1  # consecutive native numbers


@differential
def test_task_name_argument_converted_with_str(loop):
    class StrSub(str):
        pass

    class Named:
        def __str__(self):
            return "from-str"

    out = []
    for name in (123, StrSub("sub"), Named(), "plain", None):
        t = loop.create_task(noop(), name=name)
        n = t.get_name()
        out.append((norm(n), type(n).__name__))
        loop.run_until_complete(t)
    t = loop.create_task(noop(), name="x")
    for value in (456, StrSub("s2"), Named()):
        t.set_name(value)
        out.append((t.get_name(), type(t.get_name()).__name__))
    out.append(attempt(t.set_name))
    loop.run_until_complete(t)
    return out


@differential
def test_task_name_whose_str_fails(loop):
    class BadName:
        def __str__(self):
            raise ZeroDivisionError("no str")

    seen = record_handler(loop)
    coro = noop()
    out = [attempt(loop.create_task, coro, name=BadName())]
    gc.collect()
    out.append(seen)
    coro.close()
    t = loop.create_task(noop(), name="ok")
    out.append(attempt(t.set_name, BadName()))
    out.append(t.get_name())
    loop.run_until_complete(t)
    return out


@differential
def test_task_get_coro_and_coro_attribute(loop):
    async def body():
        return 1

    coro = body()
    t = loop.create_task(coro)
    out = [t.get_coro() is coro, t._coro is coro]
    loop.run_until_complete(t)
    out += [t.get_coro() is coro, t._coro is coro]
    return out


@differential
def test_create_task_with_non_coroutine(loop):
    def gen():
        return 1
        yield

    async def coro_fn():
        pass

    class Awaitable:
        def __await__(self):
            yield

    out = [attempt(loop.create_task, value) for value in
           (1, None, coro_fn, Awaitable(), loop.create_future())]
    g = gen()
    res = attempt(loop.create_task, g)
    out.append(res)
    if res[0] == "returned":
        out.append(attempt(loop.run_until_complete, asyncio.sleep(0)))
    g.close()
    return out


@differential
def test_custom_coroutine_object_is_run(loop):
    class Coro(collections.abc.Coroutine):
        def __init__(self):
            self.sent = []

        def send(self, value):
            self.sent.append(value)
            if len(self.sent) < 3:
                return None
            raise StopIteration("custom-done")

        def throw(self, typ, val=None, tb=None):
            raise typ if val is None else val

        def close(self):
            pass

        def __await__(self):
            return self

    c = Coro()
    t = loop.create_task(c)
    loop.run_until_complete(t)
    return [t.result(), c.sent]


# ------------------------------------------------------------------ tasks: context


@since(3, 12)
@differential
def test_task_get_context(loop):
    ctx = contextvars.copy_context()
    t1 = loop.create_task(noop())
    t2 = loop.create_task(noop(), context=ctx)
    out = [type(t1.get_context()).__name__, t1.get_context() is contextvars.copy_context(),
           t2.get_context() is ctx, t1.get_context() is t1.get_context()]
    loop.run_until_complete(asyncio.gather(t1, t2))
    out.append(t2.get_context() is ctx)
    return out


@differential
def test_task_context_changes_do_not_leak(loop):
    async def child(tag):
        before = var.get()
        var.set(tag)
        await asyncio.sleep(0)
        return (before, var.get())

    async def main():
        var.set("main")
        a = loop.create_task(child("a"))
        var.set("main-2")
        b = loop.create_task(child("b"))
        results = await asyncio.gather(a, b)
        return [results, var.get()]

    out = loop.run_until_complete(main())
    out.append(var.get())
    return out


@since(3, 11)
@differential
def test_task_context_argument(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")

    async def child():
        seen = var.get()
        var.set("changed-by-task")
        await asyncio.sleep(0)
        return seen

    t = loop.create_task(child(), context=ctx)
    result = loop.run_until_complete(t)
    return [result, ctx[var], var.get()]


@differential
def test_task_callbacks_and_wakeups_run_in_task_context(loop):
    async def child(fut):
        var.set("child")
        value = await fut
        return (value, var.get())

    f = loop.create_future()
    g = c_future(loop)
    t1 = loop.create_task(child(f))
    t2 = loop.create_task(child(g))
    run_iterations(loop, 2)
    f.set_result(1)
    g.set_result(2)
    return [loop.run_until_complete(t1), loop.run_until_complete(t2), var.get()]


# Made where no context variable is set, a task or callback gets an empty copy of the
# context, which swordfish makes only when needed (src/context.rs). These scenarios run in
# a fresh empty context so that they take that path whatever the test process has set.


def in_empty_context(scenario):
    def run(loop):
        return contextvars.Context().run(scenario, loop)

    run.__name__ = scenario.__name__
    run.__doc__ = scenario.__doc__
    return run


@differential
@in_empty_context
def test_empty_context_task_keeps_what_its_steps_set(loop):
    other = contextvars.ContextVar("other", default="unset")

    async def child():
        seen = [var.get()]
        await asyncio.sleep(0)
        token = other.set("set in step 2")
        await asyncio.sleep(0)
        seen.append(other.get())
        var.set("set in step 3")
        await asyncio.sleep(0)
        seen.append(var.get())
        other.reset(token)
        await asyncio.sleep(0)
        seen.append(other.get())
        return seen

    tasks = [loop.create_task(child()) for _ in range(3)]
    out = loop.run_until_complete(asyncio.gather(*tasks))
    return [out, var.get(), other.get(), len(contextvars.copy_context())]


@differential
@in_empty_context
def test_empty_context_tasks_made_by_a_task(loop):
    async def grandchild():
        await asyncio.sleep(0)
        return var.get()

    async def child(tag):
        first = await loop.create_task(grandchild())
        var.set(tag)
        second = await loop.create_task(grandchild())
        return (first, second, var.get())

    async def main():
        return await asyncio.gather(child("a"), child("b"))

    return loop.run_until_complete(main())


@since(3, 12)
@differential
@in_empty_context
def test_empty_context_get_context_during_a_step(loop):
    async def child():
        ctx = asyncio.current_task().get_context()
        out = [attempt(ctx.run, lambda: None), len(ctx)]
        await asyncio.sleep(0)
        out.append(asyncio.current_task().get_context() is ctx)
        var.set("x")
        await asyncio.sleep(0)
        out.append(ctx.get(var))
        return out, ctx

    t = loop.create_task(child())
    out, ctx = loop.run_until_complete(t)
    return [out, t.get_context() is ctx]


@since(3, 12)
@differential
@in_empty_context
def test_empty_context_get_context_before_the_first_step(loop):
    async def child():
        await asyncio.sleep(0)
        var.set("from the task")
        await asyncio.sleep(0)

    t = loop.create_task(child())
    ctx = t.get_context()
    ref = weakref.ref(t.get_context())
    out = [len(ctx), t.get_context() is ctx]
    run_iterations(loop, 1)
    out.append(ref() is ctx)
    loop.run_until_complete(t)
    out += [ctx.get(var), t.get_context() is ctx, var.get()]
    return out


@since(3, 12)
@differential
@in_empty_context
def test_empty_context_handles(loop):
    def set_var(tag):
        var.set(tag)

    h1 = loop.call_soon(set_var, "soon")
    ctx1 = h1.get_context()
    h2 = loop.call_later(0, set_var, "later")
    h3 = loop.call_soon(set_var, "unasked")
    out = [len(ctx1), h1.get_context() is ctx1]
    run_iterations(loop, 2)
    out += [ctx1.get(var), h1.get_context() is ctx1, h2.get_context().get(var),
            h3.get_context().get(var), var.get()]
    return out


@differential
@in_empty_context
def test_empty_context_timer_callbacks(loop):
    seen = []

    def first(tag):
        seen.append(("first", var.get()))
        var.set(tag)
        loop.call_soon(second)

    def second():
        seen.append(("second", var.get()))

    loop.call_later(0, first, "a")
    loop.call_at(loop.time(), first, "b")
    run_iterations(loop, 3)
    return [seen, var.get()]


@differential
@in_empty_context
def test_empty_context_done_callbacks(loop):
    def set_var(fut):
        var.set(fut.result())

    f = loop.create_future()
    f.add_done_callback(set_var)
    g = loop.create_future()
    g.add_done_callback(set_var)
    ctx = f._callbacks[0][1]
    out = [len(ctx), f._callbacks[0][1] is ctx]
    f.set_result("f")
    g.set_result("g")
    run_iterations(loop, 1)
    out += [ctx.get(var), var.get()]
    return out


# ------------------------------------------------------------------ tasks: cancellation


@differential
def test_task_cancel_with_message_while_awaiting_future(loop):
    async def child(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            seen.append(exc(e))
            raise

    seen = []
    f = loop.create_future()
    t = loop.create_task(child(f))
    run_iterations(loop, 2)
    out = [t._fut_waiter is f, t.cancel("why"), f.cancelled(), f._cancel_message, t._must_cancel]
    run_iterations(loop, 3)
    out += [seen, t.cancelled(), t._cancel_message, attempt(t.result)]
    return out


@differential
def test_task_cancel_while_awaiting_another_task(loop):
    async def inner():
        try:
            await loop.create_future()
        except asyncio.CancelledError as e:
            seen.append(("inner", exc(e)))
            raise

    async def outer(t):
        try:
            await t
        except asyncio.CancelledError as e:
            seen.append(("outer", exc(e)))
            raise

    seen = []
    ti = loop.create_task(inner())
    to = loop.create_task(outer(ti))
    run_iterations(loop, 3)
    out = [to._fut_waiter is ti, to.cancel("from-outer")]
    if PY >= (3, 11):
        out += [ti.cancelling(), to.cancelling()]
    run_iterations(loop, 4)
    out += [seen, ti.cancelled(), to.cancelled()]
    for t in (ti, to):
        out.append(cancellation(t.result))
    return out


@differential
def test_task_cancel_while_sleeping(loop):
    async def sleeper():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError as e:
            return ("swallowed", exc(e))

    t = loop.create_task(sleeper())
    run_iterations(loop, 2)
    out = [t.cancel("wake"), t.cancel()]
    out.append(loop.run_until_complete(t))
    out += [t.cancelled(), t.done()]
    if PY >= (3, 11):
        out.append(t.cancelling())
    return out


@differential
def test_task_cancel_while_awaiting_gather(loop):
    async def child(i):
        try:
            await loop.create_future()
        except asyncio.CancelledError as e:
            seen.append((i, exc(e)))
            raise

    async def parent():
        await asyncio.gather(child(1), child(2))

    seen = []
    t = loop.create_task(parent())
    run_iterations(loop, 4)
    waiter = t._fut_waiter
    out = [type(waiter).__name__, t.cancel("gather-msg")]
    try:
        loop.run_until_complete(t)
    except asyncio.CancelledError as e:
        out.append(("caller", chain(e)))
    out += [sorted(seen), t.cancelled(), waiter.cancelled()]
    return out


@differential
def test_task_cancel_before_first_step(loop):
    ran = []

    async def body():
        ran.append(True)
        return 1

    t = loop.create_task(body())
    out = [t.cancel("early"), t._must_cancel, t.cancelled(), t.done()]
    run_iterations(loop, 2)
    out += [ran, t.cancelled(), t._must_cancel]
    out.append(cancellation(t.result))
    return out


@differential
def test_task_cancelled_right_before_returning(loop):
    async def body():
        asyncio.current_task().cancel("late")
        return "value"

    t = loop.create_task(body())
    run_iterations(loop, 2)
    out = [t.cancelled(), attempt(t.result), t._cancel_message if hasattr(t, "_cancel_message") else None]
    if PY >= (3, 11):
        out.append(t.cancelling())
    return out


@differential
def test_task_cancels_itself_then_awaits(loop):
    async def body():
        me = asyncio.current_task()
        me.cancel("self")
        flags = [me._must_cancel]
        fut = loop.create_future()
        try:
            await fut
        except asyncio.CancelledError as e:
            flags += [exc(e), fut.cancelled(), me._must_cancel]
        return flags

    t = loop.create_task(body())
    return loop.run_until_complete(t)


@differential
def test_task_cancel_twice(loop):
    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError as e:
            return ("caught", exc(e))

    f = loop.create_future()
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    out = [t.cancel("one"), t.cancel("two"), t._must_cancel, f._cancel_message]
    if PY >= (3, 11):
        out.append(t.cancelling())
    out.append(loop.run_until_complete(t))
    out.append(t.cancel("three"))
    return out


@differential
def test_task_cancel_after_awaited_future_done_before_resume(loop):
    async def body(fut):
        try:
            return ("value", await fut)
        except asyncio.CancelledError as e:
            return ("cancelled", exc(e))

    f = loop.create_future()
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    f.set_result("ready")
    out = [t._fut_waiter is f, t.cancel("too-late"), t._must_cancel]
    out.append(loop.run_until_complete(t))
    return out


@differential
def test_task_cancel_after_done(loop):
    t = loop.create_task(noop())
    loop.run_until_complete(t)
    out = [t.cancel(), t.cancel("x"), t.cancelled()]
    if PY >= (3, 11):
        out.append(t.cancelling())
    return out


@since(3, 11)
@differential
def test_task_cancelling_and_uncancel(loop):
    async def body(fut):
        try:
            await fut
        except asyncio.CancelledError:
            t = asyncio.current_task()
            steps.append(("in-except", t.cancelling(), t._must_cancel))
            steps.append(("uncancel", t.uncancel(), t.uncancel(), t.cancelling()))
            return "recovered"

    steps = []
    f = loop.create_future()
    t = loop.create_task(body(f))
    run_iterations(loop, 2)
    out = [t.cancelling(), t.cancel(), t.cancelling(), t.cancel(), t.cancelling(),
           t._must_cancel]
    out.append(loop.run_until_complete(t))
    out += [steps, t.cancelling(), t.uncancel()]
    return out


@since(3, 11)
@differential
def test_task_uncancel_clears_a_pending_cancel_request(loop):
    # 3.13 changed uncancel(): reaching zero also withdraws the request (_must_cancel).
    ran = []

    async def body():
        ran.append("ran")
        return "done"

    t = loop.create_task(body())
    out = [t.cancel(), t._must_cancel, t.uncancel(), t._must_cancel, t.cancelling()]
    run_iterations(loop, 2)
    out += [ran, t.cancelled(), attempt(t.result)]
    return out


@since(3, 11)
@differential
def test_task_uncancel_with_two_requests(loop):
    t = loop.create_task(noop())
    out = [t.cancel(), t.cancel(), t.uncancel(), t._must_cancel, t.uncancel(), t._must_cancel]
    run_iterations(loop, 2)
    out += [t.cancelled(), attempt(t.result)]
    return out


@differential
def test_awaiter_sees_cancelled_error_chain(loop):
    async def inner():
        await loop.create_future()

    async def outer(t):
        try:
            await t
        except asyncio.CancelledError as e:
            return [chain(e), tb_names(e)]

    ti = loop.create_task(inner())
    to = loop.create_task(outer(ti))
    run_iterations(loop, 3)
    ti.cancel("inner-msg")
    return loop.run_until_complete(to)


@differential
def test_cancelled_task_result_twice(loop):
    async def inner():
        await loop.create_future()

    t = loop.create_task(inner())
    run_iterations(loop, 2)
    t.cancel("msg")
    run_iterations(loop, 2)
    out = []
    for call in (t.result, t.result, t.exception, t._make_cancelled_error):
        try:
            e = call()
        except asyncio.CancelledError as caught:
            e = caught
        out.append(chain(e))
    return out


@differential
def test_two_awaiters_of_a_cancelled_task(loop):
    async def inner():
        await loop.create_future()

    async def awaiter(t):
        try:
            await t
        except asyncio.CancelledError as e:
            return chain(e)

    t = loop.create_task(inner())
    a = loop.create_task(awaiter(t))
    b = loop.create_task(awaiter(t))
    run_iterations(loop, 3)
    t.cancel("shared")
    return loop.run_until_complete(asyncio.gather(a, b))


@differential
def test_run_until_complete_of_a_cancelled_task(loop):
    async def inner():
        await loop.create_future()

    t = loop.create_task(inner())
    run_iterations(loop, 2)
    t.cancel("ruc")
    try:
        loop.run_until_complete(t)
    except asyncio.CancelledError as e:
        return chain(e)


@differential
def test_coroutine_raising_cancelled_error_itself(loop):
    async def body():
        raise asyncio.CancelledError("own")

    t = loop.create_task(body())
    run_iterations(loop, 2)
    out = [t.cancelled(), t._state]
    if PY >= (3, 11):
        out.append(t.cancelling())
    out.append(cancellation(t.result))
    return out
