"""loop.create_connection and loop.connect_accepted_socket: resolution, several
addresses (sequential and happy eyeballs), local addresses, given sockets, TLS, the
stdlib's errors, cancellation without leaked sockets."""

import asyncio
import errno
import socket
import ssl

import pytest

from conftest import PY, reset_close
from netutil import (
    Echo,
    Recorder,
    addrinfo,
    needs_ipv6,
    reserved_port,
    resolve_to,
    socket_fds,
    tls,  # noqa: F401 (fixture)
    tls_files,  # noqa: F401 (fixture)
    unresponsive_listener,
)


@pytest.fixture
def listener():
    """A listening (blocking) TCP socket on 127.0.0.1; connections queue up unaccepted."""
    s = socket.create_server(("127.0.0.1", 0), backlog=16)
    yield s
    s.close()


def refused_message(address):
    return f"[Errno {errno.ECONNREFUSED}] Connect call failed {address}"


async def settle(condition, limit=1000):
    """Let the loop run until `condition()` holds (at most `limit` iterations)."""
    for _ in range(limit):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


# -- connecting and talking -------------------------------------------------------------


def test_connect_numeric_host_and_exchange(loop, run, listener):
    port = listener.getsockname()[1]
    listener.setblocking(False)

    async def main():
        accepting = asyncio.ensure_future(loop.sock_accept(listener))
        tr, pr = await loop.create_connection(Recorder, "127.0.0.1", port)
        peer, _ = await accepting
        with peer:
            assert pr.made.result() is tr
            assert tr.get_extra_info("peername") == ("127.0.0.1", port)
            assert tr.get_extra_info("sockname") == peer.getpeername()
            sock = tr.get_extra_info("socket")
            assert (sock.family, sock.type) == (socket.AF_INET, socket.SOCK_STREAM)
            assert sock.gettimeout() == 0
            await loop.sock_sendall(peer, b"ping")
            assert await pr.received(4) == b"ping"
            tr.write(b"pong")
            got = b""
            while len(got) < 4:
                got += await loop.sock_recv(peer, 4)
            assert got == b"pong"
            tr.close()
            assert await pr.lost is None
            assert await loop.sock_recv(peer, 1) == b""

    run(main())


def test_connect_by_name_and_string_port(loop, run, listener):
    """A name goes through getaddrinfo (in the executor); the port may be a string."""
    port = listener.getsockname()[1]

    async def main():
        tr, pr = await loop.create_connection(Recorder, "localhost", str(port))
        assert tr.get_extra_info("peername")[1] == port
        tr.close()
        await pr.lost

    run(main())


def test_resolution_arguments(loop, run, listener):
    port = listener.getsockname()[1]
    calls = []
    resolve_to(loop, [addrinfo("127.0.0.1", port)], calls)

    async def main():
        tr, pr = await loop.create_connection(
            Recorder, "service.test", port, family=socket.AF_INET,
            proto=socket.IPPROTO_TCP, flags=socket.AI_CANONNAME,
        )
        tr.close()
        await pr.lost

    run(main())
    assert calls == [
        (
            "service.test",
            port,
            {
                "family": socket.AF_INET,
                "type": socket.SOCK_STREAM,
                "proto": socket.IPPROTO_TCP,
                "flags": socket.AI_CANONNAME,
            },
        )
    ]


def test_empty_resolution(loop, run):
    resolve_to(loop, [])
    with pytest.raises(OSError) as e:
        run(loop.create_connection(asyncio.Protocol, "nowhere.test", 80))
    assert type(e.value) is OSError
    assert str(e.value) == "getaddrinfo() returned empty list"


def test_empty_local_resolution(loop, run, listener):
    port = listener.getsockname()[1]
    resolve_to(loop, {"server.test": [addrinfo("127.0.0.1", port)]})
    with pytest.raises(OSError, match=r"^getaddrinfo\(\) returned empty list$"):
        run(loop.create_connection(
            asyncio.Protocol, "server.test", port, local_addr=("local.test", 0)
        ))


