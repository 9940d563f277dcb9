"""The default executor, and name resolution (getaddrinfo/getnameinfo) on top of it.

Numeric addresses are resolved on the loop thread: `getaddrinfo` with a literal IP address
and a numeric port never touches DNS, so it needs no thread.
"""

import asyncio
import concurrent.futures
import functools
import socket
import threading
import time
import warnings
from asyncio import futures
from asyncio.log import logger

from ._compat import PY311


def _is_ip_literal(host):
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str):
        return False
    address = host.partition("%")[0]  # IPv6 scope id
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, address)
        except (OSError, ValueError):
            continue
        return True
    return False


def _is_numeric_port(port):
    if port is None or isinstance(port, int):
        return True
    if isinstance(port, bytes):
        return port.isdigit()
    return isinstance(port, str) and port.isdigit()


def _getaddrinfo_debug(slow, host, port, family, type, proto, flags):
    msg = [f"{host}:{port!r}"]
    if family:
        msg.append(f"family={family!r}")
    if type:
        msg.append(f"type={type!r}")
    if proto:
        msg.append(f"proto={proto!r}")
    if flags:
        msg.append(f"flags={flags!r}")
    msg = ", ".join(msg)
    logger.debug("Get address info %s", msg)
    t0 = time.monotonic()
    addrinfo = socket.getaddrinfo(host, port, family, type, proto, flags)
    dt = time.monotonic() - t0
    msg = f"Getting address info {msg} took {dt * 1e3:.3f}ms: {addrinfo!r}"
    if dt >= slow:
        logger.info(msg)
    else:
        logger.debug(msg)
    return addrinfo


class ExecutorMixin:
    def _init_executor(self):
        self._default_executor = None
        self._executor_shutdown_called = False

    def _close_executor(self):
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)

    def _check_default_executor(self):
        if self._executor_shutdown_called:
            raise RuntimeError("Executor shutdown has been called")

    def run_in_executor(self, executor, func, *args):
        self._check_closed()
        if self.get_debug():
            self._check_callback(func, "run_in_executor")
        if executor is None:
            executor = self._default_executor
            self._check_default_executor()
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        return futures.wrap_future(executor.submit(func, *args), loop=self)

    def set_default_executor(self, executor):
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            if not PY311:  # 3.10 only deprecates other executors
                warnings.warn(
                    "Using the default executor that is not an instance of ThreadPoolExecutor "
                    "is deprecated and will be prohibited in Python 3.9",
                    DeprecationWarning,
                    2,
                )
            else:
                raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout=None):
        """Join the default executor's threads, waiting at most `timeout` seconds."""
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        done = self.create_future()
        thread = threading.Thread(target=self._join_executor, args=(executor, done))
        thread.start()
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout)
        except asyncio.TimeoutError:
            warnings.warn(
                f"The executor did not finishing joining its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=2,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _join_executor(self, executor, done):
        try:
            executor.shutdown(wait=True)
        except Exception as exc:
            if not self.is_closed():
                self.call_soon_threadsafe(_set_exception_unless_done, done, exc)
        else:
            if not self.is_closed():
                self.call_soon_threadsafe(_set_result_unless_done, done, None)

    def _check_resolver(self):
        # What run_in_executor checks first: an answer given without the executor fails
        # where the stdlib's, which always uses it, would.
        self._check_closed()
        self._check_default_executor()

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        if self.get_debug():
            resolve = functools.partial(_getaddrinfo_debug, self.slow_callback_duration)
        else:
            resolve = socket.getaddrinfo
        if (host is None or _is_ip_literal(host)) and _is_numeric_port(port):
            # Nothing to look up: answered at once, without a thread.
            self._check_resolver()
            if resolve is socket.getaddrinfo:
                flags |= socket.AI_NUMERICHOST  # and never a lookup, whatever the resolver
            return resolve(host, port, family, type, proto, flags)
        return await self.run_in_executor(None, resolve, host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        numeric = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        if flags & numeric == numeric:
            self._check_resolver()
            return socket.getnameinfo(sockaddr, flags)
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)


def _set_result_unless_done(fut, result):
    if not fut.done():
        fut.set_result(result)


def _set_exception_unless_done(fut, exc):
    if not fut.done():
        fut.set_exception(exc)
