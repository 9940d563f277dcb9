"""WebSockets over HTTP/2 (RFC 8441): the server's SETTINGS enable the extended CONNECT, a
`CONNECT` with `:protocol websocket` is the handshake (answered 200, or refused with a
status), and the stream's DATA carries the frames both ways, beside ordinary streams on the
same connection. The client is the `h2` library for the stream and the `websockets`
library's sans-I/O protocol for the frames (tests/h2util.py); ASGI and RSGI apps, h2c and
TLS, permessage-deflate, flow control both ways, closes from either side, resets and
graceful shutdown."""

import asyncio
import hashlib

import h2.errors
import h2.settings
import hyperframe.frame
import pytest
from websockets.frames import Close

from h2util import H2Client, H2WebSocket, Response, read_all, read_frames, tls_client_context
from httputil import port_of, run, serving
from netutil import tls_files  # noqa: F401 (fixture)

STATE = {}


async def ws_app(scope, receive, send):
    """`/echo` echoes; `/deny` refuses with a close, `/teapot` with its own response;
    `/bye` sends a message and closes; `/hold` reads nothing until STATE["release"] is
    set, then sums what comes; `/late` accepts once STATE["server"] is shutting down. Plain `http` requests get their path back."""
    if scope["type"] == "http":
        await read_all(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})
        return
    path = scope["path"]
    STATE.setdefault("scopes", {})[path] = scope
    assert (await receive())["type"] == "websocket.connect"
    if path == "/deny":
        await send({"type": "websocket.close"})
        return
    if path == "/late":  # decided only once the server has begun its shutdown
        STATE["deciding"].set()
        while not STATE["server"].state.shutting_down:
            await asyncio.sleep(0.005)  # polling the server's state: nothing signals it
    if path == "/teapot":
        await send({"type": "websocket.http.response.start", "status": 418, "headers": [(b"x-why", b"tea")]})
        await send({"type": "websocket.http.response.body", "body": b"short and stout"})
        return
    subprotocol = scope["subprotocols"][-1] if scope["subprotocols"] else None
    await send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": [(b"x-over", b"h2")]})
    if path == "/bye":
        await send({"type": "websocket.send", "text": "bye"})
        await send({"type": "websocket.close", "code": 4001, "reason": "done"})
    if path == "/hold":
        await STATE["release"].wait()
    received = 0
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            STATE.setdefault("disconnects", {})[path] = m
            done = STATE.get("done", {}).get(path)
            if done is not None:
                done.set()
            return
        data = m.get("text") if m.get("text") is not None else m["bytes"]
        received += len(data)
        STATE["received"] = received
        if path == "/echo":
            await send({"type": "websocket.send", **({"text": data} if isinstance(data, str) else {"bytes": data})})


def expect_disconnect(path):
    STATE.setdefault("done", {})[path] = asyncio.Event()


async def disconnected(path, timeout=5):
    await asyncio.wait_for(STATE["done"][path].wait(), timeout)
    return STATE["disconnects"][path]


def test_a_websocket_over_h2c_echoes_beside_plain_streams(loop):
    async def main():
        STATE.clear()
        expect_disconnect("/echo")
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, r = await H2WebSocket.connect(c, b"/echo?room=1", subprotocols=["chat", "v2"])
            assert c.conn.remote_settings[h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL] == 1
            assert r.status == 200, r.status
            # RFC 8441 §5: no Sec-WebSocket-Accept (there is no key); the subprotocol and
            # the app's fields as over HTTP/1.1.
            assert r.header(b"sec-websocket-accept") is None
            assert r.header(b"sec-websocket-protocol") == b"v2" and r.header(b"x-over") == b"h2"
            scope = STATE["scopes"]["/echo"]
            assert (scope["type"], scope["http_version"], scope["scheme"]) == ("websocket", "2", "ws")
            assert (scope["path"], scope["query_string"], scope["subprotocols"]) == ("/echo", b"room=1", ["chat", "v2"])
            assert "method" not in scope
            headers = dict(scope["headers"])
            assert headers[b"sec-websocket-version"] == b"13" and headers[b"host"] == b"localhost"
            # Past the frame-length encodings and the stream's and connection's windows.
            messages = ["h\u00e9llo", b"\x00" * 125, b"x" * 65536, "\u20ac" * 100_000, bytes(range(256)) * 12_000]
            for m in messages:
                await ws.send(m)
                plain = c.send(b"GET", b"/beside")
                assert await ws.recv() == m
                assert (await c.response(plain)).body == b"/beside"
            await ws.close(1000, "thanks")
            assert await ws.recv() == (1000, "")
            assert await ws.event() is None and c.responses[ws.sid].ended
            assert (await disconnected("/echo"))["code"] == 1000
            assert (await c.request(b"GET", b"/after")).body == b"/after"
            c.close()

    run(loop, main())


