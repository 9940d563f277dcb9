"""Edges of the HTTP server's framing and lifetimes, on the stdlib loop and on swordfish:
replies the server makes itself to a HEAD, a 304, the response framing the server keeps to
itself when an app names a transfer coding, and clients that leave in the middle of a
request body."""

import asyncio
import logging

import pytest

from httputil import closed, connect, read_response, read_until_closed, request, run, serving

H = b"Host: example.com\r\n"
HEAD = b"HEAD / HTTP/1.1\r\n" + H + b"\r\n"


def test_server_replies_to_head_have_no_body(loop):
    # A 500 for a failed app, and a 503 over the concurrency limit: the length the text
    # would have, no text (RFC 9110 §9.3.2).
    release = None

    async def app(scope, receive, send):
        if scope["path"] == "/boom":
            raise ValueError("boom")
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        nonlocal release
        release = asyncio.Event()
        async with serving(app, limit_concurrency=1) as server:
            failed = await read_until_closed(server, b"HEAD /boom HTTP/1.1\r\n" + H + b"\r\n")
            reader, writer = await connect(server)
            writer.write(b"GET /wait HTTP/1.1\r\n" + H + b"\r\n")
            while server.state.active_requests < 1:
                await asyncio.sleep(0.005)
            refused = await read_until_closed(server, HEAD)
            release.set()
            served = await read_response(reader)
            writer.close()
            return failed, refused, served

    failed, refused, served = run(loop, main())
    assert failed.startswith(b"HTTP/1.1 500 ") and failed.endswith(b"content-length: 21\r\n\r\n"), failed
    assert refused.startswith(b"HTTP/1.1 503 ") and refused.endswith(b"content-length: 19\r\n\r\n"), refused
    assert served.status == 200 and served.body == b"ok"


def test_not_modified_has_no_body_and_keeps_the_connection(loop):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", b'"v1"')]})
        await send({"type": "http.response.body", "body": b"must not be sent"})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"If-None-Match: \"v1\"\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            # The connection stays usable, and nothing of the body is in the way.
            writer.write(b"GET /again HTTP/1.1\r\n" + H + b"\r\n")
            again = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.close()
            return head, again

    head, again = run(loop, main())
    assert head.startswith(b"HTTP/1.1 304 ") and b'etag: "v1"' in head
    assert again.startswith(b"HTTP/1.1 304 ")


def streaming_app(headers):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "body": b"c"})
    return app


def test_app_transfer_encoding_chunked_leaves_the_framing_to_the_server(loop):
    chunked = [(b"transfer-encoding", b"chunked")]
    both = chunked + [(b"content-length", b"3")]

    async def main():
        async with serving(streaming_app(chunked)) as server:
            http11, _ = await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            http10 = await read_until_closed(server, b"GET / HTTP/1.0\r\n\r\n")
        async with serving(streaming_app(both)) as server:
            declared, _ = await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")
        return http11, http10, declared

    http11, http10, declared = run(loop, main())
    names = lambda resp: [n for n, _ in resp.headers]  # noqa: E731
    # One transfer-encoding header, the server's, and the body chunked under it.
    assert names(http11).count("transfer-encoding") == 1 and http11.body == b"abc"
    # Never chunked towards HTTP/1.0: the end of the body is the end of the connection.
    head, _, body = http10.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and body == b"abc"
    # Never both framing headers (RFC 9112 §6.2): the declared length frames the body.
    assert "transfer-encoding" not in names(declared)
    assert declared.header("content-length") == "3" and declared.body == b"abc"


