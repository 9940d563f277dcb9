"""RSGI 1.6 (granian's interface) as swordfish serves it, on the stdlib loop and on
swordfish, over real sockets: the scope and its headers, the body read whole and in pieces,
every response method, streamed responses with flow control, `client_disconnect()`, the
WebSocket protocol with the `websockets` client, the app's errors, and where granian fails
(an invalid status, a second `accept()`, a close code after `accept()`, a client that reads
nothing). tests/apps/rsgi_app.py re-creates granian's own RSGI test routes."""

import asyncio
import json
import os
import pathlib
import socket

import pytest
import websockets
from websockets.asyncio.client import connect as ws_connect

from apps import rsgi_app
from httputil import connect, port_of, read_response, request, run, serving
from swordfish import rsgi
from swordfish.server.wsgi import detect_interface

HERE = pathlib.Path(__file__).parent
APP_FILE = HERE / "apps" / "rsgi_app.py"
H = b"Host: example.com\r\n"
WAIT = 5.0


def rsgi_serving(app, **options):
    options.setdefault("interface", "rsgi")
    options.setdefault("timeout_graceful_shutdown", 2)
    return serving(app, **options)


async def get(server, path, extra=b"", method=b"GET"):
    """The response to one request on a new connection."""
    reader, writer = await connect(server)
    try:
        writer.write(method + b" " + path + b" HTTP/1.1\r\n" + H + extra + b"\r\n")
        return await asyncio.wait_for(read_response(reader, method == b"HEAD"), WAIT)
    finally:
        writer.close()


def ws_url(server, path):
    return f"ws://127.0.0.1:{port_of(server)}{path}"


# --- the scope ----------------------------------------------------------------------------


def test_scope_of_a_request(loop):
    seen = []

    async def app(scope, protocol):
        seen.append(scope)
        headers = scope.headers
        seen.append({
            "keys": headers.keys(), "values": headers.values(), "items": headers.items(),
            "get": headers.get("X-TWO"), "get_default": headers.get("nope", "d"), "get_none": headers.get("nope"),
            "get_all": headers.get_all("x-two"), "getitem": headers["x-mixed-case"], "contains": "X-Mixed-Case" in headers,
            "not_contains": "nope" in headers, "iter": list(headers), "len": len(headers),
            "same": scope.headers is headers,
        })
        try:
            headers["nope"]
        except KeyError as e:
            seen.append(("keyerror", e.args))
        protocol.response_empty(204, [])

    async def main():
        async with rsgi_serving(app) as server:
            raw = (b"GET /p%2Fq/%C3%A9?a=1&b=%20 HTTP/1.1\r\nHost: h\r\nX-Mixed-Case: V\r\n"
                   b"x-two: 1\r\nX-Two: 2\r\n\r\n")
            reader, writer = await connect(server)
            writer.write(raw)
            resp = await read_response(reader)
            client = writer.get_extra_info("sockname")
            writer.close()
            return resp, port_of(server), client

    resp, port, client = run(loop, main())
    assert resp.status == 204
    scope, h, keyerror = seen
    assert isinstance(scope, rsgi.Scope)
    assert scope.proto == "http"
    assert scope.rsgi_version == "1.6" == rsgi.RSGI_VERSION
    assert scope.http_version == "1.1"
    assert scope.scheme == "http"
    assert scope.method == "GET"
    assert scope.path == "/p/q/\u00e9"
    assert scope.query_string == "a=1&b=%20"
    assert scope.authority is None
    assert scope.server == f"127.0.0.1:{port}"
    assert scope.client == f"{client[0]}:{client[1]}"
    assert h == {
        "keys": ["host", "x-mixed-case", "x-two", "x-two"], "values": ["h", "V", "1", "2"],
        "items": [("host", "h"), ("x-mixed-case", "V"), ("x-two", "1"), ("x-two", "2")],
        "get": "1", "get_default": "d", "get_none": None, "get_all": ["1", "2"], "getitem": "V", "contains": True,
        "not_contains": False, "iter": ["host", "x-mixed-case", "x-two", "x-two"], "len": 4, "same": True,
    }
    assert keyerror == ("keyerror", ("nope",))


