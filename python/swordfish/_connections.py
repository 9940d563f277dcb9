"""Outgoing stream connections: `create_connection` (with happy eyeballs),
`create_unix_connection` and `connect_accepted_socket`, plus the argument checks shared
with the server and datagram halves of the networking API.

The transports themselves come from the loop's `_make_socket_transport` /
`_make_ssl_transport`; this module only opens, binds and connects sockets and hands them
over.
"""

import asyncio
import functools
import inspect
import itertools
import os
import socket
import sys
from asyncio import tasks
from asyncio.log import logger

from ._compat import PY313

try:
    import ssl as _ssl
except ImportError:  # pragma: no cover - Python built without ssl
    _ssl = None


# -- helpers shared by _connections, _servers and _datagram -----------------------------


def version_keywords(since=(), removed=()):
    """Make a loop method refuse the keyword arguments that this interpreter's asyncio does
    not have, with the TypeError a call to the stdlib's method raises.

    `since` and `removed` map a keyword to the (major, minor) version that added, or
    removed, it in the stdlib.
    """
    version = sys.version_info[:2]
    absent = {name for name, v in dict(since).items() if version < v}
    absent |= {name for name, v in dict(removed).items() if version >= v}

    def decorate(method):
        if not absent:
            return method

        @functools.wraps(method)
        def checked(*args, **kwargs):
            for name in kwargs:
                if name in absent:
                    raise TypeError(
                        f"{method.__name__}() got an unexpected keyword argument {name!r}"
                    )
            return method(*args, **kwargs)

        signature = inspect.signature(method)
        checked.__signature__ = signature.replace(
            parameters=[p for p in signature.parameters.values() if p.name not in absent]
        )
        mark = getattr(inspect, "markcoroutinefunction", None)  # 3.12+
        if mark is not None:
            mark(checked)
        else:
            checked._is_coroutine = asyncio.coroutines._is_coroutine
        return checked

    return decorate


def check_ssl_socket(sock):
    if _ssl is not None and isinstance(sock, _ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


def check_ssl_timeouts(ssl, handshake_timeout, shutdown_timeout):
    """The checks of create_connection & co., which treat any false `ssl` as no TLS."""
    if handshake_timeout is not None and not ssl:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if shutdown_timeout is not None and not ssl:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")


def set_reuse_port(sock):
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        ) from None


def bind_error_reason(exc):
    """How the stdlib words an OSError inside its 'error while attempting to bind' messages:
    the whole str() from 3.13 on, only the strerror before."""
    if PY313 or not exc.strerror:
        return str(exc).lower()
    return exc.strerror.lower()


def is_abstract_unix_path(path):
    # Linux abstract namespace: the name starts with a NUL (str or bytes).
    return len(path) > 0 and path[0] in (0, "\x00")


def interleave_by_family(infos, first_family_count=1):
    """Reorder getaddrinfo() results so that families alternate (RFC 8305), after
    `first_family_count - 1` extra addresses of the first family."""
    by_family = {}
    for info in infos:
        by_family.setdefault(info[0], []).append(info)
    groups = list(by_family.values())
    lead = max(first_family_count - 1, 0)
    ordered = groups[0][:lead]
    groups[0] = groups[0][lead:]
    for row in itertools.zip_longest(*groups):
        ordered.extend(info for info in row if info is not None)
    return ordered


def _connect_error(errors, all_errors):
    """The one exception create_connection raises when every address failed."""
    if not errors:
        return OSError("create_connection failed: every attempt was cancelled")
    if all_errors:
        return ExceptionGroup("create_connection failed", errors)  # noqa: F821 (3.11+)
    first = str(errors[0])
    if all(str(exc) == first for exc in errors):
        return errors[0]
    return OSError("Multiple exceptions: " + ", ".join(str(exc) for exc in errors))


