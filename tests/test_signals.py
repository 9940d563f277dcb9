"""add_signal_handler / remove_signal_handler, and Ctrl-C handling in the
runners (in a child interpreter)."""

import asyncio
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import PY, child_env, run_on


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_signal_handler_runs_in_loop(loop):
    async def main():
        fut = loop.create_future()

        def handler(*args):
            fut.set_result((args, threading.get_ident(), loop.is_running()))

        loop.add_signal_handler(signal.SIGUSR1, handler, "a", 1)
        os.kill(os.getpid(), signal.SIGUSR1)
        result = await asyncio.wait_for(fut, 5)
        assert loop.remove_signal_handler(signal.SIGUSR1) is True
        return result

    args, ident, running = run_on(loop, main())
    assert args == ("a", 1)
    assert ident == threading.get_ident()
    assert running is True


def test_signal_wakes_parked_loop(loop):
    async def main():
        fut = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR2, lambda: fut.set_result(time.monotonic()))

        def sender():
            time.sleep(0.05)  # let the loop park; not needed for correctness
            os.kill(os.getpid(), signal.SIGUSR2)
            sent.append(time.monotonic())

        sent = []
        th = threading.Thread(target=sender)
        th.start()
        got = await asyncio.wait_for(fut, 20)
        th.join()
        loop.remove_signal_handler(signal.SIGUSR2)
        return got - sent[0] if sent else 0.0

    assert run_on(loop, main(), timeout=25) < 1.0


def test_signal_handler_repeated_signals(loop):
    async def main():
        calls = []
        done = loop.create_future()

        def handler():
            calls.append(1)
            if len(calls) < 3:
                os.kill(os.getpid(), signal.SIGUSR1)
            elif not done.done():
                done.set_result(None)

        loop.add_signal_handler(signal.SIGUSR1, handler)
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.wait_for(done, 5)
        loop.remove_signal_handler(signal.SIGUSR1)
        return len(calls)

    assert run_on(loop, main()) == 3


def test_replacing_signal_handler(loop):
    async def main():
        fut = loop.create_future()
        old = []
        loop.add_signal_handler(signal.SIGUSR1, old.append, "old")
        loop.add_signal_handler(signal.SIGUSR1, lambda: fut.set_result("new"))
        os.kill(os.getpid(), signal.SIGUSR1)
        res = await asyncio.wait_for(fut, 5)
        assert old == []
        assert loop.remove_signal_handler(signal.SIGUSR1) is True
        return res

    assert run_on(loop, main()) == "new"


def test_signal_before_run_is_delivered_when_loop_runs(loop):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "early")
    os.kill(os.getpid(), signal.SIGUSR1)
    assert got == []  # handlers run as loop callbacks, never inside the signal

    async def main():
        while not got:
            await asyncio.sleep(0.001)

    run_on(loop, main(), timeout=5)
    assert got == ["early"]
    loop.remove_signal_handler(signal.SIGUSR1)


def test_signal_handler_exception_is_reported(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        fut = loop.create_future()

        def bad():
            raise ValueError("in signal handler")

        loop.add_signal_handler(signal.SIGUSR1, bad)
        os.kill(os.getpid(), signal.SIGUSR1)
        while not contexts:
            await asyncio.sleep(0.001)
        # the loop keeps going and the handler stays installed
        loop.add_signal_handler(signal.SIGUSR1, fut.set_result, "second")
        os.kill(os.getpid(), signal.SIGUSR1)
        return await asyncio.wait_for(fut, 5)

    assert run_on(loop, main()) == "second"
    assert isinstance(contexts[0]["exception"], ValueError)
    loop.remove_signal_handler(signal.SIGUSR1)


def test_signal_handler_runs_in_registration_context(loop):
    import contextvars

    var = contextvars.ContextVar("sig_var", default="default")

    async def main():
        fut = loop.create_future()
        var.set("at-registration")
        loop.add_signal_handler(signal.SIGUSR1, lambda: fut.set_result(var.get()))
        var.set("later")
        os.kill(os.getpid(), signal.SIGUSR1)
        res = await asyncio.wait_for(fut, 5)
        loop.remove_signal_handler(signal.SIGUSR1)
        return res

    assert run_on(loop, main()) == "at-registration"


def test_sigint_handler_replaces_keyboard_interrupt(loop):
    async def main():
        fut = loop.create_future()
        loop.add_signal_handler(signal.SIGINT, fut.set_result, "handled")
        os.kill(os.getpid(), signal.SIGINT)
        res = await asyncio.wait_for(fut, 5)
        assert loop.remove_signal_handler(signal.SIGINT) is True
        return res

    assert run_on(loop, main()) == "handled"


def test_remove_signal_handler_restores_default(loop):
    loop.add_signal_handler(signal.SIGUSR1, print)
    assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None)
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert loop.remove_signal_handler(signal.SIGUSR1) is False


