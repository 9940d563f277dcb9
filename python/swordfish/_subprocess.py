"""Child processes: `loop.subprocess_exec`, `loop.subprocess_shell` and their transport.

The child is started by `subprocess.Popen`. Each of its standard streams that is a pipe is
connected with the loop's `connect_write_pipe` (stdin) or `connect_read_pipe` (stdout,
stderr), as the stdlib does, with a protocol that forwards to the subprocess protocol as
`pipe_data_received` / `pipe_connection_lost`.

The child's exit is watched without a helper thread and without SIGCHLD: a pidfd
(`os.pidfd_open`) becomes readable when the child exits; the loop's reader callback then
reaps it with `waitpid(WNOHANG)`. Where pidfds are not available (kernels before 5.3, or a
seccomp filter refuses them), a daemon thread per child waits for the exit without reaping
(`waitid(WNOWAIT)`), then reaps it and passes the status to the loop with
`call_soon_threadsafe`. Either way the child is reaped exactly once, by the watcher, and is
never signalled after that (its pid could belong to another process by then).

The protocol sees `connection_made` once every pipe is connected, then `pipe_data_received`,
`pipe_connection_lost` and `process_exited` as they happen, and `connection_lost(None)` last,
once the child has exited and every pipe is closed.
"""

import functools
import os
import signal
import subprocess
import sys
import threading
import warnings
from asyncio import protocols, transports
from asyncio.log import logger

__all__ = ["SubprocessTransport", "SubprocessMixin"]

# Python 3.11 changed when `Process.wait()` returns: before, as soon as the child has exited;
# since, only once the transport is done (the child has exited and every pipe is closed).
_WAIT_FOR_PIPES = sys.version_info >= (3, 11)

_pidfd_works = None


def _pidfd_available():
    """Whether this system can open pidfds (tried once)."""
    global _pidfd_works
    if _pidfd_works is None:
        works = hasattr(os, "pidfd_open")
        if works:
            try:
                os.close(os.pidfd_open(os.getpid()))
            except OSError:
                works = False
        _pidfd_works = works
    return _pidfd_works


def _describe_stdio(value):
    if value == subprocess.PIPE:
        return "<pipe>"
    if value == subprocess.STDOUT:
        return "<stdout>"
    if value == subprocess.DEVNULL:
        return "<devnull>"
    return repr(value)


def _log_spawn(what, stdin, stdout, stderr):
    parts = [what]
    if stdin is not None:
        parts.append(f"stdin={_describe_stdio(stdin)}")
    if stdout is not None and stderr == subprocess.STDOUT:
        parts.append(f"stdout=stderr={_describe_stdio(stdout)}")
    else:
        if stdout is not None:
            parts.append(f"stdout={_describe_stdio(stdout)}")
        if stderr is not None:
            parts.append(f"stderr={_describe_stdio(stderr)}")
    logger.debug(" ".join(parts))


