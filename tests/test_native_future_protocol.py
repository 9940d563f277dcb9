"""Differential tests of swordfish's native ``Future`` against the C type: done callbacks,
repr and the logging of unretrieved exceptions, the await protocol, and a closed loop
(tests/differential.py runs each scenario on both loops and compares the transcripts)."""

import asyncio
import contextvars
import gc
import sys
import types

from conftest import gc_disabled, run_iterations
from differential import (
    attempt, chain, differential, exc, known_difference, never, noop, norm, PY, r,
    record_handler, var,
)


# ------------------------------------------------------------------ futures: callbacks


@differential
def test_future_done_callbacks_run_in_order_and_not_inline(loop):
    f = loop.create_future()
    got = []
    for name in ("a", "b", "c"):
        f.add_done_callback(lambda fut, name=name: got.append((name, fut is f, fut.result())))
    f.set_result(9)
    inline = list(got)
    run_iterations(loop, 2)
    return [inline, got]


@differential
def test_future_done_callbacks_interleave_with_call_soon(loop):
    f = loop.create_future()
    got = []
    loop.call_soon(got.append, "soon-1")
    f.add_done_callback(lambda fut: got.append("cb-1"))
    f.add_done_callback(lambda fut: got.append("cb-2"))
    f.set_result(None)
    loop.call_soon(got.append, "soon-2")
    run_iterations(loop, 3)
    return got


@differential
def test_future_done_callback_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "given")
    got = []
    f = loop.create_future()
    token = var.set("at-add")
    try:
        f.add_done_callback(lambda fut: got.append(("explicit", var.get())), context=ctx)
        f.add_done_callback(lambda fut: got.append(("implicit", var.get())))
        f.add_done_callback(lambda fut: got.append(("none", var.get())), context=None)
    finally:
        var.reset(token)
    var.set("at-set")
    f.set_result(None)
    run_iterations(loop, 2)
    var.set("default")
    return got


@differential
def test_future_callback_added_after_done_is_scheduled(loop):
    f = loop.create_future()
    f.set_result(5)
    got = []
    f.add_done_callback(lambda fut: got.append(fut.result()))
    inline = list(got)
    run_iterations(loop, 2)
    return [inline, got, f._callbacks]


@differential
def test_future_callbacks_attribute_shape(loop):
    def a(fut):
        pass

    def b(fut):
        pass

    ctx = contextvars.copy_context()
    f = loop.create_future()
    out = [f._callbacks]
    f.add_done_callback(a)
    f.add_done_callback(b, context=ctx)
    cbs = f._callbacks
    out.append(type(cbs).__name__)
    out.append([(type(item).__name__, len(item), item[0].__name__,
                 type(item[1]).__name__, item[1] is ctx) for item in cbs])
    f.set_result(None)
    out.append(f._callbacks)
    return out


@differential
def test_future_remove_done_callback_counts(loop):
    def a(fut):
        pass

    def b(fut):
        pass

    def c(fut):
        pass

    def x(fut):
        pass

    def names(f):
        return None if f._callbacks is None else [cb.__name__ for cb, ctx in f._callbacks]

    f = loop.create_future()
    out = [f.remove_done_callback(a)]
    for cb in (a, b, a, c, a):
        f.add_done_callback(cb)
    out.append(names(f))
    out.append(f.remove_done_callback(a))
    out.append(names(f))
    out.append(f.remove_done_callback(x))
    out.append(f.remove_done_callback(b))
    out.append(names(f))
    out.append(f.remove_done_callback(c))
    out.append(names(f))
    f.add_done_callback(c)
    f.set_result(1)
    out.append(f.remove_done_callback(c))
    return out


@differential
def test_future_remove_first_callback_then_add(loop):
    got = []

    def make(name):
        def cb(fut):
            got.append(name)
        return cb

    a, b, c, d = (make(n) for n in "abcd")
    f = loop.create_future()
    f.add_done_callback(a)
    f.add_done_callback(b)
    out = [f.remove_done_callback(a)]
    f.add_done_callback(c)
    out.append(f.remove_done_callback(b))
    out.append(f.remove_done_callback(c))
    f.add_done_callback(d)
    f.add_done_callback(a)
    f.set_result(None)
    run_iterations(loop, 2)
    return [out, got]


@differential
def test_future_remove_done_callback_uses_equality(loop):
    class Owner:
        def __init__(self):
            self.calls = 0

        def meth(self, fut):
            self.calls += 1

    class AlwaysEqual:
        def __eq__(self, other):
            return True

        __hash__ = None

    class EqRaises:
        def __eq__(self, other):
            raise ZeroDivisionError("eq")

        __hash__ = None

    o = Owner()
    f = loop.create_future()
    f.add_done_callback(o.meth)
    f.add_done_callback(o.meth)
    out = [o.meth is not o.meth, f.remove_done_callback(o.meth)]

    def plain(fut):
        pass

    g = loop.create_future()
    g.add_done_callback(plain)
    g.add_done_callback(plain)
    out.append(attempt(g.remove_done_callback, EqRaises()))
    out.append(len(g._callbacks))
    out.append(g.remove_done_callback(AlwaysEqual()))
    out.append(g._callbacks)
    return out


