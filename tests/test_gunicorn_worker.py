"""`gunicorn -k swordfish.gunicorn.Worker`: gunicorn (from PyPI) as the process manager,
swordfish serving in each worker. ASGI and WSGI apps, gunicorn's access log format, its
signals (TERM graceful with a request in flight, HUP replacing the workers), its
--max-requests, its --timeout killing a worker whose loop is stuck, its limits, TLS, and
HTTP/2 as gunicorn's own settings ask for it (ALPN over TLS, h2c)."""

import asyncio
import re
import signal
import ssl
import sys
import time

import pytest

from apps.serving import (DEADLINE, TESTS, ServeProcess, exchange, get, pid_of, read_rest, socket_to, split_response,
                           start_in_flight)
from h2util import PREFACE, H2Client, tls_client_context
from netutil import tls_files  # noqa: F401 (fixture)

ASGI, WSGI = "apps.env_app:app", "apps.wsgi_app:app"


def gunicorn(app, *args, worker="swordfish.gunicorn.Worker"):
    cmd = [sys.executable, "-m", "gunicorn", "-k", worker, "--chdir", TESTS,
           "--bind", "127.0.0.1:0", "--graceful-timeout", "10", *args, app]
    return ServeProcess(cmd=cmd)


# The WSGI app on gunicorn's workers of both kinds: on the loop, and on the thread engine.
WSGI_WORKERS = pytest.mark.parametrize("worker", ["swordfish.gunicorn.Worker", "swordfish.gunicorn.ThreadWorker"])


def port_of(srv):
    m, _ = srv.wait_line(r"Listening at: https?://127\.0\.0\.1:(\d+)")
    return int(m.group(1))


def until(condition, what):
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("app, worker", [(ASGI, "swordfish.gunicorn.Worker"), (WSGI, "swordfish.gunicorn.Worker"),
                                         (WSGI, "swordfish.gunicorn.ThreadWorker")])
def test_serves_asgi_and_wsgi_apps_on_every_worker(app, worker):
    srv = gunicorn(app, "--workers", "2", worker=worker)
    try:
        port = port_of(srv)
        srv.wait_line(r"swordfish worker serving", count=2)
        pids = {pid_of(port) for _ in range(20)}
        assert pids and srv.proc.pid not in pids
    finally:
        assert srv.stop() == 0, srv.log()


def test_access_log_in_gunicorns_format():
    srv = gunicorn(ASGI, "--access-logfile", "-")
    try:
        port = port_of(srv)
        status, body = exchange(port, b"GET /pid?x=1 HTTP/1.1\r\nHost: t\r\nUser-Agent: probe/2\r\n"
                                      b"Referer: http://r/\r\nConnection: close\r\n\r\n")
        assert status == 200
        m, _ = srv.wait_line(r'^127\.0\.0\.1 - - \[[^\]]+\] "GET /pid\?x=1 HTTP/1\.1" 200 (\d+) "http://r/" "probe/2"$')
        assert int(m.group(1)) == len(body)
    finally:
        srv.stop()


@WSGI_WORKERS
def test_sigterm_lets_a_request_in_flight_finish(worker):
    srv = gunicorn(WSGI, worker=worker)
    try:
        port = port_of(srv)
        srv.wait_line(r"swordfish worker serving")
        s, data = start_in_flight(port, "/slow?t=1")
        srv.proc.send_signal(signal.SIGTERM)
        assert split_response(read_rest(s, data)) == (200, b"begin\nend\n")
    finally:
        assert srv.wait() == 0, srv.log()


def test_hup_replaces_the_workers():
    srv = gunicorn(ASGI, "--workers", "1")
    try:
        port = port_of(srv)
        srv.wait_line(r"swordfish worker serving")
        before = pid_of(port)
        srv.proc.send_signal(signal.SIGHUP)
        srv.wait_line(r"swordfish worker serving", count=2)
        until(lambda: pid_of(port) != before, "the worker was not replaced")
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("app, worker", [(ASGI, "swordfish.gunicorn.Worker"), (WSGI, "swordfish.gunicorn.ThreadWorker")])
def test_max_requests_recycles_the_worker(app, worker):
    srv = gunicorn(app, "--workers", "1", "--max-requests", "3", worker=worker)
    try:
        port = port_of(srv)
        seen = set()
        until(lambda: seen.add(pid_of(port)) or len(seen) >= 2, "no new worker after --max-requests")
    finally:
        srv.stop()


def test_a_worker_whose_loop_is_stuck_is_replaced_after_timeout():
    srv = gunicorn(ASGI, "--workers", "1", "--timeout", "2")
    try:
        port = port_of(srv)
        srv.wait_line(r"swordfish worker serving")
        stuck = pid_of(port)
        s = socket_to(port)
        s.sendall(b"GET /block?t=60 HTTP/1.1\r\nHost: t\r\n\r\n")
        srv.wait_line(r"WORKER TIMEOUT \(pid:%d\)" % stuck)
        until(lambda: pid_of(port) != stuck, "the stuck worker was not replaced")
        s.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("args,raw,status", [
    (["--limit-request-line", "40"], b"GET /" + b"a" * 60 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414),
    (["--limit-request-field_size", "20"], b"GET / HTTP/1.1\r\nHost: t\r\nX-Long: " + b"v" * 30 + b"\r\n\r\n", 431),
    (["--limit-request-fields", "2"], b"GET / HTTP/1.1\r\nHost: t\r\nA: 1\r\nB: 2\r\n\r\n", 431),
])
def test_gunicorns_limits(args, raw, status):
    srv = gunicorn(ASGI, *args)
    try:
        assert exchange(port_of(srv), raw)[0] == status
    finally:
        srv.stop()


def test_keep_alive_setting_closes_idle_connections():
    srv = gunicorn(ASGI, "--keep-alive", "1")
    try:
        port = port_of(srv)
        s = socket_to(port)
        s.sendall(b"GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
        started = time.monotonic()
        data = read_rest(s)  # the response, then the close after a second idle
        assert data.startswith(b"HTTP/1.1 200") and 0.5 < time.monotonic() - started < 5
    finally:
        srv.stop()


def test_tls(tls_files):  # noqa: F811
    cert, key = tls_files
    srv = gunicorn(ASGI, "--certfile", cert, "--keyfile", key)
    try:
        port = port_of(srv)
        ctx = ssl.create_default_context(cafile=cert)
        assert get(port, "/pid", ctx)[0] == 200
        assert re.search(r"Listening at: https://", srv.log())
    finally:
        srv.stop()


def h2_get(port, path, tls=None):
    async def main():
        c = await H2Client.open(port, tls=tls)
        try:
            r = await c.request(b"GET", path.encode())
            return r.status, r.body
        finally:
            c.close()

    return asyncio.run(main())


def test_http2_over_tls_when_gunicorn_offers_h2(tls_files):  # noqa: F811
    cert, key = tls_files
    srv = gunicorn(ASGI, "--certfile", cert, "--keyfile", key, "--http-protocols", "h2,h1")
    try:
        port = port_of(srv)
        status, body = h2_get(port, "/pid", tls_client_context(cert))
        assert status == 200 and int(body) > 0
        # HTTP/1.1 still, for a client that offers only it.
        assert get(port, "/pid", ssl.create_default_context(cafile=cert))[0] == 200
    finally:
        srv.stop()


@pytest.mark.parametrize("app", [ASGI, WSGI])
def test_h2c_when_gunicorn_asks_for_it(app):
    srv = gunicorn(app, "--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge",
                   "--http2-max-concurrent-streams", "7")
    try:
        port = port_of(srv)
        status, body = h2_get(port, "/pid")
        assert status == 200 and int(body) > 0

        async def streams():
            c = await H2Client.open(port)
            await c.request(b"GET", b"/pid")
            n = c.conn.remote_settings.max_concurrent_streams
            c.close()
            return n

        assert asyncio.run(streams()) == 7
    finally:
        srv.stop()


def test_no_http2_unless_gunicorn_asks_for_it():
    """gunicorn's default `--http-protocols h1`: a client's HTTP/2 preface is not served."""
    srv = gunicorn(ASGI)
    try:
        port = port_of(srv)
        with socket_to(port) as s:
            s.sendall(PREFACE)
            answer = read_rest(s)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
        assert get(port, "/pid")[0] == 200
    finally:
        srv.stop()
