"""TLS and sendfile through the public asyncio API, on both loops: `loop.sendfile` (plain and
TLS transports, offsets and counts, its errors), `loop.start_tls` on both sides of an open
connection, SNI, ALPN and client certificates, connections closed or cancelled in the middle
of a handshake (without leaked descriptors), and the handshake and shutdown timeouts."""

import asyncio
import errno
import shutil
import socket
import ssl
import subprocess
import threading

import pytest

from conftest import PY, reset_close, skip_asyncio_before
from netutil import (
    Recorder,
    first_protocol,
    openssl_tls,  # noqa: F401 (fixture)
    socket_fds,
    tls,  # noqa: F401 (fixture)
    tls_files,  # noqa: F401 (fixture)
)
from transportutil import (
    Rec,
    conn,  # noqa: F401 (fixture)
    iterations,
    payload,
    peer_sees_close,
    recv_exactly,
)

WAIT = 5  # seconds: the bound on any single wait for an event in these tests


# -- helpers ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def client_cert_files(tmp_path_factory):
    """A self-signed client certificate on an EC key (CN=swordfish-client):
    (certfile, keyfile)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the client certificate is made with the openssl command")
    folder = tmp_path_factory.mktemp("tls-client")
    cert, key = str(folder / "client.pem"), str(folder / "client.key")
    command = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
               "-nodes", "-days", "2", "-subj", "/CN=swordfish-client",
               "-keyout", key, "-out", cert]
    subprocess.run(command, check=True, capture_output=True)
    return cert, key


@pytest.fixture
def datafile(tmp_path):
    """A file of pseudo-random bytes: (path, its contents)."""
    data = payload(200_000, seed=3)
    path = tmp_path / "sendfile.bin"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def listener():
    """A non-blocking listening TCP socket on 127.0.0.1 (accept it through the loop)."""
    s = socket.create_server(("127.0.0.1", 0), backlog=8)
    s.setblocking(False)
    yield s
    s.close()


async def wait(aw):
    return await asyncio.wait_for(aw, WAIT)


async def tls_pair(loop, server_ctx, client_ctx, server_hostname="localhost"):
    """A TLS server and a client connected to it.

    Returns (server, client transport, client protocol, server transport, server protocol)."""
    factory, first = first_protocol(loop)
    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_ctx)
    try:
        ctr, cpr = await wait(loop.create_connection(
            Recorder, *server.sockets[0].getsockname(), ssl=client_ctx,
            server_hostname=server_hostname,
        ))
        spr = await wait(first)
        str_ = await wait(spr.made)
    except BaseException:
        server.close()
        raise
    return server, ctr, cpr, str_, spr


async def shut(server, *transports):
    for tr in transports:
        tr.abort()
    server.close()
    await wait(server.wait_closed())


async def fds_back_to(before, limit=200):
    """Let the loop run until this process's sockets are `before` again (bounded)."""
    for _ in range(limit):
        if socket_fds() == before:
            return
        await iterations(1)


async def accept_hello(loop, listener):
    """Accept one connection on `listener` and read the client's first TLS record."""
    peer, _ = await wait(loop.sock_accept(listener))
    hello = await wait(loop.sock_recv(peer, 65536))
    assert hello[:1] == b"\x16"  # a TLS handshake record: the ClientHello
    return peer


# -- loop.sendfile ------------------------------------------------------------------------


@pytest.mark.parametrize("offset, count", [(0, None), (1000, None), (1000, 5000), (0, 100)])
def test_sendfile_over_tcp_sends_the_range_and_advances_the_file(
        loop, run, conn, datafile, offset, count):
    path, data = datafile
    expected = data[offset:None if count is None else offset + count]

    async def main():
        tr, pr, peer = await conn()
        with open(path, "rb") as f:
            sent = await loop.sendfile(tr, f, offset, count)
            position = f.tell()
        received = await wait(recv_exactly(loop, peer, len(expected)))
        tr.write(b"after")  # the transport writes again once sendfile is done
        assert await wait(recv_exactly(loop, peer, 5)) == b"after"
        return sent, received, position

    sent, received, position = run(main())
    assert sent == len(expected)
    assert received == expected
    assert position == offset + len(expected)


