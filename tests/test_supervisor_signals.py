"""The supervisor's signals under load: SIGHUP replaces every worker by one running the new
code with no request failed and no connection reset (kept-alive clients, a connection per
request, WebSocket clients that get 1012 and reconnect; an ASGI and a WSGI app), a SIGHUP
to broken code leaves the old workers serving, a kept-alive connection of a retiring
worker is closed only between requests, SIGTTIN / SIGTTOU change the number of workers,
SIGUSR1 reopens the log files everywhere, and `kill -9` of a worker fails exactly the
requests in flight on it.

Every client counts what it sent and what came back; waits are on log lines, responses and
process exits, with deadlines."""

import http.client
import json
import os
import signal
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from apps.serving import DEADLINE, read_rest, read_until, socket_to
from subprocessutil import children
from test_http_workers import Served, alive, get, pids_seen
from wsgiutil import WSGI_ENGINE

pytestmark = pytest.mark.timeout(180)

ASGI_APP = """
import os

VERSION = {version!r}


async def app(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({{"type": "websocket.accept"}})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({{"type": "websocket.send", "text": message["text"]}})
    if scope["type"] != "http":
        return
    body = f"{{VERSION}} {{os.getpid()}}".encode()
    await send({{"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}})
    await send({{"type": "http.response.body", "body": body}})
"""

