"""Differential tests of swordfish's native ``Future`` and ``Task`` against the C types.

Each test is a scenario: a function that takes a fresh loop, runs some asyncio code on it
and returns a transcript (plain, comparable values). The scenario runs once on a fresh
``asyncio.new_event_loop()`` (whose futures and tasks are the interpreter's C types) and
once on a fresh ``swordfish.new_event_loop()`` (whose ``create_future``/``create_task``
make the native types), in the same process, and the two transcripts must be equal.
The stdlib run is the reference, so a scenario passes there by construction; a
difference is a place where the native types do not behave as the C ones.

Memory addresses (``0x...``) and task numbers (``Task-N``) are normalised away; file
paths and line numbers are the same on both sides (the same code runs twice).
"""

import asyncio
import collections.abc
import concurrent.futures
import contextvars
import gc
import inspect
import io
import re
import sys
import types
import weakref

import pytest

from conftest import gc_disabled, require_swordfish, run_iterations

PY = sys.version_info[:2]

var = contextvars.ContextVar("native_tasks_var", default="default")


# ------------------------------------------------------------------ helpers

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_TASK_NUMBER = re.compile(r"Task-\d+")


def norm(text):
    """A repr or message without addresses and task numbers."""
    return _TASK_NUMBER.sub("Task-N", _ADDR.sub("0x?", str(text)))


def r(obj):
    """``repr(obj)``, normalised."""
    return norm(repr(obj))


def exc(e):
    """An exception as comparable data: its type's name and its args."""
    if e is None:
        return None
    return (type(e).__name__, r(e.args))


def attempt(fn, *args, **kwargs):
    """Call ``fn``; what it returned or raised, as comparable data."""
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # CancelledError, KeyboardInterrupt, ... included
        return ("raised", type(e).__name__, norm(str(e)))
    return ("returned", r(value))


def attempt_type(fn, *args, **kwargs):
    """As ``attempt``, but only the type of what was raised (for messages that name the
    object's type, which differs: see ``test_type_name_in_attribute_error_messages``)."""
    out = attempt(fn, *args, **kwargs)
    return out[:2] if out[0] == "raised" else out


def chain(e, depth=6):
    """The shape of an exception's ``__context__`` chain, with each link's cause."""
    out = []
    seen = set()
    while e is not None and id(e) not in seen and len(out) < depth:
        seen.add(id(e))
        out.append((exc(e), exc(e.__cause__), e.__suppress_context__))
        e = e.__context__
    return out


def tb_names(e):
    """The function names in an exception's traceback."""
    names = []
    tb = e.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def ctx_summary(ctx):
    """What an exception handler was given, without keeping the objects alive."""
    out = {"keys": sorted(ctx), "message": ctx.get("message")}
    if "exception" in ctx:
        out["exception"] = exc(ctx["exception"])
    for key in ("future", "task"):
        if key in ctx:
            out[key] = r(ctx[key])
    return out


def record_handler(loop):
    """Install an exception handler that records summaries; return the record."""
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx_summary(ctx)))
    return seen


def _close(loop):
    """Cancel what a scenario left pending, give it a few iterations, close the loop."""
    if loop.is_closed() or loop.is_running():
        return
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            run_iterations(loop, 5)
        for t in pending:
            if not t.done():  # stuck (a scenario broke it on purpose): let it go quietly
                t._log_destroy_pending = False
    finally:
        loop.close()


def _transcript(factory, scenario):
    loop = factory()
    try:
        if len(inspect.signature(scenario).parameters) == 2:
            return scenario(loop, factory)
        return scenario(loop)
    finally:
        _close(loop)


def scenario_on(factory, scenario):
    """The transcript of ``scenario`` on a fresh loop from ``factory``."""
    return _transcript(factory, scenario)


def compare(scenario):
    """Run ``scenario`` on both loops; the transcripts must be equal."""
    sf = require_swordfish()
    expected = _transcript(asyncio.new_event_loop, scenario)
    got = _transcript(sf.new_event_loop, scenario)
    assert got == expected


def differential(scenario):
    """Turn a scenario ``test_x(loop[, factory])`` into a test comparing both loops."""

    def test():
        compare(scenario)

    test.__name__ = scenario.__name__
    test.__qualname__ = scenario.__qualname__
    test.__doc__ = scenario.__doc__
    test.__module__ = scenario.__module__
    return test


