"""swordfish's own entry points: Loop, new_event_loop, run, install,
EventLoopPolicy, and its use through asyncio.run / asyncio.Runner /
unittest.IsolatedAsyncioTestCase.  swordfish only."""

import asyncio
import contextvars
import gc
import os
import sys
import time
import unittest
import warnings

import pytest

from conftest import PY, run_on

var = contextvars.ContextVar("api_var", default="default")


@pytest.fixture
def restore_policy():
    if not hasattr(asyncio, "get_event_loop_policy"):
        pytest.skip("no event loop policies on this Python")
    old = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(old)


# ------------------------------------------------------------- the loop


def test_loop_class(sf):
    assert issubclass(sf.Loop, asyncio.AbstractEventLoop)
    a, b = sf.new_event_loop(), sf.Loop()
    try:
        assert type(a) is sf.Loop and type(b) is sf.Loop
        assert a is not b
        assert not a.is_running() and not a.is_closed()
    finally:
        a.close()
        b.close()


def test_loop_repr(sf_loop):
    r = repr(sf_loop)
    assert "running=False" in r and "closed=False" in r


# ------------------------------------------------------------ swordfish.run


def test_run_returns_result_on_swordfish_loop(sf):
    seen = {}

    async def main(x):
        loop = asyncio.get_running_loop()
        seen["loop"] = loop
        seen["task"] = asyncio.current_task()
        await asyncio.sleep(0.001)
        return x * 2

    assert sf.run(main(21)) == 42
    assert type(seen["loop"]) is sf.Loop
    assert seen["task"] is not None
    assert seen["loop"].is_closed()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


@pytest.mark.parametrize("debug", [True, False, None])
def test_run_debug_flag(sf, debug):
    async def main():
        return asyncio.get_running_loop().get_debug()

    env_debug = bool(sys.flags.dev_mode or (
        not sys.flags.ignore_environment and os.environ.get("PYTHONASYNCIODEBUG")
    ))
    expected = bool(debug) if debug is not None else env_debug
    assert sf.run(main(), debug=debug) is expected


def test_run_propagates_exception(sf):
    async def main():
        await asyncio.sleep(0)
        raise KeyError("propagated")

    with pytest.raises(KeyError, match="propagated"):
        sf.run(main())


def test_run_cleans_up_tasks_asyncgens_and_executor(sf):
    events = []

    async def leftover():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("leftover-cancelled")
            raise

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            events.append("agen-closed")

    gens = []

    def work():
        time.sleep(0.05)
        events.append("executor-work-done")

    async def main():
        asyncio.get_running_loop().create_task(leftover())
        g = agen()
        gens.append(g)  # keep alive: only shutdown_asyncgens can close it
        await g.__anext__()
        asyncio.get_running_loop().run_in_executor(None, work)
        await asyncio.sleep(0)
        return "main-done"

    assert sf.run(main()) == "main-done"
    assert "leftover-cancelled" in events
    assert "agen-closed" in events
    assert "executor-work-done" in events


@pytest.mark.parametrize("runner", ["asyncio.run", "swordfish.run"])
def test_run_inside_running_loop_raises_cleanly(sf, runner):
    run = asyncio.run if runner == "asyncio.run" else sf.run

    async def inner():
        return 1

    async def main():
        coro = inner()
        try:
            with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
                run(coro)
        finally:
            coro.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sf.run(main())
        gc.collect()
    # refusing to run must not leave half-created coroutines or loops behind
    assert [str(w.message) for w in caught] == []


def test_run_rejects_non_coroutine(sf):
    try:
        asyncio.run(42)
    except Exception as e:  # noqa: BLE001
        expected = type(e)
    with pytest.raises(expected):
        sf.run(42)


def test_run_keyboard_interrupt_from_task(sf):
    async def main():
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sf.run(main())


# ------------------------------------------------------ install / policy


def test_event_loop_policy_class(sf):
    assert issubclass(sf.EventLoopPolicy, asyncio.DefaultEventLoopPolicy)
    loop = sf.EventLoopPolicy().new_event_loop()
    try:
        assert type(loop) is sf.Loop
    finally:
        loop.close()


def test_install_sets_policy(sf, restore_policy):
    sf.install()
    assert isinstance(asyncio.get_event_loop_policy(), sf.EventLoopPolicy)
    loop = asyncio.new_event_loop()
    try:
        assert type(loop) is sf.Loop
    finally:
        loop.close()

    async def main():
        return type(asyncio.get_running_loop())

    assert asyncio.run(main()) is sf.Loop


def test_asyncio_run_with_loop_factory(sf):
    if PY < (3, 12):
        pytest.skip("asyncio.run(loop_factory=) needs Python 3.12+")

    async def main():
        await asyncio.sleep(0.001)
        return type(asyncio.get_running_loop())

    assert asyncio.run(main(), loop_factory=sf.new_event_loop) is sf.Loop
    assert asyncio.run(main(), loop_factory=sf.Loop) is sf.Loop


def test_asyncio_runner_with_loop_factory(sf):
    if PY < (3, 11):
        pytest.skip("asyncio.Runner needs Python 3.11+")

    async def first():
        var.set("kept between runs")
        return asyncio.get_running_loop()

    async def second():
        return var.get(), asyncio.get_running_loop()

    with asyncio.Runner(loop_factory=sf.new_event_loop, debug=True) as runner:
        loop = runner.get_loop()
        assert type(loop) is sf.Loop
        assert loop.get_debug() is True
        assert runner.run(first()) is loop
        value, loop2 = runner.run(second())
        assert loop2 is loop
        assert value == "kept between runs"
    assert loop.is_closed()


def test_isolated_asyncio_test_case(sf, restore_policy):
    log = []

    class Case(unittest.IsolatedAsyncioTestCase):
        if PY >= (3, 13):
            loop_factory = staticmethod(sf.new_event_loop)

        async def asyncSetUp(self):
            log.append(("setup", type(asyncio.get_running_loop())))
            self.addAsyncCleanup(self.cleanup)

        async def cleanup(self):
            log.append("cleanup")

        async def test_body(self):
            loop = asyncio.get_running_loop()
            log.append(("test", type(loop), loop.get_debug()))
            fut = loop.create_future()
            loop.call_later(0.001, fut.set_result, "ok")
            self.assertEqual(await fut, "ok")

        async def asyncTearDown(self):
            log.append("teardown")

    if PY < (3, 13):
        sf.install()
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert result.wasSuccessful(), result.errors + result.failures
    assert result.testsRun == 1
    assert log == [
        ("setup", sf.Loop),
        ("test", sf.Loop, True),  # IsolatedAsyncioTestCase runs in debug mode
        "teardown",
        "cleanup",
    ]


def test_isolated_asyncio_test_case_via_install(sf, restore_policy):
    ran = []

    class Case(unittest.IsolatedAsyncioTestCase):
        async def test_body(self):
            ran.append(type(asyncio.get_running_loop()))

    sf.install()
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert result.wasSuccessful(), result.errors + result.failures
    assert ran == [sf.Loop]
