"""WebSockets through the server's lifecycle and settings: graceful shutdown (close 1001 to every
open WebSocket, a wait for the closing handshakes bounded by timeout_graceful_shutdown),
limit_concurrency and max_requests counting WebSocket connections, the access log, TLS (wss://),
the asyncio and uvloop loops, `--workers 2`, and 10,000 connect/close cycles without a leak.

In-process servers run in a thread (tests/apps/serving.py) with the echo app of
tests/apps/ws_echo_app.py, whose WsProbe the tests wait on; CLI servers run
`python -m swordfish serve apps.ws_echo_app:app` in a subprocess. Every wait has a deadline."""

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import signal
import ssl
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from apps.serving import WAIT, CliServer, ErrorLog, ThreadServer, client_for, payload
from apps.ws_clients import (
    RawClient, closed_by_server, negotiated_extensions, refused_status, ws_connect, ws_connect_async,
)
from apps.ws_echo_app import WsProbe, create_app
from netutil import tls_files  # noqa: F401 (fixture)

GOING_AWAY = 1001  # RFC 6455 7.4.1: "a server going down"
SERVICE_RESTART = 1012  # IANA's registry: the client may reconnect at once
SIZES = [0, 125, 126, 65535, 65536, 1 << 20]
# "Flat" for the leak test, after a warm-up of 1,000 cycles: the next 9,000 may add less than
# RSS_TOLERANCE of memory (under 1 KiB a connection, while a leaked connection, with its buffers
# and deflate context, costs tens of KiB), and fewer GC-tracked objects than one per nine
# connections (the count moves by about a hundred between idle samples).
RSS_TOLERANCE = 8 << 20
OBJECTS_TOLERANCE = 1000


@pytest.fixture(params=["swordfish", "asyncio"])
def server_loop(request):
    return request.param


@pytest.fixture
def probe():
    return WsProbe()


class LogLines(ErrorLog):
    """`with LogLines(name):` collects the records of logger `name` at INFO and above, from any
    thread; the logger is opened to INFO meanwhile (the server checks it when it starts)."""

    def __init__(self, name):
        super().__init__()
        self.setLevel(logging.INFO)
        self.logger = logging.getLogger(name)

    def __enter__(self):
        self.old_level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self.old_level)

    def messages(self):
        with self.cond:
            return [r.getMessage() for r in self.records]


def echo_round_trips(ws, sizes=SIZES):
    for n in sizes:
        text = ("ß€x" * n)[:n]
        ws.send(text)
        assert ws.recv(timeout=WAIT) == text
        data = payload(n, seed=n)
        ws.send(data)
        assert ws.recv(timeout=WAIT) == data


def wait_stopped(server, timeout=WAIT):
    server.thread.join(timeout)
    assert not server.thread.is_alive(), "the server did not stop"


# -- graceful shutdown ----------------------------------------------------------------------

def test_graceful_shutdown_closes_every_websocket_with_1001(server_loop, probe):
    # A generous graceful timeout: the server must stop as soon as the clients have answered,
    # not when the timeout runs out.
    with ThreadServer(create_app(probe), loop=server_loop, timeout_graceful_shutdown=20) as server:
        with contextlib.ExitStack() as stack:
            clients = [stack.enter_context(ws_connect(server.port, f"/c{i}")) for i in range(3)]
            for ws in clients:
                echo_round_trips(ws, [5])
            started = time.monotonic()
            server.server.shutdown()
            # The websockets client answers a close by itself (its reader thread).
            assert [closed_by_server(ws)[0] for ws in clients] == [GOING_AWAY] * 3
            wait_stopped(server)
            took = time.monotonic() - started
    assert took < 5, f"the server took {took:.1f}s to stop although every client answered at once"
    assert probe.wait_for(lambda p: p.ended == 3, WAIT)
    # Each app heard of the end through websocket.disconnect (not by being cancelled), with the
    # code of the client's answer, which echoes the server's.
    assert probe.disconnect_codes == [GOING_AWAY] * 3
    with pytest.raises(OSError):
        ws_connect(server.port, "/after", open_timeout=2)  # no longer listening