def known_difference(scenario, stdlib, native):
    """Run ``scenario`` on both loops where the native types differ from the C ones on
    purpose (docs/loop.md, "Known differences"): each transcript must be the one given, so the
    test fails if either side changes."""
    sf = require_swordfish()
    assert _transcript(asyncio.new_event_loop, scenario) == stdlib
    assert _transcript(sf.new_event_loop, scenario) == native


def since(major, minor):
    return pytest.mark.skipif(PY < (major, minor), reason=f"needs Python {major}.{minor}+")


def c_future(loop):
    """A future of the interpreter's C type, whatever loop it is bound to."""
    return asyncio.Future(loop=loop)


def c_task(loop, coro, name=None):
    """A task of the interpreter's C type, whatever loop runs it."""
    return asyncio.Task(coro, loop=loop, name=name)


@types.coroutine
def bare_yield():
    yield


async def noop():
    await bare_yield()


@types.coroutine
def yield_value(value):
    return (yield value)


def never(loop):
    """A coroutine that waits forever on a fresh future of ``loop``."""

    async def waiting():
        await loop.create_future()

    return waiting()


# ------------------------------------------------------------------ sanity


def test_swordfish_loop_makes_native_futures_and_tasks():
    # Without this, every differential test below could compare C types with C types.
    sf = require_swordfish()
    loop = sf.new_event_loop()
    try:
        fut = loop.create_future()
        task = loop.create_task(noop())
        assert type(fut).__module__ == "swordfish", type(fut)
        assert type(task).__module__ == "swordfish", type(task)
        loop.run_until_complete(task)
    finally:
        loop.close()
    loop = asyncio.new_event_loop()
    try:
        assert type(loop.create_future()) is asyncio.Future
    finally:
        loop.close()


# ------------------------------------------------------------------ futures: results


@differential
def test_future_result_and_exception_before_done(loop):
    f = loop.create_future()
    return [attempt(f.result), attempt(f.exception), f.done(), f.cancelled(), f._state]


@differential
def test_future_set_result_twice(loop):
    f = loop.create_future()
    return [
        attempt(f.set_result, 1),
        attempt(f.set_result, 2),
        attempt(f.set_exception, ValueError("late")),
        attempt(f.cancel),
        attempt(f.result),
        attempt(f.exception),
        f._state,
    ]


@differential
def test_future_set_exception_twice(loop):
    f = loop.create_future()
    return [
        attempt(f.set_exception, ValueError("first")),
        attempt(f.set_exception, KeyError("second")),
        attempt(f.set_result, 3),
        attempt(f.result),
        exc(f.exception()),
        f._state,
    ]


@differential
def test_future_set_exception_with_a_class(loop):
    f = loop.create_future()
    out = [attempt(f.set_exception, ValueError)]
    e = f.exception()
    return out + [exc(e), e.__traceback__ is None, attempt(f.result)]


@differential
def test_future_set_exception_class_whose_constructor_raises(loop):
    class Broken(Exception):
        def __init__(self):
            raise KeyError("ctor")

    f = loop.create_future()
    return [attempt(f.set_exception, Broken), f.done(), f._state]


@differential
def test_future_set_exception_rejects_non_exceptions(loop):
    f = loop.create_future()
    return [
        attempt(f.set_exception, 1),
        attempt(f.set_exception, "boom"),
        attempt(f.set_exception, int),
        attempt(f.set_exception, None),
        f.done(),
    ]


@differential
def test_future_set_exception_with_stop_iteration(loop):
    class MyStop(StopIteration):
        pass

    out = []
    for value in (StopIteration("v"), StopIteration, MyStop("m")):
        f = loop.create_future()
        out.append(attempt(f.set_exception, value))
        if f.done():
            e = f.exception()
            out.append((exc(e), exc(e.__cause__), exc(e.__context__)))
        else:
            out.append(f._state)
    return out


@differential
def test_future_set_result_values_round_trip(loop):
    out = []
    for value in (None, 0, (1, 2), [3], StopIteration, ValueError("as value")):
        f = loop.create_future()
        f.set_result(value)
        out.append((f.result() is value, f._result is value, f._exception))
    return out