def _kill_quietly(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# -- watching the child's exit -------------------------------------------------------------


class _ExitWatch:
    """Reaps one child and reports its wait status (None: reaped by someone else) to
    `on_exit`. `signal()` refuses to signal a reaped child: its pid may be reused."""

    def __init__(self, pid, on_exit):
        self._pid = pid
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._reaped = False

    def _reap(self, flags):
        """waitpid() under the lock; returns (done, status)."""
        with self._lock:
            if self._reaped:
                return True, None
            try:
                pid, status = os.waitpid(self._pid, flags)
            except ChildProcessError:
                pid, status = self._pid, None
            if pid == 0:
                return False, None
            self._reaped = True
            return True, status

    def unless_reaped(self, func, *args):
        """`func(*args)` under the lock, unless the child is reaped: its pid may belong to
        another process by then."""
        with self._lock:
            if not self._reaped:
                func(*args)

    def _report(self, status):
        on_exit, self._on_exit = self._on_exit, None
        if on_exit is not None:
            on_exit(status)


class _PidfdWatch(_ExitWatch):
    """The pidfd is registered with the loop's reactor; it becomes readable at exit."""

    def __init__(self, loop, pid, on_exit):
        super().__init__(pid, on_exit)
        self._loop = loop
        self._fd = -1
        self._fd = os.pidfd_open(pid)
        try:
            loop._add_reader(self._fd, self._readable)
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise

    def _readable(self):
        done, status = self._reap(os.WNOHANG)
        if not done:
            return  # not waitable yet: the pidfd stays readable, try again
        self._release()
        self._report(status)

    def _release(self):
        fd, self._fd = self._fd, -1
        if fd >= 0:
            loop, self._loop = self._loop, None
            if loop is not None and not loop.is_closed():
                loop._remove_reader(fd)
            os.close(fd)

    def __del__(self):
        # The loop was closed before the child exited: don't leak the descriptor.
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _ThreadWatch(_ExitWatch):
    """A daemon thread waits for the exit (without reaping, so that `signal()` stays safe
    until the reap under the lock) and hands the status to the loop."""

    def __init__(self, loop, pid, on_exit):
        super().__init__(pid, on_exit)
        self._loop = loop
        thread = threading.Thread(
            target=self._wait, name=f"swordfish-waitpid-{pid}", daemon=True
        )
        thread.start()

    def _wait(self):
        try:
            os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # reaped elsewhere; _reap() says so
        _, status = self._reap(0)
        loop, self._loop = self._loop, None
        try:
            loop.call_soon_threadsafe(self._report, status)
        except RuntimeError:  # the loop is closed: the child is reaped all the same
            logger.warning("child process %d exited after its event loop was closed", self._pid)


def _watch_exit(loop, pid, on_exit):
    if _pidfd_available():
        try:
            return _PidfdWatch(loop, pid, on_exit)
        except OSError:  # out of descriptors, say: a thread can still do it
            pass
    return _ThreadWatch(loop, pid, on_exit)


# -- the transport -------------------------------------------------------------------------


class _PipeProtocol(protocols.Protocol):
    """The protocol of one of the child's pipes: forwards to the subprocess transport."""

    def __init__(self, owner, fd):
        self._owner = owner
        self._fd = fd

    def __repr__(self):
        return f"<{type(self).__name__} fd={self._fd}>"

    def data_received(self, data):
        self._owner._pipe_data(self._fd, data)

    def connection_lost(self, exc):
        owner, self._owner = self._owner, None
        if owner is not None:
            owner._pipe_lost(self._fd, exc)

    # Flow control of the stdin pipe goes to the subprocess protocol.

    def pause_writing(self):
        if self._owner is not None and self._owner._protocol is not None:
            self._owner._protocol.pause_writing()

    def resume_writing(self):
        if self._owner is not None and self._owner._protocol is not None:
            self._owner._protocol.resume_writing()


class SubprocessTransport(transports.SubprocessTransport):
    """A child process with its pipes (see the module docstring)."""

    def __init__(self, loop, protocol, args, shell, stdin, stdout, stderr, bufsize,
                 waiter=None, extra=None, **popen_kwargs):
        self._closed = False  # first: __del__ reads it even when __init__ fails
        super().__init__(extra)
        self._loop = loop
        self._protocol = protocol
        self._proc = None
        self._pid = None
        self._returncode = None
        self._watch = None
        self._pipes = {}  # fd -> pipe transport, once connected
        self._open_pipes = set()  # fds of the child's pipes that have not been lost yet
        self._held = []  # protocol calls held until connection_made is scheduled
        self._connected = False  # connection_made was scheduled
        self._connecting = None  # the task that connects the pipes
        self._exit_waiters = []
        self._finished = False

        try:
            self._proc = subprocess.Popen(
                args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr,
                universal_newlines=False, bufsize=bufsize, **popen_kwargs,
            )
        except BaseException:
            self._closed = True
            raise
        self._pid = self._proc.pid
        self._extra["subprocess"] = self._proc
        if loop.get_debug():
            program = args if isinstance(args, (bytes, str)) else args[0]
            logger.debug("process %r created: pid %s", program, self._pid)
        for fd, pipe in enumerate((self._proc.stdin, self._proc.stdout, self._proc.stderr)):
            if pipe is not None:
                self._open_pipes.add(fd)
        try:
            self._watch = _watch_exit(loop, self._pid, self._child_exited)
            self._connecting = loop.create_task(self._connect_pipes(waiter))
        except BaseException:
            self._abandon()
            raise

    def _abandon(self):
        """Setting up the child failed after it started: kill it, close its pipes, and reap
        it if nothing else will."""
        proc = self._proc
        self.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if self._watch is None:
            try:
                proc.kill()
            except OSError:
                pass
            proc.wait()

    async def _connect_pipes(self, waiter):
        # Through the loop's public connect_*_pipe, as the stdlib does: code that wraps
        # them sees the child's pipes too.
        loop = self._loop
        proc = self._proc
        error = None
        for fd, pipe, connect in (
            (0, proc.stdin, loop.connect_write_pipe),
            (1, proc.stdout, loop.connect_read_pipe),
            (2, proc.stderr, loop.connect_read_pipe),
        ):
            if pipe is None:
                continue
            if error is None:
                try:
                    transport, _ = await connect(functools.partial(_PipeProtocol, self, fd), pipe)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    error = exc
                else:
                    self._pipes[fd] = transport
                    if self._closed:  # closed meanwhile
                        transport.close()
                    continue
            # Not connected: this end will not report, so it is not waited for.
            pipe.close()
            self._open_pipes.discard(fd)
        self._connecting = None
        held, self._held = self._held, None
        if error is None:
            self._connected = True
            loop.call_soon(self._protocol.connection_made, self)
            for call in held:
                loop.call_soon(*call)
        else:
            # The protocol never got a connection: it hears nothing more, but the
            # transport still finishes (and wakes `_wait()`) once the child is gone.
            self.close()
            for call in held:
                if call[0] == self._finish:
                    loop.call_soon(*call)
            self._maybe_finish()
        if waiter is not None and not waiter.cancelled():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        error = None  # no reference cycle through the traceback

    def __repr__(self):
        info = [type(self).__name__]
        if self._closed:
            info.append("closed")
        if self._pid is not None:
            info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        elif self._pid is not None:
            info.append("running")
        else:
            info.append("not started")
        for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            pipe = self._pipes.get(fd)
            if pipe is not None:
                info.append(f"{name}={pipe!r}")
        return f"<{' '.join(info)}>"

    # -- protocol callbacks, in order ------------------------------------------------------

    def _deliver(self, callback, *args):
        if self._held is not None:
            self._held.append((callback, *args))
        elif self._connected or callback == self._finish:
            self._loop.call_soon(callback, *args)

    def _pipe_data(self, fd, data):
        self._deliver(self._protocol.pipe_data_received, fd, data)

    def _pipe_lost(self, fd, exc):
        self._open_pipes.discard(fd)
        self._deliver(self._protocol.pipe_connection_lost, fd, exc)
        self._maybe_finish()

    def _child_exited(self, status):
        proc = self._proc
        if status is not None:
            returncode = os.waitstatus_to_exitcode(status)
        elif proc.returncode is not None:
            returncode = proc.returncode  # reaped through the Popen object
        else:
            returncode = 255
            logger.warning(
                "child process %d was reaped by someone else: its return code is unknown, "
                "reporting 255",
                self._pid,
            )
        if self._loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        if proc.returncode is None:
            proc.returncode = returncode  # the Popen object must not wait for it again
        self._deliver(self._protocol.process_exited)
        if not _WAIT_FOR_PIPES:
            self._wake_waiters()
        self._maybe_finish()

    def _maybe_finish(self):
        if self._finished or self._returncode is None or self._open_pipes:
            return
        self._finished = True
        self._deliver(self._finish)

    def _finish(self):
        try:
            if self._connected:
                self._protocol.connection_lost(None)
        finally:
            self._wake_waiters()
            self._loop = None
            self._proc = None
            self._protocol = None
            self._watch = None

    def _wake_waiters(self):
        waiters, self._exit_waiters = self._exit_waiters, None
        for fut in waiters or ():
            if not fut.cancelled():
                fut.set_result(self._returncode)

    async def _wait(self):
        """The child's return code, once it has exited (asyncio.subprocess.Process.wait)."""
        if self._returncode is not None:
            return self._returncode
        fut = self._loop.create_future()
        self._exit_waiters.append(fut)
        return await fut

    # -- public interface ------------------------------------------------------------------

    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol):
        self._protocol = protocol

    def is_closing(self):
        return self._closed

    def get_pid(self):
        return self._pid

    def get_returncode(self):
        return self._returncode

    def get_pipe_transport(self, fd):
        return self._pipes.get(fd)

    def send_signal(self, signal):
        if self._proc is None:
            raise ProcessLookupError()
        self._signal(signal)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def _signal(self, sig):
        if self._returncode is None and self._proc.returncode is None:
            self._watch.unless_reaped(_kill_quietly, self._pid, sig)

    def _running(self):
        """Whether the child has not exited yet (without reaping it)."""
        if self._returncode is not None or self._proc.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._loop is None or not self._loop.is_closed():
            # (On a closed loop the pipe transports cannot report their end: they are left
            # to their own finalizers.)
            for pipe in self._pipes.values():
                pipe.close()
        if self._proc is not None and self._watch is not None and self._running():
            if self._loop.get_debug():
                logger.warning("Close running child process: kill %r", self)
            try:
                # Through the Popen object, as the stdlib does.
                self._watch.unless_reaped(self._proc.kill)
            except (ProcessLookupError, PermissionError):  # gone, or a setuid child
                pass

    def __del__(self, _warn=warnings.warn):
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self.close()


