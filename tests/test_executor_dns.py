"""run_in_executor, set_default_executor, getaddrinfo, getnameinfo."""

import asyncio
import concurrent.futures
import logging
import socket
import threading

import pytest

from conftest import PY, run_iterations, run_on


# ------------------------------------------------------------ executors


def test_run_in_executor_default(loop):
    async def main():
        return await loop.run_in_executor(None, lambda a, b: (a + b, threading.get_ident()), 2, 3)

    value, ident = run_on(loop, main())
    assert value == 5
    assert ident != threading.get_ident()


def test_run_in_executor_returns_asyncio_future(loop):
    async def main():
        fut = loop.run_in_executor(None, int, "7")
        assert isinstance(fut, asyncio.Future)
        assert fut.get_loop() is loop
        return await fut

    assert run_on(loop, main()) == 7


def test_run_in_executor_exception(loop):
    def boom():
        raise LookupError("from thread")

    async def main():
        with pytest.raises(LookupError, match="from thread"):
            await loop.run_in_executor(None, boom)

    run_on(loop, main())


def test_run_in_executor_explicit_executor(loop):
    names = []
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="explicit-pool") as ex:

        async def main():
            await loop.run_in_executor(ex, lambda: names.append(threading.current_thread().name))

        run_on(loop, main())
    assert names and names[0].startswith("explicit-pool")


def test_run_in_executor_non_thread_executor(loop):
    class Inline(concurrent.futures.Executor):
        def __init__(self):
            self.calls = 0

        def submit(self, fn, *args, **kwargs):
            self.calls += 1
            f = concurrent.futures.Future()
            try:
                f.set_result(fn(*args, **kwargs))
            except Exception as e:  # noqa: BLE001
                f.set_exception(e)
            return f

    ex = Inline()

    async def main():
        ok = await loop.run_in_executor(ex, divmod, 7, 2)
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(ex, divmod, 1, 0)
        return ok

    assert run_on(loop, main()) == (3, 1)
    assert ex.calls == 2


def test_set_default_executor(loop):
    names = []
    ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="my-default")
    try:
        loop.set_default_executor(ex)

        async def main():
            await loop.run_in_executor(None, lambda: names.append(threading.current_thread().name))

        run_on(loop, main())
    finally:
        ex.shutdown(wait=True)
    assert names and names[0].startswith("my-default")


def test_set_default_executor_rejects_other_executors(loop):
    class NotAThreadPool(concurrent.futures.Executor):
        def submit(self, fn, *args, **kwargs):
            raise AssertionError("must not be used")

    if PY >= (3, 11):
        with pytest.raises(TypeError, match="executor must be ThreadPoolExecutor instance"):
            loop.set_default_executor(NotAThreadPool())
    else:
        with pytest.warns(DeprecationWarning):
            loop.set_default_executor(NotAThreadPool())


def test_run_in_executor_rejects_coroutine_function_in_debug(loop):
    loop.set_debug(True)

    async def coro_fn():
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used with run_in_executor"):
        loop.run_in_executor(None, coro_fn)


def test_run_in_executor_many_concurrent(loop):
    async def main():
        return await asyncio.gather(*(loop.run_in_executor(None, pow, i, 2) for i in range(200)))

    assert run_on(loop, main()) == [i * i for i in range(200)]


def test_cancel_run_in_executor_awaiter(loop):
    release = threading.Event()
    finished = threading.Event()
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def blocking():
        release.wait(10)
        finished.set()
        return "late result"

    async def main():
        fut = loop.run_in_executor(None, blocking)
        waiter = loop.create_task(asyncio.wait_for(fut, 10))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert fut.cancelled()
        release.set()
        await loop.run_in_executor(None, finished.wait, 10)
        # give the late completion of the cancelled future a chance to misbehave
        for _ in range(5):
            await asyncio.sleep(0)

    try:
        run_on(loop, main())
    finally:
        release.set()
    assert finished.is_set()
    assert contexts == []


def test_executor_result_after_loop_closed_is_silent(loop_factory, caplog):
    # The worker finishes after the loop is closed: nothing may be logged and
    # nothing may blow up, in the worker thread or here.
    lp = loop_factory()
    release = threading.Event()
    ex = concurrent.futures.ThreadPoolExecutor(1)
    try:
        fut = lp.run_in_executor(ex, release.wait, 10)
        run_iterations(lp, 1)
        lp.close()
        release.set()
        ex.shutdown(wait=True)
        assert not fut.done()
    finally:
        release.set()
        ex.shutdown(wait=True)
        if not lp.is_closed():
            lp.close()
    errors = [r for r in caplog.records if r.levelno >= 40]
    assert errors == []


