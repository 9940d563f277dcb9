"""The loop's low-level socket API (`sock_recv`, `sock_sendall`, `sock_connect`, …).

Each operation is tried at once; when the socket would block, a reader or writer watcher
retries it when the socket is ready. The watcher goes away as soon as the operation's future
is done, including when the awaiting task is cancelled, so the socket stays usable.
"""

import errno
import functools
import io
import os
import socket
from asyncio import base_events, constants, exceptions

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without ssl
    ssl = None

_WOULD_BLOCK = (BlockingIOError, InterruptedError)
# Exactly this type takes the native path; a subclass may override recv/send, so it gets
# the stdlib's method calls.
_PLAIN_SOCKET = socket.socket


def _check_socket(sock):
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")
    # The stdlib checks this only in debug mode and otherwise blocks the whole loop in the
    # socket call; a clear error is better than a hung loop.
    if sock.gettimeout() != 0:
        raise ValueError("the socket must be non-blocking")


def _plain_fd(sock):
    """The descriptor of a plain non-blocking socket, whose operations are native; None for
    anything else (after refusing what the stdlib's checks refuse)."""
    if type(sock) is _PLAIN_SOCKET and sock.gettimeout() == 0:
        return sock.fileno()
    _check_socket(sock)
    return None


def _release(remove, fd, handle, fut):
    # A replaced watcher is cancelled; only remove the one this operation installed.
    if not handle.cancelled():
        remove(fd)


