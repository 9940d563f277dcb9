"""RFC 6455 as the server keeps it, on the stdlib loop and on swordfish, through a raw client
that can send anything: the opening handshake and its refusals, frames the server must fail
the connection for (and with which code), UTF-8 checks on text (at the bad byte), pings and
control frames between fragments, length encodings and masks, and both close handshakes."""

import pytest

from httputil import request
from wsutil import (
    BINARY, CLOSE, CONT, PING, PONG, RSV1, RSV2, RSV3, TEXT, Handoff, Message, RawClient, accept_for,
    accepted, close_payload, data_of, echo_app, frame, handshake_request, ws_fails, ws_serving,
)

RFC_KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 §1.3's example, answered with:
RFC_ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


# --- the opening handshake -----------------------------------------------------------------

def test_handshake_answers_the_rfc_example(run):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server, key=RFC_KEY)  # checks status, Upgrade, Connection
            client.send_text("hi")
            return client.response, await client.recv()

    resp, echoed = run(main())
    assert accept_for(RFC_KEY) == RFC_ACCEPT
    assert resp.header("sec-websocket-accept") == RFC_ACCEPT
    assert resp.body == b""
    assert echoed == "hi"


@pytest.mark.parametrize("connection, upgrade", [
    ("keep-alive, Upgrade", "websocket"),
    ("upgrade", "WebSocket"),
    ("Upgrade,keep-alive", "websocket"),
])
def test_handshake_header_tokens_are_case_insensitive(run, connection, upgrade):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server, connection=connection, upgrade=upgrade)
            client.send_binary(b"ok")
            return await client.recv()

    assert run(main()) == b"ok"


@pytest.mark.parametrize("change", [
    {"key": False},  # no Sec-WebSocket-Key
    {"key": "abc"},  # not base64 of 16 bytes
    {"key": "AAAAAAAAAAAAAAAAAAAA"},  # 15 bytes
    {"key": "AAAAAAAAAAAAAAAAAAAAAAAA"},  # 18 bytes
    {"connection": "keep-alive"},  # Upgrade: websocket without Connection: upgrade
], ids=["no-key", "short-key", "15-byte-key", "18-byte-key", "no-connection-upgrade"])
def test_bad_handshake_is_400_and_never_reaches_the_app(run, change):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            resp, _ = await request(server, handshake_request(**change))
            return resp, app.calls

    resp, calls = run(main())
    assert resp.status == 400, resp
    assert resp.header("sec-websocket-accept") is None
    assert calls == 0


@pytest.mark.parametrize("version", ["8", "14"])
def test_other_version_is_426_naming_13(run, version):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            resp, _ = await request(server, handshake_request(version=version))
            return resp, app.calls

    resp, calls = run(main())
    assert resp.status == 426, resp
    assert [v.strip() for v in resp.header("sec-websocket-version").split(",")] == ["13"]
    assert calls == 0


def test_missing_version_is_refused(run):
    # RFC 6455 §4.2.1 makes the version required; §4.4 answers a wrong one with 426. A
    # missing one may get either.
    async def main():
        async with ws_serving(Handoff()) as server:
            resp, _ = await request(server, handshake_request(version=None))
            return resp

    assert run(main()).status in (400, 426)


# --- frames the server fails the connection for --------------------------------------------

