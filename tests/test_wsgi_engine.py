"""What the WSGI thread engine (`--wsgi-engine threads`) guarantees beyond the WSGI tests
it passes as the loop's path does (`make test` runs those on both): a client that sends its
body slowly, or reads its answer slowly, holds a connection but no thread; pipelined
requests are answered in order; a streamed answer waits for a client that does not read
(memory stays bounded); apps that block each get a thread while the poller serves on; a
client that resets mid-answer leaves the server serving; many connections at once are each
answered right; and TLS falls back to the loop's path. (Its workers share connections by
the board: tests/test_http_workers.py.)

Most tests have one or two engine threads, so that a request holding a thread would show."""

import asyncio
import logging
import os
import socket
import struct
import threading

import pytest

from httputil import connect, read_response
from netutil import tls_files  # noqa: F401 (fixture)
from wsgiutil import WAIT, H, run, server_errors, until, wsgi_echo_app, wsgi_serving


def threaded(app, threads=1, **options):
    return wsgi_serving(app, threads=threads, wsgi_engine="threads", **options)


def sized_app(environ, start_response):
    """GET /N: N bytes (one bytes object); anything else: the echo app."""
    path = environ["PATH_INFO"].strip("/")
    if not path.isdigit():
        return wsgi_echo_app(environ, start_response)
    body = b"x" * int(path)
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


async def get(server, path="/"):
    reader, writer = await connect(server)
    try:
        writer.write(b"GET %s HTTP/1.1\r\n%s\r\n" % (path.encode(), H))
        return await asyncio.wait_for(read_response(reader), WAIT)
    finally:
        writer.close()