class SocketsMixin:
    async def _sock_op(self, sock, writing, method, *args):
        """Run the non-blocking `sock.<method>(*args)`, waiting for readiness while it would
        block. The method is looked up on every attempt, as the stdlib does."""
        try:
            return getattr(sock, method)(*args)
        except _WOULD_BLOCK:
            pass
        fut = self.create_future()
        self._watch_until_done(sock.fileno(), writing, fut, self._retry_sock_op, fut, sock, method, args)
        try:
            return await fut
        finally:
            fut = None  # no cycle through the traceback

    def _watch_until_done(self, fd, writing, fut, callback, *args):
        if writing:
            handle = self._add_writer(fd, callback, *args)
            fut.add_done_callback(functools.partial(_release, self.remove_writer, fd, handle))
        else:
            handle = self._add_reader(fd, callback, *args)
            fut.add_done_callback(functools.partial(_release, self.remove_reader, fd, handle))

    @staticmethod
    def _retry_sock_op(fut, sock, method, args):
        if fut.done():
            return
        try:
            result = getattr(sock, method)(*args)
        except _WOULD_BLOCK:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    # sock_recv, sock_recv_into and sock_sendall make their system calls natively on a plain
    # non-blocking socket (see src/sock_ops.rs): the result comes back at once, or a future
    # completed by a watcher. Leaving early (cancelled) removes that watcher.

    async def sock_recv(self, sock, n):
        fd = _plain_fd(sock)
        if fd is None:
            return await self._sock_op(sock, False, "recv", n)
        fut = self._sock_recv(sock, fd, n)
        if type(fut) is bytes:
            return fut
        # _sock_wait inlined: this is the hot path of a task that loops over sock_recv.
        try:
            return await fut
        except BaseException:
            self._sock_abandon(fd, fut, False)
            raise

    async def _sock_wait(self, fd, fut, writing):
        """Wait for a native operation's future; leaving early removes its watcher."""
        try:
            return await fut
        except BaseException:
            self._sock_abandon(fd, fut, writing)
            raise

    async def sock_recv_into(self, sock, buf):
        fd = _plain_fd(sock)
        if fd is None:
            return await self._sock_op(sock, False, "recv_into", buf)
        fut = self._sock_recv_into(sock, fd, buf)
        if type(fut) is int:
            return fut
        return await self._sock_wait(fd, fut, False)

    async def sock_recvfrom(self, sock, bufsize):
        _check_socket(sock)
        return await self._sock_op(sock, False, "recvfrom", bufsize)

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        _check_socket(sock)
        if not nbytes:
            nbytes = len(buf)
        return await self._sock_op(sock, False, "recvfrom_into", buf, nbytes)

    async def sock_sendto(self, sock, data, address):
        _check_socket(sock)
        return await self._sock_op(sock, True, "sendto", data, address)

    async def sock_accept(self, sock):
        _check_socket(sock)
        conn, address = await self._sock_op(sock, False, "accept")
        conn.setblocking(False)
        return conn, address

    async def sock_sendall(self, sock, data):
        fd = _plain_fd(sock)
        if fd is None:
            return await self._sock_sendall_generic(sock, data)
        fut = self._sock_sendall(sock, fd, data)
        if fut is None:
            return
        return await self._sock_wait(fd, fut, True)

    async def _sock_sendall_generic(self, sock, data):
        try:
            sent = sock.send(data)
        except _WOULD_BLOCK:
            sent = 0
        view = memoryview(data).cast("B")
        if sent == view.nbytes:
            return
        fut = self.create_future()
        progress = [sent]
        self._watch_until_done(sock.fileno(), True, fut, self._send_more, fut, sock, view, progress)
        try:
            return await fut
        finally:
            fut = None

    @staticmethod
    def _send_more(fut, sock, view, progress):
        if fut.done():
            return
        start = progress[0]
        try:
            sent = sock.send(view[start:])
        except _WOULD_BLOCK:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            return
        start += sent
        if start == view.nbytes:
            fut.set_result(None)
        else:
            progress[0] = start

    async def sock_connect(self, sock, address):
        _check_socket(sock)
        if sock.family == socket.AF_INET or (
            base_events._HAS_IPv6 and sock.family == socket.AF_INET6
        ):
            resolved = await self._ensure_resolved(
                address, family=sock.family, type=sock.type, proto=sock.proto
            )
            address = resolved[0][4]
        fut = self.create_future()
        try:
            sock.connect(address)
        except _WOULD_BLOCK:
            self._watch_until_done(sock.fileno(), True, fut, self._connect_done, fut, sock, address)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        try:
            return await fut
        finally:
            fut = None

    @staticmethod
    def _connect_done(fut, sock, address):
        if fut.done():
            return
        try:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err != 0:
                raise OSError(err, f"Connect call failed {address}")
        except _WOULD_BLOCK:
            pass
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)

    async def _ensure_resolved(self, address, *, family=0, type=socket.SOCK_STREAM, proto=0, flags=0):
        host, port = address[:2]
        info = base_events._ipaddr_info(host, port, family, type, proto, *address[2:])
        if info is not None:
            return [info]
        return await self.getaddrinfo(host, port, family=family, type=type, proto=proto, flags=flags)

    # -- sendfile --------------------------------------------------------------------------

    async def sock_sendfile(self, sock, file, offset=0, count=None, *, fallback=True):
        _check_socket(sock)
        _check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except exceptions.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    async def _sock_sendfile_native(self, sock, file, offset, count):
        """Zero-copy os.sendfile(), waiting for writability between chunks."""
        try:
            fileno = file.fileno()
        except (AttributeError, io.UnsupportedOperation):
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        try:
            fsize = os.fstat(fileno).st_size
        except OSError:
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        blocksize = count if count else fsize
        if not blocksize:
            return 0
        fut = self.create_future()
        state = {"offset": offset, "sent": 0, "watching": False}
        self._sendfile_step(fut, sock, fileno, count, blocksize, state)
        try:
            return await fut
        finally:
            fut = None

    def _sendfile_step(self, fut, sock, fileno, count, blocksize, state):
        """Send until the socket would block (then wait for it) or the end is reached."""
        if fut.done():
            return
        while True:
            if count:
                blocksize = count - state["sent"]
                if blocksize <= 0:
                    return _sendfile_done(fut, fileno, state, None)
            try:
                sent = os.sendfile(sock.fileno(), fileno, state["offset"], blocksize)
            except _WOULD_BLOCK:
                if not state["watching"]:
                    state["watching"] = True
                    self._watch_until_done(
                        sock.fileno(), True, fut, self._sendfile_step,
                        fut, sock, fileno, count, blocksize, state,
                    )
                return
            except OSError as exc:
                if state["watching"] and exc.errno == errno.ENOTCONN and type(exc) is not ConnectionError:
                    new_exc = ConnectionError("socket is not connected", errno.ENOTCONN)
                    new_exc.__cause__ = exc
                    exc = new_exc
                if state["sent"] == 0:
                    # Nothing went out: the caller may fall back to read/send.
                    exc = exceptions.SendfileNotAvailableError("os.sendfile call failed")
                return _sendfile_done(fut, fileno, state, exc)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                return _sendfile_done(fut, fileno, state, exc)
            if sent == 0:  # end of file
                return _sendfile_done(fut, fileno, state, None)
            state["offset"] += sent
            state["sent"] += sent

    async def _sock_sendfile_fallback(self, sock, file, offset, count):
        if offset:
            file.seek(offset)
        limit = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        blocksize = min(count, limit) if count else limit
        buf = bytearray(blocksize)
        total = 0
        try:
            while True:
                if count:
                    blocksize = min(count - total, blocksize)
                    if blocksize <= 0:
                        break
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    break
                await self.sock_sendall(sock, view[:read])
                total += read
            return total
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset + total)


def _sendfile_done(fut, fileno, state, exc):
    # Leave the file position after what was sent, as the stdlib does.
    if state["sent"] > 0:
        os.lseek(fileno, state["offset"], os.SEEK_SET)
    if exc is None:
        fut.set_result(state["sent"])
    else:
        fut.set_exception(exc)


def _check_sendfile_params(sock, file, offset, count):
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.type == socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")
