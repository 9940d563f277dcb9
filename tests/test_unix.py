"""Unix stream sockets: loop.create_unix_server and loop.create_unix_connection (paths,
stale socket files, cleanup on close (3.13), the abstract namespace, given sockets, TLS,
the stdlib's argument errors)."""

import errno
import os
import pathlib
import socket
import ssl
import uuid

import pytest

from conftest import PY
from netutil import Echo, Recorder, socket_fds, tls, tls_files  # noqa: F401 (fixtures)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "s")


def abstract_name():
    return "\0swordfish-test-" + uuid.uuid4().hex


async def exchange(loop, address, payload=b"over unix", **kwargs):
    tr, pr = await loop.create_unix_connection(Recorder, address, **kwargs)
    tr.write(payload)
    assert await pr.received(len(payload)) == payload
    tr.close()
    assert await pr.lost is None
    return tr


@pytest.mark.parametrize("as_path", [False, True])
def test_echo(loop, run, path, as_path):
    where = pathlib.Path(path) if as_path else path

    async def main():
        server = await loop.create_unix_server(Echo, where)
        (sock,) = server.sockets
        assert (sock.family, sock.type) == (socket.AF_UNIX, socket.SOCK_STREAM)
        assert sock.getsockname() == path
        tr = await exchange(loop, where)
        assert tr.get_extra_info("peername") == path
        server.close()
        await server.wait_closed()

    run(main())


def test_stale_socket_file_is_replaced(loop, run, path):
    old = socket.socket(socket.AF_UNIX)
    old.bind(path)
    old.close()  # the file stays behind
    assert os.path.exists(path)

    async def main():
        server = await loop.create_unix_server(Echo, path)
        await exchange(loop, path)
        server.close()

    run(main())


def test_other_file_at_the_path(loop, run, path):
    with open(path, "w") as f:
        f.write("not a socket")
    with pytest.raises(OSError) as e:
        run(loop.create_unix_server(Echo, path))
    assert e.value.errno == errno.EADDRINUSE
    assert str(e.value) == f"[Errno {errno.EADDRINUSE}] Address {path!r} is already in use"
    with open(path) as f:
        assert f.read() == "not a socket"


def test_bind_error_closes_the_socket(loop, run, tmp_path):
    before = socket_fds(collect=True)
    with pytest.raises(FileNotFoundError):
        run(loop.create_unix_server(Echo, str(tmp_path / "missing-dir" / "s")))
    assert socket_fds() == before


@pytest.mark.parametrize("cleanup", [None, True, False])
def test_socket_file_after_close(loop, run, path, cleanup):
    """3.13 removes the socket file on close (unless cleanup_socket=False); older
    Pythons leave it."""
    if cleanup is not None and PY < (3, 13):
        with pytest.raises(TypeError, match="cleanup_socket"):
            loop.create_unix_server(Echo, path, cleanup_socket=cleanup)
        return
    kwargs = {} if cleanup is None else {"cleanup_socket": cleanup}

    async def main():
        server = await loop.create_unix_server(Echo, path, **kwargs)
        assert os.path.exists(path)
        server.close()
        await server.wait_closed()

    run(main())
    removed = PY >= (3, 13) and cleanup is not False
    assert os.path.exists(path) is not removed


@pytest.mark.skipif(PY < (3, 13), reason="the cleanup is new in 3.13")
def test_cleanup_spares_a_replaced_file(loop, run, path, tmp_path):
    async def main():
        server = await loop.create_unix_server(Echo, path)
        other = tmp_path / "other"
        other.write_text("someone else's")
        os.replace(other, path)
        server.close()

    run(main())
    assert pathlib.Path(path).read_text() == "someone else's"


@pytest.mark.skipif(PY < (3, 13), reason="the cleanup is new in 3.13")
def test_cleanup_of_a_given_socket(loop, run, path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)

    async def main():
        server = await loop.create_unix_server(Echo, sock=sock)
        await exchange(loop, path)
        server.close()

    run(main())
    assert not os.path.exists(path)


@pytest.mark.parametrize("kind", [str, bytes])
def test_abstract_namespace(loop, run, kind):
    name = abstract_name()
    address = name if kind is str else name.encode()

    async def main():
        server = await loop.create_unix_server(Echo, address)
        assert server.sockets[0].getsockname() == name.encode()
        await exchange(loop, address)
        server.close()
        await server.wait_closed()

    run(main())


def test_given_listening_socket(loop, run, path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)

    async def main():
        server = await loop.create_unix_server(Echo, sock=sock)
        assert sock.gettimeout() == 0
        await exchange(loop, path)
        server.close()
        assert sock.fileno() == -1

    run(main())


def test_connection_with_a_given_socket(loop, run):
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.create_unix_connection(Recorder, sock=a)
        assert a.gettimeout() == 0
        b.sendall(b"hi")
        assert await pr.received(2) == b"hi"
        tr.close()
        await pr.lost

    with b:
        run(main())


def test_connect_to_nothing(loop, run, path):
    before = socket_fds(collect=True)
    with pytest.raises(FileNotFoundError):
        run(loop.create_unix_connection(Recorder, path))
    assert socket_fds() == before


def test_connect_to_a_dead_socket_file(loop, run, path):
    old = socket.socket(socket.AF_UNIX)
    old.bind(path)
    old.close()
    with pytest.raises(ConnectionRefusedError):
        run(loop.create_unix_connection(Recorder, path))


def test_tls(loop, run, path, tls):
    server_ctx, client_ctx = tls

    async def main():
        server = await loop.create_unix_server(
            Echo, path, ssl=server_ctx, ssl_handshake_timeout=5
        )
        tr = await exchange(
            loop, path, b"secret", ssl=client_ctx, server_hostname="localhost"
        )
        assert tr.get_extra_info("ssl_object") is not None
        server.close()

    run(main())


def test_server_argument_errors(loop, run, path):
    inet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cases = [
        (dict(path=path, ssl=True), TypeError, "ssl argument must be an SSLContext or None"),
        (dict(path=path, ssl_handshake_timeout=1), ValueError,
         "ssl_handshake_timeout is only meaningful with ssl"),
        (dict(path=path, sock=unix), ValueError,
         "path and sock can not be specified at the same time"),
        (dict(), ValueError, "path was not specified, and no sock specified"),
        (dict(sock=inet), ValueError, f"A UNIX Domain Stream Socket was expected, got {inet!r}"),
        (dict(sock=dgram), ValueError,
         f"A UNIX Domain Stream Socket was expected, got {dgram!r}"),
    ]
    if PY >= (3, 11):
        cases.append((dict(path=path, ssl_shutdown_timeout=1), ValueError,
                      "ssl_shutdown_timeout is only meaningful with ssl"))
    try:
        for kwargs, exc_type, message in cases:
            with pytest.raises(exc_type) as e:
                run(loop.create_unix_server(Echo, **kwargs))
            assert str(e.value) == message, kwargs
    finally:
        for s in (inet, dgram, unix):
            s.close()
    assert not os.path.exists(path)


def test_connection_argument_errors(loop, run, path):
    inet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    context = ssl.create_default_context()
    cases = [
        (dict(path=path, ssl=context), "you have to pass server_hostname when using ssl"),
        (dict(path=path, server_hostname="x"), "server_hostname is only meaningful with ssl"),
        (dict(path=path, ssl_handshake_timeout=1),
         "ssl_handshake_timeout is only meaningful with ssl"),
        (dict(path=path, sock=unix), "path and sock can not be specified at the same time"),
        (dict(), "no path and sock were specified"),
        (dict(sock=inet), f"A UNIX Domain Stream Socket was expected, got {inet!r}"),
    ]
    if PY >= (3, 11):
        cases.append((dict(path=path, ssl_shutdown_timeout=1),
                      "ssl_shutdown_timeout is only meaningful with ssl"))
    try:
        for kwargs, message in cases:
            with pytest.raises(ValueError) as e:
                run(loop.create_unix_connection(Recorder, **kwargs))
            assert str(e.value) == message, kwargs
    finally:
        inet.close()
        unix.close()


def test_server_lifecycle(loop, run, path):
    async def main():
        server = await loop.create_unix_server(Echo, path, start_serving=False)
        assert not server.is_serving()
        with pytest.raises(ConnectionRefusedError):  # bound, not listening
            await loop.create_unix_connection(Recorder, path)
        async with server:
            await server.start_serving()
            await exchange(loop, path)
        assert not server.is_serving()

    run(main())


@pytest.mark.parametrize("keyword", ["ssl_shutdown_timeout"])
def test_keywords_of_newer_pythons_are_refused(loop, keyword, path):
    if PY >= (3, 11):
        pytest.skip(f"{keyword} exists on this Python")
    with pytest.raises(TypeError, match=keyword):
        loop.create_unix_connection(Recorder, path, **{keyword: None})
    with pytest.raises(TypeError, match=keyword):
        loop.create_unix_server(Recorder, path, **{keyword: None})