def test_scope_of_http_1_0_and_an_absolute_target(loop):
    seen = []

    async def app(scope, protocol):
        seen.append((scope.http_version, scope.authority, scope.path, scope.query_string, scope.method))
        protocol.response_empty(200, [])

    async def main():
        async with rsgi_serving(app) as server:
            a = await get(server, b"/x")
            resp, _ = await request(server, b"GET /old HTTP/1.0\r\n\r\n")
            b = await get(server, b"http://example.org:8080/abs?q=1", method=b"POST")
            c = await get(server, b"http://example.org?q=2")
            return a, resp, b, c

    for resp in run(loop, main()):
        assert resp.status == 200
    assert seen == [
        ("1.1", None, "/x", "", "GET"),
        ("1", None, "/old", "", "GET"),
        ("1.1", "example.org:8080", "/abs", "q=1", "POST"),
        ("1.1", "example.org", "/", "q=2", "GET"),
    ]


def test_scope_over_a_unix_socket(loop, tmp_path):
    seen = []

    async def app(scope, protocol):
        seen.append((scope.server, scope.client))
        protocol.response_str(200, [], "ok")

    async def main():
        path = str(tmp_path / "s.sock")
        async with rsgi_serving(app, uds=path):
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            resp = await read_response(reader)
            writer.close()
            return resp, path

    resp, path = run(loop, main())
    assert resp.body == b"ok"
    assert seen == [(path, "")]


def test_header_values_keep_every_byte(loop):
    seen = []

    async def app(scope, protocol):
        seen.append(scope.headers.get("x-latin"))
        protocol.response_empty(200, [])

    async def main():
        async with rsgi_serving(app) as server:
            return await get(server, b"/", b"X-Latin: caf\xe9\r\n")

    assert run(loop, main()).status == 200
    assert seen == ["caf\u00e9"]


# --- the request body ------------------------------------------------------------------------


