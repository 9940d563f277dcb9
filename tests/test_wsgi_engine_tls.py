"""TLS on the WSGI thread engine (rustls, `--wsgi-engine threads`), over real sockets with
the stdlib's `ssl` and curl as clients: HTTP/1.1 served by the engine's threads with
`wsgi.url_scheme` https, request bodies and large answers through the records both ways, a
client that reads late, `wsgi.file_wrapper` and static files (sealed from the file, as
`sendfile` cannot encrypt), close_notify before the close, a burst of handshakes (taken
through off the lead) beside a served connection, a ClientHello in pieces, a
client that offers `h2` moved to the loop before anything of it is read (and one that
offers only HTTP/1.1 kept), a plain HTTP request on the TLS port refused, and OpenSSL's
TLS (`--ssl-engine openssl`) left to the loop."""

import asyncio
import hashlib
import logging
import os
import re
import socket
import ssl
import subprocess
import threading
import time

import pytest

from h2util import H2Client, tls_client_context
from httputil import port_of, read_response
from netutil import tls_files  # noqa: F401 (fixture)
from test_http2_clients import need
from wsgiutil import WAIT, run, server_errors, wsgi_serving


def engine_app(environ, start_response):
    """`/who`: the HTTP version, the scheme and the thread's name; `/big/N`: N bytes in
    64 KiB parts; `/file/N`: N bytes of a file by `wsgi.file_wrapper`; `/echo`: the body's
    length and SHA-256."""
    path = environ["PATH_INFO"]
    if path == "/who":
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            name = f.read().strip()
        body = f"{environ['SERVER_PROTOCOL']} {environ['wsgi.url_scheme']} {name}".encode()
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path.startswith("/big/"):
        n = int(path[5:])
        start_response("200 OK", [("Content-Length", str(n))])
        return (b"b" * min(65536, n - i) for i in range(0, n, 65536))
    if path.startswith("/file/"):
        f = open(environ["swordfish.test.file"], "rb")
        start_response("200 OK", [("Content-Length", path[6:])])
        return environ["wsgi.file_wrapper"](f)
    data = environ["wsgi.input"].read()
    body = f"{len(data)} {hashlib.sha256(data).hexdigest()}".encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


def served(tls_files, tmp_path=None, threads=4, **options):  # noqa: F811 (fixture)
    cert, key = tls_files
    app = engine_app
    if tmp_path is not None:
        path = str(tmp_path / "blob")

        def app(environ, start_response):
            environ["swordfish.test.file"] = path
            return engine_app(environ, start_response)

    return wsgi_serving(app, threads=threads, wsgi_engine="threads", ssl_certfile=cert, ssl_keyfile=key, **options)


async def tls_connect(server, cert, alpn=("http/1.1",)):
    return await asyncio.open_connection("127.0.0.1", port_of(server), ssl=tls_client_context(cert, alpn),
                                         server_hostname="localhost")


def client_hello(cert):
    """A ClientHello of the stdlib's TLS, as a client would send it first."""
    ctx = tls_client_context(cert, ("http/1.1",))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def get(path, *fields):
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n".encode() + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


def test_http_1_1_is_served_by_the_engine(loop, tls_files, caplog):  # noqa: F811
    cert, _ = tls_files

    async def main():
        async with served(tls_files) as server:
            reader, writer = await tls_connect(server, cert)
            out = []
            for _ in range(3):  # keep-alive
                writer.write(get("/who"))
                out.append(await asyncio.wait_for(read_response(reader), WAIT))
            writer.close()
            return out

    with caplog.at_level(logging.INFO):
        out = run(loop, main())
    assert all(r.status == 200 and r.body.decode().startswith("HTTP/1.1 https swordfish-wsgi-") for r in out), out
    messages = [r.getMessage() for r in caplog.records]
    assert "WSGI served by the thread engine" in messages
    assert any("TLS by rustls" in m for m in messages), messages
    assert server_errors(caplog) == []


