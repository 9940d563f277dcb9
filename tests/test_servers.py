"""loop.create_server and the Server object: addresses and socket options, the accept
path (errors, out-of-descriptor pauses, per-connection contexts), the lifecycle
(start_serving, serve_forever, close, wait_closed per Python version, close_clients),
given sockets and the stdlib's argument errors."""

import asyncio
import contextvars
import errno
import socket
import ssl
from asyncio import trsock

import pytest

from conftest import PY, reset_close
from netutil import Echo, Recorder, needs_ipv6, resolve_to, socket_fds


class Accepted:
    """A protocol factory that keeps every protocol it made; `next()` waits for the
    connection after the one it returned last (or the `index`th) to be made."""

    def __init__(self, cls=Recorder):
        self.cls = cls
        self.protocols = []
        self._waiting = []
        self._cursor = 0

    def __call__(self):
        p = self.cls()
        self.protocols.append(p)
        for fut in self._waiting:
            if not fut.done():
                fut.set_result(None)
        self._waiting.clear()
        return p

    async def next(self, index=None):
        if index is None:
            index = self._cursor
        self._cursor = index + 1
        while len(self.protocols) <= index:
            fut = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            await fut
        p = self.protocols[index]
        await p.made
        return p


async def connect(loop, address, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setblocking(False)
    await loop.sock_connect(s, address)
    return s


async def recv_exactly(loop, sock, n):
    data = b""
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            break
        data += chunk
    return data


# -- serving ------------------------------------------------------------------------------


def test_echo_server_and_its_attributes(loop, run):
    async def main():
        accepted = Accepted(Echo)
        server = await loop.create_server(accepted, "127.0.0.1", 0)
        assert server.get_loop() is loop
        assert server.is_serving()
        (sock,) = server.sockets
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
        assert repr(server) == f"<Server sockets={server.sockets!r}>"
        client = await connect(loop, sock.getsockname())
        with client:
            proto = await accepted.next()
            assert proto.transport.get_extra_info("peername") == client.getsockname()
            assert proto.transport.get_extra_info("sockname") == sock.getsockname()
            await loop.sock_sendall(client, b"echo me")
            assert await recv_exactly(loop, client, 7) == b"echo me"
        assert await proto.lost is None
        server.close()
        assert not server.is_serving()
        assert server.sockets == ()
        await server.wait_closed()

    run(main())


def accept_queued(loop, run, accepted, clients, backlog):
    """Serve with the factory `accepted` on a listener where `clients` connections are
    already queued, until each has its protocol; then close everything."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    clients = [socket.create_connection(listener.getsockname()) for _ in range(clients)]

    async def main():
        server = await loop.create_server(accepted, sock=listener, backlog=backlog)
        for i in range(len(clients)):
            await accepted.next(i)
        server.close()
        for p in accepted.protocols:
            p.transport.close()
            await p.lost
        await server.wait_closed()

    try:
        run(main())
        return [c.getsockname() for c in clients]
    finally:
        for c in clients:
            c.close()


def test_every_queued_connection_is_accepted(loop, run):
    """Connections queued before the loop looks are all accepted, with a small backlog
    too."""
    accepted = Accepted()
    clients = accept_queued(loop, run, accepted, 6, backlog=2)
    assert {p.transport.get_extra_info("peername") for p in accepted.protocols} == set(clients)


class OnePerWake(Accepted):
    """A factory that asks for one connection per wake-up of the listening socket (as
    swordfish's server does when other processes accept from the same queue), and notes
    how many connections had been made when the loop's next round of callbacks began."""

    accept_batch = 1

    def __init__(self, loop):
        super().__init__()
        self.loop = loop
        self.seen_next_round = None

    def __call__(self):
        if not self.protocols:
            # Runs after every callback already queued, so after the accept callback's
            # whole batch, and before that socket's next accept callback.
            self.loop.call_soon(lambda: setattr(self, "seen_next_round", len(self.protocols)))
        return super().__call__()


def test_accept_batch_takes_one_connection_per_wake(sf_loop, sf_run):
    accepted = OnePerWake(sf_loop)
    accept_queued(sf_loop, sf_run, accepted, 4, backlog=16)
    assert accepted.seen_next_round == 1


def test_each_connection_gets_its_own_context(loop, run):
    """As with the stdlib's per-connection task: what the protocol factory sets in a
    context variable is seen by that connection's callbacks, and not by the next one."""
    var = contextvars.ContextVar("var", default=None)
    seen = []

    class P(Recorder):
        def connection_made(self, transport):
            seen.append(("made", self.n, var.get()))
            super().connection_made(transport)

        def data_received(self, data):
            seen.append(("data", self.n, var.get()))
            super().data_received(data)

    count = 0

    def factory():
        nonlocal count
        count += 1
        seen.append(("factory", count, var.get()))
        var.set(count)
        p = P()
        p.n = count
        return p

    async def main():
        protos = Accepted(factory)
        server = await loop.create_server(protos, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()
        for i in range(2):
            with await connect(loop, address) as c:
                p = await protos.next(i)
                await loop.sock_sendall(c, b"x")
                await p.received(1)
        server.close()

    run(main())
    assert seen == [
        ("factory", 1, None), ("made", 1, 1), ("data", 1, 1),
        ("factory", 2, None), ("made", 2, 2), ("data", 2, 2),
    ]


# -- addresses and socket options -----------------------------------------------------------


@needs_ipv6
def test_several_hosts(loop, run):
    async def main():
        server = await loop.create_server(Recorder, ["127.0.0.1", "::1", "127.0.0.1"], 0)
        families = sorted(s.family for s in server.sockets)
        assert families == [socket.AF_INET, socket.AF_INET6]
        for s in server.sockets:
            if s.family == socket.AF_INET6:
                assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
            with await connect(loop, s.getsockname(), s.family):
                pass
        server.close()
        await server.wait_closed()

    run(main())


@pytest.mark.parametrize("host", [None, ""])
def test_all_interfaces(loop, run, host):
    expected = sorted(
        {info[0] for info in socket.getaddrinfo(None, 0, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)}
    )

    async def main():
        server = await loop.create_server(Recorder, host, 0)
        assert sorted(s.family for s in server.sockets) == expected
        server.close()
        only4 = await loop.create_server(Recorder, host, 0, family=socket.AF_INET)
        assert [s.getsockname()[0] for s in only4.sockets] == ["0.0.0.0"]
        only4.close()

    run(main())


def test_same_address_twice_gives_one_socket(loop, run):
    async def main():
        server = await loop.create_server(Recorder, ["127.0.0.1", "127.0.0.1"], 0)
        assert len(server.sockets) == 1
        server.close()

    run(main())


def test_reuse_address(loop, run):
    async def main():
        default = await loop.create_server(Recorder, "127.0.0.1", 0)
        off = await loop.create_server(Recorder, "127.0.0.1", 0, reuse_address=False)
        assert default.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0
        assert off.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 0
        default.close()
        off.close()

    run(main())


def test_reuse_port(loop, run):
    async def main():
        first = await loop.create_server(Recorder, "127.0.0.1", 0, reuse_port=True)
        port = first.sockets[0].getsockname()[1]
        second = await loop.create_server(Recorder, "127.0.0.1", port, reuse_port=True)
        assert second.sockets[0].getsockname()[1] == port
        assert second.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        with pytest.raises(OSError) as e:
            await loop.create_server(Recorder, "127.0.0.1", port)
        first.close()
        second.close()
        return port, e.value

    port, exc = run(main())
    assert exc.errno == errno.EADDRINUSE
    reason = f"[errno {errno.EADDRINUSE}] address already in use" if PY >= (3, 13) else (
        "address already in use"
    )
    assert str(exc) == (
        f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address "
        f"('127.0.0.1', {port}): {reason}"
    )


def test_bind_error_closes_the_sockets_already_made(loop, run):
    async def main():
        taken = await loop.create_server(Recorder, "127.0.0.1", 0, reuse_address=False)
        port = taken.sockets[0].getsockname()[1]
        before = socket_fds(collect=True)
        with pytest.raises(OSError):
            await loop.create_server(
                Recorder, ["127.0.0.2", "127.0.0.1"], port, reuse_address=False
            )
        assert socket_fds() == before
        taken.close()

    run(main())


def test_address_not_available(loop, run):
    """Not a local address: 3.13 skips such addresses, then fails when none is left."""
    with pytest.raises(OSError) as e:
        run(loop.create_server(Recorder, "192.0.2.1", 0))
    if PY >= (3, 13):
        assert e.value.errno is None
        assert str(e.value) == "could not bind on any address out of [('192.0.2.1', 0)]"
    else:
        assert e.value.errno == errno.EADDRNOTAVAIL
        assert str(e.value) == (
            f"[Errno {errno.EADDRNOTAVAIL}] error while attempting to bind on address "
            f"('192.0.2.1', 0): cannot assign requested address"
        )


def test_empty_resolution(loop, run):
    resolve_to(loop, [])
    with pytest.raises(OSError) as e:
        run(loop.create_server(Recorder, "nowhere.test", 80))
    assert str(e.value) == "getaddrinfo('nowhere.test') returned empty list"


@pytest.mark.skipif(PY < (3, 13), reason="keep_alive is new in 3.13")
def test_keep_alive(loop, run):
    async def main():
        on = await loop.create_server(Recorder, "127.0.0.1", 0, keep_alive=True)
        off = await loop.create_server(Recorder, "127.0.0.1", 0)
        assert on.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        assert off.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        on.close()
        off.close()

    run(main())


@pytest.mark.parametrize("keyword, version", [("keep_alive", (3, 13)), ("ssl_shutdown_timeout", (3, 11))])
def test_keywords_of_newer_pythons_are_refused(loop, keyword, version):
    if PY >= version:
        pytest.skip(f"{keyword} exists on this Python")
    with pytest.raises(TypeError, match=keyword):
        loop.create_server(Recorder, "127.0.0.1", 0, **{keyword: None})


# -- lifecycle ------------------------------------------------------------------------------


def test_start_serving_later(loop, run):
    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, "127.0.0.1", 0, start_serving=False)
        assert not server.is_serving()
        address = server.sockets[0].getsockname()
        with pytest.raises(ConnectionRefusedError):  # not even listening yet
            await connect(loop, address)
        await server.start_serving()
        assert server.is_serving()
        await server.start_serving()  # twice is fine
        with await connect(loop, address):
            await accepted.next()
        server.close()

    run(main())


def test_serve_forever(loop, run):
    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0, start_serving=False)
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        assert server.is_serving()
        with pytest.raises(RuntimeError) as e:
            await server.serve_forever()
        assert str(e.value) == f"server {server!r} is already being awaited on serve_forever()"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not server.is_serving()
        assert server.sockets == ()
        with pytest.raises(RuntimeError) as e:
            await server.serve_forever()
        assert str(e.value) == f"server {server!r} is closed"

    run(main())


def test_close_ends_serve_forever(loop, run):
    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        server.close()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())


