"""The WebSocket server's limits, on the stdlib loop and on swordfish: ws_max_size (close
1009, at once for a frame header that declares too much), permessage-deflate (negotiated,
round trips, off with ws_per_message_deflate=False, a decompression bomb), and backpressure
both ways (a slow app stops the server reading; a slow client blocks the app's send)."""

import asyncio
import math
import random
import struct
import zlib

import pytest

from wsutil import (
    BINARY, CONT, DEFLATE_TAIL, MiB, PING, RSV1, TEXT, WAIT, Handoff, RawClient, accepted, compress, data_of,
    echo_app, ws_connect, ws_fails, ws_serving,
)

KiB = 1024
STALL = 1.0  # seconds without progress that count as blocked (see the backpressure tests)


def kernel_buffer_max(name):
    """The most a TCP socket buffer can grow to here (net.ipv4.tcp_rmem/tcp_wmem, 3rd value)."""
    with open(f"/proc/sys/net/ipv4/{name}") as f:
        return int(f.read().split()[2])


def numbered(i, size, seed=7):
    """Message i of a sequence: its number, then random bytes (nothing compresses it)."""
    return struct.pack("!I", i) + random.Random(seed + i).randbytes(size - 4)


# --- ws_max_size ---------------------------------------------------------------------------

@pytest.mark.parametrize("opcode", [TEXT, BINARY])
def test_message_over_ws_max_size_is_1009(run, opcode):
    async def main():
        async with ws_serving(echo_app, ws_max_size=1000) as server:
            client = await RawClient.open(server)
            client.send_frame(opcode, b"a" * 1000)  # exactly the limit: fine
            assert len(await client.recv()) == 1000
            client.send_frame(opcode, b"a" * 1001)
            await ws_fails(client, 1009)

    run(main())


def test_fragmented_message_over_ws_max_size_is_1009(run):
    async def main():
        async with ws_serving(echo_app, ws_max_size=1000) as server:
            client = await RawClient.open(server)
            client.send_frame(TEXT, "a" * 600, fin=False)
            client.send_frame(CONT, "a" * 400)  # 1000 in all: fine
            assert await client.recv() == "a" * 1000
            client.send_frame(TEXT, "a" * 600, fin=False)
            client.send_frame(CONT, "a" * 401, fin=False)
            await ws_fails(client, 1009)

    run(main())


@pytest.mark.parametrize("max_size, declared", [(1000, 1001), (None, 16 * MiB + 1), (None, 1 << 40)],
                         ids=["1000", "default", "2**40"])
def test_frame_header_declaring_too_much_is_1009_at_once(run, max_size, declared):
    # Only the header (and its mask key) is sent: the server must not wait for the payload.
    options = {} if max_size is None else {"ws_max_size": max_size}

    async def main():
        async with ws_serving(echo_app, **options) as server:
            client = await RawClient.open(server)
            client.send_frame(BINARY, b"", length=declared, mask=b"abcd")
            await ws_fails(client, 1009)

    run(main())


def test_default_ws_max_size_is_16_mib(run):
    async def main():
        async with ws_serving(echo_app) as server:
            async with ws_connect(server, compression=None) as ws:
                await ws.send(b"\x01" * (16 * MiB))
                assert await ws.recv() == b"\x01" * (16 * MiB)
            client = await RawClient.open(server)
            # One byte too many, in two frames, so that the server has read it all when it
            # closes (no unread data for the kernel to answer with a reset).
            client.send_frame(BINARY, b"\x01" * (16 * MiB), fin=False)
            client.send_frame(CONT, b"\x01")
            await ws_fails(client, 1009, timeout=20)

    run(main(), timeout=40)


# --- permessage-deflate ------------------------------------------------------------------------

SIZES = [0, 1, 125, 1000, 65536, MiB, 5 * MiB]


def test_deflate_is_negotiated_and_round_trips(run):
    async def main():
        async with ws_serving(echo_app) as server:
            async with ws_connect(server) as ws:  # the library offers permessage-deflate
                agreed = ws.response.headers.get("sec-websocket-extensions", "")
                got = []
                for size in SIZES:
                    for data in (b"ab" * (size // 2), random.Random(size).randbytes(size)):
                        await ws.send(data)
                        got.append(await ws.recv() == data)
                        await ws.send(data.hex()[:size])
                        got.append(await ws.recv() == data.hex()[:size])
                return agreed, got

    agreed, got = run(main(), timeout=60)
    assert agreed.split(";")[0].strip() == "permessage-deflate", agreed
    assert all(got), got


def test_deflate_off_is_not_negotiated(run):
    async def main():
        async with ws_serving(echo_app, ws_per_message_deflate=False) as server:
            async with ws_connect(server) as ws:
                headers = ws.response.headers
                await ws.send("plain " * 1000)
                echoed = await ws.recv()
            client = await RawClient.open(server, deflate=True)  # offered, not agreed
            assert client.deflate is None
            client.send_frame(TEXT, compress(b"x"), rsv=RSV1)
            await ws_fails(client, 1002)
            return headers, echoed

    headers, echoed = run(main())
    assert "sec-websocket-extensions" not in headers
    assert echoed == "plain " * 1000


def test_raw_compressed_messages_reach_the_app_and_come_back(run):
    app = Handoff()
    texts = ["", "a", "h\u00e9llo " * 500, "\u20ac" * 70000]

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server, deflate=True)
            assert client.deflate is not None, client.response
            for i, text in enumerate(texts):
                client.send_compressed(TEXT, text, pieces=1 + i)  # RSV1 on the first frame only
            client.send_binary(b"not compressed")  # allowed on a deflate connection too
            received = [data_of(await conn.receive()) for _ in range(len(texts) + 1)]
            for item in received:
                key = "text" if isinstance(item, str) else "bytes"
                await conn.send({"type": "websocket.send", key: item})
            echoed = [await client.recv() for _ in received]  # inflated when compressed
            return received, echoed

    received, echoed = run(main(), timeout=30)
    assert received == texts + [b"not compressed"]
    assert echoed == received


def test_deflate_bomb_is_1009(run):
    # 20 MiB of zeros are about 20 KiB compressed: the server must stop inflating at
    # ws_max_size (16 MiB), not hold 20 MiB first or accept it.
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server, deflate=True)
            assert client.deflate is not None
            c = zlib.compressobj(wbits=-client.client_bits())
            bomb = c.compress(bytes(20 * MiB)) + c.flush(zlib.Z_SYNC_FLUSH)
            assert bomb.endswith(DEFLATE_TAIL) and len(bomb) < 100 * KiB
            client.send_frame(BINARY, bomb[:-4], rsv=RSV1)
            await ws_fails(client, 1009)

    run(main(), timeout=20)


