"""asyncio's streams (open_connection, start_server, open_unix_connection,
start_unix_server) on top of the loop's connections and servers, unchanged."""

import asyncio
import socket

import pytest

from conftest import PY
from netutil import reserved_port, tls, tls_files  # noqa: F401 (fixtures)


async def echo_lines(reader, writer):
    """Client handler: echo each line upper-cased until EOF, then say bye and close."""
    try:
        while line := await reader.readline():
            writer.write(line.upper())
            await writer.drain()
        writer.write(b"bye\n")
        await writer.drain()
    finally:
        writer.close()


async def talk(reader, writer, lines):
    for line in lines:
        writer.write(line)
    await writer.drain()
    answers = [await reader.readline() for _ in lines]
    writer.write_eof()
    tail = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answers, tail


def test_tcp_streams(loop, run):
    async def main():
        server = await asyncio.start_server(echo_lines, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()
        reader, writer = await asyncio.open_connection(*address)
        assert writer.get_extra_info("peername") == address
        answers, tail = await talk(reader, writer, [b"one\n", b"two\n"])
        assert answers == [b"ONE\n", b"TWO\n"]
        assert tail == b"bye\n"
        server.close()
        await server.wait_closed()

    run(main())


def test_unix_streams(loop, run, tmp_path):
    path = str(tmp_path / "s")

    async def main():
        server = await asyncio.start_unix_server(echo_lines, path)
        reader, writer = await asyncio.open_unix_connection(path)
        assert writer.get_extra_info("peername") == path
        answers, tail = await talk(reader, writer, [b"unix\n"])
        assert (answers, tail) == ([b"UNIX\n"], b"bye\n")
        server.close()
        await server.wait_closed()

    run(main())


def test_many_clients_at_once(loop, run):
    async def client(address, i):
        reader, writer = await asyncio.open_connection(*address)
        return await talk(reader, writer, [f"client {i}\n".encode()])

    async def main():
        async with await asyncio.start_server(echo_lines, "127.0.0.1", 0) as server:
            address = server.sockets[0].getsockname()
            results = await asyncio.gather(*[client(address, i) for i in range(25)])
        for i, (answers, tail) in enumerate(results):
            assert answers == [f"CLIENT {i}\n".encode()] and tail == b"bye\n"

    run(main())


def test_large_transfer_with_flow_control(loop, run):
    payload = bytes(range(256)) * 8192  # 2 MiB

    async def sink(reader, writer):
        data = await reader.read()
        writer.write(len(data).to_bytes(8, "big"))
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(sink, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        for i in range(0, len(payload), 65536):
            writer.write(payload[i:i + 65536])
            await writer.drain()
        writer.write_eof()
        assert int.from_bytes(await reader.readexactly(8), "big") == len(payload)
        writer.close()
        await writer.wait_closed()
        server.close()

    run(main(), timeout=30)


def test_connection_refused(loop, run):
    with reserved_port() as reserved:
        with pytest.raises(ConnectionRefusedError):
            run(asyncio.open_connection(*reserved.getsockname()))


def test_server_closed_while_a_client_is_connected(loop, run):
    async def main():
        connected = loop.create_future()

        async def handler(reader, writer):
            connected.set_result(None)
            while data := await reader.read(100):  # echo until the client goes
                writer.write(data)
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        await connected
        server.close()
        waiting = asyncio.ensure_future(server.wait_closed())
        writer.write(b"still here")
        assert await reader.readexactly(10) == b"still here"
        assert waiting.done() is (PY < (3, 12))  # 3.12+ waits for the connection
        writer.close()
        await writer.wait_closed()
        await waiting

    run(main())


def test_serve_forever_and_cancel(loop, run):
    async def main():
        server = await asyncio.start_server(echo_lines, "127.0.0.1", 0, start_serving=False)
        serving = asyncio.ensure_future(server.serve_forever())
        while not server.is_serving():  # the task starts listening when it first runs
            await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        answers, _ = await talk(reader, writer, [b"x\n"])
        assert answers == [b"X\n"]
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert not server.is_serving()

    run(main())


def test_tls_streams(loop, run, tls):
    server_ctx, client_ctx = tls

    async def main():
        server = await asyncio.start_server(echo_lines, "127.0.0.1", 0, ssl=server_ctx)
        address = server.sockets[0].getsockname()
        reader, writer = await asyncio.open_connection(
            *address, ssl=client_ctx, server_hostname="localhost"
        )
        assert writer.get_extra_info("ssl_object") is not None
        writer.write(b"secret\n")
        assert await reader.readline() == b"SECRET\n"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    run(main())


def test_streams_over_a_given_socket(loop, run):
    a, b = socket.socketpair()

    async def main():
        reader, writer = await asyncio.open_connection(sock=a)
        b.setblocking(False)
        await loop.sock_sendall(b, b"line\n")
        assert await reader.readline() == b"line\n"
        writer.write(b"back")
        await writer.drain()
        assert await loop.sock_recv(b, 4) == b"back"
        writer.close()
        await writer.wait_closed()

    with b:
        run(main())