def test_a_slow_body_holds_no_thread(loop):
    async def main():
        async with threaded(wsgi_echo_app) as server:
            reader, writer = await connect(server)
            body = os.urandom(100_000)
            writer.write(b"POST /slow HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (H, len(body)) + body[:10])
            await writer.drain()
            # The one thread is free for another client meanwhile.
            assert (await get(server, "/other")).status == 200
            writer.write(body[10:])
            response = await asyncio.wait_for(read_response(reader), WAIT)
            assert (response.status, response.body) == (200, body)
            writer.close()

    run(loop, main())


def test_a_client_that_does_not_read_holds_no_thread(loop):
    size = 32 << 20

    async def main():
        async with threaded(sized_app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET /%d HTTP/1.1\r\n%s\r\n" % (size, H))
            await writer.drain()
            # Far more than the socket buffers take: the rest waits in the server, not
            # in its thread.
            for _ in range(3):
                assert (await get(server, "/13")).body == b"x" * 13
            response = await asyncio.wait_for(read_response(reader), 30)
            assert response.status == 200 and len(response.body) == size and response.body.count(b"x") == size
            writer.close()

    run(loop, main())


def test_pipelined_requests_are_answered_in_order(loop):
    async def main():
        async with threaded(wsgi_echo_app, threads=2) as server:
            reader, writer = await connect(server)
            requests = [b"POST /%d HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (i, H, len(str(i)), str(i).encode())
                        for i in range(60)]
            writer.write(b"".join(requests))
            for i in range(60):
                response = await asyncio.wait_for(read_response(reader), WAIT)
                assert (response.header("x-path"), response.body) == (f"/{i}", str(i).encode())
            writer.close()

    run(loop, main())


def test_many_connections_at_once(loop):
    # Connections and requests in flight together: every answer is its own request's.
    async def client(server, n):
        reader, writer = await connect(server)
        try:
            for i in range(15):
                body = os.urandom((n * 7919 + i * 104729) % 70_000)
                writer.write(b"POST /%d/%d HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (n, i, H, len(body)) + body)
                response = await asyncio.wait_for(read_response(reader), WAIT)
                assert (response.status, response.header("x-path"), response.body) == (200, f"/{n}/{i}", body)
        finally:
            writer.close()

    async def main():
        async with threaded(wsgi_echo_app, threads=3) as server:
            await asyncio.gather(*(client(server, n) for n in range(60)))

    run(loop, main(), timeout=60)


def test_apps_that_block_each_get_a_thread_while_the_poller_serves_on(loop):
    # Every request blocks (a database call, say) until all of them are in the app at
    # once: the poller must be taken up again each time the threads it had are blocked,
    # or the later requests are never read and the barrier never fills.
    parties = 6
    barrier = threading.Barrier(parties)

    def blocking_app(environ, start_response):
        try:
            barrier.wait(timeout=WAIT)
            status = "200 OK"
        except threading.BrokenBarrierError:
            status = "503 Service Unavailable"
        start_response(status, [("Content-Length", "0")])
        return []

    async def main():
        async with threaded(blocking_app, threads=parties) as server:
            responses = await asyncio.gather(*(get(server) for _ in range(parties)))
            assert [r.status for r in responses] == [200] * parties
            # And again, with the threads now parked after their first requests.
            barrier.reset()
            responses = await asyncio.gather(*(get(server) for _ in range(parties)))
            assert [r.status for r in responses] == [200] * parties

    run(loop, main(), timeout=60)


def test_a_streamed_answer_waits_for_a_client_that_does_not_read(loop):
    # The app's iteration goes on only as fast as the client reads: what the server holds
    # for it stays bounded (the socket buffers and one part), not the whole answer.
    part, parts = 1 << 20, 256
    made = [0]

    def app(environ, start_response):
        start_response("200 OK", [("Content-Length", str(part * parts))])

        def body():
            for _ in range(parts):
                made[0] += 1
                yield b"y" * part
        return body()

    async def main():
        async with threaded(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            await until(lambda: made[0] > 2)
            await asyncio.sleep(0.5)  # the client reads nothing for a while: the app must stall
            stalled = made[0]
            assert stalled < 64, f"{stalled} MiB made for a client that read nothing"
            response = await asyncio.wait_for(read_response(reader), 60)
            assert len(response.body) == part * parts and made[0] == parts
            writer.close()

    run(loop, main(), timeout=90)


def test_a_client_that_resets_mid_answer_leaves_the_server_serving(loop, caplog):
    sent = threading.Event()
    finished = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] != "/stream":
            return sized_app(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            try:
                for _ in range(10_000):
                    yield b"z" * 65536
                    sent.set()
            finally:
                finished.set()
        return body()

    async def main():
        async with threaded(app) as server:
            sock = socket.create_connection(("127.0.0.1", server.sockets[0].getsockname()[1]))
            sock.sendall(b"GET /stream HTTP/1.1\r\n" + H + b"\r\n")
            await until(sent.is_set)
            assert sock.recv(4096)
            # RST: close with a zero linger.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            await until(finished.is_set, what="the app's iterable closed")
            assert (await get(server, "/5")).body == b"xxxxx"

    with caplog.at_level(logging.ERROR):
        run(loop, main())
    assert server_errors(caplog) == []


def test_tls_by_openssl_is_served_on_the_loop(loop, caplog, tls_files):  # noqa: F811 (fixture)
    """The engine's TLS is rustls's (tests/test_wsgi_engine_tls.py); with OpenSSL's, the
    loop serves."""
    import ssl

    cert, key = tls_files
    ctx = ssl.create_default_context(cafile=cert)

    async def main():
        async with threaded(sized_app, ssl_certfile=cert, ssl_keyfile=key, ssl_engine="openssl") as server:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            writer.write(b"GET /3 HTTP/1.1\r\n" + H + b"\r\n")
            response = await asyncio.wait_for(read_response(reader), WAIT)
            writer.close()
            return response

    with caplog.at_level(logging.INFO):
        assert run(loop, main()).body == b"xxx"
    assert any("the loop serves instead" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("threads", [1, 4])
def test_keep_alive_timeout_closes_an_idle_connection(loop, threads):
    async def main():
        async with threaded(sized_app, threads=threads, timeout_keep_alive=0.2) as server:
            reader, writer = await connect(server)
            writer.write(b"GET /2 HTTP/1.1\r\n" + H + b"\r\n")
            assert (await asyncio.wait_for(read_response(reader), WAIT)).body == b"xx"
            # The engine's own timer closes it: EOF, nothing more sent.
            assert await asyncio.wait_for(reader.read(), WAIT) == b""
            writer.close()

    run(loop, main())