# ------------------------------------------------------------------ futures: repr and logging


@differential
def test_future_repr_in_every_state(loop):
    def cb_named(fut):
        pass

    out = []
    f = loop.create_future()
    out.append(r(f))
    f.add_done_callback(cb_named)
    out.append(r(f))
    f.set_result([1, 2])
    out.append(r(f))
    g = loop.create_future()
    g.set_exception(ValueError("bad"))
    out.append(r(g))
    h = loop.create_future()
    h.cancel()
    out.append(r(h))
    k = loop.create_future()
    for _ in range(5):
        k.add_done_callback(cb_named)
    out.append(r(k))
    if PY < (3, 11):
        out.append([norm(s) for s in f._repr_info()])
    return out


@differential
def test_set_result_unless_cancelled_on_a_task_refuses(loop):
    """asyncio.sleep()'s timer callback, given a task: the task's set_result refuses, and
    the task runs on (the native shortcut for that callback is for futures only)."""
    seen = record_handler(loop)

    async def body():
        await asyncio.sleep(0.01)
        return "ran"

    t = loop.create_task(body())
    loop.call_soon(asyncio.futures._set_result_unless_cancelled, t, 42)
    run_iterations(loop, 2)
    out = [t.done(), seen]
    out.append(loop.run_until_complete(t))
    return out


@differential
def test_future_exception_never_retrieved_is_reported(loop):
    seen = record_handler(loop)
    with gc_disabled():
        f = loop.create_future()
        f.set_exception(ValueError("lost"))
        del f
        after_del = list(seen)
        gc.collect()
    return [after_del, seen]


@differential
def test_future_exception_retrieved_is_not_reported(loop):
    seen = record_handler(loop)
    for retrieve in ("exception", "result"):
        f = loop.create_future()
        f.set_exception(ValueError(retrieve))
        try:
            getattr(f, retrieve)()
        except ValueError:
            pass
        del f
    gc.collect()
    return seen


@differential
def test_future_never_retrieved_report_when_call_exception_handler_fails(loop):
    def failing_handler(ctx):
        raise RuntimeError("handler failed")

    loop.call_exception_handler = failing_handler
    got = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: got.append(
        (exc(u.exc_value), isinstance(u.object, asyncio.Future), callable(u.object)))
    try:
        f = loop.create_future()
        f.set_exception(ValueError("lost"))
        del f
        gc.collect()
    finally:
        sys.unraisablehook = old
        del loop.call_exception_handler
    return got


@differential
def test_task_destroyed_pending_report_when_call_exception_handler_fails(loop):
    def failing_handler(ctx):
        raise RuntimeError("handler failed")

    got = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: got.append(
        (exc(u.exc_value), isinstance(u.object, asyncio.Future), callable(u.object)))
    try:
        task = loop.create_task(never(loop))
        run_iterations(loop, 2)
        loop.call_exception_handler = failing_handler
        del task
        gc.collect()
    finally:
        sys.unraisablehook = old
        del loop.call_exception_handler
    return got


# ------------------------------------------------------------------ futures: await protocol


@differential
def test_future_await_done_future(loop):
    async def main():
        out = []
        f = loop.create_future()
        f.set_result("v")
        out.append(await f)
        out.append(await f)
        g = loop.create_future()
        g.set_exception(KeyError("k"))
        try:
            await g
        except KeyError as e:
            out.append(exc(e))
        h = loop.create_future()
        h.cancel("c")
        try:
            await h
        except asyncio.CancelledError as e:
            out.append(chain(e))
        return out

    return loop.run_until_complete(main())


@differential
def test_future_await_pending_future(loop):
    async def main():
        f = loop.create_future()
        loop.call_soon(f.set_result, 3)
        before = f._asyncio_future_blocking
        value = await f
        return [before, value, f._asyncio_future_blocking]

    return loop.run_until_complete(main())


@differential
def test_future_yield_from_in_generator_coroutine(loop):
    @types.coroutine
    def gen_wait(fut):
        value = yield from fut
        return ("got", value)

    async def main():
        f = loop.create_future()
        loop.call_soon(f.set_result, 4)
        a = await gen_wait(f)
        g = loop.create_future()
        g.set_result(5)
        b = await gen_wait(g)
        h = loop.create_future()
        loop.call_soon(h.set_exception, ValueError("gen"))
        try:
            await gen_wait(h)
        except ValueError as e:
            c = exc(e)
        return [a, b, c]

    return loop.run_until_complete(main())


