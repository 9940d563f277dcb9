"""Helpers shared by the networking tests (connections, servers, Unix, datagram,
streams): a recording protocol, descriptor accounting, reserved ports, a listener
that never completes a handshake, controlled name resolution and TLS contexts."""

import asyncio
import gc
import os
import shutil
import socket
import ssl
import subprocess

import pytest


def _has_ipv6():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = _has_ipv6()
needs_ipv6 = pytest.mark.skipif(not HAS_IPV6, reason="no IPv6 loopback on this host")


class Recorder(asyncio.Protocol):
    """A stream protocol that records what happens to it, with futures to await."""

    def __init__(self):
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.transport = None
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self.data = bytearray()
        self._want = None

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(transport)

    def data_received(self, data):
        self.data += data
        if self._want is not None and len(self.data) >= self._want[0]:
            if not self._want[1].done():
                self._want[1].set_result(None)

    def eof_received(self):
        self.eof.set_result(None)

    def connection_lost(self, exc):
        self.lost.set_result(exc)

    async def received(self, n):
        """Wait until at least `n` bytes arrived; return them all."""
        if len(self.data) < n:
            self._want = (n, self.loop.create_future())
            await self._want[1]
        return bytes(self.data)


class Echo(Recorder):
    """Writes back whatever it receives."""

    def data_received(self, data):
        super().data_received(data)
        self.transport.write(data)


def open_fds():
    return set(os.listdir("/proc/self/fd"))


def socket_fds(collect=False):
    """Descriptors of this process that are sockets (after a GC pass if `collect`, so that
    garbage from earlier tests does not close its sockets in the middle of a test)."""
    if collect:
        gc.collect()
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                fds.add(fd)
        except OSError:
            pass
    return fds


def reserved_port(family=socket.AF_INET, host="127.0.0.1"):
    """A bound, not listening TCP socket: connections to its port are refused for as long
    as it stays open. Returns the socket (close it)."""
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    return s


def unresponsive_listener(host="127.0.0.1"):
    """A listening socket whose accept queue is full: a new connection to it stays in
    SYN-SENT (the kernel drops its SYN) until the caller gives up. Returns
    (listener, [sockets filling the queue]); close them all."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(0)
    fillers = []
    while True:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.settimeout(0.3)
        try:
            probe.connect(listener.getsockname())
        except (socket.timeout, TimeoutError):
            probe.close()  # the queue is full: the next connections hang too
            return listener, fillers
        fillers.append(probe)
        if len(fillers) > 16:
            raise RuntimeError("the listener's queue never filled up")


def addrinfo(host, port):
    """A getaddrinfo() entry for a numeric host."""
    if ":" in host:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))


def resolve_to(loop, infos, calls=None):
    """Make `loop.getaddrinfo` return `infos` (a list for any host, or a dict host -> list)
    as CPython's own tests do, recording each call in `calls`."""

    async def getaddrinfo(host, port, **kwargs):
        if calls is not None:
            calls.append((host, port, kwargs))
        found = infos.get(host, []) if isinstance(infos, dict) else infos
        return list(found)

    loop.getaddrinfo = getaddrinfo


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A self-signed certificate for localhost and 127.0.0.1: (certfile, keyfile)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.fixture(params=["openssl", "rustls"])
def tls(request, tls_files):
    """(server context, client context trusting the server's certificate). The server's is
    served by OpenSSL, then by rustls on swordfish's loop (other loops take it as OpenSSL's)."""
    return tls_pair(tls_files, request.param)


@pytest.fixture
def openssl_tls(tls_files):
    """`tls` served by OpenSSL only: for what is configured on the `SSLContext` object after
    it is made (SNI callbacks, ALPN, client certificates), or read from its `SSLObject`."""
    return tls_pair(tls_files, "openssl")


def tls_pair(tls_files, engine):
    """(server context, client context) with the server's served by `engine`: see `tls`."""
    cert, key = tls_files
    if engine == "rustls":
        from swordfish import _native
        from swordfish._tls import RustlsContext

        server = RustlsContext(ssl.PROTOCOL_TLS_SERVER)
        server.rustls = _native.RustlsServerConfig(cert, key, None, "none", [])
    else:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cert)
    return server, client


def first_protocol(loop, cls=Recorder):
    """A protocol factory for a server, and a future resolved with its first protocol."""
    first = loop.create_future()

    def factory():
        proto = cls()
        if not first.done():
            first.set_result(proto)
        return proto

    return factory, first