def test_granian_routes(loop):
    async def main():
        async with rsgi_serving(rsgi_app.routes) as server:
            info = await get(server, b"/info?test=true")
            echo, _ = await request(server, b"POST /echo HTTP/1.1\r\n" + H + b"Content-Length: 4\r\n\r\ntest")
            chunked = (b"POST /echos HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                       b"2\r\nte\r\n2\r\nst\r\n0\r\n\r\n")
            echos, _ = await request(server, chunked)
            stream = await get(server, b"/stream")
            file = await get(server, b"/file")
            head = await get(server, b"/file", method=b"HEAD")
            err = await get(server, b"/err_app")
            return info, echo, echos, stream, file, head, err

    info, echo, echos, stream, file, head, err = run(loop, main())
    data = json.loads(info.body)
    assert data["proto"] == "http" and data["query_string"] == "test=true" and data["path"] == "/info"
    assert data["headers"]["host"] == "example.com"
    assert (echo.status, echo.body) == (200, b"test")
    assert echo.header("content-type") == "text/plain; charset=utf-8"
    assert (echos.status, echos.body) == (200, b"test")
    assert (stream.status, stream.body) == (200, b"testtesttest")
    assert stream.header("transfer-encoding") == "chunked"
    content = APP_FILE.read_bytes()
    assert (file.status, file.body) == (200, content)
    assert file.header("content-length") == str(len(content))
    assert file.header("content-type") == "text/x-python"
    assert (head.status, head.body, head.header("content-length")) == (200, b"", str(len(content)))
    assert err.status == 500


@pytest.mark.parametrize("rng,status,body", [
    ("0-9", 206, slice(0, 10)),
    ("5-5", 206, slice(5, 6)),
    ("10-100000000", 206, slice(10, None)),
    ("100000000-100000010", 416, None),
])
def test_granian_file_range_route(loop, rng, status, body):
    async def main():
        async with rsgi_serving(rsgi_app.routes) as server:
            extra = f"file-path: {APP_FILE}\r\nrange: bytes={rng}\r\n".encode()
            return await get(server, b"/file_range", extra)

    resp = run(loop, main())
    assert resp.status == status
    content = APP_FILE.read_bytes()
    if body is not None:
        assert resp.body == content[body]
        part = content[body]
        start = body.start
        assert resp.header("content-range") == f"bytes {start}-{start + len(part) - 1}/{len(content)}"


def test_body_whole_in_pieces_and_twice(loop):
    seen = []

    async def app(scope, protocol):
        if scope.path == "/whole":
            first = await protocol()
            seen.append((len(first), await protocol()))
            protocol.response_str(200, [], str(len(first)))
        else:
            pieces = [len(p) async for p in protocol]
            seen.append(pieces)
            async for p in protocol:  # the body is over: nothing more
                seen.append(p)
            protocol.response_str(200, [], str(sum(pieces)))

    async def send_slowly(server, path, total):
        reader, writer = await connect(server)
        writer.write(b"POST " + path + b" HTTP/1.1\r\n" + H + f"Content-Length: {total}\r\n\r\n".encode())
        for _ in range(total // 10000):
            writer.write(b"x" * 10000)
            await writer.drain()
        resp = await read_response(reader)
        writer.close()
        return resp

    async def main():
        async with rsgi_serving(app) as server:
            whole = await send_slowly(server, b"/whole", 1_000_000)
            pieces = await send_slowly(server, b"/pieces", 1_000_000)
            empty, _ = await request(server, b"POST /whole HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n")
            return whole, pieces, empty

    whole, pieces, empty = run(loop, main())
    assert whole.body == b"1000000" and pieces.body == b"1000000" and empty.body == b"0"
    assert seen[0] == (1_000_000, b"")
    assert len(seen[1]) > 1 and sum(seen[1]) == 1_000_000
    assert seen[2] == (0, b"")


def test_expect_100_continue_is_answered_when_the_app_reads(loop):
    async def app(scope, protocol):
        protocol.response_bytes(200, [], await protocol())

    async def main():
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            writer.write(b"hello")
            resp = await read_response(reader)
            writer.close()
            return interim, resp

    interim, resp = run(loop, main())
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    assert resp.body == b"hello"


# --- responses -------------------------------------------------------------------------------


def test_response_methods(loop):
    async def app(scope, protocol):
        path = scope.path
        if path == "/empty":
            protocol.response_empty(204, [("x-a", "1")])
        elif path == "/str":
            protocol.response_str(201, [("content-type", "text/plain; charset=utf-8")], "h\u00e9llo")
        elif path == "/bytes":
            protocol.response_bytes(200, [("x-b", "2"), ("x-b", "3")], b"\x00\x01")
        elif path == "/keywords":
            protocol.response_bytes(status=202, headers=[], body=b"kw")
        elif path == "/stream_str":
            trx = protocol.response_stream(200, [])
            await trx.send_str("a\u00e9")
            await trx.send_bytes(b"")
            await trx.send_bytes(bytearray(b"b"))

    async def main():
        async with rsgi_serving(app) as server:
            return [await get(server, p) for p in (b"/empty", b"/str", b"/bytes", b"/keywords", b"/stream_str")]

    empty, text, data, kw, stream = run(loop, main())
    assert (empty.status, empty.body, empty.header("x-a")) == (204, b"", "1")
    assert (text.status, text.body) == (201, "h\u00e9llo".encode())
    assert data.body == b"\x00\x01" and [v for n, v in data.headers if n == "x-b"] == ["2", "3"]
    assert (kw.status, kw.body) == (202, b"kw")
    assert stream.body == "a\u00e9b".encode()


def test_the_first_response_wins(loop):
    errors = []

    async def app(scope, protocol):
        protocol.response_str(200, [], "first")
        protocol.response_str(500, [], "second")
        protocol.response_empty(404, [])
        try:
            protocol.response_stream(200, [])
        except rsgi.ProtocolError as e:
            errors.append(e)

    async def main():
        async with rsgi_serving(app) as server:
            return await get(server, b"/"), await get(server, b"/")

    for resp in run(loop, main()):
        assert (resp.status, resp.body) == (200, b"first")
    assert len(errors) == 2


def test_response_file_errors(loop, tmp_path):
    small = tmp_path / "small.txt"
    small.write_bytes(b"0123456789")
    outcomes = []

    async def app(scope, protocol):
        try:
            if scope.path == "/missing":
                protocol.response_file(200, [], str(tmp_path / "nope"))
            elif scope.path == "/dir":
                protocol.response_file(200, [], str(tmp_path))
            elif scope.path == "/empty-range":
                protocol.response_file_range(206, [], str(small), 4, 4)
            elif scope.path == "/past-end":
                protocol.response_file_range(206, [], str(small), 4, 11)
            elif scope.path == "/negative":
                protocol.response_file_range(206, [], str(small), -1, 3)
            elif scope.path == "/wrong-length":
                protocol.response_file(200, [("content-length", "3")], str(small))
            elif scope.path == "/pathlike":
                protocol.response_file_range(206, [], small, 9, 10)
        except ValueError as e:
            outcomes.append((scope.path, str(e)))
            protocol.response_empty(416, [])

    async def main():
        async with rsgi_serving(app) as server:
            paths = (b"/missing", b"/dir", b"/empty-range", b"/past-end", b"/negative", b"/wrong-length", b"/pathlike")
            return [await get(server, p) for p in paths]

    missing, directory, empty, past, negative, wrong, pathlike = run(loop, main())
    assert missing.status == 404 and directory.status == 404
    assert empty.status == past.status == negative.status == 416
    assert [p for p, _ in outcomes] == ["/empty-range", "/past-end", "/negative", "/wrong-length"]
    # A content-length that does not match the file fails the response (the app's second
    # try comes after its first): a 500.
    assert wrong.status == 500
    assert (pathlike.status, pathlike.body) == (206, b"9")


@pytest.mark.parametrize("status", [1000, 42, 0, 103])
def test_an_invalid_status_fails_that_response_and_the_server_serves_on(loop, status):
    async def app(scope, protocol):
        if scope.path == "/bad":
            protocol.response_bytes(status, [], b"x")
        else:
            protocol.response_str(200, [], "fine")

    async def main():
        async with rsgi_serving(app) as server:
            bad = await get(server, b"/bad")
            good = await get(server, b"/good")
            return bad, good

    bad, good = run(loop, main())
    assert bad.status == 500
    assert (good.status, good.body) == (200, b"fine")


@pytest.mark.parametrize("headers", [[("x", 1)], ["x: y"], [("x",)], [(b"x", b"y")], [("x", "a\r\nb")], 7])
def test_malformed_headers_fail_the_response(loop, headers):
    async def app(scope, protocol):
        protocol.response_bytes(200, headers, b"x")

    async def main():
        async with rsgi_serving(app) as server:
            return await get(server, b"/")

    assert run(loop, main()).status == 500


def test_apps_that_do_not_respond_get_500(loop):
    async def app(scope, protocol):
        if scope.path == "/raise-after":
            protocol.response_str(200, [], "sent")
            raise RuntimeError("after the response")
        if scope.path == "/raise":
            raise RuntimeError("before")
        if scope.path == "/raise-at-call":
            raise RuntimeError("at call")

    def at_call(scope, protocol):
        if scope.path == "/raise-at-call":
            raise RuntimeError("at call")
        return app(scope, protocol)

    async def main():
        async with rsgi_serving(at_call) as server:
            return [await get(server, p) for p in (b"/return", b"/raise", b"/raise-after", b"/raise-at-call")]

    ret, raised, after, at = run(loop, main())
    assert ret.status == raised.status == at.status == 500
    assert (after.status, after.body) == (200, b"sent")


def test_a_stream_ends_when_the_app_returns_whoever_holds_the_transport(loop):
    kept = []

    async def app(scope, protocol):
        trx = protocol.response_stream(200, [])
        kept.append(trx)
        await trx.send_bytes(b"part")

    async def main():
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\nGET / HTTP/1.1\r\n" + H + b"\r\n")
            first = await read_response(reader)
            second = await read_response(reader)
            writer.close()
            try:
                await kept[0].send_bytes(b"late")
            except rsgi.ProtocolClosed as e:
                return first, second, e

    first, second, late = run(loop, main())
    assert first.body == second.body == b"part"
    assert isinstance(late, RuntimeError)


def test_a_stream_waits_for_a_client_that_does_not_read(loop):
    progress = {"sent": 0, "waited_at": None}
    chunk = b"x" * (256 * 1024)
    total = 64 * 1024 * 1024

    async def app(scope, protocol):
        trx = protocol.response_stream(200, [("content-length", str(total))])
        while progress["sent"] < total:
            pending = trx.send_bytes(chunk)
            if progress["waited_at"] is None and isinstance(pending, asyncio.Future):
                progress["waited_at"] = progress["sent"]
            await pending
            progress["sent"] += len(chunk)

    async def main():
        async with rsgi_serving(app) as server:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port_of(server)))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            while progress["waited_at"] is None:
                await asyncio.sleep(0.01)
            resp = await asyncio.wait_for(read_response(reader), 30)
            writer.close()
            return resp

    resp = run(loop, main(), timeout=60)
    assert len(resp.body) == total
    # The app waited while the client read nothing: a few MiB queued at most, not 64.
    assert progress["waited_at"] < 16 * 1024 * 1024


