"""The ASGI WebSocket spec (2.5) as the server keeps it, on the stdlib loop and on swordfish:
the scope, connect/accept/receive/send/close, denials (403 and the app's own response), app
errors, disconnect codes, sends after the end, `ws="none"`, and the ws options in Config
and on the command line."""

import asyncio
import ssl

import pytest
import websockets

from apps.serving import CliServer, raw_connection, read_raw_response
from httputil import port_of, request
from netutil import tls_files  # noqa: F401 (fixture)
from swordfish.server import ClientDisconnected, Config
from wsutil import (
    MiB, Handoff, Message, PingCounting, RawClient, accept_next, accepted, data_of, echo_app, handshake_request,
    ws_connect, ws_serving,
)


def test_scope(run):
    app = Handoff(state={"db": "ready"})
    raw_request_headers = [("X-Mixed-Case", "V"), ("x-two", "1"), ("X-Two", "2")]

    async def main():
        async with ws_serving(app, root_path="/root", lifespan="on") as server:
            opening = asyncio.ensure_future(RawClient.open(
                server, "/p%2Fq/%C3%A9?a=1&b=%20", key="dGhlIHNhbXBsZSBub25jZQ==",
                protocols=["chat, superchat", " v2 "], headers=raw_request_headers,
            ))
            conn = await app.next()
            await conn.accept(subprotocol="superchat")
            client = await opening
            return conn.scope, port_of(server), client.sock.getsockname(), client.response

    scope, port, client_addr, response = run(main())
    assert scope["type"] == "websocket"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.5"}
    assert scope["http_version"] == "1.1"
    assert scope["scheme"] == "ws"
    # path and raw_path include root_path, as for http
    assert scope["path"] == "/root/p/q/\u00e9"
    assert scope["raw_path"] == b"/root/p%2Fq/%C3%A9"
    assert scope["query_string"] == b"a=1&b=%20"
    assert scope["root_path"] == "/root"
    assert scope["headers"] == [
        (b"host", b"example.com"), (b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
        (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="), (b"sec-websocket-version", b"13"),
        (b"sec-websocket-protocol", b"chat, superchat"), (b"sec-websocket-protocol", b"v2"),
        (b"x-mixed-case", b"V"), (b"x-two", b"1"), (b"x-two", b"2"),
    ]
    assert scope["subprotocols"] == ["chat", "superchat", "v2"]
    assert scope["server"] == ("127.0.0.1", port)
    assert tuple(scope["client"]) == client_addr
    assert scope["state"] == {"db": "ready"}
    assert scope["extensions"]["websocket.http.response"] == {}
    assert response.header("sec-websocket-protocol") == "superchat"


def test_scheme_is_wss_over_tls(run, tls_files):
    cert, key = tls_files
    app = Handoff()

    async def main():
        async with ws_serving(app, ssl_certfile=cert, ssl_keyfile=key) as server:
            accepting = accept_next(app)
            async with ws_connect(server, ssl=ssl.create_default_context(cafile=cert)) as ws:
                conn = await accepting
                await ws.send("over tls")
                got = data_of(await conn.receive())
                await conn.send({"type": "websocket.send", "bytes": b"back"})
                return conn.scope["scheme"], got, await ws.recv()

    assert run(main()) == ("wss", "over tls", b"back")


def test_state_is_a_copy_per_connection(run):
    app = Handoff(state={"n": 0})

    async def main():
        async with ws_serving(app, lifespan="on") as server:
            _, first = await accepted(app, server)
            first.scope["state"]["n"] = 1
            first.scope["state"]["added"] = True
            _, second = await accepted(app, server)
            return second.scope["state"]

    assert run(main()) == {"n": 0}


def test_accept_headers_and_subprotocol_reach_the_client(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            accepting = accept_next(app, subprotocol="b", headers=[(b"x-custom", b"1"), (b"set-cookie", b"k=v")])
            async with ws_connect(server, subprotocols=["a", "b"]) as ws:
                conn = await accepting
                return conn.scope["subprotocols"], ws.subprotocol, ws.response.headers

    offered, chosen, headers = run(main())
    assert offered == ["a", "b"]
    assert chosen == "b"
    assert headers["x-custom"] == "1" and headers["set-cookie"] == "k=v"


def test_no_subprotocol_header_unless_the_app_chooses_one(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, _ = await accepted(app, server, protocols=["a"])
            return client.response

    assert run(main()).header("sec-websocket-protocol") is None


def test_first_message_is_connect_then_text_and_bytes(run):
    app = Handoff()
    sent = ["h\u00e9llo", b"\x00\xff", "", b"", "x" * 70000]

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)  # accepted() checks websocket.connect
            for item in sent:
                (client.send_text if isinstance(item, str) else client.send_binary)(item)
            return [data_of(await conn.receive()) for _ in sent]

    got = run(main())
    assert got == sent
    assert [type(x) for x in got] == [type(x) for x in sent]


def test_send_text_and_bytes(run):
    app = Handoff()
    messages = [
        {"type": "websocket.send", "text": "h\u00e9llo"},
        {"type": "websocket.send", "bytes": b"\x00\xff"},
        {"type": "websocket.send", "bytes": None, "text": "t"},
        {"type": "websocket.send", "text": None, "bytes": b"b"},
        {"type": "websocket.send", "text": ""},
        {"type": "websocket.send", "bytes": b""},
        {"type": "websocket.send", "bytes": bytes(range(256)) * 300},
    ]

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            for m in messages:
                await conn.send(m)
            return [await client.recv() for _ in messages]

    assert run(main()) == ["h\u00e9llo", b"\x00\xff", "t", b"b", "", b"", bytes(range(256)) * 300]


@pytest.mark.parametrize("bad", [
    {"type": "websocket.send", "text": "t", "bytes": b"b"},
    {"type": "websocket.send"},
    {"type": "websocket.send", "text": None, "bytes": None},
], ids=["both", "neither", "both-none"])
def test_send_needs_exactly_one_of_text_and_bytes(run, bad):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            with pytest.raises(Exception):
                await conn.send(bad)
            conn.finish()
            try:
                return await client.read_message()
            except (asyncio.IncompleteReadError, ConnectionError):
                return None  # the server may have dropped the connection: nothing was sent

    got = run(main())
    assert not isinstance(got, Message), f"the invalid send went out as {got}"


@pytest.mark.parametrize("fields, code, reason", [
    ({}, 1000, ""),
    ({"code": 4001, "reason": "bye \u00e9"}, 4001, "bye \u00e9"),
    ({"code": 1001, "reason": None}, 1001, ""),
])
def test_app_close_then_disconnect(run, fields, code, reason):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            await conn.send({"type": "websocket.close", **fields})
            got = await client.expect_close()
            client.send_close(got[0])
            assert await client.server_closed_tcp()
            message = await conn.receive()
            return got, message

    got, message = run(main())
    assert got == (code, reason)
    assert message["type"] == "websocket.disconnect", message


def test_send_after_the_close_handshake_raises_client_disconnected(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            await conn.send({"type": "websocket.close"})
            client.send_close((await client.expect_close())[0])
            assert await client.server_closed_tcp()
            assert (await conn.receive())["type"] == "websocket.disconnect"
            with pytest.raises(ClientDisconnected):
                await conn.send({"type": "websocket.send", "text": "late"})

    run(main())


def test_close_before_accept_is_403(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            async def deny():
                conn = await app.next()
                assert await conn.receive() == {"type": "websocket.connect"}
                await conn.send({"type": "websocket.close"})
                return await conn.receive()

            denying = asyncio.ensure_future(deny())
            resp, was_closed = await request(server, handshake_request())
            after = await denying
            denying = asyncio.ensure_future(deny())
            with pytest.raises(websockets.InvalidStatus) as info:
                async with ws_connect(server):
                    pass
            await denying
            return resp, was_closed, after, info.value.response.status_code

    resp, was_closed, after, status = run(main())
    assert resp.status == 403 and was_closed
    assert status == 403
    assert after["type"] == "websocket.disconnect", after


def test_denial_with_the_apps_own_response(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            async def deny():
                conn = await app.next()
                assert await conn.receive() == {"type": "websocket.connect"}
                await conn.send({
                    "type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", b"Basic"), (b"content-type", b"text/plain")],
                })
                await conn.send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
                await conn.send({"type": "websocket.http.response.body", "body": b"entry"})

            denying = asyncio.ensure_future(deny())
            resp, _ = await request(server, handshake_request())
            await denying
            return resp

    resp = run(main())
    assert resp.status == 401
    assert resp.header("www-authenticate") == "Basic"
    assert resp.header("content-type") == "text/plain"
    assert resp.header("sec-websocket-accept") is None
    assert resp.body == b"no entry"


@pytest.mark.parametrize("receive_first", [True, False])
def test_app_returning_without_accept_is_403(run, receive_first):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            requesting = asyncio.ensure_future(request(server, handshake_request()))
            conn = await app.next()
            if receive_first:
                assert await conn.receive() == {"type": "websocket.connect"}
            conn.finish()
            return await requesting

    resp, was_closed = run(main())
    assert resp.status == 403 and was_closed


def test_app_raising_before_accept_is_500(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            requesting = asyncio.ensure_future(request(server, handshake_request()))
            conn = await app.next()
            assert await conn.receive() == {"type": "websocket.connect"}
            conn.finish(RuntimeError("the app failed"))
            return await requesting

    resp, was_closed = run(main())
    assert resp.status == 500 and was_closed


def test_app_raising_after_accept_closes_1011(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            conn.finish(RuntimeError("the app failed"))
            got = await client.expect_close()
            client.send_close(got[0])
            return got[0], await client.server_closed_tcp()

    assert run(main()) == (1011, True)


@pytest.mark.parametrize("code, reason", [(1000, ""), (1001, "going"), (4002, "ciao \u00e9")])
def test_client_close_reaches_the_app(run, code, reason):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            accepting = accept_next(app)
            async with ws_connect(server) as ws:
                conn = await accepting
                await ws.close(code, reason)
            return await conn.receive_disconnect()

    assert run(main()) == (code, reason)


def test_client_close_without_a_code_is_1005(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.send_close()
            return await conn.receive_disconnect()

    assert run(main()) == (1005, "")


@pytest.mark.parametrize("when", ["after-accept", "before-accept"])
def test_tcp_drop_without_close_is_1006_and_send_raises(run, when):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            if when == "after-accept":
                client, conn = await accepted(app, server)
                client.close_tcp()
            else:
                client = await RawClient.connect(server)
                client.write(handshake_request())
                conn = await app.next()
                assert await conn.receive() == {"type": "websocket.connect"}
                client.close_tcp()
            code, _ = await conn.receive_disconnect()
            late = {"type": "websocket.send", "text": "late"} if when == "after-accept" else {
                "type": "websocket.accept"}
            with pytest.raises(ClientDisconnected) as info:
                await conn.send(late)
            return code, info.value

    code, exc = run(main())
    assert code == 1006
    assert isinstance(exc, OSError)


def test_client_close_handshake_then_send_raises(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.send_close(1000)
            assert (await client.expect_close())[0] == 1000
            assert await client.server_closed_tcp()
            code = await conn.receive_disconnect()
            with pytest.raises(ClientDisconnected):
                await conn.send({"type": "websocket.send", "bytes": b"late"})
            return code

    assert run(main()) == (1000, "")


def test_concurrent_connections_are_independent(run):
    async def main():
        async with ws_serving(echo_app) as server:
            async def one(i):
                async with ws_connect(server, f"/{i}") as ws:
                    for j in range(5):
                        await ws.send(f"{i}:{j}")
                        assert await ws.recv() == f"{i}:{j}"
                    await ws.send(bytes([i]) * 1000)
                    return await ws.recv()

            return await asyncio.gather(*(one(i) for i in range(20)))

    assert run(main(), timeout=20) == [bytes([i]) * 1000 for i in range(20)]


def test_ws_none_hands_an_upgrade_to_the_app_as_http(run):
    app = Handoff()

    async def main():
        async with ws_serving(app, ws="none") as server:
            requesting = asyncio.ensure_future(request(server, handshake_request("/chat")))
            conn = await app.next()
            scope = conn.scope
            assert (await conn.receive())["type"] == "http.request"
            await conn.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await conn.send({"type": "http.response.body", "body": b"ok"})
            conn.finish()
            resp, _ = await requesting
            return scope, resp

    scope, resp = run(main())
    assert scope["type"] == "http" and scope["path"] == "/chat"
    assert (b"upgrade", b"websocket") in scope["headers"]
    assert resp.status == 200 and resp.body == b"ok"


def test_config_defaults_are_uvicorns():
    config = Config(echo_app)
    assert config.ws == "auto"
    assert config.ws_max_size == 16 * MiB
    assert config.ws_max_queue == 32
    assert config.ws_ping_interval == 20.0
    assert config.ws_ping_timeout == 20.0
    assert config.ws_per_message_deflate is True
    assert Config(echo_app, ws="none").ws == "none"


def test_config_refuses_an_unknown_ws():
    # Config checks its other choices (lifespan, loop) the same way.
    with pytest.raises(ValueError):
        Config(echo_app, ws="wsproto-of-some-kind")


def test_cli_ws_options():
    options = ["--ws-max-size", "1000", "--ws-max-queue", "8", "--no-ws-per-message-deflate",
               "--ws-ping-interval", "0.2", "--ws-ping-timeout", "5"]
    with CliServer("wsutil:echo_app", *options) as srv:
        assert srv.listening.wait(30) and srv.port, "the server did not start:\n" + srv.output()

        async def main():
            async with ws_connect(srv.port, create_connection=PingCounting) as ws:
                assert "sec-websocket-extensions" not in ws.response.headers
                await ws.send("x" * 1000)
                assert await ws.recv() == "x" * 1000
                await ws.wait_pings(2)
                await ws.send("x" * 1001)
                with pytest.raises(websockets.ConnectionClosed) as info:
                    await ws.recv()
                return info.value.rcvd.code

        assert asyncio.run(asyncio.wait_for(main(), 20)) == 1009
        assert srv.stop() == 0, srv.output()


def test_cli_ws_none():
    with CliServer("wsutil:echo_app", "--ws", "none") as srv:
        assert srv.listening.wait(30) and srv.port, "the server did not start:\n" + srv.output()
        with raw_connection(srv) as sock:
            sock.sendall(handshake_request())
            assert read_raw_response(sock) == (200, b"http")
        assert srv.stop() == 0, srv.output()

