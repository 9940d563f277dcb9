"""ASGI 3 behaviour of the HTTP server, on the stdlib loop and on swordfish: the scope,
receive/send, keep-alive and pipelining, chunked and streamed responses, content-length
checks, pathsend, trailers and the response headers an app may send."""

import asyncio
import os
import socket
import sys

import pytest

from httputil import connect, echo_app, port_of, read_response, read_until_closed, request, responder, run, serving

H = b"Host: example.com\r\n"
GET = b"GET / HTTP/1.1\r\n" + H + b"\r\n"


def test_scope(loop):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)
        await responder({"type": "http.response.body", "body": b"ok"})(scope, receive, send)

    async def main():
        async with serving(app, root_path="/root") as server:
            raw = b"GET /p%2Fq/%C3%A9?a=1&b=%20 HTTP/1.1\r\nHost: h\r\nX-Mixed-Case: V\r\nx-two: 1\r\nX-Two: 2\r\n\r\n"
            resp, _ = await request(server, raw)
            assert resp.status == 200
            return server.sockets[0].getsockname()[1]

    port = run(loop, main())
    (scope,) = seen
    assert scope["type"] == "http"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    # path and raw_path include root_path (the ASGI spec's WSGI section; uvicorn too)
    assert scope["path"] == "/root/p/q/\u00e9"
    assert scope["raw_path"] == b"/root/p%2Fq/%C3%A9"
    assert scope["query_string"] == b"a=1&b=%20"
    assert scope["root_path"] == "/root"
    assert scope["headers"] == [(b"host", b"h"), (b"x-mixed-case", b"V"), (b"x-two", b"1"), (b"x-two", b"2")]
    assert scope["server"] == ("127.0.0.1", port)
    host, cport = scope["client"]
    assert host == "127.0.0.1" and isinstance(cport, int)
    assert "http.response.pathsend" in scope["extensions"]
    assert "http.response.trailers" in scope["extensions"]
    assert "state" not in scope  # lifespan off


def test_an_absolute_target_names_the_host(loop):
    # An origin server takes the host from an absolute-form target and ignores the Host
    # field (RFC 9112 §3.2.2); the app sees it as the field's value.
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)
        await echo_app(scope, receive, send)

    async def main():
        async with serving(app) as server:
            raw = b"GET http://example.org:8080/x?y HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n\r\n"
            resp, _ = await request(server, raw)
            assert resp.status == 200

    run(loop, main())
    (scope,) = seen
    assert scope["path"] == "/x" and scope["query_string"] == b"y"
    assert scope["headers"] == [(b"host", b"example.org:8080"), (b"x-a", b"1")]


def test_scope_values_per_request(loop):
    # Each scope starts from the server's template: what one request sets (a method other
    # than GET, a query, HTTP/1.0) must not show in the next one on the same connection.
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["method"], scope["path"], scope["query_string"], scope["http_version"]))
        await echo_app(scope, receive, send)

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            for raw in (
                b"POST /a?x=1 HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n",
                GET,
                b"DELETE /b? HTTP/1.1\r\n" + H + b"\r\n",
                b"GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                b"PURGE /d?y HTTP/1.1\r\n" + H + b"\r\n",
                GET,
            ):
                writer.write(raw)
                assert (await read_response(reader)).status == 200
            writer.close()

    run(loop, main())
    assert seen == [
        ("POST", "/a", b"x=1", "1.1"),
        ("GET", "/", b"", "1.1"),
        ("DELETE", "/b", b"", "1.1"),
        ("GET", "/c", b"", "1.0"),
        ("PURGE", "/d", b"y", "1.1"),
        ("GET", "/", b"", "1.1"),
    ]


