"""Differential tests of swordfish's native ``Future`` against the C type: its result,
exception and cancellation, and its attributes (tests/differential.py runs each scenario on
both loops and compares the transcripts)."""

import asyncio
import collections.abc
import gc
import inspect
import weakref

from conftest import gc_disabled, require_swordfish, run_iterations
from differential import (
    attempt, attempt_type, cancellation, chain, differential, exc, known_difference, noop, norm,
    r, record_handler, scenario_on, tb_names,
)


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
        out.append(cancellation(call))
    return out


@differential
def test_future_cancel_with_message(loop):
    f = loop.create_future()
    out = [f.cancel(msg="stop"), f._cancel_message]
    for call in (f.result, f.exception, f.result):
        out.append(cancellation(call))
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
    expected = scenario_on(asyncio.new_event_loop, scenario)
    got = scenario_on(sf.new_event_loop, scenario)
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