@differential
def test_await_done_failed_future_inside_except_block_chains_context(loop):
    async def main():
        out = []
        f = loop.create_future()
        f.set_exception(ValueError("stored"))
        try:
            raise KeyError("handling")
        except KeyError:
            try:
                await f
            except ValueError as e:
                out.append(chain(e))
        g = loop.create_future()
        loop.call_soon(g.set_exception, ValueError("later"))
        try:
            raise KeyError("handling")
        except KeyError:
            try:
                await g
            except ValueError as e:
                out.append(chain(e))
        return out

    return loop.run_until_complete(main())


@differential
def test_future_await_iterator_next_twice_on_pending(loop):
    f = loop.create_future()
    it = f.__await__()
    first = next(it)
    return [first is f, f._asyncio_future_blocking, attempt(next, it),
            f._asyncio_future_blocking, f.done()]


def test_future_await_iterator_on_done_future():
    """A native future is its own await iterator (awaiting allocates nothing), so it is
    never exhausted: a second `next()` gives the result again."""

    def scenario(loop):
        f = loop.create_future()
        f.set_result(7)
        it = f.__await__()
        out = [it is f]
        for _ in range(2):
            try:
                next(it)
            except StopIteration as e:
                out.append(("stop", e.value, e.args))
        return out

    known_difference(
        scenario,
        stdlib=[False, ("stop", 7, (7,)), ("stop", None, ())],
        native=[True, ("stop", 7, (7,)), ("stop", 7, (7,))],
    )


@differential
def test_future_iter_protocol(loop):
    f = loop.create_future()
    f.set_result((1, 2))
    out = [list(iter(f)), list(f.__iter__())]
    try:
        next(iter(f))
    except StopIteration as e:
        out.append(("stop", e.value, e.args))
    g = loop.create_future()
    g.set_exception(KeyError("iter"))
    out.append(attempt(list, iter(g)))
    h = loop.create_future()
    h.cancel()
    out.append(attempt(list, iter(h)))
    return out


def test_future_next_on_the_future_itself():
    def scenario(loop):
        f = loop.create_future()
        return [attempt(next, f), f._asyncio_future_blocking]

    known_difference(
        scenario,
        stdlib=[("raised", "TypeError", "'_asyncio.Future' object is not an iterator"), False],
        native=[("returned", "<Future pending>"), True],
    )


def test_future_await_iterator_send_and_throw():
    """The await iterator has `send` (which ignores its value), not `throw` or `close`
    (with them the native future would pass for a coroutine: collections.abc.Coroutine)."""

    def scenario(loop):
        f = loop.create_future()
        it = f.__await__()
        out = [hasattr(it, "send"), hasattr(it, "throw"), hasattr(it, "close")]
        out.append(attempt(lambda: it.send(None) is f))
        f.set_result(8)
        out.append(attempt(it.send, "ignored"))
        return out

    known_difference(
        scenario,
        stdlib=[True, True, True, ("returned", "True"), ("raised", "StopIteration", "8")],
        native=[True, False, False, ("returned", "True"), ("raised", "StopIteration", "8")],
    )


@differential
def test_coroutine_driven_by_hand_with_send_of_a_value(loop):
    # A coroutine awaiting a future, driven with send(value) after the future is done.
    async def waits(fut):
        return await fut

    f = loop.create_future()
    coro = waits(f)
    out = [coro.send(None) is f]
    f.set_result("r")
    try:
        coro.send("pushed")
    except StopIteration as e:
        out.append(("stop", e.value))
    except BaseException as e:
        out.append(("raised", type(e).__name__, norm(str(e))))
    coro.close()
    return out


@differential
def test_coroutine_driven_by_hand_throw_and_close(loop):
    async def waits(fut):
        try:
            return await fut
        except ValueError as e:
            return ("caught", exc(e))
        finally:
            record.append("finally")

    record = []
    f = loop.create_future()
    coro = waits(f)
    out = [coro.send(None) is f]
    try:
        coro.throw(ValueError("thrown"))
    except StopIteration as e:
        out.append(e.value)
    g = loop.create_future()
    coro2 = waits(g)
    coro2.send(None)
    coro2.close()
    out.append(record)
    out.append(g.done())
    return out


# ------------------------------------------------------------------ futures: closed loop


@differential
def test_future_on_a_closed_loop(loop):
    loop.close()
    f = loop.create_future()
    out = [f.done(), attempt(f.set_result, 1), f.done()]
    g = loop.create_future()
    g.add_done_callback(lambda fut: None)
    out += [attempt(g.set_result, 2), g.done(), g._callbacks]
    out.append(attempt(f.add_done_callback, lambda fut: None))
    return out


@differential
def test_create_task_on_a_closed_loop(loop):
    loop.close()
    coro = noop()
    out = [attempt(loop.create_task, coro)]
    coro.close()
    return out