def test_client_disconnect_wakes_every_waiter(loop):
    woken = []
    started = asyncio.Event() if False else None

    async def app(scope, protocol):
        body = await protocol()
        watchers = [asyncio.ensure_future(protocol.client_disconnect()) for _ in range(2)]
        cancelled = protocol.client_disconnect()
        cancelled.cancel()
        state["ready"].set()
        await asyncio.wait_for(asyncio.gather(*watchers), WAIT)
        woken.append(body)
        # Answering a client that left is no error.
        protocol.response_bytes(200, [], b"late")
        after = protocol.client_disconnect()
        await asyncio.wait_for(after, WAIT)
        woken.append("after")

    state = {}

    async def main():
        state["ready"] = asyncio.Event()
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 2\r\n\r\nhi")
            await asyncio.wait_for(state["ready"].wait(), WAIT)
            writer.close()
            while len(woken) < 2:
                await asyncio.sleep(0.01)

    del started
    run(loop, main())
    assert woken == [b"hi", "after"]


def test_a_cancelled_body_read_leaves_the_body_to_the_next(loop):
    got = []

    async def app(scope, protocol):
        try:
            await asyncio.wait_for(protocol(), 0.05)
        except asyncio.TimeoutError:
            got.append("timeout")
        state["more"].set()
        got.append(await protocol())
        protocol.response_empty(200, [])

    state = {}

    async def main():
        state["more"] = asyncio.Event()
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 4\r\n\r\n")
            await asyncio.wait_for(state["more"].wait(), WAIT)
            writer.write(b"body")
            resp = await read_response(reader)
            writer.close()
            return resp

    assert run(loop, main()).status == 200
    assert got == ["timeout", b"body"]