def test_scope_server_is_the_listening_socket_of_the_connection(loop):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["server"])
        await echo_app(scope, receive, send)

    async def main():
        socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
        ports = [s.getsockname()[1] for s in socks]
        async with serving(app, sockets=socks):
            for port in (ports[0], ports[1], ports[0], ports[1]):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(GET)
                assert (await read_response(reader)).status == 200
                writer.close()
        return ports

    a, b = run(loop, main())
    assert seen == [("127.0.0.1", a), ("127.0.0.1", b), ("127.0.0.1", a), ("127.0.0.1", b)]


def test_keep_alive_and_pipelining_in_order(loop):
    async def app(scope, receive, send):
        # the first request finishes last if requests ran concurrently
        if scope["path"] == "/slow":
            await asyncio.sleep(0.05)
        await echo_app(scope, receive, send)

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(
                b"GET /slow HTTP/1.1\r\n" + H + b"\r\n"
                b"POST /two HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc"
                b"GET /three HTTP/1.1\r\n" + H + b"\r\n"
            )
            paths = [(await read_response(reader)).header("x-path") for _ in range(3)]
            for i in range(3):
                writer.write(b"GET /ka%d HTTP/1.1\r\n" % i + H + b"\r\n")
                paths.append((await read_response(reader)).header("x-path"))
            writer.close()
            return paths

    assert run(loop, main()) == ["/slow", "/two", "/three", "/ka0", "/ka1", "/ka2"]


def test_long_pipeline_of_immediate_responses(loop):
    # Each response is complete before its app awaits anything, and completing it starts
    # the next pipelined request: thousands of them must neither nest nor reorder.
    count = 3000

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-path", scope["path"].encode())]})
        await send({"type": "http.response.body", "body": b"."})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(b"GET /%d HTTP/1.1\r\n" % i + H + b"\r\n" for i in range(count)))
            paths = [(await read_response(reader)).header("x-path") for _ in range(count)]
            writer.close()
            return paths

    assert run(loop, main()) == ["/%d" % i for i in range(count)]


def test_request_read_with_others_waits_behind_queued_callbacks(sf_loop):
    # Two requests read in one poll. The first starts at once (an eager task on 3.12+) and
    # queues a callback; the second must run after that callback, not jump ahead of it: a
    # CPU-heavy request started eagerly would hold up every wake-up already waiting.
    if sys.version_info < (3, 12):
        pytest.skip("requests start as eager tasks on Python 3.12+ only (before, all are queued)")
    order = []

    async def app(scope, receive, send):
        order.append(("start", scope["path"]))
        asyncio.get_running_loop().call_soon(order.append, ("callback", scope["path"]))
        await responder({"type": "http.response.body", "body": b"ok"})(scope, receive, send)

    async def main():
        async with serving(app) as server:
            conns = [await connect(server) for _ in range(2)]
            for reader, writer in conns:  # both accepted, kept alive and idle
                writer.write(GET)
                assert (await read_response(reader)).status == 200
            for i, (_, writer) in enumerate(conns):
                writer.write(b"GET /%d HTTP/1.1\r\n" % i + H + b"\r\n")
            statuses = [(await read_response(reader)).status for reader, _ in conns]
            for _, writer in conns:
                writer.close()
            return statuses

    assert run(sf_loop, main()) == [200, 200]
    seen = [entry for entry in order if entry[1] != "/"]
    first = seen[0][1]
    second = "/1" if first == "/0" else "/0"
    assert seen == [("start", first), ("callback", first), ("start", second), ("callback", second)]


def test_task_factory_set_in_lifespan_is_used(loop):
    # Requests normally start as eager tasks (Python 3.12+); a task factory the app
    # installs at startup takes over instead.
    made = []

    def factory(lp, coro, **kwargs):
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=lp, **kwargs)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    asyncio.get_running_loop().set_task_factory(factory)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await responder({"type": "http.response.body", "body": b"ok"})(scope, receive, send)

    async def main():
        try:
            async with serving(app, lifespan="on") as server:
                del made[:]
                resp, _ = await request(server, GET)
                # the client side of the test makes tasks on this loop too
                return resp.status, [name for name in made if name.endswith("<locals>.app")]
        finally:
            asyncio.get_running_loop().set_task_factory(None)

    status, app_tasks = run(loop, main())
    assert status == 200
    assert len(app_tasks) == 1


