"""sock_recv / sock_recv_into / sock_sendall across many operations on one socket.

swordfish makes these system calls natively, reads into a buffer it keeps between reads,
and leaves a socket's epoll registration in place between two operations on it. These
tests pin down what that must not change: results never share memory, a closed socket's
descriptor number reused by a new socket works, data that arrives between two operations
is seen, and add_reader keeps its level-triggered behaviour. Every test also runs on the
stdlib loop.
"""

import asyncio
import os
import socket

import pytest

from conftest import nb_socketpair, run_on


async def spin(n=5):
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("size", [1, 100, 16 * 1024, 16 * 1024 + 1, 60000])
def test_results_never_share_memory(loop, socketpair, size):
    a, b = socketpair()
    first_payload = os.urandom(size)
    second_payload = os.urandom(size)

    async def main():
        b.send(first_payload)
        first = await loop.sock_recv(a, 1 << 17)
        b.send(second_payload)
        second = await loop.sock_recv(a, 1 << 17)
        return first, second

    first, second = run_on(loop, main())
    assert first == first_payload
    assert second == second_payload


def test_recv_sizes_follow_the_data(loop, socketpair):
    a, b = socketpair()

    async def main():
        sizes = []
        for n in (1, 5000, 17000, 3):
            b.send(b"z" * n)
            data = await loop.sock_recv(a, 65536)
            sizes.append(len(data))
            assert type(data) is bytes and data == b"z" * n
        return sizes

    assert run_on(loop, main()) == [1, 5000, 17000, 3]


def test_recv_n_caps_the_result(loop, socketpair):
    a, b = socketpair()

    async def main():
        b.send(b"0123456789")
        first = await loop.sock_recv(a, 4)
        rest = await loop.sock_recv(a, 100)
        return first, rest, await loop.sock_recv(a, 0)

    assert run_on(loop, main()) == (b"0123", b"456789", b"")


def test_ping_pong_many_rounds(loop, socketpair):
    a, b = socketpair()

    async def server():
        while True:
            data = await loop.sock_recv(a, 102400)
            if not data:
                return
            await loop.sock_sendall(a, data)

    async def main():
        task = loop.create_task(server())
        for i in range(300):
            msg = b"%d-" % i * (1 + i % 50)
            await loop.sock_sendall(b, msg)
            got = b""
            while len(got) < len(msg):
                got += await loop.sock_recv(b, 102400)
            assert got == msg
        b.shutdown(socket.SHUT_WR)
        await task

    run_on(loop, main())


def test_data_arriving_between_operations(loop, socketpair):
    a, b = socketpair()

    async def main():
        b.send(b"one")
        assert await loop.sock_recv(a, 100) == b"one"
        # Arrives while nothing waits on `a`, and is read by the next operation.
        b.send(b"two")
        await spin()
        assert await loop.sock_recv(a, 100) == b"two"
        # Arrives after the next operation started waiting.
        task = loop.create_task(loop.sock_recv(a, 100))
        await spin()
        assert not task.done()
        b.send(b"three")
        assert await task == b"three"

    run_on(loop, main())


def test_descriptor_number_reused_by_a_new_socket(loop):
    async def main():
        for round_ in range(20):
            a, b = nb_socketpair()
            fd = a.fileno()
            b.send(b"x")
            assert await loop.sock_recv(a, 10) == b"x"
            a.close()
            b.close()
            # The lowest free numbers come back, so new pairs soon reuse `fd` (lower ones
            # may come first if something else closed a descriptor meanwhile).
            opened = []
            try:
                while not any(s.fileno() == fd for s in opened) and len(opened) < 64:
                    opened.extend(nb_socketpair())
                reused = [s for s in opened if s.fileno() == fd]
                assert reused, (fd, [s.fileno() for s in opened])
                c = reused[0]
                i = opened.index(c)
                d = opened[i + 1] if i % 2 == 0 else opened[i - 1]
                task = loop.create_task(loop.sock_recv(c, 10))
                await spin(2)
                d.send(b"round %d" % round_)
                assert await asyncio.wait_for(task, 5) == b"round %d" % round_
            finally:
                for s in opened:
                    s.close()

    run_on(loop, main())


