"""WSGI apps over HTTP/2, served by the loop (the thread engine serves HTTP/1.1, and moves
a connection that opens with HTTP/2's preface or asks for `Upgrade: h2c` to the loop): the environ of a stream, request
bodies through `wsgi.input` with the stream's flow control, streamed and file responses,
errors; ALPN `h2` over TLS, h2c under `--http 2` (which has the loop serve even where the
thread engine would), h2c beside the thread engine. Flask and Werkzeug through
httpx's HTTP/2 client: the tests of tests/test_wsgi_frameworks.py that hold for any HTTP
version run again here, on clients that check every response came over HTTP/2."""

import asyncio
import hashlib
import logging
import subprocess
import threading
import time

import h2.errors
import pytest

from h2util import PREFACE, H2Client, through_shutdown, tls_client_context
from httputil import port_of, read_response, run, serving
from netutil import tls_files  # noqa: F401 (fixture)
from test_http2_clients import need
# The fixtures, and the tests that hold for any HTTP version: collected here, where the
# `http2` fixture below makes their clients speak HTTP/2.
from test_wsgi_frameworks import (  # noqa: F401
    fl, server_loop, test_flask_error_is_its_own_500, test_flask_form_with_a_file,
    test_flask_json_with_a_length_and_chunked, test_flask_routes_and_query,
    test_flask_send_file_goes_through_the_file_wrapper, test_werkzeug_cookies_and_redirects,
    test_werkzeug_form_files_and_streamed_body, test_werkzeug_request_data, wz,
)


@pytest.fixture
def http2():
    return True


STREAMED = []


def wsgi_app(environ, start_response):
    """`/env` answers what the environ says; `/sum` the body's SHA-256 and size, read in
    pieces; `/stream` 128 pieces of 16 KiB, recording each; `/fail` raises; `/short` sends
    less than its Content-Length."""
    path = environ["PATH_INFO"]
    if path == "/sum":
        h, n = hashlib.sha256(), 0
        while True:
            piece = environ["wsgi.input"].read(50_000)
            if not piece:
                break
            h.update(piece)
            n += len(piece)
        start_response("200 OK", [("content-type", "text/plain")])
        return [f"{h.hexdigest()} {n}".encode()]
    if path == "/stream":
        start_response("200 OK", [("content-type", "application/octet-stream")])

        def pieces():
            for i in range(128):
                STREAMED.append(i)
                yield bytes([i]) * 16384
        return pieces()
    if path == "/fail":
        raise RuntimeError("the app failed")
    if path == "/short":
        start_response("200 OK", [("content-length", "100")])
        return [b"only ten b"]
    keys = ("SERVER_PROTOCOL", "REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "HTTP_HOST", "wsgi.url_scheme",
            "CONTENT_LENGTH", "HTTP_COOKIE")
    start_response("200 OK", [("content-type", "text/plain")])
    return [repr(tuple(environ.get(k) for k in keys)).encode()]


def test_a_wsgi_app_over_h2c(loop):
    async def main():
        async with serving(wsgi_app, interface="wsgi", wsgi_engine="loop",
                           http2_initial_stream_window_size=65535) as server:
            c = await H2Client.open(port_of(server))
            r = await c.request(b"GET", b"/env?x=1", headers=[(b"cookie", b"a=1"), (b"cookie", b"b=2")])
            # WSGI has no WebSockets: the extended CONNECT is not offered.
            assert not c.conn.remote_settings.enable_connect_protocol
            assert r.status == 200
            assert r.body.decode() == repr(("HTTP/2", "GET", "/env", "x=1", "localhost", "http", None, "a=1; b=2"))
            # A body past the stream's window: credited back as wsgi.input reads it.
            body = bytes(range(256)) * 4000
            r = await c.request(b"POST", b"/sum", body=body, headers=[(b"content-length", str(len(body)).encode())])
            assert r.body.decode() == f"{hashlib.sha256(body).hexdigest()} {len(body)}"
            # Several streams at once, each an app thread's.
            ids = [c.send(b"GET", b"/env?n=%d" % i) for i in range(20)]
            for i, sid in enumerate(ids):
                assert f"'n={i}'" in (await c.response(sid)).body.decode()
            c.close()

    run(loop, main())