def test_name_resolution_error_propagates(loop, run):
    async def getaddrinfo(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    loop.getaddrinfo = getaddrinfo
    with pytest.raises(socket.gaierror):
        run(loop.create_connection(asyncio.Protocol, "nowhere.test", 80))


# -- failures -----------------------------------------------------------------------------


def test_connection_refused(loop, run):
    with reserved_port() as reserved:
        address = reserved.getsockname()
        with pytest.raises(ConnectionRefusedError) as e:
            run(loop.create_connection(asyncio.Protocol, *address))
    assert e.value.errno == errno.ECONNREFUSED
    assert str(e.value) == refused_message(address)


def test_several_addresses_all_refused(loop, run):
    with reserved_port() as a, reserved_port() as b:
        first, second = a.getsockname(), b.getsockname()
        resolve_to(loop, [addrinfo(*first), addrinfo(*second)])
        with pytest.raises(OSError) as e:
            run(loop.create_connection(asyncio.Protocol, "two.test", 80))
    assert type(e.value) is OSError
    assert str(e.value) == (
        f"Multiple exceptions: {refused_message(first)}, {refused_message(second)}"
    )


def test_several_failures_with_one_message_raise_the_first(loop, run):
    with reserved_port() as a:
        address = a.getsockname()
        resolve_to(loop, [addrinfo(*address)] * 3)
        with pytest.raises(ConnectionRefusedError) as e:
            run(loop.create_connection(asyncio.Protocol, "thrice.test", 80))
    assert str(e.value) == refused_message(address)


@pytest.mark.skipif(PY < (3, 12), reason="all_errors is new in 3.12")
@pytest.mark.parametrize("count", [1, 2])
def test_all_errors_raises_a_group(loop, run, count):
    ports = [reserved_port() for _ in range(count)]
    addresses = [p.getsockname() for p in ports]
    try:
        resolve_to(loop, [addrinfo(*a) for a in addresses])
        with pytest.raises(ExceptionGroup) as e:  # noqa: F821
            run(loop.create_connection(asyncio.Protocol, "group.test", 80, all_errors=True))
    finally:
        for p in ports:
            p.close()
    assert e.value.message == "create_connection failed"
    assert [str(x) for x in e.value.exceptions] == [refused_message(a) for a in addresses]
    assert all(isinstance(x, ConnectionRefusedError) for x in e.value.exceptions)


@pytest.mark.parametrize(
    "keyword, version",
    [("ssl_shutdown_timeout", (3, 11)), ("all_errors", (3, 12))],
)
def test_keywords_of_newer_pythons_are_refused(loop, keyword, version):
    if PY >= version:
        pytest.skip(f"{keyword} exists on this Python")
    with pytest.raises(TypeError, match=keyword):
        loop.create_connection(asyncio.Protocol, "127.0.0.1", 80, **{keyword: None})


def test_peer_reset_after_connect(loop, run, listener):
    listener.setblocking(False)

    async def main():
        accepting = asyncio.ensure_future(loop.sock_accept(listener))
        tr, pr = await loop.create_connection(Recorder, *listener.getsockname())
        peer, _ = await accepting
        reset_close(peer)
        exc = await pr.lost
        assert isinstance(exc, ConnectionResetError)
        assert tr.is_closing()

    run(main())


def test_closed_socket_is_refused(loop, run):
    sock = socket.socket()
    sock.close()
    with pytest.raises(OSError) as e:
        run(loop.create_connection(asyncio.Protocol, sock=sock))
    assert e.value.errno == errno.EBADF


def test_protocol_factory_error_closes_the_socket(sf_loop, sf_run, listener):
    """swordfish closes the socket it opened; the stdlib leaves it to the GC (with a
    ResourceWarning)."""
    loop, run = sf_loop, sf_run
    before = socket_fds(collect=True)

    def factory():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        run(loop.create_connection(factory, *listener.getsockname()))
    assert socket_fds() == before


# -- several addresses: order, happy eyeballs --------------------------------------------


@needs_ipv6
@pytest.mark.parametrize("delay", [None, 0.25])
def test_falls_back_from_refused_ipv6_to_ipv4(loop, run, listener, delay):
    """localhost resolving to ::1 (refused) then 127.0.0.1 (listening)."""
    port = listener.getsockname()[1]
    with reserved_port(socket.AF_INET6, "::1") as v6:
        resolve_to(loop, [addrinfo("::1", v6.getsockname()[1]), addrinfo("127.0.0.1", port)])

        async def main():
            tr, pr = await loop.create_connection(
                Recorder, "localhost", port, happy_eyeballs_delay=delay
            )
            assert tr.get_extra_info("peername") == ("127.0.0.1", port)
            tr.close()
            await pr.lost

        run(main())


@needs_ipv6
@pytest.mark.parametrize(
    "options, order",
    [
        ({}, "abc"),
        ({"interleave": 1}, "acb"),
        ({"interleave": 2}, "abc"),
        ({"happy_eyeballs_delay": 0.25}, "acb"),
        ({"happy_eyeballs_delay": 0.25, "interleave": 0}, "abc"),
    ],
)
def test_address_order(loop, run, options, order):
    """Every address is refused; the message lists the attempts in the order tried."""
    with reserved_port(socket.AF_INET6, "::1") as a, reserved_port(
        socket.AF_INET6, "::1"
    ) as b, reserved_port() as c:
        infos = [addrinfo(*s.getsockname()[:2]) for s in (a, b, c)]
        resolve_to(loop, infos)
        with pytest.raises(OSError) as e:
            run(loop.create_connection(asyncio.Protocol, "three.test", 80, **options))
    expected = ", ".join(refused_message(infos["abc".index(k)][4]) for k in order)
    assert str(e.value) == "Multiple exceptions: " + expected


def test_happy_eyeballs_overtakes_a_hanging_address(loop, run, listener):
    hanging, fillers = unresponsive_listener()
    port = listener.getsockname()[1]
    resolve_to(loop, [addrinfo(*hanging.getsockname()), addrinfo("127.0.0.1", port)])
    before = socket_fds(collect=True)

    async def main():
        tr, pr = await loop.create_connection(
            Recorder, "race.test", port, happy_eyeballs_delay=0.05
        )
        assert tr.get_extra_info("peername") == ("127.0.0.1", port)
        # The attempt still hanging was cancelled and closed its socket.
        mine = tr.get_extra_info("socket").fileno()
        assert await settle(lambda: socket_fds() - before == {str(mine)})
        tr.close()
        await pr.lost

    try:
        run(main())
    finally:
        hanging.close()
        for f in fillers:
            f.close()
    assert socket_fds() <= before


def test_without_happy_eyeballs_a_hanging_address_blocks(loop, run, listener):
    """Sequential attempts: the second address is not tried while the first hangs."""
    hanging, fillers = unresponsive_listener()
    resolve_to(loop, [addrinfo(*hanging.getsockname()), addrinfo(*listener.getsockname())])
    before = socket_fds(collect=True)

    async def main():
        task = asyncio.ensure_future(loop.create_connection(Recorder, "seq.test", 80))
        assert await settle(lambda: len(socket_fds() - before) == 1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settle(lambda: socket_fds() == before)
        assert socket_fds() == before

    try:
        run(main())
    finally:
        hanging.close()
        for f in fillers:
            f.close()


# -- cancellation -------------------------------------------------------------------------


@pytest.mark.parametrize("steps", range(8))
def test_cancel_at_any_point_leaks_no_socket(loop, run, listener, steps):
    before = socket_fds(collect=True)

    async def main():
        task = loop.create_task(loop.create_connection(Recorder, *listener.getsockname()))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        try:
            tr, pr = await task
        except asyncio.CancelledError:
            pass
        else:
            tr.close()
            await pr.lost
        await settle(lambda: socket_fds() == before)
        assert socket_fds() == before

    run(main())


@pytest.mark.parametrize("delay", [None, 0.001])
def test_cancel_while_connecting_leaks_no_socket(loop, run, delay):
    hanging, fillers = unresponsive_listener()
    resolve_to(loop, [addrinfo(*hanging.getsockname())] * 2)
    before = socket_fds(collect=True)
    attempts = 2 if delay is not None else 1

    async def main():
        task = loop.create_task(
            loop.create_connection(Recorder, "hang.test", 80, happy_eyeballs_delay=delay)
        )
        while len(socket_fds() - before) < attempts:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settle(lambda: socket_fds() == before)
        assert socket_fds() == before

    try:
        run(main())
    finally:
        hanging.close()
        for f in fillers:
            f.close()


# -- local_addr ---------------------------------------------------------------------------


def test_local_addr(loop, run, listener):
    async def main():
        tr, pr = await loop.create_connection(
            Recorder, *listener.getsockname(), local_addr=("127.0.0.2", 0)
        )
        assert tr.get_extra_info("sockname")[0] == "127.0.0.2"
        tr.close()
        await pr.lost

    run(main())


def test_local_addr_in_use(loop, run, listener):
    taken = listener.getsockname()
    with pytest.raises(OSError) as e:
        run(loop.create_connection(asyncio.Protocol, *taken, local_addr=taken))
    assert e.value.errno == errno.EADDRINUSE
    reason = (
        f"[errno {errno.EADDRINUSE}] address already in use"
        if PY >= (3, 13)
        else "address already in use"
    )
    assert str(e.value) == (
        f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address "
        f"{taken!r}: {reason}"
    )


def test_local_addr_of_another_family(loop, run, listener):
    with pytest.raises(OSError) as e:
        run(loop.create_connection(
            asyncio.Protocol, *listener.getsockname(), local_addr=("::1", 0)
        ))
    assert str(e.value) == f"no matching local address with family={socket.AF_INET!r} found"


# -- sock= --------------------------------------------------------------------------------


def test_connected_sock(loop, run, listener):
    sock = socket.create_connection(listener.getsockname())

    async def main():
        tr, pr = await loop.create_connection(Recorder, sock=sock)
        assert tr.get_extra_info("socket").fileno() == sock.fileno()
        assert sock.gettimeout() == 0  # made non-blocking
        tr.close()
        await pr.lost
        assert sock.fileno() == -1

    run(main())


def test_unix_stream_sock_is_accepted(loop, run):
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.create_connection(Recorder, sock=a)
        b.sendall(b"x")
        assert await pr.received(1) == b"x"
        tr.close()
        await pr.lost

    with b:
        run(main())


def test_argument_errors(loop, run):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    context = ssl.create_default_context()
    wrapped = context.wrap_socket(
        socket.socket(), server_hostname="x", do_handshake_on_connect=False
    )
    P = asyncio.Protocol
    cases = [
        (dict(sock=tcp, host="127.0.0.1", port=80), ValueError,
         "host/port and sock can not be specified at the same time"),
        (dict(sock=tcp, port=80), ValueError,
         "host/port and sock can not be specified at the same time"),
        (dict(), ValueError, "host and port was not specified and no sock specified"),
        (dict(sock=udp), ValueError, f"A Stream Socket was expected, got {udp!r}"),
        (dict(sock=wrapped), TypeError, "Socket cannot be of type SSLSocket"),
        (dict(host="127.0.0.1", port=80, server_hostname="x"), ValueError,
         "server_hostname is only meaningful with ssl"),
        (dict(sock=tcp, ssl=True), ValueError,
         "You must set server_hostname when using ssl without a host"),
        (dict(host="127.0.0.1", port=80, ssl_handshake_timeout=1), ValueError,
         "ssl_handshake_timeout is only meaningful with ssl"),
    ]
    if PY >= (3, 11):
        cases.append((dict(host="127.0.0.1", port=80, ssl_shutdown_timeout=1), ValueError,
                      "ssl_shutdown_timeout is only meaningful with ssl"))
    try:
        for kwargs, exc_type, message in cases:
            with pytest.raises(exc_type) as e:
                run(loop.create_connection(P, **kwargs))
            assert str(e.value) == message, kwargs
    finally:
        for s in (udp, tcp, wrapped):
            s.close()


# -- TLS ----------------------------------------------------------------------------------


def test_tls_connection(loop, run, tls):
    server_ctx, client_ctx = tls

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(
            Recorder, "127.0.0.1", port, ssl=client_ctx, ssl_handshake_timeout=5
        )
        assert tr.get_extra_info("ssl_object") is not None
        assert tr.get_extra_info("peername") == ("127.0.0.1", port)
        tr.write(b"secret")
        assert await pr.received(6) == b"secret"
        tr.close()
        await pr.lost
        server.close()
        await server.wait_closed()

    run(main())


@pytest.mark.parametrize("hostname, ok", [("localhost", True), ("", True), ("wrong.test", False)])
def test_tls_server_hostname(loop, run, tls, hostname, ok):
    server_ctx, client_ctx = tls
    if hostname == "":
        client_ctx.check_hostname = False

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=server_ctx)
        try:
            address = server.sockets[0].getsockname()
            if ok:
                tr, pr = await loop.create_connection(
                    Recorder, *address, ssl=client_ctx, server_hostname=hostname
                )
                tr.close()
                await pr.lost
            else:
                with pytest.raises(ssl.SSLCertVerificationError):
                    await loop.create_connection(
                        Recorder, *address, ssl=client_ctx, server_hostname=hostname
                    )
        finally:
            server.close()

    run(main())


def test_tls_handshake_timeout(loop, run, listener, tls):
    """The peer accepts TCP but never answers the TLS hello."""
    _, client_ctx = tls
    before = socket_fds(collect=True)

    async def main():
        t0 = loop.time()
        with pytest.raises((ConnectionError, asyncio.TimeoutError)):
            await loop.create_connection(
                Recorder, *listener.getsockname(), ssl=client_ctx,
                server_hostname="localhost", ssl_handshake_timeout=0.2,
            )
        assert loop.time() - t0 < 5
        await settle(lambda: socket_fds() == before)
        assert socket_fds() == before

    run(main())


# -- connect_accepted_socket ----------------------------------------------------------------


def test_connect_accepted_socket(loop, run, listener):
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Recorder, conn)
        assert tr.get_extra_info("peername") == client.getsockname()
        client.sendall(b"hello")
        assert await pr.received(5) == b"hello"
        tr.write(b"bye")
        tr.close()
        assert await pr.lost is None

    with client:
        run(main())
        assert client.recv(10) == b"bye"