def test_response_framing(loop):
    streaming = responder(
        {"type": "http.response.body", "body": b"ab", "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": True},
        {"type": "http.response.body", "body": b"cd"},
    )

    async def main():
        async with serving(streaming) as server:
            chunked, _ = await request(server, GET)
            http10, was_closed = await request(server, b"GET / HTTP/1.0\r\n\r\n")
            head, _ = await request(server, b"HEAD / HTTP/1.1\r\n" + H + b"\r\n", head_request=True)
        async with serving(responder({"type": "http.response.body", "body": b"xyz"})) as server:
            single, _ = await request(server, GET)
        async with serving(responder({"type": "http.response.body", "body": b"ignored"}, status=204)) as server:
            empty, _ = await request(server, GET)
        async with serving(responder({"type": "http.response.body", "body": b"1234"}), server_header=False,
                           date_header=False, headers=["X-Default: yes"]) as server:
            plain, _ = await request(server, GET)
        return chunked, http10, was_closed, head, single, empty, plain

    chunked, http10, was_closed, head, single, empty, plain = run(loop, main())
    assert chunked.header("transfer-encoding") == "chunked" and chunked.body == b"abcd"
    assert chunked.header("server") == "swordfish" and chunked.header("date").endswith("GMT")
    assert http10.body == b"abcd" and http10.header("transfer-encoding") is None and was_closed
    assert head.body == b"" and head.status == 200
    assert single.header("content-length") == "3" and single.body == b"xyz"
    assert empty.status == 204 and empty.header("content-length") is None
    assert plain.header("server") is None and plain.header("date") is None
    assert plain.header("x-default") == "yes"


def test_large_bodies_keep_their_framing_and_order(loop):
    """Bodies past the size the server copies go out by reference, after their head and
    before the next response on the connection."""
    big = [bytes([65 + i]) * n for i, n in enumerate((100_000, 50_000, 40_000, 30_000))]

    async def app(scope, receive, send):
        kind = scope["path"]
        if kind == "/declared":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(big[0])).encode())]})
            await send({"type": "http.response.body", "body": big[0]})
        elif kind == "/single":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": big[1]})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": big[2], "more_body": True})
            await send({"type": "http.response.body", "body": big[3]})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(b"GET /" + p + b" HTTP/1.1\r\n" + H + b"\r\n" for p in (b"declared", b"single", b"chunked")))
            responses = [await read_response(reader) for _ in range(3)]
            writer.close()
            return responses

    declared, single, chunked = run(loop, main())
    assert declared.header("content-length") == "100000" and declared.body == big[0]
    assert single.header("content-length") == "50000" and single.body == big[1]
    assert chunked.header("transfer-encoding") == "chunked" and chunked.body == big[2] + big[3]