def test_pipelined_requests_in_order(loop):
    async def app(scope, protocol):
        protocol.response_str(200, [], scope.path + ":" + (await protocol()).decode())

    async def main():
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            for i in range(20):
                writer.write(f"POST /{i} HTTP/1.1\r\n".encode() + H + b"Content-Length: 1\r\n\r\n" + str(i % 10).encode())
            bodies = [(await read_response(reader)).body for _ in range(20)]
            writer.close()
            return bodies

    assert run(loop, main()) == [f"/{i}:{i % 10}".encode() for i in range(20)]


# --- WebSocket -------------------------------------------------------------------------------


def test_granian_websocket_routes(loop):
    async def main():
        async with rsgi_serving(rsgi_app.routes) as server:
            async with ws_connect(ws_url(server, "/ws_echo")) as ws:
                await ws.send("foo")
                text = await ws.recv()
                await ws.send(b"bar")
                data = await ws.recv()
            async with ws_connect(ws_url(server, "/ws_info?test=true")) as ws:
                info = json.loads(await ws.recv())
            # The route pushes without waiting for as long as it can: the client takes three
            # and vanishes.
            ws = await ws_connect(ws_url(server, "/ws_push"))
            pushed = [await ws.recv() for _ in range(3)]
            _abort_ws(ws)
            try:
                async with ws_connect(ws_url(server, "/ws_reject")):
                    pass
            except websockets.InvalidStatus as e:
                rejected = e.response.status_code
            return text, data, info, pushed, rejected

    text, data, info, pushed, rejected = run(loop, main())
    assert (text, data) == ("foo", b"bar")
    assert info["proto"] == "ws" and info["query_string"] == "test=true" and info["scheme"] == "http"
    assert info["headers"]["upgrade"] == "websocket"
    assert pushed == ["ping"] * 3
    assert rejected == 403