@differential
def test_future_result_traceback_frames(loop):
    def raiser():
        raise ValueError("tb")

    f = loop.create_future()
    try:
        raiser()
    except ValueError as e:
        f.set_exception(e)
    out = []
    for _ in range(2):
        try:
            f.result()
        except ValueError as e:
            out.append(tb_names(e))
    out.append(tb_names(f.exception()))
    return out


@differential
def test_future_errors_chain_to_the_exception_being_handled(loop):
    # The C future raises with PyErr_SetObject: the exception being handled becomes the
    # raised exception's __context__.
    failed = loop.create_future()
    failed.set_exception(ValueError("stored"))
    cancelled = loop.create_future()
    cancelled.cancel("msg")
    pending = loop.create_future()
    out = []
    for call in (failed.result, cancelled.result, cancelled.exception, pending.result,
                 pending.exception, lambda: pending.set_exception(1)):
        try:
            raise KeyError("handling")
        except KeyError:
            try:
                call()
            except BaseException as e:
                out.append(chain(e))
    done = loop.create_future()
    done.set_result(1)
    try:
        raise KeyError("handling")
    except KeyError:
        try:
            done.set_result(2)
        except BaseException as e:
            out.append(chain(e))
    return out


# ------------------------------------------------------------------ futures: cancellation


@differential
def test_future_cancel_without_message(loop):
    f = loop.create_future()
    out = [f.cancel(), f.cancelled(), f.done(), f._state, f._cancel_message]
    for call in (f.result, f.exception):
        try:
            call()
        except asyncio.CancelledError as e:
            out.append((exc(e), chain(e)))
    return out


@differential
def test_future_cancel_with_message(loop):
    f = loop.create_future()
    out = [f.cancel(msg="stop"), f._cancel_message]
    for call in (f.result, f.exception, f.result):
        try:
            call()
        except asyncio.CancelledError as e:
            out.append((exc(e), chain(e)))
    return out


@differential
def test_future_cancel_with_positional_and_non_string_message(loop):
    f = loop.create_future()
    g = loop.create_future()
    out = [f.cancel(42), f._cancel_message, g.cancel(None), g._cancel_message]
    out.append(attempt(f.result))
    try:
        f.result()
    except asyncio.CancelledError as e:
        out.append(exc(e))
    return out


@differential
def test_future_cancel_after_done(loop):
    out = []
    f = loop.create_future()
    f.set_result(1)
    out += [f.cancel(), f.cancelled(), f.result()]
    g = loop.create_future()
    g.set_exception(ValueError("x"))
    out += [g.cancel("m"), g._log_traceback, g._cancel_message]
    h = loop.create_future()
    out += [h.cancel("first"), h.cancel("second"), h._cancel_message]
    return out


@differential
def test_future_cancel_clears_log_traceback_even_when_done(loop):
    seen = record_handler(loop)
    f = loop.create_future()
    f.set_exception(ValueError("unseen"))
    before = f._log_traceback
    returned = f.cancel()
    after = f._log_traceback
    del f
    gc.collect()
    return [before, returned, after, seen]


@differential
def test_future_make_cancelled_error(loop):
    out = []
    f = loop.create_future()
    out.append(chain(f._make_cancelled_error()))
    f._cancel_message = "preset"
    out.append(chain(f._make_cancelled_error()))
    g = loop.create_future()
    g.cancel("bye")
    out.append(chain(g._make_cancelled_error()))
    out.append(chain(g._make_cancelled_error()))
    h = loop.create_future()
    h.set_result(1)
    out.append(chain(h._make_cancelled_error()))
    return out


@differential
def test_future_cancel_message_attribute_set_and_used(loop):
    f = loop.create_future()
    f._cancel_message = "before"
    out = [f._cancel_message, f.cancel(), f._cancel_message]
    f._cancel_message = "after"
    out.append(f._cancel_message)
    try:
        f.result()
    except asyncio.CancelledError as e:
        out.append(exc(e))
    f._cancel_message = None
    out.append(attempt(f.exception))
    g = loop.create_future()
    g._cancel_message = 7
    out.append(g._cancel_message)
    return out


