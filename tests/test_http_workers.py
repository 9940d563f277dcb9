"""The CLI in a subprocess: `--workers` under the supervisor (distinct pids, a killed worker
is replaced, max-requests recycles without failed requests, SIGTERM drains and stops
accepting at once, SIGINT, the graceful timeout ends stuck requests), single-process
max-requests, `swordfish.serve()` (one process and workers), `--proxy-headers`, `--fd`,
`--uds`, `--loop uvloop`, and options from SWORDFISH_* variables. The app is workerapp.py.

Every wait is on an observable event (a log line, a response, a process exit) with a
deadline; the deadlines are generous for a loaded 2-core machine."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from apps.serving import ServeProcess, listening_socket, read_rest, socket_to, split_response, start_in_flight
from subprocessutil import children
from swordfish.server.proxy import ProxyHeaders, TrustedHosts

pytestmark = pytest.mark.timeout(180)

TESTS = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 30.0  # seconds for anything to happen


class Served(ServeProcess):
    """`python -m swordfish serve workerapp:app ARGS` (or the command cmd) with its log
    collected line by line (apps/serving.py), and its workers: waited for, and killed with
    it."""

    def __init__(self, *args, app="workerapp:app", **options):
        super().__init__(*args, app=app, **options)

    def wait_workers(self, n):
        """Waits until n workers listen; their pids."""
        self.wait_line(r"serving on .*\(pid \d+\)", count=n)
        return children(self.proc.pid, zombies=False)

    def close(self):
        super().close()
        for pid in children(self.proc.pid, zombies=False):
            _kill(pid)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def get(addr, path, headers=b"", timeout=10):
    """One request on a new connection (Connection: close): (status, body)."""
    with socket_to(addr, timeout) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + headers + b"\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return split_response(data)


def answering(addr, timeout=DEADLINE):
    """Polls until the server answers GET /pid; its pid."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, body = get(addr, "/pid", timeout=5)
            assert status == 200
            return int(body)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # polling interval, not synchronisation


def pids_seen(port, want, timeout=DEADLINE):
    """Concurrent requests that each block their worker briefly, until every pid in want
    has answered (a worker blocked in one request cannot accept the next connection)."""
    seen = set()
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(4) as pool:
        while not want <= seen:
            assert time.monotonic() < deadline, (want, seen)
            for status, body in pool.map(lambda _: get(port, "/pid?block=0.05"), range(4)):
                assert status == 200
                seen.add(int(body))
    return seen


# -- workers -------------------------------------------------------------------------------

def test_workers_serve_from_distinct_processes():
    with Served("--port", "0", "--workers", "3", "--no-access-log") as srv:
        pids = srv.wait_workers(3)
        assert len(pids) == 3 and srv.proc.pid not in pids
        assert pids_seen(srv.port(), pids) == pids
        assert srv.stop() == 0, srv.log()
        assert not any(alive(p) for p in pids)