def test_wait_closed_before_close(loop, run):
    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        waiter = asyncio.ensure_future(server.wait_closed())
        with await connect(loop, server.sockets[0].getsockname()) as c:
            await loop.sock_sendall(c, b"round trip")
        assert not waiter.done()
        server.close()
        await waiter
        await server.wait_closed()  # and again, once closed

    run(main())


def test_wait_closed_and_open_connections(loop, run):
    """3.12+: wait_closed() also waits for the connections to go. 3.10/3.11: it returns
    at once when the server is closed."""

    async def main():
        accepted = Accepted(Echo)
        server = await loop.create_server(accepted, "127.0.0.1", 0)
        client = await connect(loop, server.sockets[0].getsockname())
        proto = await accepted.next()
        server.close()
        waiter = asyncio.ensure_future(server.wait_closed())
        await loop.sock_sendall(client, b"ping")
        assert await recv_exactly(loop, client, 4) == b"ping"  # the connection lives on
        if PY >= (3, 12):
            assert not waiter.done()
            client.close()
            await proto.lost
            await waiter
        else:
            assert waiter.done()
            client.close()
            await proto.lost

    run(main())


@pytest.mark.skipif(PY >= (3, 13), reason="3.13's _attach/_detach take the transport")
def test_private_attach_without_transport(loop, run):
    """Before 3.13 the stdlib's transports (and CPython's own tests) call
    server._attach()/_detach() without arguments; wait_closed counts them."""

    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        server._attach()
        server.close()
        waiter = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0)
        assert waiter.done() is (PY < (3, 12))  # 3.12 waits for the attached one
        server._detach()
        await waiter

    run(main())