def test_wsgi_streams_errors_and_resets_over_h2c(loop, caplog):
    caplog.set_level(logging.ERROR, "swordfish")

    async def main():
        STREAMED.clear()
        async with serving(wsgi_app, interface="wsgi", wsgi_engine="loop", http2_max_send_buffer_size=65536) as server:
            c = await H2Client.open(port_of(server), auto_window=False)
            # The client opens no window: the app's iterable is held, not read ahead into memory.
            sid = c.send(b"GET", b"/stream")
            while len(c.responses[sid].body) < 65535:
                await c.pump()
            await asyncio.sleep(0.3)  # no event says the app is held: a while of it does
            # At most about 26 of the 128: the window (64 KiB), the stream's queue (64 KiB)
            # with what the app thread had posted before it paused (256 KiB and a piece),
            # and a piece in hand.
            assert len(STREAMED) <= 28, len(STREAMED)
            c.auto_window = True
            c.conn.increment_flow_control_window(2 << 20)
            c.conn.increment_flow_control_window(2 << 20, sid)
            c.flush()
            r = await c.response(sid)
            assert r.body == b"".join(bytes([i]) * 16384 for i in range(128))
            assert (await c.request(b"GET", b"/fail")).status == 500
            assert (await c.request(b"GET", b"/short")).reset == h2.errors.ErrorCodes.INTERNAL_ERROR
            # A stream reset while its app streams: the app's writes stop, the connection goes on.
            STREAMED.clear()
            sid = c.send(b"GET", b"/stream")
            while not c.responses[sid].body:
                await c.pump()
            c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
            c.flush()
            assert (await c.request(b"GET", b"/env")).status == 200
            c.close()

    run(loop, main())
    messages = [r.getMessage() for r in caplog.records]
    assert any("the app failed" in m or "Exception" in m for m in messages), messages
    assert any("shorter than its Content-Length" in m for m in messages), messages


def test_wsgi_over_h2_by_alpn(loop, tls_files):
    cert, key = tls_files

    async def main():
        async with serving(wsgi_app, interface="wsgi", ssl_certfile=cert, ssl_keyfile=key) as server:
            c = await H2Client.open(port_of(server), tls=tls_client_context(cert))
            assert c.writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            r = await c.request(b"GET", b"/env")
            assert r.body.decode().startswith("('HTTP/2', 'GET', '/env', '', 'localhost', 'https'")
            c.close()

    run(loop, main())


def test_http_2_has_the_loop_serve_wsgi(loop, caplog):
    """`--http 2` with `--wsgi-engine threads`: the loop serves (the engine speaks HTTP/1.1)."""
    caplog.set_level(logging.INFO, "swordfish")

    async def main():
        async with serving(wsgi_app, interface="wsgi", wsgi_engine="threads", http="2") as server:
            c = await H2Client.open(port_of(server))
            assert (await c.request(b"GET", b"/env")).body.decode().startswith("('HTTP/2'")
            c.close()

    run(loop, main())
    messages = [r.getMessage() for r in caplog.records]
    assert "WSGI served by the loop" in messages, messages


def thread_app(environ, start_response):
    """The HTTP version, and the name of the thread the app runs on (the engine's are
    `swordfish-wsgi-N`, the loop's pool's `swordfish-wsgi`)."""
    if environ["QUERY_STRING"].startswith("sleep="):
        time.sleep(float(environ["QUERY_STRING"][6:]))
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        name = f.read().strip()
    start_response("200 OK", [("content-type", "text/plain")])
    return [f"{environ['SERVER_PROTOCOL']} {name}".encode()]


async def http11(port, head):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    r = await read_response(reader)
    writer.close()
    return r