@pytest.mark.parametrize("threads", [1, 2])
def test_a_burst_of_handshakes_beside_served_connections(loop, tls_files, threads):  # noqa: F811
    """Handshakes are taken through off the lead (the leader hands it on first): 48
    clients opening at once, a client stalled halfway through its ClientHello and one that
    leaves mid-handshake, while a connection opened before keeps being served; with one
    thread (nobody to hand the lead to) as with two."""
    cert, _ = tls_files

    async def client(server):
        reader, writer = await tls_connect(server, cert)
        out = []
        for _ in range(2):
            writer.write(get("/who"))
            out.append(await asyncio.wait_for(read_response(reader), WAIT))
        writer.close()
        return out

    async def main():
        async with served(tls_files, threads=threads) as server:
            port = port_of(server)
            reader, writer = await tls_connect(server, cert)
            hello = await asyncio.to_thread(client_hello, cert)
            stalled = socket.create_connection(("127.0.0.1", port))
            stalled.sendall(hello[: len(hello) // 2])
            gone = socket.create_connection(("127.0.0.1", port))
            gone.sendall(hello)
            gone.close()
            burst = asyncio.gather(*(client(server) for _ in range(48)))
            beside = []
            while not burst.done():
                writer.write(get("/who"))
                beside.append(await asyncio.wait_for(read_response(reader), WAIT))
                await asyncio.sleep(0)
            answers = await burst
            writer.write(get("/who"))
            beside.append(await asyncio.wait_for(read_response(reader), WAIT))
            writer.close()
            stalled.close()
            return answers, beside

    answers, beside = run(loop, main())
    for r in [r for out in answers for r in out] + beside:
        assert r.status == 200 and r.body.decode().startswith("HTTP/1.1 https swordfish-wsgi-"), r


def test_bodies_both_ways_and_a_client_that_reads_late(loop, tls_files):  # noqa: F811
    cert, _ = tls_files
    body = os.urandom(3 * 1024 * 1024)
    big = 16 * 1024 * 1024  # far past the socket buffers

    async def main():
        async with served(tls_files) as server:
            reader, writer = await tls_connect(server, cert)
            writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            echo = await asyncio.wait_for(read_response(reader), WAIT)
            writer.write(get(f"/big/{big}") + get("/who"))
            await writer.drain()
            await asyncio.sleep(0.5)  # the app thread waits on the socket meanwhile
            late = await asyncio.wait_for(read_response(reader), WAIT)
            after = await asyncio.wait_for(read_response(reader), WAIT)
            writer.close()
            return echo, late, after

    echo, late, after = run(loop, main())
    assert echo.body.decode() == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    assert late.status == 200 and late.body == b"b" * big
    assert after.body.decode().startswith("HTTP/1.1 https swordfish-wsgi-")


def test_file_wrapper_is_sealed_from_the_file(loop, tls_files, tmp_path):  # noqa: F811
    cert, _ = tls_files
    data = os.urandom(5 * 1024 * 1024 + 17)
    (tmp_path / "blob").write_bytes(data)

    async def main():
        async with served(tls_files, tmp_path) as server:
            reader, writer = await tls_connect(server, cert)
            writer.write(get(f"/file/{len(data)}") + get("/who"))
            first = await asyncio.wait_for(read_response(reader), WAIT)
            second = await asyncio.wait_for(read_response(reader), WAIT)
            writer.close()
            return first, second

    first, second = run(loop, main())
    assert first.status == 200 and first.body == data
    assert second.body.decode().startswith("HTTP/1.1 https")


def test_close_notify_comes_before_the_close(loop, tls_files):  # noqa: F811
    """`Connection: close`: the server's TLS ends with close_notify, so the client's read
    ends cleanly (the stdlib raises for a TLS connection cut without it)."""
    cert, _ = tls_files

    def client(port):
        ctx = tls_client_context(cert, ("http/1.1",))
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost", suppress_ragged_eofs=False) as s:
                s.sendall(get("/who", b"Connection: close"))
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
                return got

    async def main():
        async with served(tls_files) as server:
            return await asyncio.to_thread(client, port_of(server))

    got = run(loop, main())
    assert re.fullmatch(rb"HTTP/1\.1 200 .*\r\n\r\nHTTP/1\.1 https swordfish-wsgi-\d*", got, re.S), got


def handshake_in_pieces(port, cert, alpn):
    """A TLS client over a blocking socket whose ClientHello goes out in two writes, 50 ms
    apart; then GET /who. The response's body."""
    ctx = tls_client_context(cert, alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        s.sendall(hello[:7])
        time.sleep(0.05)
        s.sendall(hello[7:])
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if out := outgoing.read():
                    s.sendall(out)
                data = s.recv(65536)
                if not data:
                    raise ConnectionError("closed during the handshake")
                incoming.write(data)
        if out := outgoing.read():
            s.sendall(out)
        protocol = tls.selected_alpn_protocol()
        if protocol == "h2":
            return protocol, None
        tls.write(get("/who", b"Connection: close"))
        s.sendall(outgoing.read())
        got = b""
        while True:
            try:
                chunk = tls.read(65536)
                if not chunk:
                    break
                got += chunk
            except ssl.SSLWantReadError:
                data = s.recv(65536)
                if not data:
                    break
                incoming.write(data)
            except ssl.SSLZeroReturnError:
                break
        return protocol, got


@pytest.mark.parametrize("alpn,expected", [(("http/1.1",), "http/1.1"), (("h2", "http/1.1"), "h2")])
def test_a_client_hello_in_pieces(loop, tls_files, alpn, expected):  # noqa: F811
    cert, _ = tls_files

    async def main():
        async with served(tls_files) as server:
            return await asyncio.to_thread(handshake_in_pieces, port_of(server), cert, alpn)

    protocol, got = run(loop, main())
    assert protocol == expected
    if expected == "http/1.1":
        assert got.startswith(b"HTTP/1.1 200 ") and b"https swordfish-wsgi-" in got, got


def test_an_h2_offer_moves_to_the_loop(loop, tls_files):  # noqa: F811
    """ALPN `h2`: the loop serves HTTP/2 (its WSGI threads are `swordfish-wsgi`); curl's
    `--http2` and `--http1.1` over the same port."""
    cert, _ = tls_files

    async def main():
        async with served(tls_files) as server:
            port = port_of(server)
            c = await H2Client.open(port, tls=tls_client_context(cert))
            assert c.writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            r = await c.request(b"GET", b"/who")
            c.close()
            curl = need("curl")
            outs = []
            for flag in ("--http2", "--http1.1"):
                out = await asyncio.to_thread(subprocess.run, [curl, "-sS", "--max-time", "10", "--cacert", cert,
                                                               flag, f"https://localhost:{port}/who",
                                                               "--resolve", f"localhost:{port}:127.0.0.1"],
                                              capture_output=True, text=True, check=True)
                outs.append(out.stdout)
            return r, outs

    r, (h2, h1) = run(loop, main())
    assert (r.status, r.body) == (200, b"HTTP/2 https swordfish-wsgi")
    assert h2 == "HTTP/2 https swordfish-wsgi"
    assert h1.startswith("HTTP/1.1 https swordfish-wsgi-"), h1


def test_plain_http_on_the_tls_port_is_refused(loop, tls_files, caplog):  # noqa: F811
    async def main():
        async with served(tls_files) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(get("/who"))
            try:
                got = await asyncio.wait_for(reader.read(), WAIT)
            except ConnectionResetError:
                got = b""
            writer.close()
            return got

    got = run(loop, main())
    assert not got.startswith(b"HTTP/"), got  # an alert, or nothing
    assert server_errors(caplog) == []


def test_only_http_1_1_offered_keeps_a_client_that_offers_h2(loop, tls_files):  # noqa: F811
    """`--http 1`: no hand-off, and an `h2`-only client gets no protocol in common."""
    cert, _ = tls_files

    async def main():
        async with served(tls_files, http="1") as server:
            reader, writer = await tls_connect(server, cert, ("h2", "http/1.1"))
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
            writer.write(get("/who"))
            r = await asyncio.wait_for(read_response(reader), WAIT)
            writer.close()
            with pytest.raises(ssl.SSLError):
                await tls_connect(server, cert, ("h2",))
            return r

    assert run(loop, main()).body.decode().startswith("HTTP/1.1 https swordfish-wsgi-")