def test_websockets_over_h2_with_tls_and_permessage_deflate(loop, tls_files):
    cert, key = tls_files

    async def main():
        STATE.clear()
        async with serving(ws_app, ssl_certfile=cert, ssl_keyfile=key) as server:
            c = await H2Client.open(port_of(server), tls=tls_client_context(cert))
            assert c.writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            sockets = []
            for _ in range(3):
                ws, r = await H2WebSocket.connect(c, b"/echo", deflate=True)
                assert r.status == 200
                assert r.header(b"sec-websocket-extensions").startswith(b"permessage-deflate")
                assert ws.proto.extensions, "the client did not take the negotiated extension"
                sockets.append(ws)
            assert STATE["scopes"]["/echo"]["scheme"] == "wss"
            for i, ws in enumerate(sockets):
                await ws.send(f"compressible {i} " * 5000)
                await ws.send(b"\x01\x02" * 40_000)
            for i, ws in enumerate(sockets):
                assert await ws.recv() == f"compressible {i} " * 5000
                assert await ws.recv() == b"\x01\x02" * 40_000
            for ws in sockets:
                await ws.close()
                assert await ws.recv() == (1000, "")
            c.close()

    run(loop, main())


async def extended_connect(c, protocol, fields=()):
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(b":method", b"CONNECT"), (b":protocol", protocol), (b":scheme", b"http"),
                              (b":path", b"/x"), (b":authority", b"localhost"), *fields])
    c.responses[sid] = Response()
    c.flush()
    return await c.response(sid)


def test_handshakes_refused_over_h2(loop):
    async def main():
        STATE.clear()
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, r = await H2WebSocket.connect(c, b"/deny")
            assert ws is None and r.status == 403 and r.ended
            ws, r = await H2WebSocket.connect(c, b"/teapot")
            assert ws is None and (r.status, r.header(b"x-why"), r.body) == (418, b"tea", b"short and stout")
            # A version other than 13: 426, naming the one spoken (RFC 6455 §4.4), without
            # HTTP/1.1's `upgrade` field (RFC 9113 §8.2.2).
            r = await extended_connect(c, b"websocket", [(b"sec-websocket-version", b"8")])
            assert r.status == 426 and r.header(b"sec-websocket-version") == b"13" and r.header(b"upgrade") is None
            # An extended CONNECT for a protocol not served.
            assert (await extended_connect(c, b"connect-udp")).status == 501
            assert (await c.request(b"GET", b"/still")).body == b"/still"
            c.close()
        async with serving(ws_app, ws="none") as server:
            c = await H2Client.open(port_of(server))
            assert (await c.request(b"GET", b"/x")).status == 200
            # Without WebSockets, the extended CONNECT is not offered.
            assert not c.conn.remote_settings.enable_connect_protocol
            c.close()

    run(loop, main())


def test_the_app_closes_and_the_stream_ends(loop):
    async def main():
        STATE.clear()
        expect_disconnect("/bye")
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, r = await H2WebSocket.connect(c, b"/bye")
            assert await ws.recv() == "bye"
            assert await ws.recv() == (4001, "done")  # the client's echo goes with it
            assert await ws.event() is None
            assert c.responses[ws.sid].ended and c.responses[ws.sid].reset in (None, h2.errors.ErrorCodes.NO_ERROR)
            assert (await disconnected("/bye"))["code"] == 4001
            c.close()

    run(loop, main())


def test_a_reset_stream_is_a_lost_connection_for_the_app(loop):
    async def main():
        STATE.clear()
        expect_disconnect("/echo")
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, _ = await H2WebSocket.connect(c, b"/echo")
            await ws.send("ping")
            assert await ws.recv() == "ping"
            c.conn.reset_stream(ws.sid, h2.errors.ErrorCodes.CANCEL)
            c.flush()
            assert (await disconnected("/echo"))["code"] == 1006
            assert (await c.request(b"GET", b"/alive")).body == b"/alive"
            c.close()

    run(loop, main())


def test_a_closed_connection_ends_its_websockets(loop):
    async def main():
        STATE.clear()
        expect_disconnect("/echo")
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, _ = await H2WebSocket.connect(c, b"/echo")
            await ws.send(b"x")
            assert await ws.recv() == b"x"
            c.writer.transport.abort()
            assert (await disconnected("/echo"))["code"] == 1006

    run(loop, main())


def answer_ping(c, frame):
    """A raw client's answer to the server's PING (a graceful shutdown's second GOAWAY waits for it)."""
    if isinstance(frame, hyperframe.frame.PingFrame) and "ACK" not in frame.flags:
        ack = hyperframe.frame.PingFrame(0, flags=["ACK"])
        ack.opaque_data = frame.opaque_data
        c.writer.write(ack.serialize())