# -- the loop's API ------------------------------------------------------------------------


def _check_binary(bufsize, text, encoding, errors):
    if bufsize != 0:
        raise ValueError("bufsize must be 0")
    if text:
        raise ValueError("text must be False")
    if encoding is not None:
        raise ValueError("encoding must be None")
    if errors is not None:
        raise ValueError("errors must be None")


class SubprocessMixin:
    async def subprocess_exec(self, protocol_factory, program, *args,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=False,
                              shell=False, bufsize=0, encoding=None, errors=None,
                              text=None, **kwargs):
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if shell:
            raise ValueError("shell must be False")
        _check_binary(bufsize, text, encoding, errors)
        protocol = protocol_factory()
        what = None
        if self.get_debug():
            # Only the program: the arguments may hold secrets, or be long.
            what = f"execute program {program!r}"
            _log_spawn(what, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, (program, *args), False, stdin, stdout, stderr, bufsize, **kwargs
        )
        if what is not None:
            logger.info("%s: %r", what, transport)
        return transport, protocol

    async def subprocess_shell(self, protocol_factory, cmd, *,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=False,
                               shell=True, bufsize=0, encoding=None, errors=None,
                               text=None, **kwargs):
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if not shell:
            raise ValueError("shell must be True")
        _check_binary(bufsize, text, encoding, errors)
        protocol = protocol_factory()
        what = None
        if self.get_debug():
            what = f"run shell command {cmd!r}"
            _log_spawn(what, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, cmd, True, stdin, stdout, stderr, bufsize, **kwargs
        )
        if what is not None:
            logger.info("%s: %r", what, transport)
        return transport, protocol

    async def _make_subprocess_transport(self, protocol, args, shell, stdin, stdout, stderr,
                                         bufsize, extra=None, **kwargs):
        started = self.create_future()
        transport = SubprocessTransport(
            self, protocol, args, shell, stdin, stdout, stderr, bufsize,
            waiter=started, extra=extra, **kwargs,
        )
        try:
            await started
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            # Cancelled or failed before the pipes were connected: don't leave the child
            # running, and return only once it is reaped.
            transport.close()
            await transport._wait()
            raise
        return transport