@pytest.mark.skipif(PY < (3, 13), reason="close_clients/abort_clients are new in 3.13")
@pytest.mark.parametrize("method", ["close_clients", "abort_clients"])
def test_close_and_abort_clients(loop, run, method):
    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()
        clients = [await connect(loop, address) for _ in range(2)]
        protos = [await accepted.next(i) for i in range(2)]
        server.close()
        getattr(server, method)()
        for p in protos:
            assert await p.lost is None
        await server.wait_closed()
        for c in clients:
            assert await loop.sock_recv(c, 1) == b""
            c.close()

    run(main())


def test_no_close_clients_before_313(loop, run):
    if PY >= (3, 13):
        pytest.skip("3.13 has them")

    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        assert not hasattr(server, "close_clients")
        assert not hasattr(server, "abort_clients")
        server.close()

    run(main())


def test_async_with(loop, run):
    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        async with server as entered:
            assert entered is server
            assert server.is_serving()
        assert server.sockets == ()
        assert not server.is_serving()

    run(main())


def test_close_closes_the_listening_sockets(loop, run):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    address = listener.getsockname()

    async def main():
        server = await loop.create_server(Recorder, sock=listener)
        server.close()
        server.close()  # idempotent
        assert listener.fileno() == -1
        with pytest.raises(ConnectionRefusedError):
            await connect(loop, address)

    run(main())


