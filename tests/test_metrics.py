"""`--metrics`: the supervisor's Prometheus endpoint, read with Prometheus's own text parser
(prometheus_client), summed over the workers: responses by status class and their
duration, bytes in and out to the byte, open connections and WebSockets as gauges, and
worker restarts, with what a dead worker counted kept; HTTP/2 streams as requests."""

import asyncio
import os
import signal
import socket
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect as ws_connect

from apps.serving import DEADLINE, ServeProcess, get, pid_of, read_rest, socket_to
from h2util import H2Client

APP = "apps.ws_echo_app:app"


def serve(*args):
    srv = ServeProcess("--port", "0", "--metrics", "--metrics-port", "0", *args, app=APP)
    m, _ = srv.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
    srv.metrics_port = int(m.group(1))
    return srv


def scrape(port):
    """{(sample name, frozenset of labels): value} of GET /metrics."""
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False, timeout=DEADLINE)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def until(srv, predicate, what):
    """The scrape that satisfies predicate, scraping again until DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while True:
        samples = scrape(srv.metrics_port)
        if predicate(samples):
            return samples
        assert time.monotonic() < deadline, f"{what}: last scrape {samples}\n{srv.log()}"


def byte_counts(port, raw):
    """Send raw on a connection of its own and read until the server closes: the bytes each way."""
    s = socket_to(port)
    s.sendall(raw)
    return len(raw), len(read_rest(s))


def requests_by_class(samples):
    return {c: value(samples, "swordfish_http_requests_total", status=c) for c in ("1xx", "2xx", "3xx", "4xx", "5xx")}


def test_every_response_is_counted_by_status_class_with_its_bytes_and_duration():
    srv = serve("--workers", "2")
    try:
        port = srv.port()
        until(srv, lambda s: value(s, "swordfish_workers") == 2, "both workers serving")
        close = b"Connection: close\r\n\r\n"
        raws = [b"GET / HTTP/1.1\r\nHost: t\r\n" + close] * 3
        raws += [b"GET /raise HTTP/1.1\r\nHost: t\r\n" + close] * 2
        raws += [b"GARBAGE\r\n\r\n"]  # refused before it is a request: a 400 still
        raws += [b"GET /deny HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"]  # 403
        sent = received = 0
        for raw in raws:
            out, back = byte_counts(port, raw)
            sent, received = sent + out, received + back
        samples = until(srv, lambda s: value(s, "swordfish_http_connections") == 0, "connections closed")
        assert requests_by_class(samples) == {"1xx": 0, "2xx": 3, "3xx": 0, "4xx": 2, "5xx": 2}
        assert value(samples, "swordfish_http_received_bytes_total") == sent
        assert value(samples, "swordfish_http_sent_bytes_total") == received
        assert value(samples, "swordfish_http_connections_total") == len(raws)
        name = "swordfish_http_request_duration_seconds"
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in samples.items() if k[0] == name + "_bucket"))
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1] == (float("inf"), 7)  # cumulative, all 7 in
        assert value(samples, name + "_count") == 7
        assert 0 < value(samples, name + "_sum") < 7 * 1.0
        assert value(samples, "swordfish_workers") == 2
        assert value(samples, "swordfish_worker_restarts_total") == 0
    finally:
        assert srv.stop() == 0, srv.log()


def test_http2_streams_are_counted_as_requests():
    """Streams on one HTTP/2 connection: each a request by its status, the connection one."""
    srv = serve()
    try:
        port = srv.port()

        async def streams():
            c = await H2Client.open(port)
            ids = [c.send(b"GET", b"/") for _ in range(4)] + [c.send(b"GET", b"/raise")]
            statuses = sorted([(await c.response(sid)).status for sid in ids])
            c.close()
            return statuses

        assert asyncio.run(streams()) == [200, 200, 200, 200, 500]
        samples = until(srv, lambda s: value(s, "swordfish_http_connections") == 0, "the connection closed")
        assert requests_by_class(samples) == {"1xx": 0, "2xx": 4, "3xx": 0, "4xx": 0, "5xx": 1}
        assert value(samples, "swordfish_http_connections_total") == 1
        assert value(samples, "swordfish_http_request_duration_seconds_count") == 5
    finally:
        assert srv.stop() == 0, srv.log()


def test_h2c_moved_off_the_wsgi_thread_engine_is_one_connection():
    """The thread engine moves an h2c connection to the loop: counted once, and closed once."""
    srv = ServeProcess("--port", "0", "--metrics", "--metrics-port", "0", "--interface", "wsgi",
                       "--wsgi-engine", "threads", app="apps.wsgi_app:app")
    m, _ = srv.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
    srv.metrics_port = int(m.group(1))
    try:
        port = srv.port()

        async def moved():
            c = await H2Client.open(port)
            statuses = [(await c.request(b"GET", b"/pid")).status for _ in range(3)]
            open_now = value(scrape(srv.metrics_port), "swordfish_http_connections")
            c.close()
            return statuses, open_now

        assert asyncio.run(moved()) == ([200] * 3, 1)
        samples = until(srv, lambda s: value(s, "swordfish_http_connections") == 0, "the connection closed")
        assert value(samples, "swordfish_http_connections_total") == 1
        assert requests_by_class(samples)["2xx"] == 3
    finally:
        assert srv.stop() == 0, srv.log()


def test_open_connections_and_websockets_are_gauges():
    srv = serve()
    try:
        port = srv.port()
        idle = []
        for _ in range(3):  # kept alive after one request each
            s = socket_to(port)
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            idle.append(s)
        with ws_connect(f"ws://127.0.0.1:{port}/echo") as ws:
            ws.send("hello")
            assert ws.recv(DEADLINE) == "hello"
            samples = scrape(srv.metrics_port)
            assert value(samples, "swordfish_http_connections") == 4
            assert value(samples, "swordfish_websocket_connections") == 1
            assert value(samples, "swordfish_websocket_connections_total") == 1
            assert requests_by_class(samples)["1xx"] == 1  # the 101 that switched to it
        for s in idle:
            s.close()
        samples = until(srv, lambda s: value(s, "swordfish_http_connections") == 0
                        and value(s, "swordfish_websocket_connections") == 0, "every connection closed")
        assert value(samples, "swordfish_http_connections_total") == 4
        assert value(samples, "swordfish_websocket_connections_total") == 1
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_dead_workers_counts_are_kept_and_its_restart_counted():
    srv = serve("--workers", "2")
    try:
        port = srv.port()
        srv.wait_line(r"started worker \d+", count=2)
        pids, n = set(), 0
        deadline = time.monotonic() + DEADLINE
        while len(pids) < 2:  # until both workers have served
            assert time.monotonic() < deadline, "one worker served everything"
            pids.add(pid_of(port))
            n += 1
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        _, i = srv.wait_line(r"worker %d died .*: starting a new one" % victim)
        srv.wait_line(r"serving on", start=i)
        samples = until(srv, lambda s: value(s, "swordfish_workers") == 2, "the replacement serving")
        assert value(samples, "swordfish_worker_restarts_total") == 1
        assert requests_by_class(samples)["2xx"] == n  # what the dead worker counted is still there
        assert get(port, "/")[0] == 200
        assert requests_by_class(scrape(srv.metrics_port))["2xx"] == n + 1
    finally:
        assert srv.stop() == 0, srv.log()


def test_the_endpoint_answers_metrics_only():
    srv = serve()
    try:
        srv.port()
        base = f"http://127.0.0.1:{srv.metrics_port}"
        assert httpx.get(base + "/", trust_env=False).status_code == 404
        assert httpx.get(base + "/metricsx", trust_env=False).status_code == 404
        assert httpx.post(base + "/metrics", trust_env=False).status_code == 501
        head = httpx.head(base + "/metrics", trust_env=False)
        assert head.status_code == 200 and int(head.headers["content-length"]) > 0 and head.content == b""
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_metrics_port_in_use_stops_the_server_with_a_clear_error():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        srv = ServeProcess("--port", "0", "--metrics", "--metrics-port", str(taken.getsockname()[1]), app=APP)
        assert srv.wait() == 1
        assert "metrics: cannot listen on 127.0.0.1:%d" % taken.getsockname()[1] in srv.log()
    finally:
        taken.close()


@pytest.mark.parametrize("bad", ["70000", "-1", "x"])
def test_a_bad_metrics_port_is_refused(bad):
    srv = ServeProcess("--port", "0", "--metrics", "--metrics-port", bad, app=APP)
    assert srv.wait() == 2
    assert "--metrics-port" in srv.log()
