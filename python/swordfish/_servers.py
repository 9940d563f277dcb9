"""Listening sockets: `create_server`, `create_unix_server`, the `Server` object they
return, and the accept path that turns each incoming connection into a transport.

The listening socket is watched with the native `_add_reader`; each readiness event
accepts up to `backlog` connections. Every connection gets its transport at once, inside a
context copied for it (as the stdlib's per-connection task would), without a task.
"""

import collections.abc
import contextvars
import errno
import functools
import os
import socket
import stat
import weakref
from asyncio import constants, events, exceptions, tasks, trsock
from asyncio.log import logger

from ._compat import PY312, PY313
from ._connections import (
    bind_error_reason,
    check_ssl_socket,
    check_ssl_timeouts,
    is_abstract_unix_path,
    set_reuse_port,
    version_keywords,
)
from ._transports import shared_host

__all__ = ["Server"]

_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_NOT_NOW = (BlockingIOError, InterruptedError, ConnectionAbortedError)


class Server(events.AbstractServer):
    """What create_server() and create_unix_server() return."""

    def __init__(
        self,
        loop,
        sockets,
        protocol_factory,
        ssl_context,
        backlog,
        ssl_handshake_timeout,
        ssl_shutdown_timeout=None,
    ):
        self._loop = loop
        self._sockets = sockets
        # Weak: an abandoned transport must still be collectable (and warn).
        self._clients = weakref.WeakSet()
        self._anonymous_clients = 0
        self._waiters = []
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._ssl_context = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._serving = False
        self._serving_forever_fut = None

    def __repr__(self):
        return f"<{type(self).__name__} sockets={self.sockets!r}>"

    # Called by the transports of accepted connections. Before 3.13 the stdlib's transports
    # (and CPython's tests) call them without the transport: those are only counted.
    def _attach(self, transport=None):
        if transport is None:
            self._anonymous_clients += 1
        else:
            self._clients.add(transport)

    def _detach(self, transport=None):
        if transport is None:
            self._anonymous_clients -= 1
        else:
            self._clients.discard(transport)
        if self._sockets is None and not self._has_clients():
            self._wakeup()

    def _has_clients(self):
        return self._anonymous_clients > 0 or len(self._clients) > 0

    def _wakeup(self):
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def _start_serving(self):
        if self._serving:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            self._loop._start_serving(
                self._protocol_factory, sock, self._ssl_context, self, self._backlog,
                self._ssl_handshake_timeout, self._ssl_shutdown_timeout,
            )

    def get_loop(self):
        return self._loop

    def is_serving(self):
        return self._serving

    @property
    def sockets(self):
        if self._sockets is None:
            return ()
        return tuple(trsock.TransportSocket(sock) for sock in self._sockets)

    def close(self):
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        for sock in sockets:
            self._loop._stop_serving(sock)
        self._serving = False
        forever = self._serving_forever_fut
        if forever is not None and not forever.done():
            forever.cancel()
            self._serving_forever_fut = None
        if not self._has_clients():
            self._wakeup()

    if PY313:

        def close_clients(self):
            for transport in self._clients.copy():
                transport.close()

        def abort_clients(self):
            for transport in self._clients.copy():
                transport.abort()

    async def start_serving(self):
        self._start_serving()
        await tasks.sleep(0)  # as the stdlib: one iteration for the watchers to settle

    async def serve_forever(self):
        if self._serving_forever_fut is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except exceptions.CancelledError:
            try:
                self.close()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self):
        # 3.12+: wait until the server is closed AND its connections are gone, in either
        # order (_wakeup sets _waiters to None once both hold). 3.10/3.11: return at once
        # when the server is already closed, even with connections left.
        if self._waiters is None or (not PY312 and self._sockets is None):
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


def _host_list(host):
    if host == "":
        return [None]
    if isinstance(host, str) or not isinstance(host, collections.abc.Iterable):
        return [host]
    return list(host)