def test_remove_sigint_handler_restores_default_int_handler(loop):
    loop.add_signal_handler(signal.SIGINT, print)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_remove_never_added_returns_false(loop):
    assert loop.remove_signal_handler(signal.SIGUSR2) is False


def test_close_removes_signal_handlers(loop):
    loop.add_signal_handler(signal.SIGUSR1, print)
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_invalid_signals(loop):
    with pytest.raises(TypeError, match="sig must be an int"):
        loop.add_signal_handler("SIGUSR1", print)
    with pytest.raises(ValueError, match="invalid signal number"):
        loop.add_signal_handler(1000, print)
    with pytest.raises(ValueError, match="invalid signal number"):
        loop.add_signal_handler(0, print)
    with pytest.raises(RuntimeError, match=f"sig {int(signal.SIGKILL)} cannot be caught"):
        loop.add_signal_handler(signal.SIGKILL, print)
    with pytest.raises(TypeError, match="sig must be an int"):
        loop.remove_signal_handler("SIGUSR1")
    with pytest.raises(ValueError, match="invalid signal number"):
        loop.remove_signal_handler(1000)


def test_coroutine_handler_rejected(loop):
    async def handler():
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used with add_signal_handler"):
        loop.add_signal_handler(signal.SIGUSR1, handler)


def test_add_signal_handler_on_closed_loop(loop):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_signal_handler(signal.SIGUSR1, print)


def test_add_signal_handler_outside_main_thread(loop_factory):
    errors = []

    def worker():
        lp = loop_factory()
        try:
            lp.add_signal_handler(signal.SIGUSR1, print)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            lp.close()

    th = threading.Thread(target=worker)
    th.start()
    th.join(10)
    assert len(errors) == 1
    assert type(errors[0]) is RuntimeError
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


# ----------------------------------------------------------------- Ctrl-C

CTRL_C_SCRIPT = textwrap.dedent(
    """
    import asyncio, signal, sys
    # A shell that starts the test suite in the background leaves SIGINT ignored, and then
    # neither runner installs its Ctrl-C handling: restore Python's default first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    IMPL, RUNNER = sys.argv[1], sys.argv[2]
    if IMPL == "swordfish":
        import swordfish
        factory = swordfish.new_event_loop
        run = swordfish.run
    else:
        factory = asyncio.new_event_loop
        run = asyncio.run

    async def main():
        try:
            print("ready", flush=True)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            print("main-cancelled", flush=True)
            raise
        print("not interrupted", flush=True)

    try:
        if RUNNER == "run":
            run(main())
        elif RUNNER == "asyncio.run-loop_factory":
            asyncio.run(main(), loop_factory=factory)
        elif RUNNER == "Runner-loop_factory":
            with asyncio.Runner(loop_factory=factory) as r:
                r.run(main())
        else:
            raise SystemExit("unknown runner " + RUNNER)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(0)
    """
)


def _read_line(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    return proc.stdout.readline()


@pytest.mark.parametrize("runner", ["run", "asyncio.run-loop_factory", "Runner-loop_factory"])
def test_ctrl_c_cancels_main_task_and_raises_keyboard_interrupt(impl, runner):
    """SIGINT while main() awaits: main is cancelled, KeyboardInterrupt is
    raised out of the runner (``run`` is asyncio.run or swordfish.run)."""
    if runner == "asyncio.run-loop_factory" and PY < (3, 12):
        pytest.skip("asyncio.run(loop_factory=) needs Python 3.12+")
    if runner == "Runner-loop_factory" and PY < (3, 11):
        pytest.skip("asyncio.Runner needs Python 3.11+")
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, impl, runner],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        line = _read_line(proc, 20)
        if line != "ready\n":
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"child did not get ready: {line!r} {out!r} {err!r}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = out.split()
    if impl == "asyncio" and PY < (3, 11):
        # 3.10's asyncio.run lets KeyboardInterrupt escape the loop, then
        # cancels the remaining tasks; swordfish.run behaves like 3.11+.
        assert "KeyboardInterrupt" in lines, (out, err)
    else:
        assert lines == ["main-cancelled", "KeyboardInterrupt"], (out, err)
    assert "not interrupted" not in out
    assert proc.returncode == 0, err
