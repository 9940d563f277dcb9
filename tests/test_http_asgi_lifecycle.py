"""ASGI 3 behaviour of the HTTP server around a request's life, on the stdlib loop and on
swordfish: 100-continue, disconnects, app errors and the access log, the header-read and
keep-alive timeouts, the request limits, the concurrency limit, graceful shutdown."""

import asyncio
import logging

import pytest

from httputil import closed, connect, echo_app, read_response, read_until_closed, request, responder, run, serving
from swordfish.server import ClientDisconnected

H = b"Host: example.com\r\n"
GET = b"GET / HTTP/1.1\r\n" + H + b"\r\n"


def test_expect_100_continue(loop):
    async def main():
        async with serving(echo_app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(b"hello")
            resp = await read_response(reader)
            writer.close()
        # an app that answers without reading: no 100, and the connection closes
        async with serving(responder({"type": "http.response.body", "body": b"no"}, status=413)) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            refused = await read_response(reader)
            refused_closed = await closed(reader)
            writer.close()
        return interim, resp, refused, refused_closed

    interim, resp, refused, refused_closed = run(loop, main())
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert resp.body == b"hello"
    assert refused.status == 413 and refused.header("connection") == "close" and refused_closed


def test_disconnect_while_app_runs(loop):
    events = []

    async def app(scope, receive, send):
        events.append(await receive())  # the (empty) body
        events.append(await receive())  # waits for the disconnect
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        except OSError as e:
            events.append(e)

    async def main():
        async with serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await asyncio.sleep(0.05)
            writer.close()
            for _ in range(200):
                if len(events) == 3:
                    break
                await asyncio.sleep(0.01)

    run(loop, main())
    assert events[0] == {"type": "http.request", "body": b"", "more_body": False}
    assert events[1] == {"type": "http.disconnect"}
    assert isinstance(events[2], ClientDisconnected) and isinstance(events[2], OSError)


def test_receive_after_response_is_disconnect(loop):
    got = []

    async def app(scope, receive, send):
        await receive()
        await responder({"type": "http.response.body", "body": b"x"})(scope, receive, send)
        got.append(await receive())

    async def main():
        async with serving(app) as server:
            resp, _ = await request(server, GET)
            await asyncio.sleep(0.05)
            return resp

    assert run(loop, main()).body == b"x"
    assert got == [{"type": "http.disconnect"}]


@pytest.mark.parametrize("where", ["before", "after"])
def test_app_exception(loop, where, caplog):
    async def app(scope, receive, send):
        if where == "after":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise ValueError("boom")

    async def main():
        async with serving(app) as server:
            return await read_until_closed(server, GET)

    with caplog.at_level(logging.ERROR, logger="swordfish.error"):
        data = run(loop, main())
    if where == "before":
        assert data.startswith(b"HTTP/1.1 500 ")
    else:
        # what the app sent before it failed is delivered, then the connection closes
        assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\n4\r\npart\r\n")
    assert any("Exception in ASGI application" in r.getMessage() for r in caplog.records)


def test_access_log_has_a_line_for_every_request(loop, caplog):
    # Served, failed in the app, refused over a limit or as malformed: one line each, with
    # the status and body size the client got.
    async def app(scope, receive, send):
        if scope["path"] == "/boom":
            raise ValueError("boom")
        await echo_app(scope, receive, send)

    async def main():
        async with serving(app, access_log=True, limit_body_size=10) as server:
            statuses = []
            for raw in (
                b"POST /ok?q=1 HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc",
                b"GET /boom HTTP/1.1\r\n" + H + b"\r\n",
                b"POST /big HTTP/1.1\r\n" + H + b"Content-Length: 11\r\n\r\n",
                b"GET /a b HTTP/1.1\r\n" + H + b"\r\n",
            ):
                resp, _ = await request(server, raw)
                statuses.append(resp.status)
            return statuses

    with caplog.at_level(logging.INFO, logger="swordfish.access"):
        statuses = run(loop, main())
    lines = [r.getMessage() for r in caplog.records if r.name == "swordfish.access"]
    assert statuses == [200, 500, 413, 400]
    assert len(lines) == 4, lines
    assert '"POST /ok?q=1 HTTP/1.1" 200 3 ' in lines[0]
    assert '"GET /boom HTTP/1.1" 500 21 ' in lines[1]  # "Internal Server Error"
    assert '"-" 413 17 ' in lines[2]  # refused before it made a request
    assert '"-" 400 11 ' in lines[3]  # "Bad Request"
    assert all(line.startswith("127.0.0.1:") and line.endswith("ms") for line in lines)


def test_app_returns_without_response(loop):
    async def app(scope, receive, send):
        pass

    async def main():
        async with serving(app) as server:
            return await request(server, GET)

    resp, was_closed = run(loop, main())
    assert resp.status == 500 and was_closed


def test_header_read_timeout(loop):
    async def main():
        async with serving(echo_app, timeout_header_read=0.1) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\nHost: a\r\n")  # never finished
            t0 = loop.time()
            result = await closed(reader, 3)
            writer.close()
            return result, loop.time() - t0

    was_closed, elapsed = run(loop, main())
    assert was_closed and elapsed < 2


def test_keep_alive_timeout(loop):
    async def main():
        async with serving(echo_app, timeout_keep_alive=0.1) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            resp = await read_response(reader)
            result = await closed(reader, 3)
            writer.close()
            return resp, result

    resp, was_closed = run(loop, main())
    assert resp.status == 200 and was_closed


@pytest.mark.parametrize("option,raw,status", [
    ({"limit_request_line": 50}, b"GET /" + b"a" * 100 + b" HTTP/1.1\r\n" + H + b"\r\n", 414),
    ({"limit_header_count": 3}, b"GET / HTTP/1.1\r\n" + H + b"a: 1\r\nb: 1\r\nc: 1\r\n\r\n", 431),
    ({"limit_header_size": 100}, b"GET / HTTP/1.1\r\n" + H + b"a: " + b"x" * 200 + b"\r\n\r\n", 431),
    # one field of 3 + 30 bytes over a limit of 32, the section well under its own
    ({"limit_request_field_size": 32}, b"GET / HTTP/1.1\r\n" + H + b"a: " + b"x" * 30 + b"\r\n\r\n", 431),
    # the default, 8190, as gunicorn's: a cookie of 9,000 bytes is refused
    ({}, b"GET / HTTP/1.1\r\n" + H + b"Cookie: " + b"x" * 9000 + b"\r\n\r\n", 431),
    ({"limit_body_size": 10}, b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 11\r\n\r\n" + b"x" * 11, 413),
    ({"limit_body_size": 10}, b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n6\r\nxxxxxx\r\n6\r\nxxxxxx\r\n0\r\n\r\n", 413),
])
def test_limits(loop, option, raw, status):
    async def main():
        async with serving(echo_app, **option) as server:
            return await request(server, raw)

    resp, was_closed = run(loop, main())
    assert resp.status == status and was_closed


def test_field_size_limit_is_per_field(loop):
    """Fields each under --limit-request-field-size pass however many there are; one at
    the limit passes too."""
    fields = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 27) for i in range(5))

    async def main():
        async with serving(echo_app, limit_request_field_size=32) as server:
            return await request(server, b"GET / HTTP/1.1\r\n" + H + fields + b"\r\n")

    resp, _ = run(loop, main())
    assert resp.status == 200


@pytest.mark.parametrize("option,fields", [
    # 13 fields of 17 bytes pass the 200-byte limit with the last one
    ({"limit_header_size": 200}, [b"X-A: 1234567890\r\n"] * 13),
    # the sixth field is one too many, refused as it arrives with the head still open
    ({"limit_header_count": 5}, [b"X-%d: 1\r\n" % i for i in range(6)]),
])
def test_header_limits_across_small_reads(loop, option, fields):
    async def main():
        async with serving(echo_app, **option) as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n")
            # One field per write; writing on after the server closed would make its kernel
            # answer with a reset
            for field in fields:
                writer.write(field)
                await writer.drain()
                await asyncio.sleep(0)
            resp = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return resp

    assert run(loop, main()).status == 431


def test_concurrency_limit(loop):
    release = None

    async def app(scope, receive, send):
        await release.wait()
        await echo_app(scope, receive, send)

    async def main():
        nonlocal release
        release = asyncio.Event()
        async with serving(app, limit_concurrency=1) as server:
            r1, w1 = await connect(server)
            w1.write(GET)
            while server.state.active_requests < 1:
                await asyncio.sleep(0.005)
            second, was_closed = await request(server, GET)
            release.set()
            first = await read_response(r1)
            w1.close()
            return first, second, was_closed

    first, second, was_closed = run(loop, main())
    assert first.status == 200 and second.status == 503 and was_closed


def test_concurrency_limit_serves_pipelined_requests(loop):
    # The app keeps running a little after its response is complete, so the second request
    # of the pipeline is read while the first task still counts: it takes that task's place.
    async def app(scope, receive, send):
        await echo_app(scope, receive, send)
        for _ in range(3):
            await asyncio.sleep(0)

    async def main():
        async with serving(app, limit_concurrency=1) as server:
            reader, writer = await connect(server)
            writer.write(GET * 2)
            statuses = [(await read_response(reader)).status for _ in range(2)]
            writer.close()
            return statuses

    assert run(loop, main()) == [200, 200]


def test_concurrency_limit_counts_apps_still_running_after_their_response(loop):
    # Work after the response (background tasks) counts: on one kept-alive connection only
    # the previous request's app is replaced by the next request, older ones are not.
    release = None

    async def app(scope, receive, send):
        await echo_app(scope, receive, send)
        await release.wait()

    async def main():
        nonlocal release
        release = asyncio.Event()
        async with serving(app, limit_concurrency=1) as server:
            reader, writer = await connect(server)
            statuses = []
            for _ in range(3):
                writer.write(GET)
                statuses.append((await read_response(reader)).status)
            release.set()
            writer.close()
            return statuses

    assert run(loop, main()) == [200, 200, 503]


def test_graceful_shutdown_finishes_in_flight_request(loop):
    started = None

    async def app(scope, receive, send):
        if scope["path"] == "/busy":
            started.set()
            await asyncio.sleep(0.2)
        await echo_app(scope, receive, send)

    async def main():
        nonlocal started
        started = asyncio.Event()
        async with serving(app) as server:
            busy_r, busy_w = await connect(server)
            idle_r, idle_w = await connect(server)
            idle_w.write(GET)
            assert (await read_response(idle_r)).status == 200
            busy_w.write(b"GET /busy HTTP/1.1\r\n" + H + b"\r\n")
            await started.wait()
            server.shutdown()
            idle_closed = await closed(idle_r, 1)
            resp = await read_response(busy_r)
            busy_closed = await closed(busy_r, 1)
        return idle_closed, resp, busy_closed

    idle_closed, resp, busy_closed = run(loop, main())
    assert idle_closed and resp.status == 200 and resp.header("connection") == "close" and busy_closed


def test_graceful_timeout_closes_stuck_request(loop):
    async def app(scope, receive, send):
        await asyncio.sleep(30)

    async def main():
        async with serving(app, timeout_graceful_shutdown=0.1) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await asyncio.sleep(0.05)
            server.shutdown()
            return await closed(reader, 5)

    assert run(loop, main())


@pytest.mark.parametrize("client", ["connected", "gone"])
def test_graceful_timeout_cancels_the_app_and_waits_for_its_clean_up(loop, client):
    # Also when the client has already left and the app went on regardless.
    events = []

    async def app(scope, receive, send):
        try:
            if client == "gone":
                assert (await receive())["type"] == "http.request"
                assert (await receive())["type"] == "http.disconnect"
                events.append("client gone")
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # clean-up that itself awaits
            events.append("cleaned up")
            raise

    async def main():
        async with serving(app, timeout_graceful_shutdown=0.1) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            while server.state.active_requests < 1:
                await asyncio.sleep(0.005)
            if client == "gone":
                writer.close()
                while "client gone" not in events:
                    await asyncio.sleep(0.005)
            server.shutdown()
            closed_ok = await closed(reader, 5) if client == "connected" else True
        events.append("served")  # serve() returned
        return closed_ok, server.state.active_requests

    closed_ok, active = run(loop, main())
    assert closed_ok and active == 0
    assert events == ["client gone"] * (client == "gone") + ["cleaned up", "served"]
