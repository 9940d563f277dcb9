"""Peers that go quiet or go away, on the stdlib loop and on swordfish: the server's
keepalive pings (a client that never answers is closed with 1011, one that answers stays),
and clients that vanish mid-message, reset the connection, or leave while the app is
blocked sending to them."""

import asyncio
import struct

import pytest

from swordfish.server import ClientDisconnected
from wsutil import (
    BINARY, CLOSE, CONT, PING, TEXT, WAIT, Handoff, Message, PingCounting, RawClient, accepted, data_of,
    echo_app, ws_connect, ws_serving,
)

PINGS = {"ws_ping_interval": 0.2, "ws_ping_timeout": 0.2}


# --- keepalive pings -----------------------------------------------------------------------

def test_client_that_never_answers_pings_is_closed_1011(run):
    app = Handoff()

    async def main():
        async with ws_serving(app, **PINGS) as server:
            client, conn = await accepted(app, server)
            pings = 0
            while True:  # every ping goes unanswered
                got = await client.read_message(timeout=WAIT)
                assert not isinstance(got, Message), got
                if got.opcode == PING:
                    pings += 1
                elif got.opcode == CLOSE:
                    break
            client.send_close(got.code)
            return pings, got.code, await client.server_closed_tcp(), await conn.receive()

    pings, code, tcp_closed, message = run(main())
    assert pings >= 1
    assert code == 1011
    assert tcp_closed
    assert message["type"] == "websocket.disconnect", message


def test_raw_client_answering_pings_stays_connected(run):
    async def main():
        async with ws_serving(echo_app, **PINGS) as server:
            client = await RawClient.open(server)
            payloads = []
            while len(payloads) < 5:  # five intervals, each ping answered with its payload
                got = await client.read_message(timeout=WAIT)
                assert not isinstance(got, Message) and got.opcode == PING, got
                payloads.append(got.payload)
                client.pong(got.payload)
            client.send_text("still here")
            while not isinstance(got := await client.read_message(), Message):
                assert got.opcode == PING, got  # nothing but pings before the echo
                client.pong(got.payload)
            return payloads, got.data

    payloads, echoed = run(main())
    assert all(len(p) <= 125 for p in payloads)
    assert echoed == "still here"


def test_websockets_client_stays_connected_across_pings(run):
    async def main():
        async with ws_serving(echo_app, **PINGS) as server:
            async with ws_connect(server, create_connection=PingCounting) as ws:
                await ws.wait_pings(5)
                await ws.send("still here")
                return await ws.recv()

    assert run(main()) == "still here"


# --- clients that go away ------------------------------------------------------------------

@pytest.mark.parametrize("how", ["fin", "reset"])
def test_client_leaving_mid_message_is_1006(run, how):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.send_frame(TEXT, "the first half", fin=False)
            client.send_frame(CONT, " and more", fin=False)
            await client.drain()
            client.close_tcp() if how == "fin" else client.reset()
            return await conn.receive_disconnect()

    code, _ = run(main())
    assert code == 1006


def test_reset_while_the_app_waits_then_the_server_serves_on(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            waiting = asyncio.ensure_future(conn.receive())
            client.reset()
            code = (await waiting)["code"]
            with pytest.raises(ClientDisconnected):
                await conn.send({"type": "websocket.send", "text": "late"})
            conn.finish()
            other, other_conn = await accepted(app, server)
            other.send_binary(b"next")
            return code, data_of(await other_conn.receive())

    assert run(main()) == (1006, b"next")


def test_client_leaving_while_the_app_is_blocked_sending(run):
    # The app's send is waiting for a client that does not read; when the client goes,
    # the send must end with ClientDisconnected rather than wait for ever.
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server, rcvbuf=64 * 1024)
            blocked = asyncio.Event()
            sent = 0

            async def sender():
                nonlocal sent
                while True:
                    sending = asyncio.ensure_future(conn.send({"type": "websocket.send", "bytes": bytes(256 * 1024)}))
                    done, _ = await asyncio.wait([sending], timeout=1.0)
                    if not done:
                        blocked.set()  # this send is held up by the client: it stays awaited
                    await sending
                    sent += 1

            sending_task = asyncio.ensure_future(sender())
            await asyncio.wait_for(blocked.wait(), WAIT * 4)
            client.reset()
            with pytest.raises(ClientDisconnected):
                await asyncio.wait_for(sending_task, WAIT)
            return sent, await conn.receive_disconnect()

    sent, (code, _) = run(main(), timeout=40)
    assert sent >= 1
    assert code == 1006


def test_frame_cut_in_its_header_then_fin_is_1006(run):
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server)
            client.write(bytes([0x80 | BINARY, 0x80 | 126]) + struct.pack("!H", 300)[:1])  # header cut short
            await client.drain()
            client.close_tcp()
            return await conn.receive_disconnect()

    assert run(main())[0] == 1006
