"""loop.sock_* coroutines: data transfer, errors, cancellation, sendfile."""

import asyncio
import io
import os
import socket
import ssl

import pytest

from conftest import reset_close, run_on, skip_asyncio_before


async def spin(n=10):
    for _ in range(n):
        await asyncio.sleep(0)


async def recv_exactly(loop, sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, min(65536, n - len(buf)))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def fill_send_buffer(sock):
    sent = 0
    try:
        while True:
            sent += sock.send(b"f" * 65536)
    except BlockingIOError:
        pass
    return sent


def drain(sock):
    total = 0
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return total
        if not data:
            return total
        total += len(data)


def listener(family=socket.AF_INET, backlog=8):
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(backlog)
    srv.setblocking(False)
    return srv


def udp_pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
    return a, b


# --------------------------------------------------------------- recv/send


def test_sock_recv_waits_for_data(loop, socketpair):
    a, b = socketpair()

    async def main():
        task = loop.create_task(loop.sock_recv(a, 100))
        await spin(3)
        assert not task.done()
        await loop.sock_sendall(b, b"hello")
        return await task

    data = run_on(loop, main())
    assert type(data) is bytes
    assert data == b"hello"


def test_sock_recv_eof(loop, socketpair):
    a, b = socketpair()

    async def main():
        task = loop.create_task(loop.sock_recv(a, 100))
        await spin(2)
        b.close()
        return await task

    assert run_on(loop, main()) == b""


def test_sock_recv_into(loop, socketpair):
    a, b = socketpair()

    async def main():
        buf = bytearray(10)
        task = loop.create_task(loop.sock_recv_into(a, buf))
        await spin(2)
        b.send(b"abc")
        n = await task
        assert n == 3 and bytes(buf[:3]) == b"abc"
        mv = memoryview(bytearray(4))
        b.send(b"123456")
        n = await loop.sock_recv_into(a, mv)
        assert n == 4 and bytes(mv) == b"1234"
        assert await loop.sock_recv(a, 10) == b"56"

    run_on(loop, main())


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_sock_sendall_large_payload(loop, socketpair, kind):
    a, b = socketpair()
    payload = os.urandom(1 << 21)

    async def main():
        reader = loop.create_task(recv_exactly(loop, b, len(payload)))
        result = await loop.sock_sendall(a, kind(payload))
        assert result is None
        return await reader

    assert run_on(loop, main()) == payload


def test_sock_sendall_empty(loop, socketpair):
    a, b = socketpair()
    assert run_on(loop, loop.sock_sendall(a, b"")) is None


def test_concurrent_recvs_on_different_sockets(loop, socketpair):
    pairs = [socketpair() for _ in range(20)]

    async def main():
        tasks = [loop.create_task(loop.sock_recv(a, 10)) for a, _ in pairs]
        await spin(2)
        for i, (_, b) in enumerate(pairs):
            b.send(b"%d" % i)
        return await asyncio.gather(*tasks)

    assert run_on(loop, main()) == [b"%d" % i for i in range(20)]


# -------------------------------------------------------- connect/accept


def test_sock_connect_and_accept(loop):
    srv = listener()
    client = socket.socket()
    client.setblocking(False)
    try:

        async def main():
            accept = loop.create_task(loop.sock_accept(srv))
            await spin(2)
            assert not accept.done()
            assert await loop.sock_connect(client, srv.getsockname()) is None
            conn, addr = await accept
            try:
                assert conn.gettimeout() == 0  # accepted sockets are non-blocking
                assert addr == client.getsockname()
                await loop.sock_sendall(client, b"over tcp")
                assert await loop.sock_recv(conn, 100) == b"over tcp"
            finally:
                conn.close()

        run_on(loop, main())
    finally:
        srv.close()
        client.close()


def test_sock_connect_resolves_host_names(loop):
    srv = listener()
    client = socket.socket(socket.AF_INET)
    client.setblocking(False)
    try:

        async def main():
            port = srv.getsockname()[1]
            await loop.sock_connect(client, ("localhost", port))
            conn, _ = await loop.sock_accept(srv)
            conn.close()
            return client.getpeername()

        assert run_on(loop, main()) == srv.getsockname()
    finally:
        srv.close()
        client.close()


