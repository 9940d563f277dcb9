"""`swordfish.Loop`: the asyncio event loop whose scheduling, timers and I/O live in Rust.

The native base class `LoopCore` owns the ready queue, the timer queue, the I/O registry and
the loop iteration. This class adds lifecycle bookkeeping (running-loop registration,
async-generator hooks, close), and composes the mixins for errors, executors and DNS,
sockets, signals and the networking API.
"""

import asyncio
import os
import sys
import threading
import warnings
import weakref
from asyncio import constants, coroutines, events, futures, tasks
from asyncio.log import logger

from . import _native
from ._compat import TASK_TAKES_CONTEXT
from ._connections import ConnectionsMixin
from ._datagram import DatagramMixin
from ._datagram_transport import DatagramTransportMixin
from ._errors import ErrorsMixin
from ._executor import ExecutorMixin
from ._pipes import PipesMixin
from ._servers import ServersMixin
from ._signals import SignalsMixin
from ._sendfile import SendfileMixin
from ._sockets import SocketsMixin
from ._subprocess import SubprocessMixin
from ._tls import TlsMixin
from ._transports import TransportsMixin

__all__ = ["Loop"]


def _stop_when_done(fut):
    # Like the stdlib: a SystemExit/KeyboardInterrupt result propagates out of the loop by
    # itself, so don't stop it a second time.
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return
    futures._get_loop(fut).stop()


class Loop(
    ErrorsMixin,
    ExecutorMixin,
    SocketsMixin,
    SignalsMixin,
    ConnectionsMixin,
    ServersMixin,
    DatagramMixin,
    DatagramTransportMixin,
    TransportsMixin,
    PipesMixin,
    SubprocessMixin,
    TlsMixin,
    SendfileMixin,
    _native.LoopCore,
    asyncio.AbstractEventLoop,
):
    """A drop-in asyncio event loop with a native core."""

    def __init__(self):
        self._thread_id = None
        self._asyncgens = weakref.WeakSet()
        self._asyncgens_shutdown_called = False
        self._coroutine_origin_tracking_enabled = False
        self._coroutine_origin_tracking_saved_depth = None
        self._init_errors()
        self._init_executor()
        self._init_signals()
        self.set_debug(coroutines._is_debug_mode())
        # Native futures and tasks (see src/tasks) schedule their callbacks inside the loop,
        # so a subclass that overrides call_soon gets the C ones, which go through it.
        self._set_native_tasks(
            os.environ.get("SWORDFISH_NATIVE_TASKS", "1") != "0"
            and type(self).call_soon is _native.LoopCore.call_soon
        )

    def __repr__(self):
        return (
            f"<{type(self).__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    def __del__(self, _warn=warnings.warn):
        if not self.is_closed():
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # -- running and stopping --------------------------------------------------------------

    def _check_closed(self):
        if self.is_closed():
            raise RuntimeError("Event loop is closed")

    def _check_running(self):
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _check_thread(self):
        if self._thread_id is not None and self._thread_id != threading.get_ident():
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )

    def run_forever(self):
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self.get_debug())
        old_hooks = sys.get_asyncgen_hooks()
        try:
            self._thread_id = threading.get_ident()
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook, finalizer=self._asyncgen_finalizer_hook
            )
            events._set_running_loop(self)
            self._run()
        finally:
            self._thread_id = None
            events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_hooks)

    def run_until_complete(self, future):
        self._check_closed()
        self._check_running()
        new_task = not futures.isfuture(future)
        future = tasks.ensure_future(future, loop=self)
        if new_task:
            # The caller has no reference to the task: don't warn when it's destroyed pending.
            future._log_destroy_pending = False
        future.add_done_callback(_stop_when_done)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                # Mark the exception retrieved: it propagates to the caller now.
                future.exception()
            raise
        finally:
            future.remove_done_callback(_stop_when_done)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def close(self):
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        if self.get_debug():
            logger.debug("Close %r", self)
        self._close_core()
        self._close_executor()
        self._close_signals()

    # -- readiness callbacks ---------------------------------------------------------------

    def add_reader(self, fd, callback, *args):
        self._add_reader(fd, callback, *args)

    def remove_reader(self, fd):
        return self._remove_reader(fd)

    def add_writer(self, fd, callback, *args):
        self._add_writer(fd, callback, *args)

    def remove_writer(self, fd):
        return self._remove_writer(fd)

    # -- debug mode ------------------------------------------------------------------------

    def set_debug(self, enabled):
        self._set_debug_flag(bool(enabled))
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _set_coroutine_origin_tracking(self, enabled):
        if bool(enabled) == bool(self._coroutine_origin_tracking_enabled):
            return
        if enabled:
            self._coroutine_origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(constants.DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._coroutine_origin_tracking_saved_depth)
        self._coroutine_origin_tracking_enabled = enabled

    # -- tasks -----------------------------------------------------------------------------

    def _create_task_slow(self, coro, name=None, context=None, **kwargs):
        """create_task() with a task factory, a context, extra keywords or in debug mode
        (the native create_task handles the plain case)."""
        self._check_closed()
        factory = self.get_task_factory()
        if factory is None:
            if context is not None and not TASK_TAKES_CONTEXT:
                task = context.run(tasks.Task, coro, loop=self, name=name, **kwargs)
            elif context is not None:
                task = tasks.Task(coro, loop=self, name=name, context=context, **kwargs)
            else:
                task = tasks.Task(coro, loop=self, name=name, **kwargs)
            if task._source_traceback:
                del task._source_traceback[-1]
        else:
            if context is None:
                task = factory(self, coro, **kwargs)
            else:
                task = factory(self, coro, context=context, **kwargs)
            if name is not None:
                task.set_name(name)
        try:
            return task
        finally:
            del task  # no reference cycle through a raised exception's traceback

    # -- asynchronous generators -----------------------------------------------------------

    def _asyncgen_firstiter_hook(self, agen):
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning,
                source=self,
            )
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen):
        self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    async def shutdown_asyncgens(self):
        self._asyncgens_shutdown_called = True
        if not len(self._asyncgens):
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await tasks.gather(*[ag.aclose() for ag in closing], return_exceptions=True)
        for result, agen in zip(results, closing):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )
