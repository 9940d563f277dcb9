"""loop.create_datagram_endpoint: UDP over IPv4/IPv6, Unix datagram sockets, local and
remote addresses, socket options, given sockets and the stdlib's errors."""

import asyncio
import errno
import os
import re
import socket
import warnings

import pytest

from conftest import PY
from netutil import needs_ipv6, resolve_to, socket_fds


class Datagrams(asyncio.DatagramProtocol):
    def __init__(self):
        loop = asyncio.get_running_loop()
        self.transport = None
        self.made = loop.create_future()
        self.lost = loop.create_future()
        self.queue = asyncio.Queue()
        self.errors = []

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(transport)

    def datagram_received(self, data, addr):
        self.queue.put_nowait((data, addr))

    def error_received(self, exc):
        self.errors.append(exc)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def close(*transports):
    for tr in transports:
        tr.close()
        await tr.get_protocol().lost


def test_udp_exchange(loop, run):
    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        a_addr = a.get_extra_info("sockname")
        assert a_addr[0] == "127.0.0.1" and a_addr[1] != 0
        sock = a.get_extra_info("socket")
        assert (sock.family, sock.type) == (socket.AF_INET, socket.SOCK_DGRAM)
        b, pb = await loop.create_datagram_endpoint(Datagrams, remote_addr=a_addr)
        assert pb.made.result() is b
        assert b.get_extra_info("peername") == a_addr
        b.sendto(b"ping")
        data, b_addr = await pa.queue.get()
        assert data == b"ping" and b_addr == b.get_extra_info("sockname")
        a.sendto(b"pong", b_addr)
        assert await pb.queue.get() == (b"pong", a_addr)
        await close(a, b)

    run(main())


def test_local_and_remote(loop, run):
    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        a_addr = a.get_extra_info("sockname")
        b, pb = await loop.create_datagram_endpoint(
            Datagrams, local_addr=("127.0.0.2", 0), remote_addr=a_addr
        )
        assert b.get_extra_info("sockname")[0] == "127.0.0.2"
        assert b.get_extra_info("peername") == a_addr
        b.sendto(b"x")
        assert (await pa.queue.get())[1] == b.get_extra_info("sockname")
        await close(a, b)

    run(main())


@needs_ipv6
def test_udp_ipv6(loop, run):
    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, local_addr=("::1", 0))
        assert a.get_extra_info("socket").family == socket.AF_INET6
        b, pb = await loop.create_datagram_endpoint(
            Datagrams, remote_addr=a.get_extra_info("sockname")[:2]
        )
        b.sendto(b"six")
        assert (await pa.queue.get())[0] == b"six"
        await close(a, b)

    run(main())


def test_family_only(loop, run):
    """No address: an unbound socket of that family."""

    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        b, pb = await loop.create_datagram_endpoint(Datagrams, family=socket.AF_INET)
        assert b.get_extra_info("socket").family == socket.AF_INET
        assert b.get_extra_info("peername") is None
        b.sendto(b"hello", a.get_extra_info("sockname"))
        assert (await pa.queue.get())[0] == b"hello"
        await close(a, b)

    run(main())


def test_resolution_arguments(loop, run):
    calls = []
    resolve_to(
        loop,
        [(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP, "", ("127.0.0.1", 0))],
        calls,
    )

    async def main():
        a, _ = await loop.create_datagram_endpoint(
            Datagrams, local_addr=("here.test", 0), family=socket.AF_INET,
            proto=socket.IPPROTO_UDP, flags=socket.AI_PASSIVE,
        )
        await close(a)

    run(main())
    assert calls == [("here.test", 0, {
        "family": socket.AF_INET, "type": socket.SOCK_DGRAM,
        "proto": socket.IPPROTO_UDP, "flags": socket.AI_PASSIVE,
    })]


def test_reuse_port(loop, run):
    async def main():
        a, _ = await loop.create_datagram_endpoint(
            Datagrams, local_addr=("127.0.0.1", 0), reuse_port=True
        )
        address = a.get_extra_info("sockname")
        b, _ = await loop.create_datagram_endpoint(
            Datagrams, local_addr=address, reuse_port=True
        )
        assert b.get_extra_info("sockname") == address
        sock = b.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        with pytest.raises(OSError) as e:
            await loop.create_datagram_endpoint(Datagrams, local_addr=address)
        assert e.value.errno == errno.EADDRINUSE
        await close(a, b)

    run(main())