@pytest.mark.parametrize("offset, count", [(0, None), (1000, 5000)])
def test_sendfile_over_tls_falls_back_to_the_same_bytes(loop, run, tls, datafile, offset, count):
    server_ctx, client_ctx = tls
    path, data = datafile
    expected = data[offset:None if count is None else offset + count]

    async def main():
        server, ctr, cpr, str_, spr = await tls_pair(loop, server_ctx, client_ctx)
        try:
            with open(path, "rb") as f:
                sent = await loop.sendfile(ctr, f, offset, count)
                position = f.tell()
            received = await wait(spr.received(len(expected)))
            ctr.write(b"after")
            assert await wait(spr.received(len(expected) + 5)) == expected + b"after"
            return sent, received, position
        finally:
            await shut(server, ctr, str_)

    sent, received, position = run(main())
    assert sent == len(expected)
    assert received == expected
    assert position == offset + len(expected)


def test_sendfile_on_tls_without_fallback_raises_runtime_error(loop, run, tls, datafile):
    server_ctx, client_ctx = tls
    path, _ = datafile

    async def main():
        server, ctr, cpr, str_, spr = await tls_pair(loop, server_ctx, client_ctx)
        try:
            with open(path, "rb") as f:
                with pytest.raises(RuntimeError) as e:
                    await loop.sendfile(ctr, f, fallback=False)
                assert f.tell() == 0
            return str(e.value)
        finally:
            await shut(server, ctr, str_)

    message = run(main())
    assert message.startswith(
        "fallback is disabled and native sendfile is not supported for transport "
    ), message


@pytest.mark.parametrize("method", ["write", "writelines"])
def test_write_during_sendfile_raises_runtime_error(loop, run, conn, tmp_path, method):
    data = payload(8 << 20, seed=5)  # far more than the socket buffers hold
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    if method == "writelines" and PY >= (3, 12):
        expected = "unable to writelines; sendfile is in progress"
    else:
        expected = "unable to write; sendfile is in progress"

    async def main():
        tr, pr, peer = await conn()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        with open(path, "rb") as f:
            sending = loop.create_task(loop.sendfile(tr, f))
            # Bytes at the peer: sendfile has started, and cannot have finished, since the
            # peer has read almost nothing of the file.
            first = await wait(loop.sock_recv(peer, 1024))
            with pytest.raises(RuntimeError) as e:
                if method == "write":
                    tr.write(b"interleaved")
                else:
                    tr.writelines([b"inter", b"leaved"])
            assert not sending.done()
            rest = await wait(recv_exactly(loop, peer, len(data) - len(first)))
            sent = await wait(sending)
        return str(e.value), sent, first + rest

    message, sent, received = run(main())
    assert message == expected
    assert sent == len(data)
    assert received == data  # nothing of the refused write slipped in


# -- loop.start_tls -----------------------------------------------------------------------