def test_add_reader_after_operations_is_level_triggered(loop, socketpair):
    a, b = socketpair()

    async def main():
        b.send(b"first")
        assert await loop.sock_recv(a, 100) == b"first"
        b.send(b"waiting")
        await spin()
        calls = []
        fired = loop.create_future()

        def on_readable():
            calls.append(1)
            if len(calls) == 3:
                loop.remove_reader(a)
                fired.set_result(None)

        # Data is already there: the reader is called, and again while it stays unread.
        loop.add_reader(a, on_readable)
        await asyncio.wait_for(fired, 5)
        assert a.recv(100) == b"waiting"

    run_on(loop, main())


def test_remove_reader_between_operations(loop, socketpair):
    a, b = socketpair()

    async def main():
        b.send(b"x")
        assert await loop.sock_recv(a, 10) == b"x"
        assert loop.remove_reader(a) is False
        assert loop.remove_writer(a) is False
        b.send(b"y")
        assert await loop.sock_recv(a, 10) == b"y"

    run_on(loop, main())


def test_transport_takes_over_a_socket_used_by_sock_recv(loop, socketpair):
    a, b = socketpair()

    class Collect(asyncio.Protocol):
        def __init__(self):
            self.data = b""
            self.done = loop.create_future()

        def data_received(self, data):
            self.data += data
            if self.data.endswith(b"!"):
                self.done.set_result(None)

    async def main():
        b.send(b"before")
        assert await loop.sock_recv(a, 100) == b"before"
        transport, proto = await loop.connect_accepted_socket(Collect, a)
        b.send(b"after!")
        await asyncio.wait_for(proto.done, 5)
        transport.close()
        return proto.data

    assert run_on(loop, main()) == b"after!"


def test_sendall_waits_then_next_recv(loop, socketpair):
    a, b = socketpair()
    payload = os.urandom(1 << 21)

    async def reader():
        got = bytearray()
        while len(got) < len(payload):
            got += await loop.sock_recv(b, 1 << 16)
        await loop.sock_sendall(b, b"ack")
        return bytes(got)

    async def main():
        task = loop.create_task(reader())
        await loop.sock_sendall(a, payload)
        assert await loop.sock_recv(a, 10) == b"ack"
        return await task

    assert run_on(loop, main()) == payload


def test_recv_into_then_recv(loop, socketpair):
    a, b = socketpair()

    async def main():
        buf = bytearray(8)
        for i in range(50):
            b.send(b"%08d" % i)
            if i % 2:
                assert await loop.sock_recv_into(a, buf) == 8
                assert bytes(buf) == b"%08d" % i
            else:
                assert await loop.sock_recv(a, 8) == b"%08d" % i

    run_on(loop, main())


def test_socket_subclass_methods_are_used(loop, socketpair):
    calls = []

    class Traced(socket.socket):
        def recv(self, n, *args):
            calls.append(("recv", n))
            return super().recv(n, *args)

        def send(self, data, *args):
            calls.append(("send", len(data)))
            return super().send(data, *args)

    a, b = socketpair()
    traced = Traced(a.family, a.type, fileno=a.detach())
    traced.setblocking(False)

    async def main():
        b.send(b"hi")
        assert await loop.sock_recv(traced, 10) == b"hi"
        await loop.sock_sendall(traced, b"back")
        assert b.recv(10) == b"back"

    try:
        run_on(loop, main())
    finally:
        traced.close()
    assert ("recv", 10) in calls
    assert ("send", 4) in calls


@pytest.mark.parametrize("n", [-1, -100])
def test_negative_recv_size(loop, socketpair, n):
    a, _ = socketpair()
    with pytest.raises(ValueError, match="negative buffersize in recv"):
        run_on(loop, loop.sock_recv(a, n))


def test_recv_size_must_be_an_integer(loop, socketpair):
    a, _ = socketpair()
    with pytest.raises(TypeError):
        run_on(loop, loop.sock_recv(a, 1.5))


def test_recv_into_read_only_buffer(loop, socketpair):
    a, b = socketpair()
    b.send(b"x")
    with pytest.raises(TypeError):
        run_on(loop, loop.sock_recv_into(a, b"immutable"))


def test_sendall_of_non_bytes(loop, socketpair):
    a, _ = socketpair()
    with pytest.raises(TypeError):
        run_on(loop, loop.sock_sendall(a, "text"))


def test_sendall_on_closed_socket(loop, socketpair):
    a, _ = socketpair()
    a.close()
    for data in (b"", b"x"):
        with pytest.raises(OSError) as info:
            run_on(loop, loop.sock_sendall(a, data))
        assert info.value.errno == 9  # EBADF, as socket.send says