@differential
def test_future_cancel_schedules_the_callbacks(loop):
    f = loop.create_future()
    got = []
    f.add_done_callback(lambda fut: got.append(("cb", fut is f, fut.cancelled())))
    f.cancel()
    inline = list(got)
    run_iterations(loop, 2)
    return [inline, got]


# ------------------------------------------------------------------ futures: attributes


@differential
def test_future_private_attributes_through_its_life(loop):
    def snap(f):
        return [f._state, r(f._result), exc(f._exception), f._log_traceback,
                f._asyncio_future_blocking, f._source_traceback, r(f._cancel_message),
                f._loop is loop, f.get_loop() is loop]

    out = []
    f = loop.create_future()
    out.append(snap(f))
    f.set_result("value")
    out.append(snap(f))
    g = loop.create_future()
    g.set_exception(KeyError("k"))
    out.append(snap(g))
    g.exception()
    out.append(snap(g))
    h = loop.create_future()
    h.cancel("c")
    out.append(snap(h))
    return out


@differential
def test_future_log_traceback_can_only_be_set_false(loop):
    class BadBool:
        def __bool__(self):
            raise ZeroDivisionError("no bool")

    f = loop.create_future()
    f.set_exception(ValueError("x"))
    out = [f._log_traceback]
    for value in (True, 1, "yes", BadBool(), False):
        out.append((attempt(setattr, f, "_log_traceback", value), f._log_traceback))
    g = loop.create_future()
    g.set_exception(ValueError("y"))
    g._log_traceback = 0
    out.append(g._log_traceback)
    return out


@differential
def test_future_log_traceback_false_silences_the_report(loop):
    seen = record_handler(loop)
    f = loop.create_future()
    f.set_exception(ValueError("silenced"))
    f._log_traceback = False
    del f
    gc.collect()
    return seen


@differential
def test_future_blocking_attribute_get_and_set(loop):
    class BadBool:
        def __bool__(self):
            raise ZeroDivisionError("no bool")

    f = loop.create_future()
    out = [f._asyncio_future_blocking]
    for value in (True, 0, "x", [], BadBool(), None):
        out.append((attempt(setattr, f, "_asyncio_future_blocking", value),
                    f._asyncio_future_blocking))
    return out


@differential
def test_future_deleting_settable_attributes(loop):
    f = loop.create_future()
    names = ["_log_traceback", "_asyncio_future_blocking", "_cancel_message"]
    return [(name, attempt(delattr, f, name)) for name in names]


@differential
def test_future_readonly_attributes_refuse_assignment(loop):
    f = loop.create_future()
    names = ["_state", "_result", "_exception", "_loop", "_callbacks", "_source_traceback"]
    out = [(name, attempt_type(setattr, f, name, 1)) for name in names]
    out += [(name, attempt_type(delattr, f, name)) for name in names]
    return out


def test_type_name_in_attribute_error_messages():
    """The native types are `swordfish.Future`/`swordfish.Task`: messages that name the
    object's type say so; the rest of each message is the C one."""

    def scenario(loop):
        f = loop.create_future()
        t = loop.create_task(noop())
        loop.run_until_complete(t)
        out = [attempt(getattr, f, "no_such_attribute"), attempt(getattr, t, "no_such_attribute"),
               attempt(setattr, f, "_state", 1), attempt(delattr, t, "_coro")]

        async def waiter(fut):
            await fut

        g = loop.create_future()
        w = loop.create_task(waiter(g))
        run_iterations(loop, 2)
        out.append(r(g._callbacks[0][0]))  # the waiting task's wake-up callable
        g.set_result(None)
        loop.run_until_complete(w)
        return out

    sf = require_swordfish()
    expected = _transcript(asyncio.new_event_loop, scenario)
    got = _transcript(sf.new_event_loop, scenario)
    renamed = [tuple(norm(x).replace("swordfish.", "_asyncio.") for x in item)
               if isinstance(item, tuple) else norm(item).replace("swordfish.", "_asyncio.")
               for item in got]
    assert renamed == expected
    assert any("swordfish.Future" in str(item) for item in got)


@differential
def test_future_class_assignment_refused(loop):
    class Other:
        pass

    f = loop.create_future()
    return [attempt(setattr, f, "__class__", Other), f.__class__ is asyncio.Future]