def test_connect_accepted_socket_tls(loop, run, listener, tls):
    server_ctx, client_ctx = tls
    client = socket.create_connection(listener.getsockname())
    client.setblocking(False)
    conn, _ = listener.accept()

    async def main():
        server_side = loop.create_task(
            loop.connect_accepted_socket(Recorder, conn, ssl=server_ctx)
        )
        ctr, cpr = await loop.create_connection(
            Recorder, sock=client, ssl=client_ctx, server_hostname="localhost"
        )
        tr, pr = await server_side
        ctr.write(b"over tls")
        assert await pr.received(8) == b"over tls"
        ctr.close()
        await cpr.lost
        await pr.lost

    run(main())


def test_connect_accepted_socket_errors(loop, run):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    cases = [
        (dict(sock=udp), f"A Stream Socket was expected, got {udp!r}"),
        (dict(sock=tcp, ssl_handshake_timeout=1),
         "ssl_handshake_timeout is only meaningful with ssl"),
    ]
    if PY >= (3, 11):
        cases.append((dict(sock=tcp, ssl_shutdown_timeout=1),
                      "ssl_shutdown_timeout is only meaningful with ssl"))
    try:
        for kwargs, message in cases:
            with pytest.raises(ValueError) as e:
                run(loop.connect_accepted_socket(asyncio.Protocol, **kwargs))
            assert str(e.value) == message
    finally:
        udp.close()
        tcp.close()


def test_debug_mode_logs_the_connection(loop, run, listener, caplog):
    loop.set_debug(True)

    async def main():
        tr, pr = await loop.create_connection(Recorder, *listener.getsockname())
        tr.close()
        await pr.lost

    with caplog.at_level("DEBUG", logger="asyncio"):
        run(main())
    assert any(" connected to 127.0.0.1:" in r.getMessage() for r in caplog.records)