def test_sock_connect_ipv6(loop):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        srv.bind(("::1", 0))
    except OSError:
        srv.close()
        pytest.skip("::1 not available")
    srv.listen(1)
    srv.setblocking(False)
    client = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    client.setblocking(False)
    try:

        async def main():
            accept = loop.create_task(loop.sock_accept(srv))
            await loop.sock_connect(client, srv.getsockname()[:2])
            conn, addr = await accept
            with conn:
                await loop.sock_sendall(client, b"v6")
                return await loop.sock_recv(conn, 10), addr[:2] == client.getsockname()[:2]

        assert run_on(loop, main()) == (b"v6", True)
    finally:
        srv.close()
        client.close()


def test_sock_accept_on_non_listening_socket(loop):
    s = socket.socket()
    s.setblocking(False)
    try:

        async def main():
            with pytest.raises(OSError):
                await loop.sock_accept(s)
            assert loop.remove_reader(s) is False

        run_on(loop, main())
    finally:
        s.close()


def test_sock_connect_refused(loop):
    # a bound but not listening port refuses connections
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    client = socket.socket()
    client.setblocking(False)
    try:

        async def main():
            with pytest.raises(ConnectionRefusedError):
                await loop.sock_connect(client, holder.getsockname())

        run_on(loop, main())
        assert loop.remove_writer(client) is False
    finally:
        holder.close()
        client.close()