# ----------------------------------------------------------------- DNS


@pytest.mark.parametrize(
    "args,kwargs",
    [
        (("127.0.0.1", 80), {}),
        (("127.0.0.1", "http"), {"type": socket.SOCK_STREAM}),
        (("localhost", 8080), {"family": socket.AF_INET, "type": socket.SOCK_STREAM}),
        ((None, 0), {"family": socket.AF_INET, "type": socket.SOCK_DGRAM, "flags": socket.AI_PASSIVE}),
        (("127.0.0.1", None), {"proto": socket.IPPROTO_TCP}),
        ((b"127.0.0.1", b"53"), {"type": socket.SOCK_DGRAM}),
    ],
    ids=["numeric", "service-name", "localhost-inet", "passive", "proto", "bytes"],
)
def test_getaddrinfo_matches_socket_module(loop, args, kwargs):
    expected = socket.getaddrinfo(*args, **kwargs)

    async def main():
        return await loop.getaddrinfo(*args, **kwargs)

    result = run_on(loop, main())
    assert isinstance(result, list)
    assert sorted(result) == sorted(expected)
    for family, type_, proto, canonname, sockaddr in result:
        assert isinstance(family, socket.AddressFamily)
        assert isinstance(type_, socket.SocketKind)


def test_getaddrinfo_ipv6_loopback(loop):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        expected = socket.getaddrinfo("::1", 443, type=socket.SOCK_STREAM)
    except socket.gaierror:
        pytest.skip("::1 does not resolve here")
    result = run_on(loop, loop.getaddrinfo("::1", 443, type=socket.SOCK_STREAM))
    assert sorted(result) == sorted(expected)


def test_getaddrinfo_error(loop):
    async def main():
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo("not a numeric host", 80, flags=socket.AI_NUMERICHOST)

    run_on(loop, main())


def test_getaddrinfo_concurrent(loop):
    async def main():
        return await asyncio.gather(
            *(loop.getaddrinfo("127.0.0.1", port, type=socket.SOCK_STREAM) for port in range(1000, 1050))
        )

    results = run_on(loop, main())
    assert [r[0][4][1] for r in results] == list(range(1000, 1050))


def test_getnameinfo(loop):
    flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    expected = socket.getnameinfo(("127.0.0.1", 8080), flags)

    async def main():
        return await loop.getnameinfo(("127.0.0.1", 8080), flags)

    assert run_on(loop, main()) == expected == ("127.0.0.1", "8080")


def test_getnameinfo_default_flags(loop):
    expected = socket.getnameinfo(("127.0.0.1", 80), 0)
    assert run_on(loop, loop.getnameinfo(("127.0.0.1", 80))) == expected


def test_getnameinfo_error(loop):
    async def main():
        with pytest.raises((socket.gaierror, TypeError, OSError)):
            await loop.getnameinfo(("not-an-address", 80), socket.NI_NUMERICHOST)

    run_on(loop, main())


def test_numeric_names_need_a_usable_resolver(loop):
    # Answered at once on swordfish, yet refused where the stdlib's executor would be.
    async def main():
        await loop.shutdown_default_executor()
        with pytest.raises(RuntimeError, match="^Executor shutdown has been called$"):
            await loop.getaddrinfo("127.0.0.1", 80)
        flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        with pytest.raises(RuntimeError, match="^Executor shutdown has been called$"):
            await loop.getnameinfo(("127.0.0.1", 80), flags)

    run_on(loop, main())
    lookup = loop.getaddrinfo("127.0.0.1", 80)
    loop.close()
    with pytest.raises(RuntimeError, match="^Event loop is closed$"):
        lookup.send(None)


def test_numeric_names_are_resolved_without_a_thread(sf_loop):
    async def main():
        infos = await sf_loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)
        names = await sf_loop.getnameinfo(("::1", 80, 0, 0), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
        return infos, names

    infos, names = run_on(sf_loop, main())
    assert infos[0][4] == ("127.0.0.1", 80) and names == ("::1", "80")
    assert sf_loop._default_executor is None  # no executor was started for them


def test_getaddrinfo_in_debug_mode_logs_the_lookup(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 3600
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        run_on(loop, loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM))
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert "Get address info 127.0.0.1:80, type=<SocketKind.SOCK_STREAM: 1>" in messages
    took = [r for r in caplog.records if r.getMessage().startswith("Getting address info 127.0.0.1:80")]
    # Below slow_callback_duration: logged at DEBUG, not INFO.
    assert [r.levelno for r in took] == [logging.DEBUG]