def test_inflated_size_limit_is_exact(run):
    async def main():
        async with ws_serving(echo_app, ws_max_size=1000) as server:
            client = await RawClient.open(server, deflate=True)
            client.send_compressed(BINARY, bytes(1000))
            assert await client.recv() == bytes(1000)
            client.send_compressed(BINARY, bytes(1001), pieces=2)
            await ws_fails(client, 1009)

    run(main())


@pytest.mark.parametrize("case", ["rsv1-on-continuation", "rsv1-on-ping"])
def test_rsv1_where_deflate_does_not_allow_it_is_1002(run, case):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server, deflate=True)
            assert client.deflate is not None
            if case == "rsv1-on-continuation":
                payload = compress(b"hello")
                client.send_frame(TEXT, payload[:2], fin=False, rsv=RSV1)
                client.send_frame(CONT, payload[2:], rsv=RSV1)  # RFC 7692 §6.1: first frame only
            else:
                client.send_frame(PING, b"x", rsv=RSV1)
            await ws_fails(client, 1002)

    run(main())


def test_corrupt_deflate_data_fails_the_connection(run):
    async def main():
        async with ws_serving(echo_app) as server:
            client = await RawClient.open(server, deflate=True)
            client.send_frame(BINARY, b"\xff\xff\xff\xff\xff", rsv=RSV1)  # a reserved block type
            code, _ = await client.expect_close()
            return code

    assert run(main()) in (1002, 1007)


# --- backpressure ----------------------------------------------------------------------------
# "Blocked" is observed as no progress for STALL seconds: a server that is merely slow
# passes these tests with a smaller count; one that buffers without bound goes past the
# bound long before that.

def test_slow_app_stops_the_server_reading(run):
    size, queue = MiB, 4
    # What can sit between the client's drain() and the app without the server reading
    # more than ws_max_queue messages: the queue, one message being assembled, the
    # server's read buffer, and the kernel's buffers both sides.
    slack = kernel_buffer_max("tcp_rmem") + kernel_buffer_max("tcp_wmem") + 4 * MiB
    bound = queue + 2 + math.ceil(slack / size)
    app = Handoff()

    async def main():
        async with ws_serving(app, ws_max_queue=queue) as server:
            client, conn = await accepted(app, server, sndbuf=64 * KiB)
            pushed = 0
            while pushed <= bound:
                client.send_binary(numbered(pushed, size), mask=b"\x00\x00\x00\x00")
                pushed += 1
                try:
                    await client.drain(STALL)
                except asyncio.TimeoutError:
                    break
            assert pushed <= bound, f"the server took {pushed} MiB from a client its app never read"
            # The app reads now: the server reads again, and nothing was lost or reordered.
            numbers = []
            for _ in range(pushed):
                data = data_of(await conn.receive(timeout=WAIT * 2))
                numbers.append(struct.unpack("!I", data[:4])[0])
                assert data == numbered(numbers[-1], size)
            await client.drain(WAIT)
            return pushed, numbers

    pushed, numbers = run(main(), timeout=90)
    assert numbers == list(range(pushed))


@pytest.mark.timeout(120)
def test_slow_client_blocks_the_apps_send(run):
    size = 512 * KiB
    # What can sit between the app's send() and a client that does not read: the
    # server's write buffer (a few MiB at most), the kernel's buffers both sides (the
    # client's kept small) and the client's stream buffer.
    slack = kernel_buffer_max("tcp_wmem") + 2 * MiB + 8 * MiB
    bound = 2 + math.ceil(slack / size)
    total = bound + 20
    app = Handoff()

    async def main():
        async with ws_serving(app) as server:
            client, conn = await accepted(app, server, rcvbuf=64 * KiB)
            progress = asyncio.Event()
            sent = 0

            async def sender():
                nonlocal sent
                for i in range(total):
                    await conn.send({"type": "websocket.send", "bytes": numbered(i, size)})
                    sent += 1
                    progress.set()

            sending = asyncio.ensure_future(sender())
            try:
                while sent < total:
                    progress.clear()
                    try:
                        await asyncio.wait_for(progress.wait(), STALL)
                    except asyncio.TimeoutError:
                        break
                before_reading = sent
                assert before_reading <= bound, f"{before_reading} sends of {size} bytes completed unread"
                received = [await client.recv(timeout=WAIT * 2) for _ in range(total)]
                await asyncio.wait_for(sending, WAIT)
            finally:
                sending.cancel()
            return before_reading, received

    before_reading, received = run(main(), timeout=100)
    assert 0 < before_reading < total
    assert [struct.unpack("!I", r[:4])[0] for r in received] == list(range(total))
    assert all(r == numbered(i, size) for i, r in enumerate(received))
