"""Exception handling and debug-mode reporting: the stdlib's messages and log format."""

import sys
import traceback
from asyncio import coroutines, format_helpers, tasks
from asyncio.log import logger

from ._compat import PY313


def _format_callback(func, args, debug):
    if PY313:
        return format_helpers._format_callback_source(func, args, debug=debug)
    return format_helpers._format_callback_source(func, args)


def _describe_handle(handle):
    """How the stdlib names a handle in its slow-callback warning."""
    owner = getattr(handle._callback, "__self__", None)
    if isinstance(owner, tasks.Task):
        return repr(owner)
    return str(handle)


class ErrorsMixin:
    """set/get/call_exception_handler, default_exception_handler and debug-mode checks."""

    def _init_errors(self):
        self._exception_handler = None
        self._current_handle = None
        self.slow_callback_duration = 0.1

    def get_exception_handler(self):
        return self._exception_handler

    def set_exception_handler(self, handler):
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context):
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info = (type(exception), exception, exception.__traceback__) if exception is not None else False
        current = self._current_handle
        if "source_traceback" not in context and current is not None and current._source_traceback:
            context["handle_traceback"] = current._source_traceback
        lines = [message]
        for key in sorted(context):
            if key in ("message", "exception"):
                continue
            value = context[key]
            if key == "source_traceback":
                stack = "".join(traceback.format_list(value)).rstrip()
                value = "Object created at (most recent call last):\n" + stack
            elif key == "handle_traceback":
                stack = "".join(traceback.format_list(value)).rstrip()
                value = "Handle created at (most recent call last):\n" + stack
            else:
                value = repr(value)
            lines.append(f"{key}: {value}")
        logger.error("\n".join(lines), exc_info=exc_info)

    def call_exception_handler(self, context):
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            # Run the handler in the context of the object that failed, as 3.12+ does.
            owner = context.get("task") or context.get("future") or context.get("handle")
            ctx = owner.get_context() if hasattr(owner, "get_context") else None
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(handler, self, context)
            else:
                handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {"message": "Unhandled error in exception handler", "exception": exc, "context": context}
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an unexpected error "
                    "in custom exception handler",
                    exc_info=True,
                )

    # -- called from the native loop -------------------------------------------------------

    def _report_callback_error(self, handle, func, args, exc):
        source = _format_callback(func, args, self.get_debug())
        context = {"message": f"Exception in callback {source}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    def _check_slow_callback(self, handle, elapsed):
        if elapsed >= self.slow_callback_duration:
            logger.warning("Executing %s took %.3f seconds", _describe_handle(handle), elapsed)

    def _debug_prepare(self, callback, method, check_thread):
        """Debug-mode checks before scheduling; returns the caller's stack."""
        if check_thread:
            self._check_thread()
        self._check_callback(callback, method)
        return format_helpers.extract_stack(sys._getframe(1))

    def _check_callback(self, callback, method):
        if coroutines.iscoroutine(callback) or coroutines.iscoroutinefunction(callback):
            raise TypeError(f"coroutines cannot be used with {method}()")
        if not callable(callback):
            raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")
