"""No descriptor or memory leaks across many connections: 10,000 connect / exchange /
close cycles through a Unix server, plain and TLS, keep the process's descriptors and memory
flat, whether the client closes, aborts or fails in a protocol callback (the fatal-error
path).

Memory is read from two counters that do not depend on timing: pymalloc blocks
(`sys.getallocatedblocks()`, every small Python object) and the C allocator's bytes in use
(glibc `mallinfo2().uordblks`: large Python objects and everything the native core
allocates). Both are read after a warm-up run, so caches and free lists that fill once do
not count.
"""

import asyncio
import ctypes
import gc
import os
import sys

import pytest

from netutil import tls_files, tls_pair  # noqa: F401 (fixture)

CYCLES = 10_000
WARMUP = 1_000
# What a leak of one small object, or of 64 bytes of native memory, per cycle would exceed.
MAX_BLOCK_GROWTH = CYCLES // 4
MAX_MALLOC_GROWTH = 64 * CYCLES // 2


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost",
    )]


def _malloc_in_use():
    try:
        libc = ctypes.CDLL(None)
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None  # not glibc 2.33+
    mallinfo2.restype = _MallInfo2
    return mallinfo2().uordblks


def _fds():
    return len(os.listdir("/proc/self/fd"))


class Client(asyncio.Protocol):
    """Sends a ping; on the echo it ends the connection the way `mode` says: close(),
    abort(), or a data_received() that raises (a fatal error, reported to the handler)."""

    def __init__(self, done, mode):
        self.done = done
        self.mode = mode

    def connection_made(self, transport):
        self.transport = transport
        transport.write(b"ping")

    def data_received(self, data):
        if self.mode == "close":
            self.transport.close()
        elif self.mode == "abort":
            self.transport.abort()
        else:
            raise RuntimeError("fatal")

    def connection_lost(self, exc):
        self.done.set_result(exc)


class Server(asyncio.Protocol):
    def __init__(self, lost):
        self.lost = lost

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

    def connection_lost(self, exc):
        self.lost()


async def cycles(loop, path, n, mode="close", contexts=None):
    """`n` connections; `contexts`: (server, client) SSL contexts for TLS ones."""
    server_lost = 0

    def lost():
        nonlocal server_lost
        server_lost += 1

    server_ssl, client_ssl = contexts or (None, None)
    tls_client = {"ssl": client_ssl, "server_hostname": "localhost"} if client_ssl else {}
    server = await loop.create_unix_server(lambda: Server(lost), path, ssl=server_ssl)
    try:
        for _ in range(n):
            done = loop.create_future()
            await loop.create_unix_connection(lambda: Client(done, mode), path, **tls_client)
            exc = await done
            assert (exc is None) if mode != "fatal" else isinstance(exc, RuntimeError)
        while server_lost < n:  # the server's ends close on EOF, a moment later
            await asyncio.sleep(0)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["close", "abort", "fatal", "openssl-close", "openssl-abort", "rustls-close",
                                  "rustls-abort"])
def test_swordfish_connect_close_cycles_leak_nothing(sf_loop, sf_run, tmp_path, request, mode):
    path = str(tmp_path / "s")
    engine, _, mode = mode.rpartition("-")
    contexts = tls_pair(request.getfixturevalue("tls_files"), engine) if engine else None
    handled = []
    sf_loop.set_exception_handler(lambda loop, ctx: handled.append(None))
    sf_run(cycles(sf_loop, path, WARMUP, mode, contexts), timeout=60)
    gc.collect()
    fds = _fds()
    # Read after each half: a leak grows in both, while a table of the interpreter's that
    # happens to be resized during the run (one allocation, once) shows in one only.
    readings = [(sys.getallocatedblocks(), _malloc_in_use())]
    for _ in range(2):
        sf_run(cycles(sf_loop, path, CYCLES // 2, mode, contexts), timeout=120)
        gc.collect()
        readings.append((sys.getallocatedblocks(), _malloc_in_use()))
    assert len(handled) == (WARMUP + CYCLES if mode == "fatal" else 0)
    handled.clear()
    assert _fds() == fds
    halves = list(zip(readings, readings[1:]))
    assert min(after[0] - before[0] for before, after in halves) < MAX_BLOCK_GROWTH // 2, readings
    if readings[0][1] is not None:
        assert min(after[1] - before[1] for before, after in halves) < MAX_MALLOC_GROWTH // 2, readings


# Python-side memory of an idle accepted TCP connection (transport, core, socket, protocol,
# addresses), traced by tracemalloc: about 780 bytes on Python 3.10-3.13, and 1,070 before the
# accepted connections shared their local address and kept the peer address out of the
# extra dict.
IDLE_CONNECTION_BUDGET = 900


class _Idle(asyncio.Protocol):
    __slots__ = ("transport", "made")  # no __dict__: the protocol's part stays small

    def __init__(self, made):
        self.made = made

    def connection_made(self, transport):
        self.transport = transport
        self.made(transport)



@pytest.mark.timeout(60)
def test_swordfish_idle_connection_memory(sf_loop, sf_run):
    import socket
    import tracemalloc

    n, batch = 200, 10  # 400 descriptors in all
    transports = []
    waiting = []

    def on_made(transport):
        transports.append(transport)
        if len(transports) % batch == 0:
            waiting.pop().set_result(None)

    async def main():
        server = await sf_loop.create_server(lambda: _Idle(on_made), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        # Made before tracing starts, so that only the server's side is counted.
        clients = [socket.socket() for _ in range(n)]
        tracemalloc.start()
        try:
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            # In small batches, as connections usually come: the handles of a large burst
            # would stay in the loop's spare pool (a cache, not the connections' memory).
            for i in range(0, n, batch):
                accepted = sf_loop.create_future()
                waiting.append(accepted)
                for c in clients[i:i + batch]:
                    c.connect(("127.0.0.1", port))  # the kernel completes the handshake
                await accepted
            # The callbacks scheduled with the last connection_made (the waiters that
            # acceptance creates) run in the next iterations.
            for _ in range(3):
                await asyncio.sleep(0)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        try:
            for t, c in zip(sorted(transports, key=lambda t: t.get_extra_info("peername")[1]),
                            sorted(clients, key=lambda c: c.getsockname()[1])):
                # The shared address objects are still each connection's own addresses.
                assert t.get_extra_info("peername") == c.getsockname()
                assert t.get_extra_info("sockname") == c.getpeername()
                assert t.get_extra_info("socket").getpeername() == c.getsockname()
            return grown / n
        finally:
            for c in clients:
                c.close()
            server.close()
            await server.wait_closed()

    per_connection = sf_run(main())
    print(f"{per_connection:.0f} bytes per idle connection")
    assert per_connection <= IDLE_CONNECTION_BUDGET, per_connection
    # The connections of one server share their local address and peer host objects.
    assert transports[0].get_extra_info("sockname") is transports[-1].get_extra_info("sockname")
    assert transports[0].get_extra_info("peername")[0] is transports[-1].get_extra_info("peername")[0]