class ServersMixin:
    _unix_server_sockets = None  # listening Unix socket -> inode, to unlink on close

    @version_keywords(since={"ssl_shutdown_timeout": (3, 11), "keep_alive": (3, 13)})
    async def create_server(
        self,
        protocol_factory,
        host=None,
        port=None,
        *,
        family=socket.AF_UNSPEC,
        flags=socket.AI_PASSIVE,
        sock=None,
        backlog=100,
        ssl=None,
        reuse_address=None,
        reuse_port=None,
        keep_alive=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
        start_serving=True,
    ):
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and ssl is None:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            check_ssl_socket(sock)

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if reuse_address is None:
                reuse_address = os.name == "posix"
            sockets = await self._bind_server_sockets(
                _host_list(host), port, family, flags, reuse_address, reuse_port, keep_alive
            )
        else:
            if sock is None:
                raise ValueError("Neither host/port nor sock were specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            sockets = [sock]

        for sock in sockets:
            sock.setblocking(False)
        server = Server(
            self, sockets, protocol_factory, ssl, backlog,
            ssl_handshake_timeout, ssl_shutdown_timeout,
        )
        if start_serving:
            server._start_serving()
            await tasks.sleep(0)
        if self.get_debug():
            logger.info("%r is serving", server)
        return server

    async def _resolve_server_host(self, host, port, family, flags):
        infos = await self._ensure_resolved(
            (host, port), family=family, type=socket.SOCK_STREAM, flags=flags
        )
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned empty list")
        return infos

    async def _bind_server_sockets(
        self, hosts, port, family, flags, reuse_address, reuse_port, keep_alive
    ):
        """One bound socket per distinct address the hosts resolve to."""
        resolved = await tasks.gather(
            *[self._resolve_server_host(host, port, family, flags) for host in hosts]
        )
        # Each address once, in resolution order.
        infos = list(dict.fromkeys(info for infos in resolved for info in infos))
        sockets = []
        try:
            for af, socktype, proto, _, address in infos:
                try:
                    sock = socket.socket(af, socktype, proto)
                except OSError:
                    # Most likely a family/type/protocol this host does not support.
                    if self.get_debug():
                        logger.warning(
                            "create_server() failed to create socket.socket(%r, %r, %r)",
                            af, socktype, proto, exc_info=True,
                        )
                    continue
                sockets.append(sock)
                if reuse_address:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                if reuse_port:
                    set_reuse_port(sock)
                if keep_alive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                if af == getattr(socket, "AF_INET6", None) and hasattr(socket, "IPPROTO_IPV6"):
                    # One socket per family: no IPv4-mapped addresses on the IPv6 one.
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                try:
                    sock.bind(address)
                except OSError as err:
                    message = (
                        f"error while attempting to bind on address {address!r}: "
                        f"{bind_error_reason(err)}"
                    )
                    if PY313 and err.errno == errno.EADDRNOTAVAIL:
                        # The family is probably disabled on this host: skip the address.
                        sockets.pop()
                        sock.close()
                        if self.get_debug():
                            logger.warning(message)
                        continue
                    raise OSError(err.errno, message) from None
            if PY313 and not sockets:
                raise OSError(
                    f"could not bind on any address out of {[info[4] for info in infos]!r}"
                )
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    @version_keywords(since={"ssl_shutdown_timeout": (3, 11), "cleanup_socket": (3, 13)})
    async def create_unix_server(
        self,
        protocol_factory,
        path=None,
        *,
        sock=None,
        backlog=100,
        ssl=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
        start_serving=True,
        cleanup_socket=True,
    ):
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        check_ssl_timeouts(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)

        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            if not is_abstract_unix_path(path):
                remove_stale_unix_socket(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
                raise
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("path was not specified, and no sock specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")

        if PY313 and cleanup_socket:
            # Remember the file's inode: close() unlinks the path only if it is still ours.
            bound = sock.getsockname()
            if bound and not is_abstract_unix_path(bound):
                try:
                    inode = os.stat(bound).st_ino
                except FileNotFoundError:
                    pass
                else:
                    if self._unix_server_sockets is None:
                        self._unix_server_sockets = weakref.WeakKeyDictionary()
                    self._unix_server_sockets[sock] = inode

        sock.setblocking(False)
        server = Server(
            self, [sock], protocol_factory, ssl, backlog,
            ssl_handshake_timeout, ssl_shutdown_timeout,
        )
        if start_serving:
            server._start_serving()
            await tasks.sleep(0)
        return server

    # -- the accept path (names and signatures as on the stdlib loop) ----------------------

    def _start_serving(
        self,
        protocol_factory,
        sock,
        sslcontext=None,
        server=None,
        backlog=100,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        self._add_reader(
            sock.fileno(), self._accept_connection, protocol_factory, sock, sslcontext,
            server, backlog, ssl_handshake_timeout, ssl_shutdown_timeout,
        )

    def _stop_serving(self, sock):
        cleanup = self._unix_server_sockets
        inode = cleanup.pop(sock, None) if cleanup is not None else None
        fd = sock.fileno()
        path = None
        if fd != -1:  # (the caller may have closed the socket already)
            if inode is not None:
                path = sock.getsockname()
            self._remove_reader(fd)
        sock.close()
        if path is not None:
            try:
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                logger.error("Unable to clean up listening UNIX socket %r: %r", path, err)

    def _accept_connection(
        self,
        protocol_factory,
        sock,
        sslcontext=None,
        server=None,
        backlog=100,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        """The listening socket is readable: accept what is queued, up to `backlog`
        connections (at least one) so that other callbacks get their turn, or the factory's
        `accept_batch` where it sets one (swordfish's server, when other processes accept
        from the same queue)."""
        batch = getattr(protocol_factory, "accept_batch", None) or backlog
        # A factory may also ask the loop to leave the socket alone for a while (swordfish's
        # server, when its worker holds more than its share of the connections).
        gate = getattr(protocol_factory, "accept_pause", None)
        serving = (protocol_factory, sock, sslcontext, server, backlog, ssl_handshake_timeout, ssl_shutdown_timeout)
        for _ in range(max(batch, 1)):
            wait = gate() if gate is not None else 0
            if wait:
                self._pause_serving(wait, *serving)
                return
            try:
                conn, addr = sock.accept()
            except _NOT_NOW:
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise  # reported by the loop as an error in this callback
                # A factory that can free descriptors (swordfish's HTTP server closes its
                # least useful connections) is asked first: accept is then retried once
                # they are closed, at the next iteration. Otherwise the socket, which stays
                # readable while no descriptor is free, is left alone for a while instead
                # of spinning.
                free = getattr(protocol_factory, "free_descriptors", None)
                freed = free() if free is not None else 0
                if not freed:
                    self.call_exception_handler(
                        {
                            "message": "socket.accept() out of system resource",
                            "exception": exc,
                            "socket": trsock.TransportSocket(sock),
                        }
                    )
                self._pause_serving(0 if freed else constants.ACCEPT_RETRY_DELAY, *serving)
                return
            if self.get_debug():
                logger.debug("%r got a new connection from %r: %r", server, addr, conn)
            conn.setblocking(False)
            # A context of its own per connection, as the stdlib's per-connection task has.
            contextvars.copy_context().run(
                self._accept_connection2, protocol_factory, conn, {"peername": shared_host(addr)},
                sslcontext, server, ssl_handshake_timeout, ssl_shutdown_timeout,
            )

    def _pause_serving(self, delay, protocol_factory, sock, *args):
        """Stop watching the listening socket for `delay` seconds (args: the rest of
        `_start_serving`'s)."""
        self._remove_reader(sock.fileno())
        self.call_later(delay, self._resume_serving, protocol_factory, sock, *args)

    def _resume_serving(self, protocol_factory, sock, *args):
        if sock.fileno() == -1:  # closed while paused
            return
        self._start_serving(protocol_factory, sock, *args)

    def _accept_connection2(
        self,
        protocol_factory,
        conn,
        extra,
        sslcontext=None,
        server=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        protocol = None
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            if sslcontext:
                transport = self._make_ssl_transport(
                    conn, protocol, sslcontext, waiter=waiter, server_side=True,
                    extra=extra, server=server,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout,
                )
            else:
                transport = self._make_socket_transport(
                    conn, protocol, waiter=waiter, extra=extra, server=server
                )
        except (SystemExit, KeyboardInterrupt):
            conn.close()
            raise
        except BaseException as exc:
            conn.close()
            self._report_accept_error(exc, protocol, None)
            return
        waiter.add_done_callback(
            functools.partial(self._accepted_connection_ready, protocol, transport)
        )

    def _accepted_connection_ready(self, protocol, transport, waiter):
        if waiter.cancelled():
            exc = exceptions.CancelledError()
        else:
            exc = waiter.exception()
            if exc is None:
                return  # the protocol owns the connection now
        transport.close()
        self._report_accept_error(exc, protocol, transport)

    def _report_accept_error(self, exc, protocol, transport):
        # As the stdlib: there is nobody to tell, so only debug mode reports it.
        if not self.get_debug():
            return
        context = {
            "message": "Error on transport creation for incoming connection",
            "exception": exc,
        }
        if protocol is not None:
            context["protocol"] = protocol
        if transport is not None:
            context["transport"] = transport
        self.call_exception_handler(context)


def remove_stale_unix_socket(path):
    """Remove a socket file left at `path` by an earlier server (not any other file)."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        # The directory may let us create the socket but not inspect it.
        logger.error("Unable to check or remove stale UNIX socket %r: %r", path, err)
