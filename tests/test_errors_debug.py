"""Exception handlers, debug mode, slow callbacks, thread checks."""

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import child_env, run_iterations, run_on


class Boom(Exception):
    pass


def raise_boom():
    raise Boom("callback failed")


# --------------------------------------------------- exceptions in callbacks


def test_callback_exception_reported_with_context(loop):
    contexts = []

    def handler(lp, ctx):
        contexts.append((lp, ctx))

    loop.set_exception_handler(handler)
    after = []
    h = loop.call_soon(raise_boom)
    loop.call_soon(after.append, "next")
    run_iterations(loop, 2)
    assert after == ["next"]
    assert len(contexts) == 1
    lp, ctx = contexts[0]
    assert lp is loop
    assert isinstance(ctx["message"], str) and "Exception in callback" in ctx["message"]
    assert isinstance(ctx["exception"], Boom)
    assert ctx["handle"] is h


def test_timer_callback_exception_reported(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    fut = loop.create_future()
    h = loop.call_later(0.001, raise_boom)
    loop.call_later(0.01, fut.set_result, None)
    run_on(loop, fut)
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], Boom)
    assert contexts[0]["handle"] is h


def test_threadsafe_callback_exception_reported(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    h = loop.call_soon_threadsafe(raise_boom)
    run_iterations(loop, 2)
    assert [type(c["exception"]) for c in contexts] == [Boom]
    assert contexts[0]["handle"] is h


def test_many_failing_callbacks_never_stop_the_loop(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    for _ in range(100):
        loop.call_soon(raise_boom)
    assert run_on(loop, asyncio.sleep(0.001, "alive")) == "alive"
    assert len(contexts) == 100


def test_default_handler_logs_to_asyncio_logger(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.call_soon(raise_boom)
    run_iterations(loop, 2)
    records = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.ERROR]
    assert len(records) == 1
    assert "Exception in callback" in records[0].getMessage()
    assert records[0].exc_info is not None and records[0].exc_info[0] is Boom


# --------------------------------------------------------- handler API


def test_get_set_exception_handler(loop):
    assert loop.get_exception_handler() is None

    def handler(lp, ctx):
        pass

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None


def test_set_exception_handler_rejects_non_callable(loop):
    with pytest.raises(TypeError, match="A callable object or None is expected"):
        loop.set_exception_handler("not callable")


def test_call_exception_handler_uses_custom_handler(loop):
    got = []
    loop.set_exception_handler(lambda lp, ctx: got.append((lp, ctx)))
    ctx = {"message": "custom", "extra": 1}
    loop.call_exception_handler(ctx)
    assert got == [(loop, ctx)]


def test_failing_custom_handler_is_logged_not_raised(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")

    def bad_handler(lp, ctx):
        raise ValueError("handler broke")

    loop.set_exception_handler(bad_handler)
    loop.call_exception_handler({"message": "original"})  # must not raise
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("Unhandled error in exception handler" in m for m in msgs), msgs


def test_failing_handler_for_callback_exception_is_logged(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")

    def bad_handler(lp, ctx):
        raise ValueError("handler broke")

    loop.set_exception_handler(bad_handler)
    after = []
    loop.call_soon(raise_boom)
    loop.call_soon(after.append, "loop continued")
    run_iterations(loop, 2)
    assert after == ["loop continued"]
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("Unhandled error in exception handler" in m for m in msgs), msgs


def test_keyboard_interrupt_in_exception_handler_propagates(loop):
    def handler(lp, ctx):
        raise KeyboardInterrupt

    loop.set_exception_handler(handler)
    loop.call_soon(raise_boom)
    loop.call_later(5, loop.stop)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    assert not loop.is_running()


def test_default_exception_handler_formats_context(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    exc = Boom("explicit")
    loop.default_exception_handler({"message": "Something bad", "exception": exc, "foo": "bar"})
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    msg = records[0].getMessage()
    assert msg.startswith("Something bad")
    assert "foo: 'bar'" in msg
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info[1] is exc


def test_default_exception_handler_without_message(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.default_exception_handler({})
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert msgs == ["Unhandled exception in event loop"]


def test_call_exception_handler_without_custom_handler_logs(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.call_exception_handler({"message": "via call_exception_handler"})
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert msgs == ["via call_exception_handler"]


def test_subclass_default_exception_handler_is_used(loop):
    # A custom handler can delegate to the default one
    seen = []

    def handler(lp, ctx):
        seen.append(ctx["message"])
        lp.default_exception_handler(ctx)

    loop.set_exception_handler(handler)
    loop.call_soon(raise_boom)
    run_iterations(loop, 2)
    assert len(seen) == 1 and "Exception in callback" in seen[0]


# --------------------------------------------------------------- debug


def test_debug_default_and_toggle(loop):
    expected = bool(sys.flags.dev_mode or (
        not sys.flags.ignore_environment and os.environ.get("PYTHONASYNCIODEBUG")
    ))
    assert loop.get_debug() is expected
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_source_traceback_in_debug(loop):
    loop.set_debug(True)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    loop.call_soon(raise_boom)  # this line must appear in the source traceback
    run_iterations(loop, 2)
    assert len(contexts) == 1
    tb = contexts[0].get("source_traceback")
    assert tb, "no source_traceback in debug mode"
    assert any(frame.name == "test_source_traceback_in_debug" for frame in tb)


def test_slow_callback_duration_default(loop):
    assert loop.slow_callback_duration == 0.1
    loop.slow_callback_duration = 0.5
    assert loop.slow_callback_duration == 0.5


def _busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_slow_callback_warning_in_debug(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0.05

    def slow_cb():
        _busy(0.1)

    def fast_cb():
        pass

    loop.call_soon(slow_cb)
    loop.call_soon(fast_cb)
    run_iterations(loop, 2)
    warnings = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    msg = warnings[0].getMessage()
    assert msg.startswith("Executing ")
    assert "slow_cb" in msg
    assert "took" in msg and "seconds" in msg


def test_no_slow_callback_warning_without_debug(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.set_debug(False)
    loop.slow_callback_duration = 0.01
    loop.call_soon(_busy, 0.03)
    run_iterations(loop, 2)
    assert [r for r in caplog.records if r.levelno == logging.WARNING] == []


def test_slow_task_step_warning_in_debug(loop, caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0.02

    async def slow_step():
        _busy(0.05)

    run_on(loop, slow_step())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("Executing <Task") and "took" in m for m in warnings), warnings


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at"])
def test_non_threadsafe_call_from_other_thread_in_debug(loop, method):
    loop.set_debug(True)
    calls = {
        "call_soon": lambda: loop.call_soon(print),
        "call_later": lambda: loop.call_later(1, print),
        "call_at": lambda: loop.call_at(loop.time() + 1, print),
    }

    def from_thread():
        try:
            h = calls[method]()
        except RuntimeError as e:
            return str(e)
        h.cancel()
        return None

    async def main():
        return await loop.run_in_executor(None, from_thread)

    err = run_on(loop, main())
    assert err == "Non-thread-safe operation invoked on an event loop other than the current one"


def test_call_soon_threadsafe_from_other_thread_in_debug_is_fine(loop):
    loop.set_debug(True)

    async def main():
        fut = loop.create_future()
        th = threading.Thread(target=loop.call_soon_threadsafe, args=(fut.set_result, "ok"))
        th.start()
        res = await fut
        th.join()
        return res

    assert run_on(loop, main()) == "ok"


def test_debug_loop_not_running_allows_other_thread(loop):
    # the thread check only applies while the loop runs
    loop.set_debug(True)
    errors = []

    def worker():
        try:
            loop.call_soon(print).cancel()
        except RuntimeError as e:
            errors.append(e)

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert errors == []


DEBUG_ENV_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    if sys.argv[1] == "swordfish":
        import swordfish
        loop = swordfish.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    print(loop.get_debug())
    loop.close()
    """
)


@pytest.mark.parametrize(
    "env,args,expected",
    [
        ({"PYTHONASYNCIODEBUG": "1"}, [], "True"),
        ({}, [], "False"),
        ({}, ["-X", "dev"], "True"),
        ({"PYTHONASYNCIODEBUG": "1"}, ["-E"], "False"),
    ],
    ids=["PYTHONASYNCIODEBUG=1", "no-env", "dev-mode", "ignore-environment"],
)
def test_debug_from_environment(impl, env, args, expected):
    child = child_env(**env)
    if "-E" in args:
        # -E ignores PYTHONPATH too: pass the import path explicitly
        script = f"import sys; sys.path[:0] = {child['PYTHONPATH'].split(os.pathsep)!r}\n" + DEBUG_ENV_SCRIPT
    else:
        script = DEBUG_ENV_SCRIPT
    out = subprocess.run(
        [sys.executable, *args, "-c", script, impl],
        capture_output=True, text=True, env=child, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected
