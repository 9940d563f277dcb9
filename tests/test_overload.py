"""Overload without a fall: a server whose descriptors run out (`ulimit -n`) under a flood
of slow clients (each holding a connection with a head it never finishes) closes the
connections that are least use (every idle kept-alive one first, then the oldest
incomplete heads) and serves a new client long before the header-read timeout would free
anything; it says so in its log, at most every 10 s. On swordfish's loop."""

import resource
import socket
import sys
import time

import pytest

from apps.serving import TESTS, ServeProcess, read_rest, socket_to, split_response

HEADER_TIMEOUT = "60"  # far longer than the test waits: only shedding can make room


@pytest.fixture(autouse=True)
def enough_descriptors():
    """This process opens more sockets than the server may have."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def server_with_limit(nofile, *args):
    cmd = ["sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', sys.executable, "-m", "swordfish", "serve",
           "apps.env_app:app", "--app-dir", TESTS, "--port", "0", "--backlog", "4096",
           "--timeout-header-read", HEADER_TIMEOUT, "--no-access-log", *args]
    return ServeProcess(cmd=cmd)


def slow_clients(port, n):
    """n connections each holding an unfinished head."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHo")
        out.append(s)
    return out


def served_within(port, seconds):
    s = socket_to(port, timeout=seconds)
    s.sendall(b"GET /pid HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    started = time.monotonic()
    status, _ = split_response(read_rest(s))
    return status, time.monotonic() - started


def is_closed(s, timeout=5.0):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_flood_of_slow_clients_does_not_keep_a_new_client_out():
    srv = server_with_limit(1024)
    clients = []
    try:
        port = srv.port()
        clients = slow_clients(port, 1100)
        status, took = served_within(port, 20)
        assert status == 200 and took < 20
        srv.wait_line(r"out of file descriptors: closed 0 idle and \d+ incomplete connections to take new ones")
        # The oldest heads went first.
        assert is_closed(clients[0])
        assert not is_closed(clients[-1], timeout=0.2)
    finally:
        for s in clients:
            s.close()
        assert srv.stop() == 0, srv.log()


def test_idle_keep_alive_connections_go_first():
    srv = server_with_limit(256, "--timeout-keep-alive", "60")
    idle, heads = [], []
    try:
        port = srv.port()
        for _ in range(20):  # served once, then idle on keep-alive
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            idle.append(s)
        heads = slow_clients(port, 300)
        status, _ = served_within(port, 20)
        assert status == 200
        # The first time descriptors ran out, the idle ones made room enough: no head closed.
        m, _ = srv.wait_line(r"out of file descriptors: closed (\d+) idle and (\d+) incomplete")
        assert (int(m.group(1)), int(m.group(2))) == (20, 0)
        assert all(is_closed(s) for s in idle)
    finally:
        for s in idle + heads:
            s.close()
        assert srv.stop() == 0, srv.log()


def h2_served_once(port):
    """An h2c connection (prior knowledge) that made one request and is now idle."""
    from test_http2_attacks import Raw

    c = Raw(port)
    c.send(c.headers(1, b"/pid"))
    for frame in c.frames():
        if frame.stream_id == 1 and "END_STREAM" in frame.flags:
            return c
    raise AssertionError("no answer on stream 1")


def test_idle_http2_connections_go_first():
    """An HTTP/2 connection with no stream open is idle: shed first, with a GOAWAY."""
    srv = server_with_limit(256, "--timeout-keep-alive", "60")
    idle, heads = [], []
    try:
        port = srv.port()
        idle = [h2_served_once(port) for _ in range(20)]
        heads = slow_clients(port, 300)
        status, _ = served_within(port, 20)
        assert status == 200
        m, _ = srv.wait_line(r"out of file descriptors: closed (\d+) idle and (\d+) incomplete")
        assert (int(m.group(1)), int(m.group(2))) == (20, 0)
        assert all(c.goaway() == 0 for c in idle)  # NO_ERROR, then the connection closed
    finally:
        for c in idle:
            c.close()
        for s in heads:
            s.close()
        assert srv.stop() == 0, srv.log()