async def closed_by_the_shutdown(c, ws):
    """Read `c`'s connection raw through the server's graceful shutdown (the `h2` library
    takes the first GOAWAY for the end of the connection, while the stream goes on, RFC
    9113 §6.8), answering PINGs, until `ws`'s close frame and a GOAWAY came; answer the
    close and read on until the connection closes. (the close, whether a HEADERS came on
    the stream, whether the stream ended, how many GOAWAYs)"""
    close, headers, goaway, ended = None, False, 0, False
    while close is None or not goaway:
        f = await read_frames(c.reader)
        answer_ping(c, f)
        if isinstance(f, hyperframe.frame.GoAwayFrame):
            goaway += 1
        elif isinstance(f, hyperframe.frame.HeadersFrame) and f.stream_id == ws.sid:
            headers = True
        elif isinstance(f, hyperframe.frame.DataFrame) and f.stream_id == ws.sid:
            ws.proto.receive_data(bytes(f.data))
            for frame in ws.proto.events_received():
                close = Close.parse(frame.data)
    for chunk in ws.proto.data_to_send():  # the close's echo
        if chunk:
            c.writer.write(hyperframe.frame.DataFrame(ws.sid, data=chunk).serialize())
    with pytest.raises(asyncio.IncompleteReadError):  # then the connection closes
        while True:
            f = await read_frames(c.reader)
            answer_ping(c, f)
            ended |= f.stream_id == ws.sid and "END_STREAM" in f.flags
            goaway += isinstance(f, hyperframe.frame.GoAwayFrame)
    return close, headers, ended, goaway


def test_graceful_shutdown_closes_websockets_with_1001(loop):
    """The server shuts down: the WebSocket gets its close (1001) and the connection its
    GOAWAY; the stream ends once the client answered the close, then the connection."""

    async def main():
        STATE.clear()
        expect_disconnect("/echo")
        async with serving(ws_app) as server:
            c = await H2Client.open(port_of(server))
            ws, _ = await H2WebSocket.connect(c, b"/echo")
            await ws.send("before")
            assert await ws.recv() == "before"
            server.shutdown()
            close, _, ended, goaway = await closed_by_the_shutdown(c, ws)
            assert (close.code, close.reason) == (1001, "server shutting down")
            assert (await disconnected("/echo"))["code"] == 1001
            assert ended and goaway == 2
            c.close()

    run(loop, main())


def test_a_websocket_accepted_after_the_shutdown_began_closes_too(loop):
    """The app was still deciding the handshake when the graceful shutdown told the open
    WebSockets to close: the tunnel it opens then gets the close (1001) too, and the
    connection ends once the client answered, not at the graceful timeout."""

    async def main():
        STATE.clear()
        STATE["deciding"] = asyncio.Event()
        expect_disconnect("/late")
        async with serving(ws_app, timeout_graceful_shutdown=30) as server:
            STATE["server"] = server
            c = await H2Client.open(port_of(server))
            sid = await H2WebSocket.ask(c, b"/late")  # its answer is read raw below
            await asyncio.wait_for(STATE["deciding"].wait(), 5)
            server.shutdown()
            ws = H2WebSocket(c, sid, [])
            close, headers, ended, goaway = await closed_by_the_shutdown(c, ws)
            assert headers and (close.code, close.reason) == (1001, "server shutting down")
            assert (await disconnected("/late"))["code"] == 1001
            assert ended and goaway == 2
            c.close()

    run(loop, main())


def test_flow_control_holds_a_client_the_app_does_not_read(loop):
    """The app reads nothing: once its queue is full the stream's window stays shut, so
    the client cannot send more; released, it reads everything."""

    async def main():
        STATE.clear()
        STATE["release"] = asyncio.Event()
        expect_disconnect("/hold")
        async with serving(ws_app, ws_max_queue=2, http2_initial_stream_window_size=65535) as server:
            c = await H2Client.open(port_of(server))
            ws, _ = await H2WebSocket.connect(c, b"/hold")
            message = b"m" * 32768
            total = 64

            async def sender():
                for _ in range(total):
                    await ws.send(message)
                return True

            sending = asyncio.ensure_future(sender())
            # 2 MiB to send; the queue (2 messages) and the stream's window (64 KiB) hold
            # about 128 KiB. No event says that nothing more moves: half a second of it does.
            done, _ = await asyncio.wait([sending], timeout=0.5)
            assert not done, "the server let the client send more than its queue and window hold"
            assert "received" not in STATE
            STATE["release"].set()
            assert await asyncio.wait_for(sending, 10)
            await ws.close()
            assert await ws.recv() == (1000, "")
            await disconnected("/hold")
            assert STATE["received"] == total * len(message)
            c.close()

    run(loop, main())


async def rsgi_ws_app(scope, protocol):
    if scope.proto != "ws":
        protocol.response_str(200, [], "plain")
        return
    STATE["rsgi"] = (scope.http_version, scope.path)
    transport = await protocol.accept()
    while True:
        m = await transport.receive()
        if m.kind == 0:
            return
        if m.kind == 1:
            await transport.send_bytes(hashlib.sha256(m.data).digest())
        else:
            await transport.send_str(m.data.upper())


def test_rsgi_websockets_over_h2(loop):
    async def main():
        STATE.clear()
        async with serving(rsgi_ws_app, interface="rsgi") as server:
            c = await H2Client.open(port_of(server))
            ws, r = await H2WebSocket.connect(c, b"/rsgi")
            assert r.status == 200 and STATE["rsgi"] == ("2", "/rsgi")
            await ws.send("shout")
            assert await ws.recv() == "SHOUT"
            await ws.send(b"z" * 200_000)
            assert await ws.recv() == hashlib.sha256(b"z" * 200_000).digest()
            await ws.close()
            assert await ws.recv() == (1000, "")
            c.close()

    run(loop, main())