@differential
def test_future_arbitrary_attributes(loop):
    f = loop.create_future()
    f.foo = 1
    f.bar = [2]
    out = [f.foo, f.bar, attempt_type(lambda: sorted(vars(f))),
           attempt_type(lambda: sorted(f.__dict__))]
    del f.foo
    out.append(hasattr(f, "foo"))
    out.append(attempt_type(delattr, f, "foo"))
    out.append(attempt_type(lambda: sorted(vars(f))))
    return out


@differential
def test_future_get_loop(loop):
    f = loop.create_future()
    t = loop.create_task(noop())
    out = [f.get_loop() is loop, f._loop is loop, t.get_loop() is loop, t._loop is loop]
    loop.run_until_complete(t)
    return out


@differential
def test_future_isinstance_and_isfuture(loop):
    f = loop.create_future()
    return [
        isinstance(f, asyncio.Future),
        isinstance(f, asyncio.Task),
        asyncio.isfuture(f),
        f.__class__ is asyncio.Future,
        inspect.isawaitable(f),
        asyncio.iscoroutine(f),
        type(f).__name__,
        f.__class__.__name__,
    ]


@differential
def test_future_abc_membership(loop):
    f = loop.create_future()
    abcs = (collections.abc.Awaitable, collections.abc.Iterable, collections.abc.Iterator,
            collections.abc.Generator, collections.abc.Coroutine, collections.abc.Hashable)
    return [(a.__name__, isinstance(f, a)) for a in abcs]


def test_future_has_every_attribute_of_asyncio_future():
    """Every attribute of the C future, and `send` besides (the await protocol: from 3.12 a
    coroutine resumed with a value passes it on with `send`)."""

    def scenario(loop):
        f = loop.create_future()
        names = sorted(set(dir(asyncio.Future)) | {"__next__", "send", "throw", "close"})
        return [name for name in names if hasattr(f, name)]

    stdlib = scenario_on(asyncio.new_event_loop, scenario)
    assert "send" not in stdlib
    known_difference(scenario, stdlib, sorted(stdlib + ["send"]))


def test_task_has_every_attribute_of_asyncio_task():
    def scenario(loop):
        t = loop.create_task(noop())
        loop.run_until_complete(t)
        names = sorted(set(dir(asyncio.Task)) | {"__next__", "send", "throw", "close", "_step",
                                                 "_wakeup", "_num_cancels_requested"})
        return [name for name in names if hasattr(t, name)]

    stdlib = scenario_on(asyncio.new_event_loop, scenario)
    assert "send" not in stdlib
    known_difference(scenario, stdlib, sorted(stdlib + ["send"]))


@differential
def test_future_weakref_and_refcount_freeing(loop):
    with gc_disabled():
        f = loop.create_future()
        ref = weakref.ref(f)
        same = ref() is f
        del f
        pending_freed = ref() is None
        g = loop.create_future()
        g.add_done_callback(lambda fut: None)
        g.set_result(1)
        run_iterations(loop, 2)
        gref = weakref.ref(g)
        del g
        done_freed = gref() is None
    return [same, pending_freed, done_freed]


@differential
def test_future_argument_errors(loop):
    f = loop.create_future()

    def cb(fut):
        pass

    return [
        attempt(f.add_done_callback),
        attempt(f.add_done_callback, cb, None),
        attempt(lambda: f.add_done_callback(fn=cb)),
        attempt(lambda: f.add_done_callback(cb, ctx=None)),
        attempt(lambda: f.add_done_callback(cb, context=1)),
        attempt(f.remove_done_callback),
        attempt(f.cancel, 1, 2),
        attempt(lambda: f.cancel(message="x")),
        attempt(f.set_result),
        attempt(f.set_result, 1, 2),
        attempt(f.result, 1),
        attempt(f.done, 1),
        attempt(f.get_loop, 1),
        f.done(),
    ]


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
        try:
            t.result()
        except asyncio.CancelledError as e:
            out.append(chain(e))
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
    try:
        t.result()
    except asyncio.CancelledError as e:
        out.append(chain(e))
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
    try:
        t.result()
    except asyncio.CancelledError as e:
        out.append(chain(e))
    return out


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
    try:
        t.result()
    except asyncio.CancelledError as e:
        out.append(chain(e))
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
