"""Helpers for the stream transport tests (test_transports*.py): a recording protocol, a
buffered variant, connected transports made through the public API, a raw peer socket
read through the loop, and pipe connections.

Nothing here sleeps: waits are futures resolved by the protocols, and "nothing happened"
checks run the loop for a number of iterations (each one polls the descriptors, on both
loops) after the event that would have caused it.
"""

import asyncio
import contextlib
import hashlib
import logging
import os
import random

import pytest

from conftest import nb_socketpair, tcp_pair

KINDS = ["tcp", "unix"]


class Rec(asyncio.Protocol):
    """Records every callback in `events`; `until(pred)` waits for a condition on it."""

    def __init__(self, eof_result=None):
        self.loop = asyncio.get_running_loop()
        self.transport = None
        self.events = []
        self.data = bytearray()
        self.chunk_types = set()
        self.eof_result = eof_result
        self.made = self.loop.create_future()
        self.eof = self.loop.create_future()
        self.lost = self.loop.create_future()
        self.pauses = []  # write buffer size at each pause_writing()
        self.resumes = []  # ... and at each resume_writing()
        self._waits = []

    def _note(self, event):
        self.events.append(event)
        for item in list(self._waits):
            pred, fut = item
            if not fut.done() and pred():
                fut.set_result(None)
                self._waits.remove(item)

    async def until(self, pred):
        if pred():
            return
        fut = self.loop.create_future()
        self._waits.append((pred, fut))
        await fut

    async def received(self, n):
        """Wait until at least `n` bytes arrived; return everything received."""
        await self.until(lambda: len(self.data) >= n)
        return bytes(self.data)

    def count(self, event):
        return self.events.count(event)

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(transport)
        self._note("made")

    def data_received(self, data):
        self.chunk_types.add(type(data))
        self.data += data
        self._note("data")

    def eof_received(self):
        if not self.eof.done():
            self.eof.set_result(None)
        self._note("eof")
        return self.eof_result

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)
        self._note("lost")

    def pause_writing(self):
        self.pauses.append(self.transport.get_write_buffer_size())
        self._note("pause")

    def resume_writing(self):
        self.resumes.append(self.transport.get_write_buffer_size())
        self._note("resume")


class BufRec(Rec, asyncio.BufferedProtocol):
    """A BufferedProtocol that reads into a fixed buffer of `size` bytes."""

    def __init__(self, size=4096, eof_result=None):
        super().__init__(eof_result)
        self.buf = bytearray(size)
        self.hints = []

    def get_buffer(self, sizehint):
        self.hints.append(sizehint)
        return memoryview(self.buf)

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]
        self._note("data")


def collapse(events):
    """Events with runs of 'data' folded into one."""
    out = []
    for e in events:
        if not (out and out[-1] == e == "data"):
            out.append(e)
    return out


async def connect(loop, factory, kind="tcp"):
    """A transport on one end of a connected pair, and the other end as a raw socket.

    tcp: `connect_accepted_socket` on a TCP pair; unix: `create_unix_connection(sock=)` on
    a socketpair. Returns (transport, protocol, peer)."""
    if kind == "tcp":
        mine, peer = tcp_pair()
        tr, pr = await loop.connect_accepted_socket(factory, mine)
    elif kind == "unix":
        mine, peer = nb_socketpair()
        tr, pr = await loop.create_unix_connection(factory, sock=mine)
    else:
        raise ValueError(kind)
    return tr, pr, peer


@pytest.fixture
def conn(loop):
    """`await conn(factory, kind)`: see `connect`; transports are aborted and peers closed
    at teardown."""
    made = []

    async def _conn(factory=Rec, kind="tcp"):
        tr, pr, peer = await connect(loop, factory, kind)
        made.append((tr, peer))
        return tr, pr, peer

    yield _conn
    for tr, peer in made:
        peer.close()
        if not loop.is_closed() and not tr.is_closing():
            tr.abort()
    if not loop.is_closed() and not loop.is_running():
        loop.run_until_complete(iterations(5))


async def iterations(n=10):
    """Let the loop run `n` iterations (each polls the descriptors)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def recv_exactly(loop, sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


async def recv_all(loop, sock):
    """Everything the peer sends until EOF."""
    buf = bytearray()
    while True:
        chunk = await loop.sock_recv(sock, 1 << 20)
        if not chunk:
            return bytes(buf)
        buf += chunk


async def peer_sees_close(loop, sock):
    """The other end closed: EOF, or a reset when it closed with unread data. Returns the
    bytes received before."""
    buf = bytearray()
    while True:
        try:
            chunk = await loop.sock_recv(sock, 1 << 20)
        except ConnectionResetError:
            return bytes(buf)
        if not chunk:
            return bytes(buf)
        buf += chunk


def payload(n, seed=0):
    """`n` pseudo-random bytes: any loss, duplication or reordering changes the hash."""
    return random.Random(seed).randbytes(n)


def digest(data):
    return hashlib.sha256(data).hexdigest()


def fill_until_queued(tr, chunk=256 * 1024, limit=64 << 20):
    """Write until the transport has to queue data (the socket's buffers are full).
    Returns the bytes written."""
    written = bytearray()
    block = payload(chunk, seed=7)
    while tr.get_write_buffer_size() == 0:
        tr.write(block)
        written += block
        if len(written) > limit:
            raise AssertionError("the transport never queued anything")
    return bytes(written)


@contextlib.contextmanager
def handler_calls(loop):
    """Record calls of the loop's exception handler (contexts in the yielded list)."""
    calls = []
    loop.set_exception_handler(lambda lp, ctx: calls.append(ctx))
    try:
        yield calls
    finally:
        loop.set_exception_handler(None)


def warnings_from(caplog, text):
    return [r for r in caplog.records if r.name == "asyncio" and r.getMessage() == text
            and r.levelno == logging.WARNING]


def close_then_drop_writes(tr, caplog, message):
    """close(), then the stdlib's count of the TLS and pipe transports: five writes are
    dropped quietly, the sixth logs `message`."""
    tr.close()
    for _ in range(5):
        tr.write(b"dropped")
    assert warnings_from(caplog, message) == []
    tr.write(b"dropped")
    assert len(warnings_from(caplog, message)) == 1


# -- pipes -----------------------------------------------------------------------------


async def read_pipe(loop, factory):
    """A read-pipe transport on a new pipe: (transport, protocol, write fd)."""
    r, w = os.pipe()
    pipe = os.fdopen(r, "rb", 0)
    try:
        tr, pr = await connect_pipe(loop, "read", factory, pipe)
    except BaseException:
        pipe.close()
        os.close(w)
        raise
    return tr, pr, w


async def write_pipe(loop, factory):
    """A write-pipe transport on a new pipe: (transport, protocol, read fd)."""
    r, w = os.pipe()
    pipe = os.fdopen(w, "wb", 0)
    try:
        tr, pr = await connect_pipe(loop, "write", factory, pipe)
    except BaseException:
        pipe.close()
        os.close(r)
        raise
    return tr, pr, r


async def connect_pipe(loop, which, factory, pipe):
    return await getattr(loop, f"connect_{which}_pipe")(factory, pipe)