def test_app_transfer_coding_the_server_cannot_apply_is_refused(loop, caplog):
    async def main():
        async with serving(streaming_app([(b"transfer-encoding", b"gzip")])) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    with caplog.at_level(logging.ERROR, logger="swordfish.error"):
        resp, was_closed = run(loop, main())
    assert resp.status == 500 and was_closed
    assert any("unsupported transfer-encoding" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_client_leaving_mid_body_is_a_disconnect(loop):
    # Part of a declared body, and part of a chunked one: the app gets what came, then
    # http.disconnect, and its response raises the disconnect (ASGI 2.4).
    events = {}

    async def app(scope, receive, send):
        got = events.setdefault(scope["path"], [])
        while True:
            message = await receive()
            got.append((message["type"], message.get("body", b""), message.get("more_body")))
            if message["type"] == "http.disconnect":
                break
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except OSError as e:
            got.append(type(e).__name__)

    async def main():
        async with serving(app) as server:
            for raw in (
                b"POST /length HTTP/1.1\r\n" + H + b"Content-Length: 100\r\n\r\n0123456789",
                b"POST /chunked HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            ):
                reader, writer = await connect(server)
                writer.write(raw)
                path = raw.split(b" ")[1].decode()
                while not events.get(path):
                    await asyncio.sleep(0.005)
                writer.close()
                while len(events[path]) < 3:
                    await asyncio.sleep(0.005)

    run(loop, main())
    assert events["/length"] == [("http.request", b"0123456789", True), ("http.disconnect", b"", None),
                                 "ClientDisconnected"]
    assert events["/chunked"] == [("http.request", b"hello", True), ("http.disconnect", b"", None),
                                  "ClientDisconnected"]


def test_body_refused_mid_way_logs_no_app_error(loop, caplog):
    # The server refuses a malformed chunk while the app reads the body: the client gets a
    # 400, and the app's failing send is the closed connection, not an error of the app.
    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\n")
            resp = await asyncio.wait_for(read_response(reader), 5)
            was_closed = await closed(reader)
            writer.close()
            # Let the app run to its end.
            while server.state.active_requests:
                await asyncio.sleep(0.005)
            return resp, was_closed

    with caplog.at_level(logging.ERROR, logger="swordfish.error"):
        resp, was_closed = run(loop, main())
    assert resp.status == 400 and was_closed
    assert not [r.getMessage() for r in caplog.records if r.name == "swordfish.error"]


def test_pathsend_sends_the_size_it_announced(loop, tmp_path):
    # The file changes between send() (which reads its size for the head) and the sending:
    # one that grew gives exactly the announced bytes and the next response follows intact;
    # one that shrank fails the response and the connection closes (a client never waits
    # for bytes that will not come).
    path = tmp_path / "file.bin"
    failures = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/after":
            await send({"type": "http.response.body", "body": b"after"})
            return
        path.write_bytes(b"A" * 10)
        sending = send({"type": "http.response.pathsend", "path": str(path)})
        path.write_bytes(b"B" * 20 if scope["path"] == "/grew" else b"C" * 5)
        try:
            await sending
        except RuntimeError as e:
            failures.append(str(e))

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET /grew HTTP/1.1\r\n" + H + b"\r\nGET /after HTTP/1.1\r\n" + H + b"\r\n")
            grew = await read_response(reader)
            after = await read_response(reader)
            writer.close()
            shrank = await read_until_closed(server, b"GET /shrank HTTP/1.1\r\n" + H + b"\r\n")
        return grew, after, shrank

    grew, after, shrank = run(loop, main())
    assert grew.header("content-length") == "10" and grew.body == b"B" * 10
    assert after.status == 200 and after.body == b"after"
    head, _, body = shrank.partition(b"\r\n\r\n")
    assert b"content-length: 10" in head and body == b"C" * 5  # then the close
    assert failures == ["the file shrank while it was sent: 5 of 10 bytes"]


def test_pathsend_is_not_offered_on_a_loop_without_sendfile(loop_factory):
    class NoSendfile(asyncio.SelectorEventLoop):
        sendfile = asyncio.AbstractEventLoop.sendfile  # as uvloop's

    seen = []

    async def app(scope, receive, send):
        seen.append(sorted(scope["extensions"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        async with serving(app) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    for make in (NoSendfile, loop_factory):
        lp = make()
        try:
            resp, _ = lp.run_until_complete(asyncio.wait_for(main(), 20))
        finally:
            lp.close()
        assert resp.status == 200
    assert seen == [["http.response.trailers"], ["http.response.pathsend", "http.response.trailers"]]


def test_informational_status_is_not_a_response(loop):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 103, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})

    async def main():
        async with serving(app) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    resp, was_closed = run(loop, main())
    assert resp.status == 500 and was_closed


def test_every_pending_receive_hears_the_disconnect(loop):
    # A task listening for the disconnect, and a receive() given up under a timeout (the
    # pattern of request.is_disconnected()): the listener still hears it.
    heard = None

    async def app(scope, receive, send):
        nonlocal heard
        await receive()  # the (empty) body

        async def listen():
            return await receive()

        listener = asyncio.ensure_future(listen())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(receive(), 0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        heard = await asyncio.wait_for(listener, 5)

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            await reader.readuntil(b"part")
            writer.close()
            while heard is None:
                await asyncio.sleep(0.005)

    run(loop, main())
    assert heard == {"type": "http.disconnect"}


def test_unread_body_after_the_response_has_the_keep_alive_timeout(loop):
    # The app answers without reading a body that then stops coming: the connection
    # closes at the keep-alive timeout instead of waiting for the rest forever.
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 413, "headers": []})
        await send({"type": "http.response.body", "body": b"too big"})

    async def main():
        async with serving(app, timeout_keep_alive=0.2) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1000\r\n\r\n0123456789")
            resp = await read_response(reader)
            t0 = asyncio.get_running_loop().time()
            was_closed = await closed(reader, timeout=3)
            writer.close()
            return resp, was_closed, asyncio.get_running_loop().time() - t0

    resp, was_closed, waited = run(loop, main())
    assert resp.status == 413 and resp.body == b"too big"
    assert was_closed and waited < 2


def test_scope_dicts_are_the_request_own(loop):
    seen = []

    async def app(scope, receive, send):
        seen.append((dict(scope["asgi"]), sorted(scope["extensions"])))
        scope["asgi"]["version"] = "changed"
        scope["extensions"]["mine"] = {}
        del scope["extensions"]["http.response.trailers"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        async with serving(app) as server:
            for _ in range(2):
                await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    run(loop, main())
    assert seen[0] == seen[1]
    assert seen[0][0] == {"version": "3.0", "spec_version": "2.4"} and "mine" not in seen[1][1]


def test_message_after_the_response_is_an_app_error(loop, caplog):
    errors = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        try:
            await send({"type": "http.response.body", "body": b"more"})
        except Exception as e:
            errors.append(e)

    async def main():
        async with serving(app) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    resp, was_closed = run(loop, main())
    assert resp.body == b"done" and not was_closed
    assert [(type(e), str(e)) for e in errors] == [
        (RuntimeError, "Unexpected ASGI message 'http.response.body' sent, after response already completed.")]


def test_framing_and_connection_headers_stay_the_server_own(loop, caplog):
    # An app's Connection header becomes the server's one header; trailer fields that
    # frame or route the message are left out of the trailers.
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"connection", b"close"), (b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b"data"})
        await send({"type": "http.response.trailers", "headers": [
            (b"x-checksum", b"abc"), (b"content-length", b"4"), (b"transfer-encoding", b"chunked")]})

    async def main():
        async with serving(app, access_log=True) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    resp, was_closed = run(loop, main())
    assert [v for n, v in resp.headers if n == "connection"] == ["close"] and was_closed
    assert resp.body == b"data" and resp.trailers == [("x-checksum", "abc")]


def test_body_longer_than_declared_before_anything_went_out_is_a_500(loop, caplog):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]})
        await send({"type": "http.response.body", "body": b"hello"})

    async def main():
        async with serving(app, access_log=True) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")

    with caplog.at_level(logging.INFO, logger="swordfish.access"):
        resp, was_closed = run(loop, main())
    assert resp.status == 500 and was_closed
    lines = [r.getMessage() for r in caplog.records if r.name == "swordfish.access"]
    assert len(lines) == 1 and '"GET / HTTP/1.1" 500 21 ' in lines[0]