def test_graceful_shutdown_cuts_a_client_that_never_answers(server_loop, probe):
    timeout = 1.5
    with ThreadServer(create_app(probe), loop=server_loop, timeout_graceful_shutdown=timeout) as server:
        with ws_connect(server.port, "/polite") as polite, contextlib.closing(RawClient(server.port)) as silent:
            silent.send_text("ping?")
            assert silent.read_frame() == (0x1, b"ping?")
            started = time.monotonic()
            server.server.shutdown()
            opcode, body = silent.read_frame()
            told = time.monotonic() - started
            assert opcode == 0x8 and int.from_bytes(body[:2], "big") == GOING_AWAY, (opcode, body)
            assert told < timeout, f"the close frame came after {told:.2f}s, not at once"
            assert closed_by_server(polite)[0] == GOING_AWAY
            cut = silent.wait_end() - started  # the silent client never sends its close frame
            wait_stopped(server)
    assert timeout - 0.1 <= cut <= timeout + 3, f"the silent client was cut after {cut:.2f}s"
    assert probe.wait_for(lambda p: p.ended == 2, WAIT)  # both apps ended, one way or another


@pytest.mark.parametrize("how, code, reason", [("shutdown", GOING_AWAY, "server shutting down"),
                                               ("retire", SERVICE_RESTART, "server restarting")])
def test_a_websocket_accepted_after_the_shutdown_began_closes_too(server_loop, how, code, reason):
    """The app was still deciding a handshake when the graceful shutdown told the open
    WebSockets to close (a worker retiring under load meets this): the WebSocket it accepts
    then closes at once too, with the same code, and the server stops without waiting for
    its graceful timeout."""
    deciding = threading.Event()
    codes = []
    held = {}

    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        deciding.set()
        state = held["server"].server.state
        while not state.shutting_down:
            await asyncio.sleep(0.005)  # polling the server's state: nothing signals it
        await send({"type": "websocket.accept"})
        codes.append((await receive()).get("code"))

    with ThreadServer(app, loop=server_loop, lifespan="off", timeout_graceful_shutdown=20) as server:
        held["server"] = server
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            connecting = pool.submit(ws_connect, server.port, "/late")
            assert deciding.wait(WAIT), "the handshake did not reach the app"
            started = time.monotonic()
            getattr(server.server, how)()
            with connecting.result(WAIT) as ws:
                assert closed_by_server(ws) == (code, reason)
            wait_stopped(server)
            took = time.monotonic() - started
    assert took < 5, f"the server took {took:.1f}s to stop although the client answered at once"
    assert codes == [code]


# -- limits -------------------------------------------------------------------------------

def connect_when_admitted(port, path, deadline):
    """ws_connect, retrying while the server answers 503: a finished app frees its slot in the
    server's count a moment after the app itself has returned."""
    while True:
        try:
            return ws_connect(port, path)
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or time.monotonic() > deadline:
                raise


def test_limit_concurrency_counts_websocket_connections(server_loop, probe):
    with ThreadServer(create_app(probe), loop=server_loop, limit_concurrency=2) as server:
        with ws_connect(server.port, "/1") as first, ws_connect(server.port, "/2") as second:
            for ws in (first, second):
                echo_round_trips(ws, [10])
            assert refused_status(server.port, "/3") == 503
            with client_for(server) as http:
                assert http.get("/").status_code == 503  # plain requests share the limit
            first.close()
            assert probe.wait_for(lambda p: p.ended == 1, WAIT)
            with connect_when_admitted(server.port, "/3", time.monotonic() + WAIT) as third:
                echo_round_trips(third, [10])
                assert refused_status(server.port, "/4") == 503


def test_max_requests_counts_websocket_connections(probe):
    # Three handshakes make three requests: the server then stops by itself, closing the three
    # open WebSockets with 1001. Messages are not requests: the forty sent first do not count.
    with LogLines("swordfish.error") as log:
        with ThreadServer(create_app(probe), max_requests=3, timeout_graceful_shutdown=10) as server:
            with contextlib.ExitStack() as stack:
                clients = []
                for i in range(3):
                    clients.append(stack.enter_context(ws_connect(server.port, f"/{i}")))
                    if i < 2:
                        for _ in range(10):
                            echo_round_trips(clients[-1], [3])
                assert [closed_by_server(ws)[0] for ws in clients] == [GOING_AWAY] * 3
                wait_stopped(server)
    assert any(re.search(r"max requests reached \(3 of 3\)", m) for m in log.messages()), log.messages()