FAILURES = [
    ("unmasked", [frame(TEXT, "x", mask=False)], 1002),
    ("unmasked-close", [frame(CLOSE, close_payload(1000), mask=False)], 1002),
    ("ping-126", [frame(PING, b"p" * 126)], 1002),
    ("pong-126", [frame(PONG, b"p" * 126)], 1002),
    ("close-126", [frame(CLOSE, close_payload(1000, "r" * 124))], 1002),
    ("fragmented-ping", [frame(PING, b"p", fin=False), frame(CONT, b"q")], 1002),
    ("fragmented-close", [frame(CLOSE, close_payload(1000), fin=False)], 1002),
    ("rsv1-text", [frame(TEXT, "x", rsv=RSV1)], 1002),  # no extension agreed
    ("rsv2-binary", [frame(BINARY, b"x", rsv=RSV2)], 1002),
    ("rsv3-text", [frame(TEXT, "x", rsv=RSV3)], 1002),
    ("rsv1-ping", [frame(PING, b"x", rsv=RSV1)], 1002),
    *((f"opcode-{op:#x}", [frame(op, b"x")], 1002) for op in (0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF)),
    ("continuation-first", [frame(CONT, b"x")], 1002),
    ("text-inside-fragmented", [frame(TEXT, "a", fin=False), frame(TEXT, "b")], 1002),
    ("binary-inside-fragmented", [frame(BINARY, b"a", fin=False), frame(BINARY, b"b")], 1002),
    ("close-one-byte", [frame(CLOSE, b"\x03")], 1002),
    # 1005, 1006 and 1015 are never sent (§7.4.1); 1004 and 1016-2999 are reserved and
    # unassigned; below 1000 and 5000 up are not close codes at all (§7.4.2).
    *((f"close-{code}", [frame(CLOSE, close_payload(code))], 1002)
      for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535)),
    ("invalid-utf8-ff", [frame(TEXT, b"ok\xff")], 1007),
    ("invalid-utf8-overlong", [frame(TEXT, b"\xc0\xaf")], 1007),
    ("invalid-utf8-surrogate", [frame(TEXT, b"\xed\xa0\x80")], 1007),
    ("invalid-utf8-above-10ffff", [frame(TEXT, b"\xf4\x90\x80\x80")], 1007),
    ("invalid-utf8-truncated-at-end", [frame(TEXT, b"euro \xe2\x82")], 1007),
    ("invalid-utf8-across-fragments-at-end", [frame(TEXT, b"\xe2", fin=False), frame(CONT, b"\x82")], 1007),
]


@pytest.mark.parametrize("frames, code", [case[1:] for case in FAILURES], ids=[case[0] for case in FAILURES])
def test_protocol_errors_fail_the_connection(run, frames, code):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            for raw in frames:
                client.write(raw)
            await ws_fails(client, code)
            return await conn.receive()

    message = run(main())
    assert message["type"] == "websocket.disconnect", f"the app got {message}"


@pytest.mark.parametrize("fragments", [
    [(TEXT, b"ok\xff", False)],  # the first fragment is already wrong
    [(TEXT, b"fine ", False), (CONT, b"\xe2\x82\xac and \xc3\x28", False)],  # wrong inside the second
    [(TEXT, b"\xf0\x9f", False), (CONT, b"\x98\x00", False)],  # a 4-byte sequence cut short
], ids=["first", "second", "split-sequence"])
def test_bad_utf8_fails_at_the_bad_byte_without_waiting_for_the_rest(run, fragments):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            for opcode, data, fin in fragments:
                client.send_frame(opcode, data, fin=fin)
            await ws_fails(client, 1007)  # the final fragment never comes

    run(main())


def test_invalid_utf8_in_a_close_reason_fails(run):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            client.send_close(1000, b"bye \xff")
            code, _ = await client.expect_close()
            return code

    assert run(main()) in (1002, 1007)


def test_utf8_split_anywhere_across_fragments_is_fine(run):
    text = "a\u00e9\u20ac\U0001d11ez\u00e9"
    data = text.encode()

    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            for i, byte in enumerate(data):  # one byte a frame: every sequence is cut
                client.send_frame(TEXT if i == 0 else CONT, bytes([byte]), fin=i == len(data) - 1)
            client.send_frame(TEXT, b"", fin=False)  # and empty fragments around
            client.send_frame(CONT, data[:2], fin=False)
            client.send_frame(CONT, b"", fin=False)
            client.send_frame(CONT, data[2:], fin=True)
            return [await client.recv(), await client.recv()]

    assert run(main()) == [text, text]


# --- control frames ------------------------------------------------------------------------

@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(125)), b"\xff\x00\xfe"],
                         ids=["empty", "one", "125", "binary"])
def test_ping_is_answered_with_its_payload_and_the_app_sees_nothing(run, payload):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.ping(payload)
            pong = await client.read_message()
            client.pong(b"unsolicited")  # ignored
            client.send_text("marker")
            return pong, await conn.receive()

    pong, first = run(main())
    assert (pong.opcode, pong.payload) == (PONG, payload)
    assert data_of(first) == "marker", first


def test_control_frames_between_fragments(run):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            client.send_frame(TEXT, "Hel", fin=False)
            client.ping(b"p1")
            client.send_frame(CONT, "lo ", fin=False)
            client.pong(b"u")
            client.ping(b"p2")
            client.send_frame(CONT, "world", fin=True)
            client.send_frame(BINARY, b"\x00", fin=False)
            client.ping(b"p3")
            client.send_frame(CONT, b"\x01", fin=True)
            return [await client.read_message() for _ in range(5)]

    got = run(main())
    pongs = [f.payload for f in got if not isinstance(f, Message)]
    messages = [m.data for m in got if isinstance(m, Message)]
    assert pongs == [b"p1", b"p2", b"p3"] and all(f.opcode == PONG for f in got if not isinstance(f, Message))
    assert messages == ["Hello world", b"\x00\x01"]


