"""The harness of the differential tests of swordfish's native ``Future`` and ``Task``
(tests/test_native_*.py) against the C types.

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
import contextvars
import inspect
import re
import sys
import types

import pytest

from conftest import require_swordfish, run_iterations


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
    object's type, which differs: see ``test_type_name_in_attribute_error_messages`` in
    test_native_futures.py)."""
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


def cancellation(call):
    """The ``CancelledError`` that ``call()`` raised, with its chain; None if it raised none."""
    try:
        call()
    except asyncio.CancelledError as e:
        return exc(e), chain(e)
    return None


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