def test_the_thread_engine_moves_h2c_to_the_loop(loop):
    async def main():
        async with serving(thread_app, interface="wsgi", wsgi_engine="threads", threads=2) as server:
            port = port_of(server)
            r = await http11(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert r.status == 200 and r.body.decode().startswith("HTTP/1.1 swordfish-wsgi-"), r.body
            # The preface: the connection moves to the loop, which serves HTTP/2.
            c = await H2Client.open(port)
            ids = [c.send(b"GET", b"/%d" % i) for i in range(10)]
            for sid in ids:
                r = await c.response(sid)
                assert (r.status, r.body) == (200, b"HTTP/2 swordfish-wsgi")
            # The preface in pieces: the engine waits for the whole of it.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(PREFACE[:7])
            await writer.drain()
            await asyncio.sleep(0.05)  # the rest arrives apart (the test holds either way)
            c2 = H2Client(reader, writer, preface_sent=PREFACE[:7])
            r = await c2.request(b"GET", b"/")
            assert (r.status, r.body) == (200, b"HTTP/2 swordfish-wsgi")
            c.close()
            c2.close()

    run(loop, main())


def test_the_thread_engine_moves_an_h2c_upgrade_to_the_loop(loop):
    """`Upgrade: h2c` beside the thread engine: the loop answers 101 and serves the request
    as stream 1, also after HTTP/1.1 requests on the same connection; an upgrade with a body
    stays HTTP/1.1 on the engine (RFC 7540 §3.2 lets the server choose); curl's `--http2`."""
    async def main():
        async with serving(thread_app, interface="wsgi", wsgi_engine="threads", threads=2) as server:
            port = port_of(server)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            c, head = await H2Client.upgrade(reader, writer, b"/first")
            assert c is not None, head
            r = await c.response(1)
            assert (r.status, r.body) == (200, b"HTTP/2 swordfish-wsgi")
            r = await c.request(b"GET", b"/then")
            assert (r.status, r.body) == (200, b"HTTP/2 swordfish-wsgi")
            c.close()
            # Two HTTP/1.1 requests on the engine, then the upgrade on the same connection.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(2):
                writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                r = await read_response(reader)
                assert r.status == 200 and r.body.decode().startswith("HTTP/1.1 swordfish-wsgi-"), r.body
            c, head = await H2Client.upgrade(reader, writer, b"/later")
            assert c is not None, head
            assert (await c.response(1)).body == b"HTTP/2 swordfish-wsgi"
            c.close()
            # With a body: HTTP/1.1, on the engine.
            r = await http11(port, b"POST / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                                   b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\nContent-Length: 2\r\n\r\nab")
            assert r.status == 200 and r.body.decode().startswith("HTTP/1.1 swordfish-wsgi-"), r.body
            out = await asyncio.to_thread(subprocess.run, [need("curl"), "-sS", "--max-time", "10", "--http2",
                                                           f"http://127.0.0.1:{port}/curl"],
                                          capture_output=True, text=True, check=True)
            assert out.stdout == "HTTP/2 swordfish-wsgi"

    run(loop, main())


def test_a_moved_connection_finishes_its_streams_on_graceful_shutdown(loop):
    async def main():
        async with serving(thread_app, interface="wsgi", wsgi_engine="threads", threads=2) as server:
            c = await H2Client.open(port_of(server))
            c.send(b"GET", b"/?sleep=0.3")
            await c.pump()  # the server's SETTINGS
            await asyncio.sleep(0.1)  # the app is running (it sleeps 0.3 s)
            server.shutdown()
            goaways, data = await through_shutdown(c)
            assert goaways and data == b"HTTP/2 swordfish-wsgi"
            assert await asyncio.wait_for(c.reader.read(), 5) == b""

    run(loop, main())


def relayed_app(environ, start_response):
    """The HTTP version, the client's address and the thread the app runs on."""
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        name = f.read().strip()
    start_response("200 OK", [("content-type", "text/plain")])
    return [f"{environ['SERVER_PROTOCOL']} {environ['REMOTE_ADDR']}:{environ['REMOTE_PORT']} {name}".encode()]


def test_the_thread_engine_moves_h2c_after_a_proxy_header_with_it(loop):
    """--proxy-protocol on the thread engine: HTTP/1.1 is served there with the relayed
    client; a connection whose header is followed by HTTP/2's preface moves to the loop with
    the header, which the loop reads again: its streams see the relayed client too."""
    header = b"PROXY TCP4 192.0.2.7 198.51.100.1 5555 443\r\n"

    async def main():
        async with serving(relayed_app, interface="wsgi", wsgi_engine="threads", threads=2, proxy_protocol=True,
                           forwarded_allow_ips="127.0.0.1") as server:
            port = port_of(server)
            r = await http11(port, header + b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert r.status == 200 and r.body.decode().startswith("HTTP/1.1 192.0.2.7:5555 swordfish-wsgi-"), r.body
            # The header whole, then the preface; or the header in two pieces, the second
            # with the start of the preface.
            for pieces, preface_sent in (([header], b""), ([header[:9], header[9:] + PREFACE[:5]], PREFACE[:5])):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.02)  # apart (the test holds either way)
                c = H2Client(reader, writer, preface_sent=preface_sent)
                r = await c.request(b"GET", b"/via")
                assert (r.status, r.body) == (200, b"HTTP/2 192.0.2.7:5555 swordfish-wsgi")
                c.close()

    run(loop, main())