class StartTLSServer(asyncio.Protocol):
    """A line protocol: on "STARTTLS" it answers "GO" and upgrades to TLS (server side);
    afterwards it answers every chunk with "echo:" + chunk."""

    def __init__(self, sslcontext):
        self.loop = asyncio.get_running_loop()
        self.sslcontext = sslcontext
        self.transport = None
        self.upgraded = self.loop.create_future()  # the TLS transport
        self.lost = self.loop.create_future()
        self.plain = bytearray()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.upgraded.done():
            self.transport.write(b"echo:" + data)
            return
        self.plain += data
        if self.plain == b"STARTTLS\r\n":
            self.loop.create_task(self.upgrade())

    async def upgrade(self):
        # The answer and start_tls's pause of reading happen in one step: the client's
        # ClientHello cannot reach the plain protocol.
        self.transport.write(b"GO\r\n")
        try:
            tls_transport = await self.loop.start_tls(
                self.transport, self, self.sslcontext, server_side=True
            )
        except BaseException as exc:
            self.upgraded.set_exception(exc)
            raise
        self.transport = tls_transport
        self.upgraded.set_result(tls_transport)

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def test_start_tls_upgrades_both_sides_of_a_plain_connection(loop, run, openssl_tls):
    server_ctx, client_ctx = openssl_tls
    servers = []

    def factory():
        servers.append(StartTLSServer(server_ctx))
        return servers[-1]

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0)
        tr, pr = await loop.create_connection(Recorder, *server.sockets[0].getsockname())
        tr.write(b"STARTTLS\r\n")
        assert await wait(pr.received(4)) == b"GO\r\n"
        ctls = await wait(loop.start_tls(tr, pr, client_ctx, server_hostname="localhost"))
        stls = await wait(servers[0].upgraded)
        try:
            assert ctls.get_protocol() is pr
            assert stls.get_protocol() is servers[0]
            ctls.write(b"ping")
            assert await wait(pr.received(4 + 9)) == b"GO\r\necho:ping"
            stls.write(b"from the server")
            assert await wait(pr.received(13 + 15)) == b"GO\r\necho:pingfrom the server"

            for side, transport, context in [("client", ctls, client_ctx),
                                             ("server", stls, server_ctx)]:
                sslobj = transport.get_extra_info("ssl_object")
                assert isinstance(sslobj, ssl.SSLObject), side
                assert sslobj.server_side is (side == "server")
                assert transport.get_extra_info("sslcontext") is context, side
                cipher = transport.get_extra_info("cipher")
                assert isinstance(cipher, tuple) and len(cipher) == 3, side
                assert cipher == sslobj.cipher(), side
                assert transport.get_extra_info("peername") is not None, side
            assert ctls.get_extra_info("peercert")["subject"] == ((("commonName", "localhost"),),)
            assert stls.get_extra_info("peercert") is None  # the client sent no certificate

            ctls.close()
            assert await wait(pr.lost) is None
            assert await wait(servers[0].lost) is None
        finally:
            ctls.abort()
            stls.abort()
            server.close()
            await wait(server.wait_closed())

    run(main())


def test_start_tls_handshake_timeout_against_a_silent_peer(loop, run, conn, tls):
    _, client_ctx = tls

    async def main():
        tr, pr, peer = await conn(Recorder)
        t0 = loop.time()
        with pytest.raises(Exception) as e:
            await loop.start_tls(tr, pr, client_ctx, server_hostname="localhost",
                                 ssl_handshake_timeout=0.3)
        elapsed = loop.time() - t0
        hello = await wait(peer_sees_close(loop, peer))  # the connection is closed
        assert hello[:1] == b"\x16"  # it got the ClientHello and nothing after
        assert tr.is_closing()
        return type(e.value), str(e.value), elapsed

    kind, message, elapsed = run(main())
    assert (kind, message) == (
        ConnectionAbortedError,
        "SSL handshake is taking longer than 0.3 seconds: aborting the connection",
    )
    assert 0.15 <= elapsed < 1.5


def test_start_tls_refuses_a_non_sslcontext(loop, run, conn):
    async def main():
        tr, pr, peer = await conn(Recorder)
        for context in (None, True, "context", ssl.create_default_context):
            with pytest.raises(TypeError) as e:
                await loop.start_tls(tr, pr, context)
            assert str(e.value) == (
                f"sslcontext is expected to be an instance of ssl.SSLContext, got {context!r}"
            )
        # The transport is untouched: still open, still plain, its protocol unchanged.
        assert not tr.is_closing()
        assert tr.get_protocol() is pr
        tr.write(b"plain")
        assert await wait(recv_exactly(loop, peer, 5)) == b"plain"

    run(main())


def test_start_tls_on_a_closing_transport_returns_none_without_a_handshake(
        impl, loop, run, conn, tls):
    """The stdlib does not raise here: the transport's connection_lost reaches the TLS layer
    before its connection_made, which wakes start_tls up with no TLS transport (None)."""
    # 3.10's TLS layer (rewritten in 3.11) never tells the protocol the connection is lost.
    skip_asyncio_before(impl, (3, 11), "connection_lost after start_tls on a closing transport")
    _, client_ctx = tls

    async def main():
        tr, pr, peer = await conn(Recorder)
        tr.close()
        # Awaited directly, not through wait_for (which on 3.11 would start it one loop
        # iteration later, after the transport's connection_lost: the stdlib then hangs).
        result = await loop.start_tls(tr, pr, client_ctx, server_hostname="localhost")
        assert await wait(peer_sees_close(loop, peer)) == b""  # no ClientHello was sent
        assert await wait(pr.lost) is None
        return result

    result = run(main(), timeout=3)
    assert result is None, f"start_tls returned {result!r}"