def test_configured_headers_replace_and_yield(loop):
    # A configured server header replaces the built-in one; a header the app sets replaces
    # the configured one of that name. No framing header goes out on a 204.
    async def app(scope, receive, send):
        headers = [(b"x-team", b"app"), (b"server", b"mine")] if scope["path"] == "/own" else []
        if scope["path"] == "/204":
            await send({"type": "http.response.start", "status": 204,
                        "headers": [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        async with serving(app, headers=["Server: custom", "X-Team: ops"]) as server:
            plain, _ = await request(server, GET)
            own, _ = await request(server, b"GET /own HTTP/1.1\r\n" + H + b"\r\n")
            empty, _ = await request(server, b"GET /204 HTTP/1.1\r\n" + H + b"\r\n")
        return plain, own, empty

    plain, own, empty = run(loop, main())
    values = lambda resp, name: [v for n, v in resp.headers if n == name]  # noqa: E731
    assert values(plain, "server") == ["custom"] and values(plain, "x-team") == ["ops"]
    assert values(own, "server") == ["mine"] and values(own, "x-team") == ["app"]
    assert empty.status == 204 and values(empty, "content-length") == [] == values(empty, "transfer-encoding")


def test_head_response_is_one_write(loop):
    """The head and a small body leave in one write (one segment on the wire)."""
    async def main():
        app = responder({"type": "http.response.body", "body": b"hello"})
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            first = await asyncio.wait_for(reader.read(65536), 5)
            writer.close()
            return first

    data = run(loop, main())
    assert data.endswith(b"\r\n\r\nhello")


@pytest.mark.parametrize("declared,parts", [(b"3", [b"abcd"]), (b"5", [b"ab"]), (b"4", [b"ab", b"cde"])])
def test_content_length_mismatch_closes(loop, declared, parts):
    errors = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", declared)]})
        try:
            for i, p in enumerate(parts):
                await send({"type": "http.response.body", "body": p, "more_body": i < len(parts) - 1})
        except RuntimeError as e:
            errors.append(str(e))
            raise

    async def main():
        async with serving(app) as server:
            return await read_until_closed(server, GET)

    data = run(loop, main())
    assert errors and "Content-Length" in errors[0]
    head, _, body = data.partition(b"\r\n\r\n")
    if len(parts) == 1 and len(parts[0]) > int(declared):
        # nothing had gone out: the client gets a 500, as for an app that failed early
        assert head.startswith(b"HTTP/1.1 500 ") and b"connection: close" in head
    else:
        # the response is cut short, never completed: the client sees the connection close
        assert head.startswith(b"HTTP/1.1 200 ") and len(body) < int(declared)


def test_chunked_request_flow_control(loop):
    """A large body is delivered in pieces with more_body, and reading pauses meanwhile."""
    sizes = []

    async def app(scope, receive, send):
        total = 0
        while True:
            m = await receive()
            total += len(m["body"])
            sizes.append(len(m["body"]))
            await asyncio.sleep(0)
            if not m["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(total).encode()})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1000000\r\n\r\n")
            for _ in range(100):
                writer.write(b"x" * 10000)
                await writer.drain()
            resp = await read_response(reader)
            writer.close()
            return resp

    resp = run(loop, main())
    assert resp.body == b"1000000"
    assert len(sizes) > 1


def test_streamed_chunk_arrives_while_the_app_waits(loop):
    """A chunk of a response that goes on reaches the client once the app waits, before
    the rest exists (the app waits for the client to have read it)."""
    got_first = asyncio.Event()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await got_first.wait()
        await send({"type": "http.response.body", "body": b"second", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await reader.readuntil(b"\r\n\r\n")
            first = await asyncio.wait_for(reader.readuntil(b"first\r\n"), 5)
            got_first.set()
            rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
            writer.close()
            return first, rest

    first, rest = run(loop, main())
    assert first == b"5\r\nfirst\r\n"
    assert rest == b"6\r\nsecond\r\n0\r\n\r\n"


def _sent_before_interrupt(loop, messages, until):
    """Serve one GET with an app that sends `messages` and then raises KeyboardInterrupt;
    return what the client has received once the loop stopped, read up to `until`."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for m in messages:
            await send(m)
        raise KeyboardInterrupt

    served = serving(app)
    server = run(loop, served.__aenter__())
    try:
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as client:
            client.sendall(GET)
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(asyncio.sleep(10))
            data = b""
            while not data.endswith(until):  # the loop is not running now
                chunk = client.recv(65536)
                assert chunk, data
                data += chunk
        return data
    finally:
        run(loop, served.__aexit__(None, None, None))


def test_held_chunk_leaves_when_the_app_interrupts_the_loop(loop):
    """KeyboardInterrupt from the app's step goes on out of the loop, as from any task, and
    the chunk the step sent has reached the client by then: it is not left held for an
    iteration that may never come."""
    chunk = {"type": "http.response.body", "body": b"held", "more_body": True}
    data = _sent_before_interrupt(loop, [chunk], b"held\r\n")
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\n4\r\nheld\r\n")


def test_complete_response_leaves_when_the_app_interrupts_the_loop(loop):
    """A small complete response is held for the end of the iteration on swordfish; an app
    that interrupts the loop right after sending it does not keep it from the client."""
    data = _sent_before_interrupt(loop, [{"type": "http.response.body", "body": b"done"}], b"done")
    assert data.startswith(b"HTTP/1.1 200 ") and b"content-length: 4\r\n" in data


def _data_segments_received(sock):
    """`tcpi_data_segs_in` of Linux's `struct tcp_info` (since 4.6)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 192)
    return int.from_bytes(info[152:156], sys.byteorder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO layout of Linux")
@pytest.mark.skipif(sys.version_info < (3, 12), reason="without eager tasks every app starts in an iteration of its own")
def test_pipelined_small_responses_share_writes(sf_loop):
    """Small complete responses wait for the end of the loop iteration on swordfish's
    transport, and a pipeline that arrived in one read is served in one go (each app starts
    eagerly once the one before returns): its responses leave in one write. The server sets
    TCP_NODELAY, so each write is at least one segment; a second one is allowed in case the
    requests arrive in two reads."""
    count = 8

    async def main():
        async with serving(responder({"type": "http.response.body", "body": b"ok"})) as server:
            reader, writer = await connect(server)
            writer.write(GET * count)
            responses = [await read_response(reader) for _ in range(count)]
            segments = _data_segments_received(writer.get_extra_info("socket"))
            writer.close()
            return responses, segments

    responses, segments = run(sf_loop, main())
    assert [r.body for r in responses] == [b"ok"] * count
    assert segments <= 2


def test_pipeline_goes_on_after_an_app_interrupts_the_loop(loop):
    """KeyboardInterrupt from the app of a pipelined request goes on out of the loop; the
    requests behind it are still answered once the loop runs again."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})
        if scope["path"] == "/1":
            raise KeyboardInterrupt

    served = serving(app)
    server = run(loop, served.__aenter__())
    try:
        async def client():
            reader, writer = await connect(server)
            writer.write(b"".join(b"GET /%d HTTP/1.1\r\n" % i + H + b"\r\n" for i in range(3)))
            responses = [await read_response(reader) for _ in range(3)]
            writer.close()
            return responses

        task = loop.create_task(client())
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(10))
        responses = run(loop, task)
        assert [r.body for r in responses] == [b"/0", b"/1", b"/2"]
    finally:
        run(loop, served.__aexit__(None, None, None))


def test_long_pipeline_answered_in_order(loop):
    """More pipelined requests than one go serves (the rest continue in later iterations),
    apps that complete at once mixed with apps that wait: every response, in order."""
    count = 40

    async def app(scope, receive, send):
        if scope["path"].endswith("7"):
            await asyncio.sleep(0.001)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"".join(b"GET /%d HTTP/1.1\r\n" % i + H + b"\r\n" for i in range(count)))
            responses = [await read_response(reader) for _ in range(count)]
            writer.close()
            return responses

    responses = run(loop, main())
    assert [r.body for r in responses] == [b"/%d" % i for i in range(count)]


def test_streamed_body_in_one_step_past_the_buffers(loop):
    """An app that streams far more than the socket buffers hold without waiting on
    anything but send() gets it all delivered, in order: send() waits while the transport
    is paused and carries on when the client has read."""
    chunks = [bytes([i % 251]) * 65536 for i in range(512)]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for c in chunks:
            await send({"type": "http.response.body", "body": c, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            resp = await read_response(reader)
            writer.close()
            return resp

    resp = run(loop, main())
    assert resp.status == 200 and resp.body == b"".join(chunks)


def test_root_path_is_percent_encoded_in_raw_path(loop):
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["path"], scope["raw_path"], scope["root_path"]))
        await responder({"type": "http.response.body", "body": b"ok"})(scope, receive, send)

    async def main():
        async with serving(app, root_path="/my app/\u00e9") as server:
            resp, _ = await request(server, b"GET /x%20y HTTP/1.1\r\n" + H + b"\r\n")
            return resp.status

    assert run(loop, main()) == 200
    assert seen == [("/my app/\u00e9/x y", b"/my%20app/%C3%A9/x%20y", "/my app/\u00e9")]


def test_pathsend(loop, tmp_path):
    path = tmp_path / "file.bin"
    content = os.urandom(200_000)
    path.write_bytes(content)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.pathsend", "path": str(path)})

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET + b"HEAD / HTTP/1.1\r\n" + H + b"\r\n" + GET)
            one = await read_response(reader)
            head = await read_response(reader, head_request=True)
            two = await read_response(reader)
            writer.close()
            return one, head, two

    one, head, two = run(loop, main())
    assert one.header("content-length") == str(len(content)) and one.body == content
    assert head.header("content-length") == str(len(content)) and head.body == b""
    assert two.body == content


def test_trailers(loop):
    app = responder(
        {"type": "http.response.body", "body": b"data"},
        {"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")]},
    )

    async def wrapped(scope, receive, send):
        async def send_with_trailers(m):
            if m["type"] == "http.response.start":
                m = dict(m, trailers=True)
            await send(m)
        await app(scope, receive, send_with_trailers)

    async def main():
        async with serving(wrapped) as server:
            return await request(server, GET)

    resp, was_closed = run(loop, main())
    assert resp.body == b"data" and resp.trailers == [("x-checksum", "abc")] and not was_closed


@pytest.mark.parametrize("headers", [
    [[b"x-a", b"1"], [b"x-b", b"2"]],           # lists, as the spec writes them
    [(b"x-a", b"1"), (b"x-b", b"2")],
    ((b"x-a", b"1"), [b"x-b", b"2"]),           # a tuple of mixed pairs
    "generator",
    "iterators",                                # pairs that are any iterable of two
], ids=["lists", "tuples", "tuple-of-mixed", "generator", "iterators"])
def test_response_header_pairs_of_any_shape(loop, headers):
    async def app(scope, receive, send):
        # Made here: a generator or an iterator serves one run only.
        if headers == "generator":
            fields = ((n, v) for n, v in [(b"x-a", b"1"), (b"x-b", b"2")])
        elif headers == "iterators":
            fields = [iter((b"x-a", b"1")), iter((b"x-b", b"2"))]
        else:
            fields = headers
        await send({"type": "http.response.start", "status": 200, "headers": fields})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        async with serving(app) as server:
            return await request(server, GET)

    resp, _ = run(loop, main())
    assert resp.status == 200 and resp.header("x-a") == "1" and resp.header("x-b") == "2"


@pytest.mark.parametrize("pair, error", [
    ((b"x", b"a\r\nInjected: 1"), ValueError),  # would split the head
    ([b"x-a", b"1", b"2"], ValueError),
    ((b"x-a",), ValueError),
    (b"x-a", ValueError),
    (7, TypeError),
    ([b"x-a", "1"], TypeError),
], ids=["injection", "three", "one", "bytes", "int", "str-value"])
def test_malformed_response_header_is_refused(loop, pair, error):
    errors = []

    async def app(scope, receive, send):
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [pair]})
        except Exception as e:
            errors.append(e)
            raise

    async def main():
        async with serving(app) as server:
            return await request(server, GET)

    resp, _ = run(loop, main())
    assert resp.status == 500 and len(errors) == 1 and type(errors[0]) is error