WSGI_APP = """
import os

VERSION = {version!r}


def app(environ, start_response):
    body = f"{{VERSION}} {{os.getpid()}}".encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""


def serve_module(tmp_path, template, *args, version="v1"):
    """`swordfish serve hupapp:app --workers 2 ARGS` from tmp_path/hupapp.py."""
    (tmp_path / "hupapp.py").write_text(template.format(version=version))
    return Served("--app-dir", str(tmp_path), "--port", "0", "--workers", "2", "--no-access-log",
                  "--wsgi-engine", WSGI_ENGINE, *args, app="hupapp:app")


class Load:
    """Clients that run until `stop()`: `keep_alive` of them on kept-alive connections
    (http.client, which opens a new connection after a response that says `connection:
    close`, as every HTTP client does), `per_request` making a connection per request, and
    `websockets` echoing on a WebSocket, reconnecting after a close with 1012 (service
    restart). Every answer is counted by its body; anything else is a failure."""

    def __init__(self, port, keep_alive=3, per_request=2, websockets=0):
        self.port = port
        self.lock = threading.Lock()
        self.bodies = []
        self.failures = []
        self.echoes = 0
        self.restarts = 0  # WebSocket closes with 1012
        self.by_kind = {"kept alive": 0, "per request": 0}
        self.connections = 0  # opened by the kept-alive clients (http.client reconnects)
        self.done = threading.Event()
        self.threads = ([threading.Thread(target=self._kept_alive) for _ in range(keep_alive)]
                        + [threading.Thread(target=self._per_request) for _ in range(per_request)]
                        + [threading.Thread(target=self._websocket) for _ in range(websockets)])

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(DEADLINE)
        assert not any(t.is_alive() for t in self.threads), "a client is stuck"

    def _answered(self, status, body, kind):
        with self.lock:
            if status == 200:
                self.bodies.append(body)
                self.by_kind[kind] += 1
            else:
                self.failures.append((status, body))

    def _failed(self, what):
        with self.lock:
            self.failures.append(what)

    def _kept_alive(self):
        load = self

        class Counted(http.client.HTTPConnection):
            def connect(self):
                super().connect()
                with load.lock:
                    load.connections += 1

        conn = Counted("127.0.0.1", self.port, timeout=DEADLINE)
        try:
            while not self.done.is_set():
                try:
                    conn.request("GET", "/")
                    response = conn.getresponse()
                    self._answered(response.status, response.read(), "kept alive")
                except (OSError, http.client.HTTPException) as exc:
                    self._failed(repr(exc))
                    conn.close()
        finally:
            conn.close()

    def _per_request(self):
        while not self.done.is_set():
            try:
                self._answered(*get(self.port, "/"), "per request")
            except OSError as exc:
                self._failed(repr(exc))

    def _websocket(self):
        while not self.done.is_set():
            try:
                with ws_connect(f"ws://127.0.0.1:{self.port}/", open_timeout=DEADLINE) as ws:
                    while not self.done.is_set():
                        ws.send("echo")
                        if ws.recv(timeout=DEADLINE) != "echo":
                            self._failed("a wrong echo")
                        with self.lock:
                            self.echoes += 1
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code == 1012:
                    with self.lock:
                        self.restarts += 1
                else:
                    self._failed(repr(exc))
            except Exception as exc:
                self._failed(repr(exc))

    def wait(self, what, timeout=DEADLINE):
        """Until what(self) is true, failing at the first failure."""
        deadline = time.monotonic() + timeout
        while not what(self):
            assert not self.failures, self.failures
            assert time.monotonic() < deadline, "the load did not get there"
            time.sleep(0.01)  # polling the clients' counts

    def served_by(self, pids):
        with self.lock:
            return {int(b.split()[1]) for b in self.bodies} & set(pids)


def wait_exited(pids, srv):
    deadline = time.monotonic() + DEADLINE
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.02)  # polling for process exit


def reload_under_load(srv, path, template, websockets):
    first = srv.wait_workers(2)
    port = srv.port()
    with Load(port, websockets=websockets) as load:
        load.wait(lambda x: len(x.bodies) >= 50 and x.echoes >= 20 * websockets)
        path.write_text(template.format(version="v2"))
        _, at = srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
        srv.proc.send_signal(signal.SIGHUP)
        _, at = srv.wait_line(r"SIGHUP: reloading 2 workers", start=at)
        for old in first:
            srv.wait_line(rf"worker \d+ listens: retiring worker {old}\b", start=at)
        wait_exited(first, srv)
        new = children(srv.proc.pid, zombies=False)
        assert len(new) == 2 and not new & first
        # Both new workers answer, with the new code, and the WebSockets came back.
        count = len(load.bodies)
        load.wait(lambda x: len(x.served_by(new)) == 2 and len(x.bodies) > count + 50)
        load.wait(lambda x: x.restarts >= websockets)
        echoes = load.echoes
        load.wait(lambda x: x.echoes >= echoes + 10 * websockets)
    assert load.failures == [], f"{load.failures}\n{srv.log()}"
    after = [b for b in load.bodies if int(b.split()[1]) in new]
    assert after and all(b.startswith(b"v2 ") for b in after)
    assert all(b.startswith(b"v1 ") for b in load.bodies if int(b.split()[1]) in first)
    # Every WebSocket client heard 1012 once per worker it was on; none reconnected for
    # another reason (a failure above).
    assert load.restarts >= websockets
    # The figures of docs/reliability.md (pytest -s shows them).
    print(f"\nSIGHUP under load: {len(load.bodies)} requests answered ({load.by_kind['kept alive']} on "
          f"{load.connections} kept-alive connections, {load.by_kind['per request']} one per connection), "
          f"{load.echoes} WebSocket echoes, {load.restarts} closes with 1012, {len(load.failures)} failed")
    return load


@pytest.mark.parametrize("template", [ASGI_APP, WSGI_APP], ids=["asgi", "wsgi"])
def test_sighup_replaces_every_worker_under_load_without_a_failed_request(tmp_path, template):
    with serve_module(tmp_path, template) as srv:
        load = reload_under_load(srv, tmp_path / "hupapp.py", template, websockets=2 if template is ASGI_APP else 0)
        assert len(load.bodies) > 100
        assert srv.stop() == 0, srv.log()


def test_reload_and_max_requests_retire_as_sighup_does(tmp_path):
    """--max-requests replaces workers by the same retirement: kept-alive clients and
    WebSockets lose nothing either."""
    (tmp_path / "hupapp.py").write_text(ASGI_APP.format(version="v1"))
    with Served("--app-dir", str(tmp_path), "--port", "0", "--workers", "2", "--no-access-log",
                "--max-requests", "40", "--max-requests-jitter", "10", app="hupapp:app") as srv:
        first = srv.wait_workers(2)
        with Load(srv.port(), websockets=2) as load:
            for old in first:
                srv.wait_line(rf"worker \d+ listens: retiring worker {old}\b")
            wait_exited(first, srv)
            load.wait(lambda x: x.restarts >= 2)
            count = len(load.bodies)
            load.wait(lambda x: len(x.bodies) > count + 50)
        assert load.failures == [], f"{load.failures}\n{srv.log()}"
        assert srv.stop() == 0, srv.log()


def test_sighup_to_broken_code_leaves_the_old_workers_serving(tmp_path):
    with serve_module(tmp_path, ASGI_APP) as srv:
        first = srv.wait_workers(2)
        port = srv.port()
        (tmp_path / "hupapp.py").write_text("raise RuntimeError('broken')\n")
        srv.proc.send_signal(signal.SIGHUP)
        srv.wait_line(r"exited with 2 before it started: the workers it was to replace serve on", count=2)
        assert children(srv.proc.pid, zombies=False) == first
        assert {int(get(port, "/")[1].split()[1]) for _ in range(10)} <= first
        # Fixed, the next SIGHUP replaces them.
        (tmp_path / "hupapp.py").write_text(ASGI_APP.format(version="v3"))
        srv.proc.send_signal(signal.SIGHUP)
        for old in first:
            srv.wait_line(rf"listens: retiring worker {old}\b")
        wait_exited(first, srv)
        assert get(port, "/")[1].startswith(b"v3 ")
        assert srv.stop() == 0, srv.log()


def kept_alive_request(s, path="/"):
    """GET path on the kept-alive socket s: (status, body, whether the response said close)."""
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    head, _, body = read_until(s, b"\r\n\r\n").partition(b"\r\n\r\n")
    fields = dict(line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, head
        body += chunk
    return int(head.split()[1]), body, b"connection: close" in head.lower()


@pytest.mark.parametrize("template", [ASGI_APP, WSGI_APP], ids=["asgi", "wsgi"])
def test_a_retiring_worker_closes_a_kept_alive_connection_only_between_requests(tmp_path, template):
    with serve_module(tmp_path, template, "--timeout-keep-alive", "3") as srv:
        first = srv.wait_workers(2)
        port = srv.port()
        # Connections kept alive on the first workers, idle when the reload comes.
        conns = []
        for _ in range(6):
            s = socket_to(port)
            status, body, close = kept_alive_request(s)
            assert status == 200 and not close
            conns.append((s, int(body.split()[1])))
        assert {pid for _, pid in conns} <= first
        srv.proc.send_signal(signal.SIGHUP)
        for old in first:
            srv.wait_line(rf"retiring \(pid {old}\): draining")
        # Each retiring worker still answers the next request on its connection, saying
        # `connection: close`, and then closes it (a FIN, not a reset).
        for s, pid in conns[:4]:
            status, body, close = kept_alive_request(s)
            assert (status, close, int(body.split()[1])) == (200, True, pid)
            assert read_rest(s) == b""
        # Left idle, a connection closes at its keep-alive timeout, cleanly.
        for s, _ in conns[4:]:
            s.settimeout(DEADLINE)
            assert s.recv(1) == b""
            s.close()
        wait_exited(first, srv)
        assert srv.stop() == 0, srv.log()


def test_sigttin_adds_a_worker_and_sigttou_retires_the_oldest(tmp_path):
    with serve_module(tmp_path, ASGI_APP) as srv:
        first = srv.wait_workers(2)
        port = srv.port()
        with Load(port, websockets=1) as load:
            _, at = srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
            srv.proc.send_signal(signal.SIGTTIN)
            _, at = srv.wait_line(r"SIGTTIN: 3 workers", start=at)
            m, at = srv.wait_line(r"serving on .*\(pid (\d+)\)", start=at)
            third = int(m.group(1))
            assert children(srv.proc.pid, zombies=False) == first | {third}
            load.wait(lambda x: third in x.served_by({third}))

            for left in (2, 1):
                srv.proc.send_signal(signal.SIGTTOU)
                m, at = srv.wait_line(rf"SIGTTOU: {left} workers: retiring worker (\d+)", start=at)
                retired = int(m.group(1))
                assert retired in first  # the oldest: the third is the newest
                wait_exited([retired], srv)
                deadline = time.monotonic() + DEADLINE
                while len(children(srv.proc.pid, zombies=False)) != left:
                    assert time.monotonic() < deadline, srv.log()
                    time.sleep(0.02)  # polling for the exit to be reaped
            assert children(srv.proc.pid, zombies=False) == {third}
            srv.proc.send_signal(signal.SIGTTOU)
            srv.wait_line(r"SIGTTOU: one worker left: it stays", start=at)
            count = len(load.bodies)
            load.wait(lambda x: len(x.bodies) > count + 20 and x.restarts >= 1)
        assert load.failures == [], f"{load.failures}\n{srv.log()}"
        assert children(srv.proc.pid, zombies=False) == {third}
        assert srv.stop() == 0, srv.log()


def test_sigusr1_reopens_the_log_files_of_the_supervisor_and_every_worker(tmp_path):
    log = tmp_path / "swordfish.log"
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(process)d %(levelname)s %(message)s"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"},
            "file": {"class": "logging.FileHandler", "formatter": "plain", "filename": str(log)},
        },
        "loggers": {"swordfish": {"level": "INFO", "handlers": ["console", "file"]}},
    }
    (tmp_path / "logging.json").write_text(json.dumps(config))
    (tmp_path / "hupapp.py").write_text(ASGI_APP.format(version="v1"))
    with Served("--app-dir", str(tmp_path), "--port", "0", "--workers", "2", "--log-config",
                str(tmp_path / "logging.json"), app="hupapp:app") as srv:
        workers = srv.wait_workers(2)
        port = srv.port()
        assert get(port, "/?before")[0] == 200
        rotated = tmp_path / "swordfish.log.1"
        os.rename(log, rotated)  # as logrotate does
        srv.proc.send_signal(signal.SIGUSR1)
        for pid in workers | {srv.proc.pid}:
            srv.wait_line(rf"^{pid} INFO SIGUSR1: reopened 1 log file")
        for _ in range(4):
            assert get(port, "/?after")[0] == 200
        srv.wait_line(r"GET /\?after", count=4)
        fresh = log.read_text()
        assert "/?after" in fresh and "/?before" not in fresh
        assert all(f"{pid} INFO SIGUSR1: reopened" in fresh for pid in workers | {srv.proc.pid})
        old = rotated.read_text()
        assert "/?before" in old and "/?after" not in old
        assert srv.stop() == 0, srv.log()


def test_kill_9_fails_only_the_requests_in_flight_on_that_worker(tmp_path):
    """Connections with a request in flight on both workers; one worker is killed: exactly
    its connections fail (the response cut short), the other worker's complete, and the
    supervisor starts the replacement at once."""
    with Served("--port", "0", "--workers", "2", "--no-access-log") as srv:
        pids = srv.wait_workers(2)
        port = srv.port()
        _, at = srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
        # Each connection learns its worker, then starts a slow request on it.
        flights = []
        deadline = time.monotonic() + DEADLINE
        while {pid for _, pid in flights} != pids or len(flights) < 8:
            assert time.monotonic() < deadline, "the connections did not reach both workers"
            s = socket_to(port)
            flights.append((s, int(kept_alive_request(s, "/pid")[1])))
        for s, _ in flights:
            s.sendall(b"GET /slow?t=3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        for s, _ in flights:  # every request is in flight: its app has begun answering
            read_until(s, b"begin\n")
        victim = min(pids)
        predicted = sum(1 for _, pid in flights if pid == victim)
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        srv.wait_line(rf"worker {victim} died \(exit -9\): starting a new one", start=at)
        m, _ = srv.wait_line(r"started worker (\d+)", start=at + 1)
        assert time.monotonic() - killed < 1.0, "the replacement was not started within a second"
        failed = 0
        for s, pid in flights:
            data = read_rest(s)
            if b"end\n" in data and data.endswith(b"\r\n0\r\n\r\n"):
                assert pid != victim
            else:
                failed += 1
                assert pid == victim, data
        assert failed == predicted
        new = int(m.group(1))
        srv.wait_line(rf"serving on .*\(pid {new}\)", start=at + 1)
        assert new in pids_seen(port, {new})
        assert srv.stop() == 0, srv.log()