def test_websocket_protocol_rules(loop):
    seen = []

    async def app(scope, protocol):
        if scope.path == "/twice":
            trx = await protocol.accept()
            try:
                await protocol.accept()
            except rsgi.ProtocolError as e:
                seen.append(("twice", type(e).__name__))
            await trx.send_str("still open")
            await trx.receive()
        elif scope.path == "/code":
            await protocol.accept()
            protocol.close(4001)
        elif scope.path == "/after-close":
            trx = await protocol.accept()
            msg = await trx.receive()
            seen.append(("closed", msg.kind, msg.data))
            again = await trx.receive()
            seen.append(("again", again.kind))
            try:
                await trx.send_str("nobody")
            except rsgi.ProtocolClosed:
                seen.append(("send", "ProtocolClosed"))
        elif scope.path == "/raise":
            await protocol.accept()
            raise RuntimeError("app failed")
        elif scope.path == "/no-answer":
            return
        elif scope.path.startswith("/http-status/"):
            # As Emmett does: an HTTP status where a close code goes.
            await protocol.accept()
            protocol.close(int(scope.path.rpartition("/")[2]))
            seen.append(("http status", scope.path))
        elif scope.path == "/deny-404":
            protocol.close(404)

    async def main():
        async with rsgi_serving(app) as server:
            async with ws_connect(ws_url(server, "/twice")) as ws:
                first = await ws.recv()
            async with ws_connect(ws_url(server, "/code")) as ws:
                try:
                    await ws.recv()
                except websockets.ConnectionClosed as e:
                    code = e.rcvd.code
            async with ws_connect(ws_url(server, "/after-close")) as ws:
                pass
            async with ws_connect(ws_url(server, "/raise")) as ws:
                try:
                    await ws.recv()
                except websockets.ConnectionClosed as e:
                    raised = e.rcvd.code
            try:
                async with ws_connect(ws_url(server, "/no-answer")):
                    pass
            except websockets.InvalidStatus as e:
                unanswered = e.response.status_code
            statuses = []
            for status in (200, 404, 500):
                async with ws_connect(ws_url(server, f"/http-status/{status}")) as ws:
                    try:
                        await ws.recv()
                    except websockets.ConnectionClosed as e:
                        statuses.append(e.rcvd.code)
            try:
                async with ws_connect(ws_url(server, "/deny-404")):
                    pass
            except websockets.InvalidStatus as e:
                denied = e.response.status_code
            while len(seen) < 7:
                await asyncio.sleep(0.01)
            return first, code, raised, unanswered, statuses, denied

    first, code, raised, unanswered, statuses, denied = run(loop, main())
    assert first == "still open"
    assert code == 4001
    assert raised == 1011
    assert unanswered == 403
    assert statuses == [1000, 1008, 1011]
    assert denied == 404
    assert sorted(seen) == sorted([
        ("twice", "ProtocolError"), ("closed", 0, None), ("again", 0), ("send", "ProtocolClosed"),
        ("http status", "/http-status/200"), ("http status", "/http-status/404"), ("http status", "/http-status/500"),
    ])


def test_websocket_compression_and_large_messages(loop):
    async def main():
        async with rsgi_serving(rsgi_app.routes, ws_max_size=4 * 1024 * 1024) as server:
            async with ws_connect(ws_url(server, "/ws_echo"), compression="deflate", max_size=None) as ws:
                extensions = ws.response.headers.get("sec-websocket-extensions")
                big = os.urandom(1024 * 1024)
                await ws.send(big)
                echoed = await ws.recv()
                text = "x" * 100000
                await ws.send(text)
                return extensions, echoed == big, await ws.recv() == text

    extensions, same_bytes, same_text = run(loop, main())
    assert extensions.startswith("permessage-deflate")
    assert same_bytes and same_text


def test_websocket_message_type(loop):
    assert rsgi.WebsocketMessageType.close == 0
    assert rsgi.WebsocketMessageType.bytes == 1
    assert rsgi.WebsocketMessageType.string == 2
    assert issubclass(rsgi.ProtocolError, RuntimeError) and issubclass(rsgi.ProtocolClosed, RuntimeError)