def test_allow_broadcast(loop, run):
    """SO_BROADCAST set; the remote address is the default destination, without
    connecting the socket."""

    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, local_addr=("127.0.0.1", 0))
        a_addr = a.get_extra_info("sockname")
        b, pb = await loop.create_datagram_endpoint(
            Datagrams, remote_addr=a_addr, allow_broadcast=True
        )
        sock = b.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) != 0
        with pytest.raises(OSError):
            sock.getpeername()
        b.sendto(b"to all")
        assert (await pa.queue.get())[0] == b"to all"
        await close(a, b)

    run(main())


def test_reuse_address(loop, run):
    """3.10: True is refused and False deprecated; the keyword is gone from 3.11."""
    if PY >= (3, 11):
        with pytest.raises(TypeError, match="reuse_address"):
            loop.create_datagram_endpoint(
                Datagrams, local_addr=("127.0.0.1", 0), reuse_address=False
            )
        return
    with pytest.raises(ValueError) as e:
        run(loop.create_datagram_endpoint(
            Datagrams, local_addr=("127.0.0.1", 0), reuse_address=True
        ))
    assert str(e.value) == (
        "Passing `reuse_address=True` is no longer supported, as the usage of "
        "SO_REUSEPORT in UDP poses a significant security concern."
    )

    async def main():
        tr, _ = await loop.create_datagram_endpoint(
            Datagrams, local_addr=("127.0.0.1", 0), reuse_address=False
        )
        await close(tr)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main())
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert messages == [
        "The *reuse_address* parameter has been deprecated as of 3.5.10 and is "
        "scheduled for removal in 3.11."
    ]


# -- Unix datagram sockets ----------------------------------------------------------------


def test_unix_datagrams(loop, run, tmp_path):
    server_path, client_path = str(tmp_path / "srv"), str(tmp_path / "cli")

    async def main():
        a, pa = await loop.create_datagram_endpoint(
            Datagrams, local_addr=server_path, family=socket.AF_UNIX
        )
        sock = a.get_extra_info("socket")
        assert (sock.family, sock.type) == (socket.AF_UNIX, socket.SOCK_DGRAM)
        b, pb = await loop.create_datagram_endpoint(
            Datagrams, local_addr=client_path, remote_addr=server_path, family=socket.AF_UNIX
        )
        assert b.get_extra_info("peername") == server_path
        b.sendto(b"local")
        assert await pa.queue.get() == (b"local", client_path)
        a.sendto(b"reply", client_path)
        assert (await pb.queue.get())[0] == b"reply"
        await close(a, b)

    run(main())


def test_unix_stale_socket_file(loop, run, tmp_path):
    path = str(tmp_path / "d")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    old.bind(path)
    old.close()

    async def main():
        a, _ = await loop.create_datagram_endpoint(
            Datagrams, local_addr=path, family=socket.AF_UNIX
        )
        assert a.get_extra_info("sockname") == path
        await close(a)

    run(main())


def test_unix_regular_file_is_kept(loop, run, tmp_path):
    path = tmp_path / "file"
    path.write_text("data")
    with pytest.raises(OSError) as e:
        run(loop.create_datagram_endpoint(
            Datagrams, local_addr=str(path), family=socket.AF_UNIX
        ))
    assert e.value.errno == errno.EADDRINUSE
    assert path.read_text() == "data"


def test_unix_abstract(loop, run):
    name = "\0swordfish-dgram-" + os.urandom(6).hex()

    async def main():
        a, pa = await loop.create_datagram_endpoint(
            Datagrams, local_addr=name, family=socket.AF_UNIX
        )
        assert a.get_extra_info("sockname") == name.encode()
        b, _ = await loop.create_datagram_endpoint(
            Datagrams, remote_addr=name, family=socket.AF_UNIX
        )
        b.sendto(b"abstract")
        assert (await pa.queue.get())[0] == b"abstract"
        await close(a, b)

    run(main())