def test_stop_serving(loop, run):
    """The loop's private _stop_serving(sock) (used by CPython's tests) unregisters the
    socket and closes it."""
    a, b = socket.socketpair()

    async def main():
        fd = a.fileno()
        loop.add_reader(fd, lambda: None)
        loop._stop_serving(a)
        assert a.fileno() == -1
        assert loop.remove_reader(fd) is False

    with b:
        run(main())


# -- the accept path ------------------------------------------------------------------------


class FlakyListener(socket.socket):
    """A listening socket whose accept() fails with `error` the first `failures` times."""

    failures = 0
    error = None

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(self.error, "injected")
        return super().accept()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_accept_out_of_resources_pauses(loop, run, code):
    listener = FlakyListener()
    listener.bind(("127.0.0.1", 0))
    listener.failures, listener.error = 1, code
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, sock=listener, backlog=1)
        t0 = loop.time()
        client = await connect(loop, listener.getsockname())
        await accepted.next()
        elapsed = loop.time() - t0
        client.close()
        server.close()
        return elapsed

    elapsed = run(main())
    assert elapsed >= 0.9  # asyncio.constants.ACCEPT_RETRY_DELAY, less the stdlib's slack
    assert len(contexts) == 1
    ctx = contexts[0]
    assert ctx["message"] == "socket.accept() out of system resource"
    assert ctx["exception"].errno == code
    assert isinstance(ctx["socket"], trsock.TransportSocket)


@pytest.mark.timeout(20)
def test_close_during_accept_pause(sf_loop, sf_run):
    """swordfish does not re-watch a socket closed during the pause (the stdlib then reports
    an error from its retry callback)."""
    loop = sf_loop
    listener = FlakyListener()
    listener.bind(("127.0.0.1", 0))
    listener.failures, listener.error = 1, errno.EMFILE
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        server = await loop.create_server(Recorder, sock=listener, backlog=1)
        client = await connect(loop, listener.getsockname())
        while not contexts:
            await asyncio.sleep(0)
        server.close()
        await asyncio.sleep(asyncio.constants.ACCEPT_RETRY_DELAY + 0.1)  # the retry's time
        client.close()

    sf_run(main())
    assert [c["message"] for c in contexts] == ["socket.accept() out of system resource"]


def test_other_accept_errors_are_reported_and_serving_goes_on(loop, run):
    listener = FlakyListener()
    listener.bind(("127.0.0.1", 0))
    listener.failures, listener.error = 1, errno.EPERM
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, sock=listener)
        with await connect(loop, listener.getsockname()):
            await accepted.next()
        server.close()

    run(main())
    assert len(contexts) == 1
    assert contexts[0]["message"].startswith("Exception in callback ")
    assert contexts[0]["exception"].errno == errno.EPERM