def pid_kept_alive(s):
    """GET /pid on the open connection s, which stays open: the pid that answered."""
    s.sendall(b"GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            if (length and len(body) >= int(length.group(1))) or (not length and body.endswith(b"0\r\n\r\n")):
                return int(split_response(data)[1])
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk


@pytest.mark.parametrize("how", [(), ("--interface", "wsgi", "--wsgi-engine", "threads")],
                         ids=["loop", "wsgi-thread-engine"])
def test_workers_share_a_burst_of_connections_evenly(how):
    """40 keep-alive connections opened at once: each worker holds about half (without the
    connection board, the first worker awake took 2-4 times the other's share), on the
    loop and on the WSGI thread engine (its own accept, the same board)."""
    app = "apps.wsgi_app:app" if how else "workerapp:app"
    with Served("--port", "0", "--workers", "2", "--no-access-log", *how, app=app) as srv:
        pids = srv.wait_workers(2)
        port = srv.port()
        conns = [socket_to(port) for _ in range(40)]
        try:
            with ThreadPoolExecutor(8) as pool:
                answered = list(pool.map(pid_kept_alive, conns))
        finally:
            for c in conns:
                c.close()
        held = [answered.count(p) for p in sorted(pids)]
        assert set(answered) <= pids
        assert max(held) <= 1.5 * min(held), held
        assert srv.stop() == 0, srv.log()


def test_a_worker_over_its_share_still_accepts_while_the_other_is_stuck():
    """One worker's loop blocked (its count stays the lowest): the other, over its share,
    still takes new connections, one every few tens of milliseconds, not after the block."""
    block = 6.0
    with Served("--port", "0", "--workers", "2", "--no-access-log") as srv:
        srv.wait_workers(2)
        port = srv.port()
        blocker = socket_to(port, timeout=block + DEADLINE)
        blocker.sendall(b"GET /pid?block=%d HTTP/1.1\r\nHost: t\r\n\r\n" % block)
        # The blocked worker answers nothing while blocked: the first pid to answer on a
        # new connection is the other worker's, and from then on every one is.
        free = answering(port)
        started = time.monotonic()
        conns = []
        try:
            for _ in range(12):
                conns.append(socket_to(port))
                assert pid_kept_alive(conns[-1]) == free
            took = time.monotonic() - started
        finally:
            for c in conns:
                c.close()
        assert took < block / 2, took
        blocker.close()
        assert srv.stop() == 0, srv.log()


def test_killed_worker_is_replaced():
    with Served("--port", "0", "--workers", "2", "--no-access-log") as srv:
        pids = srv.wait_workers(2)
        port = srv.port()
        victim = min(pids)
        _, at = srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
        os.kill(victim, signal.SIGKILL)
        m, _ = srv.wait_line(rf"worker {victim} died .*starting a new one", start=at + 1)
        m, _ = srv.wait_line(r"serving on .*\(pid (\d+)\)", start=at + 1)
        new = int(m.group(1))
        assert new not in pids
        assert children(srv.proc.pid, zombies=False) == (pids - {victim}) | {new}
        assert new in pids_seen(port, {new})
        assert srv.stop() == 0, srv.log()


def test_worker_dying_right_after_it_listens_counts_as_started():
    """Its `R` and its SIGCHLD can reach the supervisor in one select round; the `R` still in
    the pipe must be read before the supervisor decides whether the worker ever started."""
    import selectors

    from swordfish.server.config import Config
    from swordfish.server.supervisor import Supervisor, Worker

    sup = Supervisor(Config(app="workerapp:app", workers=2))
    sup.sel = selectors.DefaultSelector()
    spawned = []
    sup._spawn = lambda predecessor=None: spawned.append(predecessor)
    rfd, wfd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", f"import os; os.write({wfd}, b'R')"], pass_fds=(wfd,))
    os.close(wfd)
    os.set_blocking(rfd, False)
    proc.wait()  # it wrote `R` and exited; nothing has read the pipe yet
    w = Worker(proc, rfd, None)
    sup.workers.append(w)
    sup.sel.register(rfd, selectors.EVENT_READ, w)
    try:
        sup._reap()
    finally:
        sup.sel.close()
    assert w.ready and sup.workers == [] and w.rfd is None
    assert spawned == [None]  # replaced, as a worker that died
    assert not sup.stopping and sup.exit_code == 0


def test_max_requests_recycles_without_failed_requests():
    with Served("--port", "0", "--workers", "2", "--max-requests", "8", "--max-requests-jitter", "4",
                "--no-access-log") as srv:
        first = srv.wait_workers(2)
        port = srv.port()
        failures = []
        served = []
        stop = threading.Event()

        def client(path):
            while not stop.is_set():
                try:
                    status, body = get(port, path)
                    if status != 200:
                        failures.append((status, body))
                    else:
                        served.append(body)
                except Exception as exc:
                    failures.append(exc)

        threads = [threading.Thread(target=client, args=(p,)) for p in ("/pid", "/pid", "/slow?t=0.05")]
        for t in threads:
            t.start()
        try:
            # Both first workers retire: each one only after its replacement listens.
            for old in first:
                m, _ = srv.wait_line(rf"worker (\d+) listens: retiring worker {old}\b")
                assert int(m.group(1)) not in first
            deadline = time.monotonic() + DEADLINE
            while any(alive(p) for p in first):
                assert time.monotonic() < deadline, srv.log()
                time.sleep(0.02)  # polling for process exit
            n = len(served)
            deadline = time.monotonic() + DEADLINE
            while len(served) < n + 10:  # and the replacements keep serving
                assert time.monotonic() < deadline and not failures, f"{failures}\n{srv.log()}"
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(DEADLINE)
        assert failures == [], srv.log()
        pids = {int(b) for b in served if b.isdigit()}
        assert len(pids - first) >= 2 and first & pids
        assert srv.proc.poll() is None
        assert srv.stop() == 0, srv.log()


def test_workers_exit_when_the_supervisor_is_killed():
    with Served("--port", "0", "--workers", "2", "--no-access-log") as srv:
        pids = srv.wait_workers(2)
        srv.proc.kill()
        srv.wait()
        deadline = time.monotonic() + DEADLINE
        while any(alive(p) for p in pids):  # they get SIGTERM (PR_SET_PDEATHSIG)
            assert time.monotonic() < deadline, pids
            time.sleep(0.02)  # polling for process exit


def test_worker_that_cannot_start_stops_the_supervisor():
    with Served("--port", "0", "--workers", "2", app="missing_module_xyz:app") as srv:
        assert srv.wait() == 2
        assert "before it started" in srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_the_request_in_flight_finish(workers):
    with Served("--port", "0", "--workers", str(workers), "--timeout-graceful-shutdown", "20") as srv:
        srv.wait_workers(workers) if workers > 1 else srv.wait_line("serving on")
        s, data = start_in_flight(srv.port(), "/slow?t=0.5")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        data = read_rest(s, data)
        assert split_response(data) == (200, b"begin\nend\n"), data
        assert srv.wait() == 0, srv.log()
        assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_stops_accepting_at_once(workers):
    # Once every process has closed its listening socket new connections are refused, while
    # the upload in flight (finished by the test only after that) completes.
    with Served("--port", "0", "--workers", str(workers), "--timeout-graceful-shutdown", "60") as srv:
        pids = srv.wait_workers(workers) if workers > 1 else {srv.proc.pid}
        if workers == 1:
            srv.wait_line("serving on")
        port = srv.port()
        s = socket_to(port, DEADLINE)
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nConnection: close\r\n\r\n12345")
        data = b""
        while not re.search(rb"begin (\d+)\n", data):
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
        busy = int(re.search(rb"begin (\d+)\n", data).group(1))
        srv.proc.send_signal(signal.SIGTERM)
        _, at = srv.wait_line("SIGTERM: stopping the workers") if workers > 1 else (None, 0)
        for pid in pids - {busy}:  # dying now is no reason for a replacement
            _kill(pid)
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                socket_to(port, 5).close()
            except ConnectionRefusedError:
                break
            except ConnectionResetError:
                pass  # queued as the last listener closed
            assert time.monotonic() < deadline, f"still accepting:\n{srv.log()}"
            time.sleep(0.01)  # polling interval
        assert srv.proc.poll() is None  # the upload is still in flight
        s.sendall(b"67890")
        assert split_response(read_rest(s, data)) == (200, f"begin {busy}\nend 10\n".encode())
        assert srv.wait() == 0, srv.log()
        assert not any(alive(p) for p in pids)
        assert "started worker" not in "\n".join(srv.lines[at:-1]), srv.log()


def test_sigint_stops_the_supervisor_cleanly():
    with Served("--port", "0", "--workers", "2", "--no-access-log") as srv:
        pids = srv.wait_workers(2)
        answering(srv.port())
        assert srv.stop(signal.SIGINT) == 0, srv.log()
        assert "SIGINT: stopping the workers" in srv.log()
        assert "Traceback" not in srv.log()
        assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("workers,path", [(1, "/stuck"), (2, "/stuck"), (2, "/blocked")])
def test_graceful_timeout_ends_a_stuck_request(workers, path):
    # /blocked blocks the worker's loop: only the supervisor's kill can end it.
    with Served("--port", "0", "--workers", str(workers), "--timeout-graceful-shutdown", "0.3") as srv:
        pids = srv.wait_workers(workers) if workers > 1 else {srv.proc.pid}
        if workers == 1:
            srv.wait_line("serving on")
        s, data = start_in_flight(srv.port(), path)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        data = read_rest(s, data)
        assert b"end" not in data
        assert srv.wait() == 0, srv.log()
        assert time.monotonic() - t0 < 15
        assert not any(alive(p) for p in pids)
        if path == "/blocked":
            assert "did not stop in time: killing it" in srv.log()


def test_max_requests_single_process_exits_after_them():
    # As uvicorn without workers: the process stops gracefully (exit 0) and whatever runs
    # it (systemd, a container runtime) starts it again.
    with Served("--port", "0", "--max-requests", "3") as srv:
        port = srv.port()
        pid = answering(port)
        assert pid == srv.proc.pid
        for _ in range(2):
            assert get(port, "/pid") == (200, str(pid).encode())
        assert srv.wait() == 0, srv.log()
        assert "max requests reached" in srv.log()


# -- swordfish.serve() ------------------------------------------------------------------------

def serve_call(arguments):
    """The command that runs `sys.exit(swordfish.serve(ARGUMENTS))` with workerapp importable."""
    code = f"import sys; sys.path.insert(0, {TESTS!r}); import swordfish; sys.exit(swordfish.serve({arguments}))"
    return [sys.executable, "-c", code]


def test_serve_function_serves_with_its_log_level():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = serve_call(f"__import__('workerapp').app, port={port}, log_level='warning'")
    with Served(cmd=cmd) as srv:
        assert answering(port) == srv.proc.pid
        assert get(port, "/pid") == (200, str(srv.proc.pid).encode())
        assert srv.stop() == 0, srv.log()
        assert "serving on" not in srv.log() and "GET /pid" not in srv.log(), srv.log()  # INFO lines


def test_serve_function_runs_workers():
    # A worker is `python -m swordfish serve`, in this directory: app_dir says where the app is.
    with Served(cmd=serve_call(f"'workerapp:app', port=0, workers=2, app_dir={TESTS!r}, access_log=False")) as srv:
        pids = srv.wait_workers(2)
        assert len(pids) == 2 and srv.proc.pid not in pids
        assert pids_seen(srv.port(), pids) == pids
        assert srv.stop() == 0, srv.log()
        assert not any(alive(p) for p in pids)
    # Each worker imports the app: an app object cannot be passed to them.
    with Served(cmd=serve_call("__import__('workerapp').app, port=0, workers=2")) as srv:
        assert srv.wait() == 2
        assert "'module:attribute'" in srv.log()


# -- options --------------------------------------------------------------------------------

XFF = b"X-Forwarded-For: 203.0.113.7, 10.1.2.3\r\nX-Forwarded-Proto: https\r\n"


@pytest.mark.parametrize("how", ["trusted", "untrusted", "off"])
def test_proxy_headers(how):
    if how == "trusted":  # options from the environment
        args, env = (), {"SWORDFISH_PROXY_HEADERS": "1", "SWORDFISH_FORWARDED_ALLOW_IPS": "127.0.0.1, 10.0.0.0/8"}
    elif how == "untrusted":
        args, env = ("--proxy-headers", "--forwarded-allow-ips", "192.0.2.1,10.0.0.0/8"), {}
    else:
        args, env = ("--forwarded-allow-ips", "*"), {}
    with Served("--port", "0", *args, env=env) as srv:
        port = srv.port()
        answering(port)
        status, body = get(port, "/scope", XFF)
        host, cport, scheme = body.decode().split()
        if how == "trusted":
            assert (host, cport, scheme) == ("203.0.113.7", "0", "https")
        else:
            assert host == "127.0.0.1" and cport != "0" and scheme == "http"
        assert srv.stop() == 0


def _scope_after(middleware, scope):
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    coro = middleware.__class__(app, middleware.trusted)(scope, None, None)
    try:
        coro.send(None)
    except StopIteration:
        pass
    return seen


def test_proxy_headers_middleware():
    def scope(client, *headers, kind="http"):
        return {"type": kind, "client": client, "scheme": "http" if kind == "http" else "ws",
                "headers": [(n.encode(), v.encode()) for n, v in headers]}

    mw = ProxyHeaders(None, "10.0.0.0/8, unix:")
    # Right to left: the first untrusted address is the client; a forged leftmost is ignored.
    s = _scope_after(mw, scope(("10.0.0.5", 1), ("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.9.9.9")))
    assert s["client"] == ("1.2.3.4", 0) and s["scheme"] == "http"
    # All trusted: the leftmost. Two header lines are one list.
    s = _scope_after(mw, scope(("10.0.0.5", 1), ("x-forwarded-for", "10.1.1.1"), ("x-forwarded-for", "10.2.2.2")))
    assert s["client"] == ("10.1.1.1", 0)
    # The last proto counts; websocket schemes; junk proto ignored.
    s = _scope_after(mw, scope(("10.0.0.5", 1), ("x-forwarded-proto", "http, HTTPS")))
    assert s["scheme"] == "https" and s["client"] == ("10.0.0.5", 1)
    assert _scope_after(mw, scope(("10.0.0.5", 1), ("x-forwarded-proto", "https"), kind="websocket"))["scheme"] == "wss"
    assert _scope_after(mw, scope(("10.0.0.5", 1), ("x-forwarded-proto", "javascript")))["scheme"] == "http"
    # A Unix-socket peer (no client) is trusted only through 'unix:'.
    assert _scope_after(mw, scope(None, ("x-forwarded-for", "1.2.3.4")))["client"] == ("1.2.3.4", 0)
    other = ProxyHeaders(None, "127.0.0.1")
    assert _scope_after(other, scope(None, ("x-forwarded-for", "1.2.3.4")))["client"] is None
    assert _scope_after(other, scope(("10.0.0.5", 1), ("x-forwarded-for", "1.2.3.4")))["client"] == ("10.0.0.5", 1)
    assert "::1" in TrustedHosts("::1") and "::2" not in TrustedHosts("::1") and "x" in TrustedHosts("*")


@pytest.mark.parametrize("workers", [1, 2])
def test_fd(workers):
    with listening_socket() as (fd, port), \
            Served("--fd", str(fd), "--workers", str(workers), "--port", "1", pass_fds=(fd,)) as srv:
        pid = answering(port)
        assert pid != os.getpid() and (pid == srv.proc.pid) == (workers == 1)
        assert srv.stop() == 0, srv.log()


def test_uds(tmp_path):
    path = str(tmp_path / "s.sock")
    with Served("--uds", path) as srv:
        assert answering(path) == srv.proc.pid
        assert get(path, "/pid") == (200, str(srv.proc.pid).encode())
        assert srv.stop() == 0, srv.log()
    assert not os.path.exists(path)


def test_uds_workers_recycling(tmp_path):
    # The socket path outlives the workers that retire (only the supervisor removes it).
    path = str(tmp_path / "s.sock")
    with Served("--uds", path, "--workers", "2", "--max-requests", "4", "--no-access-log") as srv:
        first = srv.wait_workers(2)
        pids = set()
        deadline = time.monotonic() + DEADLINE
        while not (pids - first):
            assert time.monotonic() < deadline, srv.log()
            status, body = get(path, "/pid")
            assert status == 200
            pids.add(int(body))
        srv.wait_line(r"listens: retiring worker")
        for _ in range(5):
            assert get(path, "/pid")[0] == 200
        assert srv.stop() == 0, srv.log()
    assert not os.path.exists(path)


def test_loop_uvloop():
    pytest.importorskip("uvloop")
    with Served("--port", "0", "--loop", "uvloop") as srv:
        assert answering(srv.port()) == srv.proc.pid
        assert srv.stop() == 0, srv.log()


def test_env_options_and_help():
    env = {"SWORDFISH_WORKERS": "2", "SWORDFISH_PORT": "0", "SWORDFISH_ACCESS_LOG": "0", "SWORDFISH_LOOP": "asyncio"}
    with Served(env=env) as srv:
        assert len(srv.wait_workers(2)) == 2
        assert "2 workers on" in srv.log()
        answering(srv.port())
        assert '"GET /pid' not in srv.log()
        assert srv.stop() == 0, srv.log()
    helptext = subprocess.run([sys.executable, "-m", "swordfish", "serve", "--help"],
                              capture_output=True, text=True, check=True).stdout
    blocks = {}  # "--option" -> its help text
    for block in re.split(r"\n(?=  -)", helptext):
        blocks[block.split()[0].rstrip(",")] = " ".join(block.split())
    for option, default in [("--workers", "1"), ("--max-requests", "None"), ("--max-requests-jitter", "0"),
                            ("--proxy-headers", "False"), ("--forwarded-allow-ips", "127.0.0.1"),
                            ("--fd", "None"), ("--uds", "None")]:
        assert blocks[option].endswith(f"(default: {default})"), blocks[option]
    assert "--worker-notify-fd" not in helptext


def test_new_connection_at_shutdown_gets_its_first_request_served():
    # A connection accepted before shutdown that has not sent its request yet is not an idle
    # keep-alive one: its request is served (connection: close); a kept-alive connection
    # that already had a request is closed at once.
    import asyncio

    import swordfish
    from httputil import connect, echo_app, read_response, serving

    async def main():
        async with serving(echo_app, timeout_graceful_shutdown=10) as server:
            fresh_r, fresh_w = await connect(server)
            used_r, used_w = await connect(server)
            used_w.write(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(used_r)).status == 200
            while len(server.state.connections) < 2:
                await asyncio.sleep(0.005)
            server.shutdown()
            assert await asyncio.wait_for(used_r.read(), 5) == b""
            fresh_w.write(b"GET /b HTTP/1.1\r\nHost: t\r\n\r\n")
            resp = await asyncio.wait_for(read_response(fresh_r), 5)
            assert resp.status == 200 and resp.header("connection") == "close"
            assert await asyncio.wait_for(fresh_r.read(), 5) == b""
            fresh_w.close()
            used_w.close()

    loop = swordfish.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