def test_unix_addresses_must_be_strings(loop, run, tmp_path):
    for kwargs in (
        dict(local_addr=str(tmp_path / "x").encode()),
        dict(remote_addr=("127.0.0.1", 0)),
    ):
        with pytest.raises(TypeError) as e:
            run(loop.create_datagram_endpoint(Datagrams, family=socket.AF_UNIX, **kwargs))
        assert str(e.value) == "string is expected"


# -- given sockets ------------------------------------------------------------------------


def test_given_socket(loop, run):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))

    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, sock=sock)
        assert sock.gettimeout() == 0
        assert a.get_extra_info("socket").fileno() == sock.fileno()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"in", sock.getsockname())
            assert (await pa.queue.get())[0] == b"in"
        await close(a)
        assert sock.fileno() == -1

    run(main())


def test_given_unix_datagram_socket(loop, run):
    a_sock, b_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)

    async def main():
        a, pa = await loop.create_datagram_endpoint(Datagrams, sock=a_sock)
        b_sock.send(b"pair")
        assert (await pa.queue.get())[0] == b"pair"
        await close(a)

    with b_sock:
        run(main())


def test_given_socket_errors(loop, run):
    stream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    expected_type = (
        f"A datagram socket was expected, got {stream!r}"
        if PY >= (3, 13)
        else f"A UDP Socket was expected, got {stream!r}"
    )
    cases = [
        (dict(sock=stream), expected_type),
        (dict(sock=udp, local_addr=("127.0.0.1", 0), reuse_port=True),
         "socket modifier keyword arguments can not be used when sock is specified. "
         "(local_addr=('127.0.0.1', 0), reuse_port=True)"),
        (dict(sock=udp, family=socket.AF_INET, allow_broadcast=True),
         "socket modifier keyword arguments can not be used when sock is specified. "
         f"(family={socket.AF_INET}, allow_broadcast=True)"),
    ]
    try:
        for kwargs, message in cases:
            with pytest.raises(ValueError) as e:
                run(loop.create_datagram_endpoint(Datagrams, **kwargs))
            # 3.10's stdlib also lists its internal default of reuse_address (a bare
            # object()); swordfish leaves it out.
            got = re.sub(r"reuse_address=<object object at 0x[0-9a-f]+>, ", "", str(e.value))
            assert got == message, kwargs
    finally:
        stream.close()
        udp.close()


# -- errors -------------------------------------------------------------------------------


def test_address_errors(loop, run):
    tuple_error = TypeError if PY >= (3, 11) else AssertionError
    cases = [
        (dict(), ValueError, "unexpected address family"),
        (dict(local_addr="127.0.0.1"), tuple_error, "2-tuple is expected"),
        (dict(remote_addr=["127.0.0.1", 80]), tuple_error, "2-tuple is expected"),
        (dict(local_addr=("127.0.0.1", 0), remote_addr=("::1", 80)), ValueError,
         "can not get address information"),
    ]
    for kwargs, exc_type, message in cases:
        with pytest.raises(exc_type) as e:
            run(loop.create_datagram_endpoint(Datagrams, **kwargs))
        assert str(e.value) == message, kwargs


def test_empty_resolution(loop, run):
    resolve_to(loop, [])
    with pytest.raises(OSError) as e:
        run(loop.create_datagram_endpoint(Datagrams, remote_addr=("nowhere.test", 53)))
    assert str(e.value) == "getaddrinfo() returned empty list"


def test_bind_failure_raises_the_first_error_and_closes(loop, run):
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    before = socket_fds(collect=True)
    try:
        with pytest.raises(OSError) as e:
            run(loop.create_datagram_endpoint(Datagrams, local_addr=taken.getsockname()))
    finally:
        taken.close()
    assert e.value.errno == errno.EADDRINUSE
    assert socket_fds() <= before


def test_protocol_factory_error_closes_the_socket(sf_loop, sf_run):
    """swordfish closes the socket it made (the stdlib leaves it to the GC)."""
    before = socket_fds(collect=True)

    def factory():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        sf_run(sf_loop.create_datagram_endpoint(factory, local_addr=("127.0.0.1", 0)))
    assert socket_fds() == before
