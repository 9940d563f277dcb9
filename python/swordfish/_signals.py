"""Unix signal handlers on the loop: `add_signal_handler` / `remove_signal_handler`.

The C-level handler of CPython writes each signal number to a wakeup socket
(`signal.set_wakeup_fd`); the loop watches that socket, so a signal wakes a waiting loop and
the Python callback runs on the loop thread like any other callback.
"""

import errno
import signal
import socket
import sys
import warnings
from asyncio import coroutines, events
from asyncio.log import logger


def _noop_handler(signum, frame):
    """The Python-level handler: the work happens on the loop, from the wakeup socket."""


def _check_signal(sig):
    if not isinstance(sig, int):
        raise TypeError(f"sig must be an int, not {sig!r}")
    if sig not in signal.valid_signals():
        raise ValueError(f"invalid signal number {sig}")


def _clear_wakeup_fd():
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError) as exc:
        logger.info("set_wakeup_fd(-1) failed: %s", exc)


class SignalsMixin:
    def _init_signals(self):
        self._signal_handlers = {}
        self._signal_rsock = None
        self._signal_wsock = None

    def _open_signal_socket(self):
        if self._signal_rsock is not None:
            return
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        wsock.setblocking(False)
        self._signal_rsock, self._signal_wsock = rsock, wsock
        self._add_reader(rsock.fileno(), self._read_signals)

    def _read_signals(self):
        while True:
            try:
                data = self._signal_rsock.recv(4096)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            if not data:
                return
            for signum in data:
                if signum:
                    self._dispatch_signal(signum)

    def _dispatch_signal(self, sig):
        handle = self._signal_handlers.get(sig)
        if handle is None:
            return  # removed meanwhile
        if handle._cancelled:
            self.remove_signal_handler(sig)
        else:
            self.call_soon(handle._run)

    def add_signal_handler(self, sig, callback, *args):
        if coroutines.iscoroutine(callback) or coroutines.iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        _check_signal(sig)
        self._check_closed()
        self._open_signal_socket()
        try:
            # Raises ValueError outside the main thread.
            signal.set_wakeup_fd(self._signal_wsock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc))
        # A stdlib Handle: it copies the current context and reports its own errors.
        self._signal_handlers[sig] = events.Handle(callback, args, self, None)
        try:
            signal.signal(sig, _noop_handler)
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                _clear_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught")
            raise

    def remove_signal_handler(self, sig):
        _check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught")
            raise
        if not self._signal_handlers:
            _clear_wakeup_fd()
        return True

    def _close_signals(self):
        if sys.is_finalizing():
            if self._signal_handlers:
                warnings.warn(
                    f"Closing the loop {self!r} on interpreter shutdown stage, "
                    f"skipping signal handlers removal",
                    ResourceWarning,
                    source=self,
                )
                self._signal_handlers.clear()
        else:
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        for sock in (self._signal_rsock, self._signal_wsock):
            if sock is not None:
                sock.close()
        self._signal_rsock = self._signal_wsock = None