@pytest.mark.parametrize("debug", [False, True])
def test_protocol_factory_error(loop, run, debug):
    loop.set_debug(debug)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    made = []

    def factory():
        made.append(None)
        if len(made) == 1:
            raise ZeroDivisionError
        return accepted_ok()

    accepted_ok = Accepted()

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()
        first = await connect(loop, address)
        with await connect(loop, address):
            await accepted_ok.next()  # the server goes on
        first.close()
        server.close()

    run(main())
    errors = [c for c in contexts if "exception" in c]
    if debug:
        assert [c["message"] for c in errors] == [
            "Error on transport creation for incoming connection"
        ]
        assert isinstance(errors[0]["exception"], ZeroDivisionError)
    else:
        assert errors == []


def test_client_reset_before_accept(loop, run):
    """A connection reset while still queued is accepted, then lost with the reset; the
    server goes on."""
    listener = socket.create_server(("127.0.0.1", 0))
    early = socket.create_connection(listener.getsockname())
    reset_close(early)

    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, sock=listener)
        first = await accepted.next()
        assert isinstance(await first.lost, ConnectionResetError)
        with await connect(loop, listener.getsockname()):
            await accepted.next()
        server.close()

    run(main())


def test_client_reset_after_accept(loop, run):
    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, "127.0.0.1", 0)
        client = await connect(loop, server.sockets[0].getsockname())
        proto = await accepted.next()
        reset_close(client)
        assert isinstance(await proto.lost, ConnectionResetError)
        server.close()
        await server.wait_closed()

    run(main())


def test_protocol_factory_error_closes_the_connection(sf_loop, sf_run):
    """swordfish closes the accepted socket at once (the stdlib leaves it to the GC)."""
    loop = sf_loop

    def factory():
        raise ZeroDivisionError

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0)
        with await connect(loop, server.sockets[0].getsockname()) as client:
            assert await loop.sock_recv(client, 1) == b""
        server.close()

    sf_run(main())


# -- sock= and argument errors ----------------------------------------------------------------


def test_given_listening_socket(loop, run):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))

    async def main():
        accepted = Accepted()
        server = await loop.create_server(accepted, sock=listener)
        assert [s.fileno() for s in server.sockets] == [listener.fileno()]
        assert listener.gettimeout() == 0
        with await connect(loop, listener.getsockname()):
            await accepted.next()
        server.close()

    run(main())


def test_argument_errors(loop, run):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    wrapped = ssl.create_default_context().wrap_socket(
        socket.socket(), server_hostname="x", do_handshake_on_connect=False
    )
    cases = [
        (dict(ssl=True), TypeError, "ssl argument must be an SSLContext or None"),
        (dict(ssl=False, sock=tcp), TypeError, "ssl argument must be an SSLContext or None"),
        (dict(host="127.0.0.1", port=0, ssl_handshake_timeout=1), ValueError,
         "ssl_handshake_timeout is only meaningful with ssl"),
        (dict(sock=wrapped), TypeError, "Socket cannot be of type SSLSocket"),
        (dict(sock=tcp, host="127.0.0.1"), ValueError,
         "host/port and sock can not be specified at the same time"),
        (dict(), ValueError, "Neither host/port nor sock were specified"),
        (dict(sock=udp), ValueError, f"A Stream Socket was expected, got {udp!r}"),
    ]
    if PY >= (3, 11):
        cases.append((dict(host="127.0.0.1", port=0, ssl_shutdown_timeout=1), ValueError,
                      "ssl_shutdown_timeout is only meaningful with ssl"))
    try:
        for kwargs, exc_type, message in cases:
            with pytest.raises(exc_type) as e:
                run(loop.create_server(Recorder, **kwargs))
            assert str(e.value) == message, kwargs
    finally:
        for s in (udp, tcp, wrapped):
            s.close()


def test_debug_mode_logs_serving(loop, run, caplog):
    loop.set_debug(True)

    async def main():
        server = await loop.create_server(Recorder, "127.0.0.1", 0)
        server.close()
        return server

    with caplog.at_level("INFO", logger="asyncio"):
        run(main())
    # (formatted when logged, while the server had its socket)
    assert "<Server sockets=(<asyncio.TransportSocket fd=" in caplog.text
    assert ")> is serving" in caplog.text