# --- lengths, masks, fragments ---------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 300000])
def test_each_length_encoding_both_ways(run, size):
    # 7-bit, 16-bit and 64-bit lengths at their edges; the raw client checks that the
    # server's own frames use the shortest encoding.
    data = bytes(i % 251 for i in range(size))

    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            client.send_binary(data)
            client.send_text(data.decode("latin-1"))
            return await client.recv(), await client.recv()

    assert run(main()) == (data, data.decode("latin-1"))


@pytest.mark.parametrize("mask", [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x01\x02\x03\x04"])
def test_any_mask_key_works(run, mask):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            client.send_text("masked \u00e9", mask=mask)
            client.send_frame(BINARY, b"ab", fin=False, mask=mask)
            client.send_frame(CONT, b"cde", mask=b"\x09\x08\x07\x06")
            return await client.recv(), await client.recv()

    assert run(main()) == ("masked \u00e9", b"abcde")


def test_many_fragments_make_one_message(run):
    pieces = [b"", b"a", b"", b"bc" * 1000, b"d", b""]

    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            for i, piece in enumerate(pieces):
                client.send_frame(BINARY if i == 0 else CONT, piece, fin=i == len(pieces) - 1)
            client.send_frame(TEXT, "", fin=False)
            client.send_frame(CONT, "", fin=True)
            return await client.recv(), await client.recv()

    assert run(main()) == (b"".join(pieces), "")


# --- the closing handshake -------------------------------------------------------------------

@pytest.mark.parametrize("code, reason", [
    (1000, ""), (1001, "away"), (1002, ""), (1003, ""), (1007, ""), (1008, ""), (1009, ""),
    (1010, ""), (1011, ""), (1012, ""), (1013, ""), (1014, ""), (3000, "x"), (4999, "r" * 123),
])
def test_client_close_is_echoed_and_reaches_the_app(run, code, reason):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.send_close(code, reason)
            echoed, _ = await client.expect_close()
            return echoed, await client.server_closed_tcp(), await conn.receive_disconnect()

    echoed, tcp_closed, disconnect = run(main())
    assert echoed == code
    assert tcp_closed
    assert disconnect == (code, reason)


def test_empty_client_close_gets_an_empty_or_1000_close(run):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server)
            client.send_close()
            code, _ = await client.expect_close()
            return code, await client.server_closed_tcp()

    code, tcp_closed = run(main())
    assert code in (1005, 1000)  # 1005: the reply had no payload either
    assert tcp_closed


def test_data_after_the_clients_close_is_dropped(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.send_close(1000)
            client.send_text("after the close")
            await client.expect_close()
            assert await client.server_closed_tcp()
            return await conn.receive()

    message = run(main())
    assert message["type"] == "websocket.disconnect", message


def test_server_close_waits_for_the_clients_close_then_closes_tcp(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            await conn.send({"type": "websocket.close", "code": 4000, "reason": "done"})
            got = await client.expect_close()
            # The server must let the client answer (RFC 6455 §7.1.2, §5.5.1): it keeps
            # the TCP connection a moment at least.
            early = await client.server_closed_tcp(0.3)
            client.send_close(4000)
            late = await client.server_closed_tcp()
            return got, early, late, await conn.receive()

    got, early, late, message = run(main())
    assert got == (4000, "done")
    assert not early, "the server closed TCP without waiting for the client's close"
    assert late, "the server kept TCP after the close handshake"
    assert message["type"] == "websocket.disconnect"


@pytest.mark.timeout(60)
def test_server_close_gives_up_on_a_silent_client(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            await conn.send({"type": "websocket.close"})
            assert (await client.expect_close())[0] == 1000
            # The client never answers: the server's close timeout ends it (uvicorn waits
            # 10 s, the websockets library's default is 10 s too).
            return await client.server_closed_tcp(30)

    assert run(main(), timeout=40)


def test_nothing_is_sent_after_the_servers_close(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            await conn.send({"type": "websocket.close"})
            with pytest.raises(Exception):  # data after a close frame (RFC 6455 §5.5.1)
                await conn.send({"type": "websocket.send", "text": "after"})
            await client.expect_close()
            client.send_close(1000)
            # closed() fails on any byte that still comes
            return await client.server_closed_tcp()

    assert run(main())