def _bind_local(sock, family, local_infos, errors):
    """Bind `sock` to the first local address of its family that works; record each
    failure in `errors`."""
    for local_family, _, _, _, address in local_infos:
        if local_family != family:
            continue
        try:
            sock.bind(address)
            return
        except OSError as exc:
            errors.append(
                OSError(
                    exc.errno,
                    f"error while attempting to bind on address {address!r}: "
                    f"{bind_error_reason(exc)}",
                )
            )
    if errors:
        raise errors.pop()
    raise OSError(f"no matching local address with {family=} found")


def _close_late_winner(task):
    """Done callback of a connection attempt that lost the race: close its socket if it
    connected anyway."""
    if task.cancelled():
        return
    if task.exception() is None:
        task.result().close()


# -- the mixin ---------------------------------------------------------------------------


class ConnectionsMixin:
    @version_keywords(since={"ssl_shutdown_timeout": (3, 11), "all_errors": (3, 12)})
    async def create_connection(
        self,
        protocol_factory,
        host=None,
        port=None,
        *,
        ssl=None,
        family=0,
        proto=0,
        flags=0,
        sock=None,
        local_addr=None,
        server_hostname=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
        happy_eyeballs_delay=None,
        interleave=None,
        all_errors=False,
    ):
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            # The certificate is checked against the host by default; without a host the
            # caller must say what to check (server_hostname='' turns the check off).
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        check_ssl_timeouts(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
        if sock is not None:
            check_ssl_socket(sock)
        if happy_eyeballs_delay is not None and interleave is None:
            interleave = 1

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            sock = await self._connect_to_host(
                host, port, family, proto, flags, local_addr,
                happy_eyeballs_delay, interleave, all_errors,
            )
            own_sock = True
        else:
            if sock is None:
                raise ValueError("host and port was not specified and no sock specified")
            if sock.type != socket.SOCK_STREAM:
                # AF_UNIX stream sockets are accepted too, as in the stdlib.
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            own_sock = False

        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            own_sock=own_sock,
        )
        if self.get_debug():
            # A TLS transport may wrap the socket: ask the transport for it.
            logger.debug(
                "%r connected to %s:%r: (%r, %r)",
                transport.get_extra_info("socket"), host, port, transport, protocol,
            )
        return transport, protocol

    async def _connect_to_host(
        self, host, port, family, proto, flags, local_addr, delay, interleave, all_errors
    ):
        """Resolve host/port (and local_addr) and return a connected non-blocking socket,
        trying the addresses one after another or, with a delay, as a staggered race."""
        infos = await self._ensure_resolved(
            (host, port), family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
        )
        if not infos:
            raise OSError("getaddrinfo() returned empty list")
        local_infos = None
        if local_addr is not None:
            local_infos = await self._ensure_resolved(
                local_addr, family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
            )
            if not local_infos:
                raise OSError("getaddrinfo() returned empty list")
        if interleave:
            infos = interleave_by_family(infos, interleave)

        errors = []  # one list of OSErrors per attempt, in the order attempts started
        try:
            if delay is None:
                for info in infos:
                    try:
                        return await self._connect_sock(errors, info, local_infos)
                    except OSError:
                        continue
            else:
                sock = await self._race_connections(errors, infos, local_infos, delay)
                if sock is not None:
                    return sock
            raise _connect_error([exc for attempt in errors for exc in attempt], all_errors)
        finally:
            errors = None  # no cycle through the raised exception's traceback

    async def _connect_sock(self, exceptions, addr_info, local_addr_infos=None):
        """One attempt: create, bind (to a local address of the same family) and connect a
        socket. Its OSErrors go to a list of its own appended to `exceptions`."""
        errors = []
        exceptions.append(errors)
        family, type_, proto, _, address = addr_info
        sock = None
        try:
            sock = socket.socket(family=family, type=type_, proto=proto)
            sock.setblocking(False)
            if local_addr_infos is not None:
                _bind_local(sock, family, local_addr_infos, errors)
            await self.sock_connect(sock, address)
            return sock
        except OSError as exc:
            errors.append(exc)
            if sock is not None:
                sock.close()
            raise
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        finally:
            exceptions = errors = None

    async def _race_connections(self, errors, infos, local_infos, delay):
        """Happy eyeballs: start the first attempt; start the next one when the latest
        fails or has run for `delay` seconds; the first socket to connect wins and the
        other attempts are cancelled. Returns None when every attempt failed."""
        remaining = iter(infos)
        running = []  # attempt tasks still going, in start order
        latest = None
        latest_started = 0.0

        def start_next():
            nonlocal latest, latest_started
            info = next(remaining, None)
            if info is None:
                latest = None
                return
            latest = self.create_task(self._connect_sock(errors, info, local_infos))
            latest_started = self.time()
            running.append(latest)

        winner = None
        try:
            start_next()
            while running:
                timeout = None
                if latest is not None:
                    timeout = max(0.0, latest_started + delay - self.time())
                done, _ = await tasks.wait(
                    running, timeout=timeout, return_when=tasks.FIRST_COMPLETED
                )
                move_on = latest is not None and (
                    not done or latest in done or self.time() >= latest_started + delay
                )
                for task in [t for t in running if t in done]:
                    running.remove(task)
                    if task.cancelled():
                        continue
                    exc = task.exception()
                    if exc is None:
                        if winner is None:
                            winner = task.result()
                        else:
                            task.result().close()
                    elif not isinstance(exc, OSError):
                        raise exc  # a programming error, as in the sequential path
                if winner is not None:
                    return winner
                if move_on:
                    start_next()
            return None
        except BaseException:
            if winner is not None:
                winner.close()
            raise
        finally:
            for task in running:
                task.cancel()  # the attempt closes its own socket when cancelled
                task.add_done_callback(_close_late_winner)
            running = None

    async def _create_connection_transport(
        self,
        sock,
        protocol_factory,
        ssl,
        server_hostname,
        server_side=False,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
        *,
        own_sock=False,
    ):
        """Wrap a connected socket in a (TLS) transport and wait until it is ready
        (connection_made called; for TLS, the handshake done)."""
        sock.setblocking(False)
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            if ssl:
                sslcontext = None if isinstance(ssl, bool) else ssl
                transport = self._make_ssl_transport(
                    sock, protocol, sslcontext, waiter,
                    server_side=server_side,
                    server_hostname=server_hostname,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout,
                )
            else:
                transport = self._make_socket_transport(sock, protocol, waiter)
        except BaseException:
            if own_sock:
                sock.close()
            raise
        try:
            await waiter
        except BaseException:
            transport.close()
            waiter = None  # a failed handshake's exception would keep the protocol alive
            raise
        return transport, protocol

    @version_keywords(since={"ssl_shutdown_timeout": (3, 11)})
    async def connect_accepted_socket(
        self,
        protocol_factory,
        sock,
        *,
        ssl=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        check_ssl_timeouts(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
        check_ssl_socket(sock)
        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, "", server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        if self.get_debug():
            logger.debug(
                "%r handled: (%r, %r)", transport.get_extra_info("socket"), transport, protocol
            )
        return transport, protocol

    @version_keywords(since={"ssl_shutdown_timeout": (3, 11)})
    async def create_unix_connection(
        self,
        protocol_factory,
        path=None,
        *,
        ssl=None,
        sock=None,
        server_hostname=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        assert server_hostname is None or isinstance(server_hostname, str)
        if ssl:
            if server_hostname is None:
                raise ValueError("you have to pass server_hostname when using ssl")
        else:
            if server_hostname is not None:
                raise ValueError("server_hostname is only meaningful with ssl")
            check_ssl_timeouts(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)

        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, path)
            except BaseException:
                sock.close()
                raise
            own_sock = True
        else:
            if sock is None:
                raise ValueError("no path and sock were specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            sock.setblocking(False)
            own_sock = False

        return await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            own_sock=own_sock,
        )
