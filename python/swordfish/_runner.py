"""Entry points: `run`, `new_event_loop`, `install` and the event loop policy."""

import asyncio
import signal
import threading

from ._compat import PY311, PY312
from ._loop import Loop


def new_event_loop():
    """A new swordfish event loop."""
    return Loop()


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """The default policy, creating swordfish loops."""

    def new_event_loop(self):
        return Loop()


def install():
    """Make swordfish the loop of `asyncio.new_event_loop()`, `asyncio.run()`, etc."""
    asyncio.set_event_loop_policy(EventLoopPolicy())


def run(main, *, debug=None):
    """Run coroutine `main` on a new swordfish loop and return its result, like `asyncio.run`."""
    if PY312:
        return asyncio.run(main, debug=debug, loop_factory=new_event_loop)
    if asyncio.events._get_running_loop() is not None:
        # Checked before a loop exists, so that nothing is left to clean up.
        raise RuntimeError("swordfish.run() cannot be called from a running event loop")
    if PY311:
        with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
            return runner.run(main)
    return _run_py310(main, debug)


def _cancel_all_tasks(loop):
    pending = asyncio.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    for task in pending:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during asyncio.run() shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )


def _run_py310(main, debug):
    """asyncio.run for 3.10 (which has no loop_factory), with 3.11's Ctrl-C handling: the
    first SIGINT cancels the main task, and KeyboardInterrupt is raised once it has ended."""
    if not asyncio.iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    loop = new_event_loop()
    interrupted = []
    task = None
    old_handler = None

    def on_sigint(signum, frame):
        interrupted.append(signum)
        if len(interrupted) == 1 and task is not None and not task.done():
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)
            return
        raise KeyboardInterrupt()

    try:
        asyncio.set_event_loop(loop)
        if debug is not None:
            loop.set_debug(debug)
        task = loop.create_task(main)
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            old_handler = signal.signal(signal.SIGINT, on_sigint)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt()
            raise
    finally:
        if old_handler is not None and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