# -- SNI, ALPN, client certificates -------------------------------------------------------


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1"])
def test_sni_callback_sees_the_client_server_hostname(loop, run, openssl_tls, hostname):
    server_ctx, client_ctx = openssl_tls
    seen = []
    server_ctx.sni_callback = lambda sslobj, name, ctx: seen.append(name)

    async def main():
        server, ctr, cpr, str_, spr = await tls_pair(
            loop, server_ctx, client_ctx, server_hostname=hostname)
        try:
            assert ctr.get_extra_info("ssl_object").server_hostname == hostname
            assert str_.get_extra_info("ssl_object").server_side
        finally:
            await shut(server, ctr, str_)

    run(main())
    # An IP address is not sent as SNI (RFC 6066): the callback sees None for it.
    assert seen == [None if hostname == "127.0.0.1" else hostname]


@pytest.mark.parametrize("server_protocols, client_protocols, expected", [
    (["h2", "http/1.1"], ["http/1.1"], "http/1.1"),
    (["h2", "http/1.1"], ["h2", "http/1.1"], "h2"),
    (["h2"], None, None),
])
def test_alpn_negotiated_protocol_on_both_ends(
        loop, run, openssl_tls, server_protocols, client_protocols, expected):
    server_ctx, client_ctx = openssl_tls
    server_ctx.set_alpn_protocols(server_protocols)
    if client_protocols is not None:
        client_ctx.set_alpn_protocols(client_protocols)

    async def main():
        server, ctr, cpr, str_, spr = await tls_pair(loop, server_ctx, client_ctx)
        try:
            return (ctr.get_extra_info("ssl_object").selected_alpn_protocol(),
                    str_.get_extra_info("ssl_object").selected_alpn_protocol())
        finally:
            await shut(server, ctr, str_)

    assert run(main()) == (expected, expected)


@pytest.fixture
def mutual_tls(openssl_tls, tls_files, client_cert_files):
    """(server context requiring a client certificate, client context presenting one,
    client context without one)."""
    server_ctx, with_cert = openssl_tls
    cert, key = client_cert_files
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(cert)
    with_cert.load_cert_chain(cert, key)
    without = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    without.load_verify_locations(tls_files[0])
    return server_ctx, with_cert, without


def test_required_client_certificate_is_the_server_side_peercert(loop, run, mutual_tls):
    server_ctx, client_ctx, _ = mutual_tls

    async def main():
        server, ctr, cpr, str_, spr = await tls_pair(loop, server_ctx, client_ctx)
        try:
            ctr.write(b"hello")
            assert await wait(spr.received(5)) == b"hello"
            return str_.get_extra_info("peercert")
        finally:
            await shut(server, ctr, str_)

    peercert = run(main())
    assert peercert["subject"] == ((("commonName", "swordfish-client"),),)
    assert peercert["issuer"] == ((("commonName", "swordfish-client"),),)


def test_client_without_a_required_certificate_is_refused(impl, loop, run, mutual_tls):
    # 3.10's TLS layer does not close the client transport when the server refuses it.
    skip_asyncio_before(impl, (3, 11), "closing a client the server refused")
    server_ctx, _, client_ctx = mutual_tls

    async def main():
        factory, first = first_protocol(loop)
        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_ctx)
        try:
            # TLS 1.3: the client's handshake completes before the server checks for its
            # certificate; the server then closes the connection. (The client writes nothing:
            # data arriving after the server's last read would turn its close into a reset,
            # a race on either loop.)
            ctr, cpr = await wait(loop.create_connection(
                Rec, *server.sockets[0].getsockname(), ssl=client_ctx,
                server_hostname="localhost",
            ))
            exc = await wait(cpr.lost)
            assert ctr.is_closing()
            spr = await wait(first)
            assert not spr.made.done()  # the server's protocol never saw a connection
            assert spr.data == b""
            return cpr.events, exc
        finally:
            server.close()
            await wait(server.wait_closed())

    events, exc = run(main())
    assert (events, exc) == (["made", "eof", "lost"], None)