def test_access_log_has_a_line_per_handshake(server_loop, probe):
    with LogLines("swordfish.access") as log:
        with ThreadServer(create_app(probe), loop=server_loop, access_log=True) as server:
            with ws_connect(server.port, "/echo?n=1") as ws:
                echo_round_trips(ws, [1, 2, 3])  # messages make no lines
            assert refused_status(server.port, "/deny?x=2") == 403
            log.wait(2)
    lines = log.messages()  # the server has stopped: every line is written
    assert len(lines) == 2, lines
    accepted = [line for line in lines if '"GET /echo?n=1 HTTP/1.1" 101 ' in line]
    denied = [line for line in lines if '"GET /deny?x=2 HTTP/1.1" 403 ' in line]
    assert len(accepted) == 1 and len(denied) == 1, lines
    assert all(line.startswith("127.0.0.1:") and line.endswith("ms") for line in lines), lines


# -- transports and loops -------------------------------------------------------------------

def test_wss(server_loop, probe, tls_files):  # noqa: F811 (fixture)
    cert, key = tls_files
    context = ssl.create_default_context(cafile=cert)
    options = {"ssl_certfile": cert, "ssl_keyfile": key}

    async def session(port):
        # websockets' asyncio client: its threaded one is not safe over TLS (ws_connect_async).
        async with ws_connect_async(port, "/secure?x=1", scheme="wss", ssl=context, max_size=None) as ws:
            assert negotiated_extensions(ws).startswith("permessage-deflate")
            await ws.send("scope")
            scope = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
            for n in SIZES:
                for message in (("ß€x" * n)[:n], payload(n, seed=n)):
                    await ws.send(message)
                    assert await asyncio.wait_for(ws.recv(), WAIT) == message
            await ws.send("close")
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), WAIT)
            frame = closed.value.rcvd
            assert frame is not None, f"the connection ended without a close frame: {closed.value!r}"
            return scope, (frame.code, frame.reason)

    with ThreadServer(create_app(probe), loop=server_loop, **options) as server:
        scope, close = asyncio.run(session(server.port))
    assert (scope["scheme"], scope["path"], scope["query_string"]) == ("wss", "/secure", "x=1")
    assert close == (1000, "bye")


@pytest.mark.parametrize("loop_name", ["swordfish", "asyncio", "uvloop"])
def test_websockets_on_each_loop(loop_name, probe):
    if loop_name == "uvloop":
        pytest.importorskip("uvloop")
    with ThreadServer(create_app(probe), loop=loop_name) as server:
        for compression in ("deflate", None):
            with ws_connect(server.port, "/loop", compression=compression, subprotocols=["a", "b"]) as ws:
                assert ws.subprotocol == "a"
                assert negotiated_extensions(ws).startswith("permessage-deflate") == (compression is not None)
                echo_round_trips(ws)
                assert ws.ping(b"are you there").wait(WAIT)  # the server answers pings
                ws.send("scope")
                assert json.loads(ws.recv(timeout=WAIT))["http_version"] == "1.1"
        with ws_connect(server.port, "/loop") as ws:
            ws.send("close")
            assert closed_by_server(ws) == (1000, "bye")
    assert probe.disconnect_codes == [1000, 1000]  # the clients' two closes; the app's own is not one


@pytest.mark.timeout(120)
def test_workers_serve_websockets_and_close_them_on_sigterm():
    with CliServer("apps.ws_echo_app:app", "--workers", "2", "--no-access-log") as srv:
        assert srv.listening.wait(30) and srv.port, "the server did not start:\n" + srv.output()
        held, deadline = {}, time.monotonic() + 30
        with contextlib.ExitStack() as stack:
            # A worker whose loop is blocked cannot accept: the second connection goes to the
            # other worker (retried: the first worker may accept it before it reads "block").
            while len(held) < 2:
                assert time.monotonic() < deadline, f"one worker took every connection:\n{srv.output()}"
                with contextlib.ExitStack() as attempt:
                    busy = attempt.enter_context(ws_connect(srv.port, "/w"))
                    busy.send("block 0.3")
                    other = attempt.enter_context(ws_connect(srv.port, "/w"))
                    other.send("pid")
                    pids = {int(busy.recv(timeout=WAIT)): busy, int(other.recv(timeout=WAIT)): other}
                    if len(pids) == 2:
                        held = pids
                        stack.push(attempt.pop_all())  # kept open until the end of the test
            for ws in held.values():
                echo_round_trips(ws, [70_000])
            srv.proc.send_signal(signal.SIGTERM)
            assert [closed_by_server(ws)[0] for ws in held.values()] == [GOING_AWAY] * 2
            assert srv.proc.wait(30) == 0, srv.output()