def test_graceful_shutdown_closes_websockets_with_1001(loop):
    async def main():
        async with rsgi_serving(rsgi_app.routes) as server:
            ws = await ws_connect(ws_url(server, "/ws_echo"))
            await ws.send("x")
            await ws.recv()
            server.shutdown()
            try:
                await asyncio.wait_for(ws.recv(), WAIT)
            except websockets.ConnectionClosed as e:
                return e.rcvd.code

    assert run(loop, main()) == 1001


# --- serving ---------------------------------------------------------------------------------


def test_interface_auto_detection():
    async def rsgi_function(scope, protocol):
        pass

    async def asgi_function(scope, receive, send):
        pass

    def wsgi_function(environ, start_response):
        pass

    assert detect_interface(rsgi_app.app) == "rsgi"
    assert detect_interface(rsgi_function) == "rsgi"
    assert detect_interface(asgi_function) == "asgi"
    assert detect_interface(wsgi_function) == "wsgi"


def test_proxy_headers_set_client_and_scheme(loop):
    seen = []

    async def app(scope, protocol):
        seen.append((scope.client, scope.scheme))
        protocol.response_empty(200, [])

    async def main():
        async with rsgi_serving(app, proxy_headers=True, forwarded_allow_ips="127.0.0.1") as server:
            await get(server, b"/", b"X-Forwarded-For: 10.0.0.1, 127.0.0.1\r\nX-Forwarded-Proto: https\r\n")
            await get(server, b"/", b"X-Forwarded-For: ::1\r\n")
            await get(server, b"/", b"X-Forwarded-Proto: https\r\n")
            await get(server, b"/")

    run(loop, main())
    assert seen[0] == ("10.0.0.1:0", "https")
    assert seen[1] == ("[::1]:0", "http")
    assert seen[2][0].startswith("127.0.0.1:") and seen[2][1] == "https"
    assert seen[3][0].startswith("127.0.0.1:") and seen[3][1] == "http"


def _abort_ws(ws):
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    ws.transport.abort()


def _abort(writer):
    """Vanish: close with a reset, nothing more read."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()


def test_clients_vanishing_mid_stream_end_the_apps_sends(loop):
    """Apps that send in a loop without ever waiting (the sends are ready at once while the
    client reads) get ProtocolClosed once the client has gone, and end."""
    ended = {}

    async def app(scope, protocol):
        try:
            if scope.proto == "ws":
                trx = await protocol.accept()
                while True:
                    await trx.send_str("ping")
            else:
                trx = protocol.response_stream(200, [])
                while True:
                    await trx.send_bytes(b"data" * 64)
        except rsgi.ProtocolClosed as e:
            ended[scope.proto] = e

    async def main():
        async with rsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            await reader.readexactly(1000)
            _abort(writer)
            ws = await ws_connect(ws_url(server, "/"))
            for _ in range(3):
                await ws.recv()
            _abort_ws(ws)
            while len(ended) < 2:
                await asyncio.sleep(0.01)

    run(loop, main())
    assert set(ended) == {"http", "ws"}


# --- what every interface has -------------------------------------------------------------


def test_static_files_proxy_protocol_and_the_concurrency_limit(loop, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"static body")
    release = {}

    async def app(scope, protocol):
        if scope.path == "/slow":
            await release["event"].wait()
        protocol.response_str(200, [], scope.client)

    async def main():
        release["event"] = asyncio.Event()
        async with rsgi_serving(app, static_path_dir=str(tmp_path), static_path_route="/static",
                                proxy_protocol=True, forwarded_allow_ips="127.0.0.1", limit_concurrency=1) as server:
            proxy = b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\n"
            static = await get(server, b"/static/a.txt", method=proxy + b"GET")
            client = await get(server, b"/", method=proxy + b"GET")
            reader, writer = await connect(server)
            writer.write(proxy + b"GET /slow HTTP/1.1\r\n" + H + b"\r\n")
            while server.state.active_requests < 1:
                await asyncio.sleep(0.005)
            refused = await get(server, b"/", method=proxy + b"GET")
            release["event"].set()
            slow = await asyncio.wait_for(read_response(reader), WAIT)
            writer.close()
            return static, client, refused, slow

    static, client, refused, slow = run(loop, main())
    assert (static.status, static.body) == (200, b"static body")
    assert client.body == b"192.168.0.1:56324"
    assert refused.status == 503
    assert slow.status == 200