# -- closing in the middle of a handshake -------------------------------------------------


def test_cancelled_tls_connect_closes_its_socket(loop, run, listener, tls):
    _, client_ctx = tls
    before = socket_fds(collect=True)

    async def main():
        connecting = loop.create_task(loop.create_connection(
            Recorder, *listener.getsockname(), ssl=client_ctx, server_hostname="localhost",
        ))
        peer = await accept_hello(loop, listener)  # the client is in its handshake now
        with peer:
            connecting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await wait(connecting)
            assert connecting.cancelled()
            assert await wait(peer_sees_close(loop, peer)) == b""
        await fds_back_to(before)

    run(main())
    assert socket_fds() == before


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_peer_closing_mid_handshake_fails_the_connect(loop, run, listener, tls, how):
    _, client_ctx = tls
    before = socket_fds(collect=True)

    async def main():
        connecting = loop.create_task(loop.create_connection(
            Recorder, *listener.getsockname(), ssl=client_ctx, server_hostname="localhost",
        ))
        peer = await accept_hello(loop, listener)
        if how == "eof":
            peer.close()
        else:
            reset_close(peer)
        with pytest.raises((OSError, ssl.SSLError)) as e:
            await wait(connecting)
        await fds_back_to(before)
        return type(e.value), str(e.value)

    kind, message = run(main())
    assert (kind, message) == (ConnectionResetError, "" if how == "eof" else
                               f"[Errno {errno.ECONNRESET}] Connection reset by peer")
    assert socket_fds() == before


# -- handshake and shutdown timeouts ------------------------------------------------------


def test_server_handshake_timeout_closes_a_silent_client(loop, run, tls):
    server_ctx, _ = tls
    timeout = 0.3

    async def main():
        factory, first = first_protocol(loop)
        server = await loop.create_server(
            factory, "127.0.0.1", 0, ssl=server_ctx, ssl_handshake_timeout=timeout)
        try:
            with socket.socket() as client:
                client.setblocking(False)
                await wait(loop.sock_connect(client, server.sockets[0].getsockname()))
                t0 = loop.time()
                assert await wait(peer_sees_close(loop, client)) == b""
                elapsed = loop.time() - t0
            spr = await wait(first)
            assert not spr.made.done()
            return elapsed
        finally:
            server.close()
            await wait(server.wait_closed())

    elapsed = run(main())
    assert timeout / 2 <= elapsed <= timeout * 5, elapsed


class SilentTLSPeer:
    """A TLS server in a thread: it completes one handshake and then neither reads nor
    closes until `stop()`, so the client's close_notify is never answered."""

    def __init__(self, context):
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(WAIT)
        self._context = context
        self._stop = threading.Event()
        self.address = self._listener.getsockname()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        raw, _ = self._listener.accept()
        with self._context.wrap_socket(raw, server_side=True) as tls_conn:
            self._stop.wait(WAIT)
            tls_conn.close()

    def stop(self):
        self._stop.set()
        self._thread.join(WAIT)
        self._listener.close()


@pytest.mark.skipif(PY < (3, 11), reason="ssl_shutdown_timeout is new in 3.11")
def test_ssl_shutdown_timeout_aborts_when_close_notify_is_not_answered(loop, run, tls):
    server_ctx, client_ctx = tls
    timeout = 0.3
    peer = SilentTLSPeer(server_ctx)

    async def main():
        tr, pr = await wait(loop.create_connection(
            Recorder, *peer.address, ssl=client_ctx, server_hostname="localhost",
            ssl_shutdown_timeout=timeout,
        ))
        t0 = loop.time()
        tr.close()
        assert tr.is_closing()
        exc = await wait(pr.lost)
        return loop.time() - t0, exc

    try:
        elapsed, exc = run(main())
    finally:
        peer.stop()
    assert timeout / 2 <= elapsed <= timeout * 5, elapsed
    assert (type(exc), str(exc)) == (TimeoutError, "SSL shutdown timed out")