def test_sock_connect_and_accept_unix(loop, tmp_path):
    path = str(tmp_path / "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    srv.setblocking(False)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setblocking(False)
    try:

        async def main():
            accept = loop.create_task(loop.sock_accept(srv))
            await loop.sock_connect(client, path)
            conn, _ = await accept
            with conn:
                await loop.sock_sendall(conn, b"unix")
                return await loop.sock_recv(client, 10)

        assert run_on(loop, main()) == b"unix"
    finally:
        srv.close()
        client.close()


def test_many_accepts(loop):
    srv = listener(backlog=32)
    clients = []
    try:

        async def main():
            conns = []
            for _ in range(20):
                c = socket.socket()
                c.setblocking(False)
                clients.append(c)
                accept = loop.create_task(loop.sock_accept(srv))
                await loop.sock_connect(c, srv.getsockname())
                conns.append((await accept)[0])
            for i, (c, conn) in enumerate(zip(clients, conns)):
                await loop.sock_sendall(c, b"%d" % i)
            got = [await loop.sock_recv(conn, 10) for conn in conns]
            for conn in conns:
                conn.close()
            return got

        assert run_on(loop, main()) == [b"%d" % i for i in range(20)]
    finally:
        srv.close()
        for c in clients:
            c.close()


# ------------------------------------------------------------------- UDP


def test_sock_sendto_recvfrom(loop, impl):
    skip_asyncio_before(impl, (3, 11), "sock_recvfrom/sock_sendto")
    a, b = udp_pair()
    try:

        async def main():
            recv = loop.create_task(loop.sock_recvfrom(b, 100))
            await spin(2)
            assert not recv.done()
            n = await loop.sock_sendto(a, b"datagram", b.getsockname())
            assert n == 8
            data, addr = await recv
            assert data == b"datagram"
            assert addr == a.getsockname()

        run_on(loop, main())
    finally:
        a.close()
        b.close()


def test_sock_recvfrom_into(loop, impl):
    skip_asyncio_before(impl, (3, 11), "sock_recvfrom_into")
    a, b = udp_pair()
    try:

        async def main():
            buf = bytearray(16)
            recv = loop.create_task(loop.sock_recvfrom_into(b, buf))
            await spin(2)
            await loop.sock_sendto(a, b"into", b.getsockname())
            n, addr = await recv
            assert (n, bytes(buf[:n]), addr) == (4, b"into", a.getsockname())
            buf2 = bytearray(16)
            await loop.sock_sendto(a, b"truncated!", b.getsockname())
            n, addr = await loop.sock_recvfrom_into(b, buf2, 5)
            assert (n, bytes(buf2[:n])) == (5, b"trunc")

        run_on(loop, main())
    finally:
        a.close()
        b.close()


def test_sock_recvfrom_into_nbytes_too_large(loop, impl):
    skip_asyncio_before(impl, (3, 11), "sock_recvfrom_into")
    a, b = udp_pair()
    try:

        async def main():
            a.sendto(b"x", b.getsockname())
            with pytest.raises(ValueError):
                await loop.sock_recvfrom_into(b, bytearray(4), 100)

        run_on(loop, main())
    finally:
        a.close()
        b.close()


def test_sock_connect_udp(loop):
    a, b = udp_pair()
    try:

        async def main():
            await loop.sock_connect(a, b.getsockname())
            await loop.sock_sendall(a, b"connected udp")
            return await loop.sock_recv(b, 100)

        assert run_on(loop, main()) == b"connected udp"
    finally:
        a.close()
        b.close()


# ----------------------------------------------------------- cancellation


async def _cancel_pending(task):
    await spin(3)
    assert not task.done(), "operation completed instead of waiting"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancel_sock_recv_leaves_socket_usable(loop, socketpair):
    a, b = socketpair()

    async def main():
        await _cancel_pending(loop.create_task(loop.sock_recv(a, 100)))
        assert loop.remove_reader(a) is False
        b.send(b"still works")
        assert await loop.sock_recv(a, 100) == b"still works"
        assert loop.remove_reader(a) is False

    run_on(loop, main())


def test_cancel_sock_recv_into(loop, socketpair):
    a, b = socketpair()

    async def main():
        buf = bytearray(100)
        await _cancel_pending(loop.create_task(loop.sock_recv_into(a, buf)))
        assert loop.remove_reader(a) is False
        b.send(b"ok")
        assert await loop.sock_recv_into(a, buf) == 2

    run_on(loop, main())


def test_cancel_sock_recvfrom(loop, impl):
    skip_asyncio_before(impl, (3, 11), "sock_recvfrom")
    a, b = udp_pair()
    try:

        async def main():
            await _cancel_pending(loop.create_task(loop.sock_recvfrom(b, 100)))
            assert loop.remove_reader(b) is False
            await _cancel_pending(loop.create_task(loop.sock_recvfrom_into(b, bytearray(10))))
            assert loop.remove_reader(b) is False
            a.sendto(b"after", b.getsockname())
            data, _ = await loop.sock_recvfrom(b, 100)
            assert data == b"after"

        run_on(loop, main())
    finally:
        a.close()
        b.close()


def test_cancel_sock_accept(loop):
    srv = listener()
    client = socket.socket()
    try:

        async def main():
            await _cancel_pending(loop.create_task(loop.sock_accept(srv)))
            assert loop.remove_reader(srv) is False
            client.connect(srv.getsockname())  # blocking connect: backlog has room
            conn, _ = await loop.sock_accept(srv)
            conn.close()

        run_on(loop, main())
    finally:
        srv.close()
        client.close()


def test_cancel_sock_sendall(loop, socketpair):
    a, b = socketpair()
    fill_send_buffer(a)

    async def main():
        await _cancel_pending(loop.create_task(loop.sock_sendall(a, b"x" * (1 << 20))))
        assert loop.remove_writer(a) is False
        # drain what was sent (including any partial write), then reuse
        reader = loop.create_task(_read_until(loop, b, b"MARKER"))
        await loop.sock_sendall(a, b"MARKER")
        assert (await reader).endswith(b"MARKER")

    run_on(loop, main())


async def _read_until(loop, sock, marker):
    buf = bytearray()
    while not buf.endswith(marker):
        chunk = await loop.sock_recv(sock, 1 << 20)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def test_cancel_sock_sendto(loop, impl, tmp_path):
    skip_asyncio_before(impl, (3, 11), "sock_sendto")
    # A Unix datagram receiver whose queue is full makes the sender wait.
    a = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.bind(str(tmp_path / "b"))
    a.setblocking(False)
    b.setblocking(False)
    try:
        queued = 0
        with pytest.raises(BlockingIOError):
            while True:
                a.sendto(b"q", str(tmp_path / "b"))
                queued += 1

        async def main():
            await _cancel_pending(loop.create_task(loop.sock_sendto(a, b"late", str(tmp_path / "b"))))
            assert loop.remove_writer(a) is False
            for _ in range(queued):
                assert b.recv(10) == b"q"
            assert await loop.sock_sendto(a, b"again", str(tmp_path / "b")) == 5
            assert b.recv(10) == b"again"  # the cancelled datagram was never sent

        run_on(loop, main())
    finally:
        a.close()
        b.close()


def test_cancel_sock_sendfile(loop, tcppair, datafile):
    c, s = tcppair()
    path, data = datafile
    filler = fill_send_buffer(c)

    async def main():
        with open(path, "rb") as f:
            await _cancel_pending(loop.create_task(loop.sock_sendfile(c, f)))
        assert loop.remove_writer(c) is False
        # What went out before the cancellation is a prefix of the file; then the socket
        # still carries new data.
        reader = loop.create_task(_read_until(loop, s, b"MARKER"))
        await loop.sock_sendall(c, b"MARKER")
        got = (await reader)[filler:]
        assert got.endswith(b"MARKER") and data.startswith(got[: -len(b"MARKER")])

    run_on(loop, main())


def test_sock_connect_to_a_name_that_does_not_resolve(loop):
    sock = socket.socket()
    sock.setblocking(False)
    try:
        with pytest.raises(socket.gaierror):
            run_on(loop, loop.sock_connect(sock, ("name.invalid", 80)))
        assert loop.remove_writer(sock) is False
    finally:
        sock.close()


def test_cancel_sock_connect(loop):
    # listen(0) with one connection already queued: further SYNs are dropped,
    # so the next connect stays pending.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    filler = socket.create_connection(srv.getsockname())
    client = socket.socket()
    client.setblocking(False)
    try:

        async def main():
            await _cancel_pending(loop.create_task(loop.sock_connect(client, srv.getsockname())))
            assert loop.remove_writer(client) is False

        run_on(loop, main())
    finally:
        client.close()
        filler.close()
        srv.close()


# ------------------------------------------------------ errors and resets


def test_peer_reset_during_recv(loop, tcppair):
    c, s = tcppair()

    async def main():
        task = loop.create_task(loop.sock_recv(c, 100))
        await spin(3)
        reset_close(s)
        with pytest.raises(ConnectionResetError):
            await task
        assert loop.remove_reader(c) is False

    run_on(loop, main())


def test_recv_after_peer_reset(loop, tcppair):
    c, s = tcppair()
    reset_close(s)

    async def main():
        with pytest.raises(ConnectionResetError):
            await loop.sock_recv(c, 100)

    run_on(loop, main())


def test_sendall_to_reset_peer(loop, tcppair):
    c, s = tcppair()
    reset_close(s)

    async def main():
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(100):
                await loop.sock_sendall(c, b"x" * 65536)
        assert loop.remove_writer(c) is False

    run_on(loop, main())


def test_sendall_to_closed_peer_pending(loop, socketpair):
    a, b = socketpair()
    fill_send_buffer(a)

    async def main():
        task = loop.create_task(loop.sock_sendall(a, b"y" * (1 << 20)))
        await spin(3)
        assert not task.done()
        b.close()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            await task
        assert loop.remove_writer(a) is False

    run_on(loop, main())


def test_operations_on_closed_socket(loop, socketpair):
    a, b = socketpair()
    a.close()

    async def main():
        with pytest.raises(OSError):
            await loop.sock_recv(a, 10)
        with pytest.raises(OSError):
            await loop.sock_recv_into(a, bytearray(10))
        with pytest.raises(OSError):
            await loop.sock_sendall(a, b"data")

    run_on(loop, main())


def _blocking_ops(loop, sock, udp):
    return {
        "sock_recv": lambda: loop.sock_recv(sock, 1),
        "sock_recv_into": lambda: loop.sock_recv_into(sock, bytearray(1)),
        "sock_sendall": lambda: loop.sock_sendall(sock, b"x"),
        "sock_connect": lambda: loop.sock_connect(sock, ("127.0.0.1", 1)),
        "sock_accept": lambda: loop.sock_accept(sock),
        "sock_recvfrom": lambda: loop.sock_recvfrom(udp, 1),
        "sock_recvfrom_into": lambda: loop.sock_recvfrom_into(udp, bytearray(1)),
        "sock_sendto": lambda: loop.sock_sendto(udp, b"x", ("127.0.0.1", 9)),
        "sock_sendfile": lambda: loop.sock_sendfile(sock, io.BytesIO(b"x")),
    }


@pytest.mark.parametrize(
    "op",
    ["sock_recv", "sock_recv_into", "sock_sendall", "sock_connect", "sock_accept",
     "sock_recvfrom", "sock_recvfrom_into", "sock_sendto", "sock_sendfile"],
)
def test_blocking_socket_rejected(loop, impl, op):
    if op.startswith(("sock_recvfrom", "sock_sendto")):
        skip_asyncio_before(impl, (3, 11), op)
    # The stdlib checks this in debug mode (swordfish may check always).
    loop.set_debug(True)
    sock = socket.socket()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    assert sock.gettimeout() is None
    try:

        async def main():
            with pytest.raises(ValueError, match="the socket must be non-blocking"):
                await _blocking_ops(loop, sock, udp)[op]()

        run_on(loop, main())
    finally:
        sock.close()
        udp.close()


def test_ssl_socket_rejected(loop):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    raw = socket.socket()
    raw.setblocking(False)
    s = ctx.wrap_socket(raw, server_hostname="example.invalid", do_handshake_on_connect=False)
    try:

        async def main():
            with pytest.raises(TypeError, match="Socket cannot be of type SSLSocket"):
                await loop.sock_recv(s, 1)
            with pytest.raises(TypeError, match="Socket cannot be of type SSLSocket"):
                await loop.sock_sendall(s, b"x")

        run_on(loop, main())
    finally:
        s.close()


# --------------------------------------------------------------- sendfile


@pytest.fixture
def datafile(tmp_path):
    data = os.urandom(300_000)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("mode", ["native", "fallback"])
@pytest.mark.parametrize(
    "offset,count", [(0, None), (1000, None), (0, 5000), (12345, 100_000), (299_990, 1000)]
)
def test_sock_sendfile(loop, tcppair, datafile, mode, offset, count):
    c, s = tcppair()
    path, data = datafile
    expected = data[offset : None if count is None else offset + count]

    async def main():
        with open(path, "rb") as f:
            fobj = f if mode == "native" else io.BytesIO(f.read())
            reader = loop.create_task(recv_exactly(loop, s, len(expected)))
            sent = await loop.sock_sendfile(
                c, fobj, offset, count, fallback=(mode == "fallback")
            )
            received = await reader
            return sent, received, fobj.tell()

    sent, received, pos = run_on(loop, main())
    assert sent == len(expected)
    assert received == expected
    assert pos == offset + len(expected)


def test_sock_sendfile_empty_file(loop, tcppair, tmp_path):
    c, s = tcppair()
    p = tmp_path / "empty"
    p.write_bytes(b"")

    async def main():
        with open(p, "rb") as f:
            return await loop.sock_sendfile(c, f)

    assert run_on(loop, main()) == 0


def test_sock_sendfile_no_fallback_for_non_regular_file(loop, tcppair):
    c, s = tcppair()

    async def main():
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sock_sendfile(c, io.BytesIO(b"data"), fallback=False)

    run_on(loop, main())


def test_sock_sendfile_argument_errors(loop, tcppair, datafile, tmp_path):
    c, s = tcppair()
    path, _ = datafile
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="only SOCK_STREAM type sockets are supported"):
                await loop.sock_sendfile(udp, f)
            with pytest.raises(ValueError, match="count must be a positive integer"):
                await loop.sock_sendfile(c, f, 0, 0)
            with pytest.raises(TypeError, match="count must be a positive integer"):
                await loop.sock_sendfile(c, f, 0, 1.5)
            with pytest.raises(ValueError, match="offset must be a non-negative integer"):
                await loop.sock_sendfile(c, f, -1)
            with pytest.raises(TypeError, match="offset must be a non-negative integer"):
                await loop.sock_sendfile(c, f, 1.5)
        with open(path, "r") as text:
            with pytest.raises(ValueError, match="file should be opened in binary mode"):
                await loop.sock_sendfile(c, text)

    try:
        run_on(loop, main())
    finally:
        udp.close()


def test_sock_sendfile_to_reset_peer(loop, tcppair, datafile):
    c, s = tcppair()
    path, _ = datafile
    reset_close(s)

    async def main():
        with open(path, "rb") as f:
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                for _ in range(20):
                    f.seek(0)
                    await loop.sock_sendfile(c, f)
        assert loop.remove_writer(c) is False

    run_on(loop, main())