# -- no leak ----------------------------------------------------------------------------------

def process_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def process_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fds_down_to(pid, limit, timeout=5.0):
    """The server's open descriptors once they are at most limit (the last connections close a
    moment after their clients saw them closed), or the count at the deadline."""
    deadline = time.monotonic() + timeout
    while (n := process_fds(pid)) > limit and time.monotonic() < deadline:
        time.sleep(0.02)  # polling an observable count, not waiting for time to pass
    return n


def server_sample(port, pid, fds_limit):
    """(descriptors, GC-tracked objects, live tasks, RSS) of the idle server. The app collects
    garbage first (it answers "stats" after gc.collect()), so that cyclic garbage waiting for a
    collection neither hides nor fakes a leak, and the RSS is read after it."""
    fds = fds_down_to(pid, fds_limit)
    with ws_connect(port, "/stats") as ws:
        ws.send("stats")
        stats = json.loads(ws.recv(timeout=WAIT))
    return fds, stats["objects"], stats["tasks"], process_rss(pid)


async def connect_close_cycles(port, first, count, concurrency=50):
    """count cycles, concurrency at a time: connect (deflate offered), one echo, then an end that
    varies with the cycle number: the client's close, the server's close, or an abrupt drop."""
    numbers = iter(range(first, first + count))

    async def cycle(i):
        ws = await ws_connect_async(port, f"/cycle?{i}")
        await ws.send("x")
        assert await ws.recv() == "x"
        if i % 10 == 0:
            ws.transport.abort()  # no closing handshake: the server sees the connection drop
        elif i % 10 < 4:
            await ws.send("close")  # the app closes
        else:
            await ws.close()
        await asyncio.wait_for(ws.wait_closed(), WAIT)
        assert i % 10 == 0 or ws.close_code == 1000, (i, ws.close_code)

    async def worker():
        for i in numbers:
            await cycle(i)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), 60)


@pytest.mark.timeout(120)
def test_ten_thousand_connect_close_cycles_leak_nothing():
    warmup, rounds, per_round = 1000, 9, 1000
    with CliServer("apps.ws_echo_app:app", "--no-access-log") as srv:
        assert srv.listening.wait(30) and srv.port, "the server did not start:\n" + srv.output()
        pid = srv.proc.pid
        idle_fds = process_fds(pid)
        started = time.monotonic()
        samples = []

        def report():
            return (f"{len(samples) * per_round} cycles in {time.monotonic() - started:.1f}s; descriptors idle "
                    f"{idle_fds}; after the warm-up and each round (fds, GC objects, tasks, RSS KiB): "
                    f"{[(f, o, t, m // 1024) for f, o, t, m in samples]}")

        # The warm-up lets the allocator and the server's caches reach their working size (and
        # may open a few lasting descriptors); what grows after it, grows with the connections.
        asyncio.run(connect_close_cycles(srv.port, 0, warmup))
        samples.append(server_sample(srv.port, pid, idle_fds + 8))
        base_fds, base_objects, base_tasks, base_rss = samples[0]
        assert base_fds <= idle_fds + 8, "descriptors leak: " + report()
        for r in range(rounds):
            asyncio.run(connect_close_cycles(srv.port, warmup + r * per_round, per_round))
            samples.append(server_sample(srv.port, pid, base_fds))
            assert samples[-1][0] <= base_fds, "descriptors leak: " + report()
        assert srv.proc.poll() is None, srv.output()
    _, last_objects, last_tasks, last_rss = samples[-1]
    assert last_tasks <= base_tasks, "tasks leak: " + report()
    assert last_objects - base_objects <= OBJECTS_TOLERANCE, "Python objects leak: " + report()
    assert last_rss - base_rss <= RSS_TOLERANCE, "memory grows: " + report()
