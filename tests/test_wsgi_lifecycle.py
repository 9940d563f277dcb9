"""A WSGI app under `python -m swordfish serve ... --interface wsgi` in a subprocess (the
app is tests/apps/wsgi_app.py): the interface chosen by flag, by SWORDFISH_INTERFACE and
by auto-detection, `--threads`, the environ of a real process (no os.environ leaking in,
not on the main thread), SIGTERM with a request in flight and with idle keep-alive
connections, the graceful timeout with a stuck app thread (and its log line), `--workers 2`
(wsgi.multiprocess), `--worker-cpu-affinity`, `--uds`, `--fd`, TLS, `--limit-concurrency`, the
request limits and timeouts, `--max-requests`, and `swordfish.serve(app, interface="wsgi")`.
(`--reload` of a WSGI app is in test_http_reload.py.)

Every wait is on an observable event (a log line, a response, a process exit) with a
generous deadline for a loaded 2-core machine."""

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from apps.serving import (ServeProcess, exchange, listening_socket, pid_of, read_rest, socket_to, split_response,
                          start_in_flight)
from httputil import free_port
from netutil import tls_files  # noqa: F401 (fixture)
from wsgiutil import WSGI_ENGINE

pytestmark = pytest.mark.timeout(120)

TESTS = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 30.0  # seconds for anything to happen
APP = "apps.wsgi_app:app"


def Cli(*args, app=APP, **options):
    """`python -m swordfish serve APP --app-dir tests ARGS` (or cmd), its log collected
    (apps/serving.py), on the WSGI engine the run tests (wsgiutil.WSGI_ENGINE)."""
    if "cmd" not in options:
        args = (*args, "--wsgi-engine", WSGI_ENGINE)
    return ServeProcess(*args, app=app, **options)


def http(addr, path, method="GET", body=b"", ctx=None):
    """One request on a new connection (Connection: close): (status, body)."""
    s = socket_to(addr, ctx=ctx)
    s.sendall(b"%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
              % (method.encode(), path.encode(), len(body), body))
    return split_response(read_rest(s))


def answering(addr, ctx=None):
    """Polls until the server answers GET /pid; that pid."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            status, body = http(addr, "/pid", ctx=ctx)
            assert status == 200, body
            return int(body)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # polling for the server to listen


def sigterm_in_flight(srv, path):
    """Leaves GET path in flight (start_in_flight), then sends the server SIGTERM: (the
    socket, what was read, when the signal went)."""
    s, data = start_in_flight(srv.port(), path)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    return s, data, t0


@pytest.mark.parametrize("how", ["flag", "env", "auto"])
def test_cli_serves_a_wsgi_app(how):
    args = ["--port", "0", "--threads", "3"]
    env = {"SWORDFISH_WSGI_LEAK_PROBE": "leaked"}
    if how == "flag":
        args += ["--interface", "wsgi"]
    elif how == "env":
        env["SWORDFISH_INTERFACE"] = "wsgi"
    with Cli(*args, env=env) as srv:
        port = srv.port()
        assert answering(port) == srv.proc.pid
        status, body = http(port, "/env?x=1")
        assert status == 200, body
        env_seen = json.loads(body)
        assert http(port, "/echo", "POST", b"posted") == (200, b"posted")
        # --threads 3: three requests in the app at once.
        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(lambda _: http(port, "/barrier?n=3"), range(3))) == [(200, b"ok")] * 3
        assert srv.stop() == 0, srv.log()
    assert env_seen["main_thread"] is False
    assert env_seen["wsgi"] == {"wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
                                "wsgi.url_scheme": "http"}
    for leaked in ("SWORDFISH_WSGI_LEAK_PROBE", "PATH", "HOME", "SWORDFISH_INTERFACE"):
        assert leaked not in env_seen["keys"], leaked
    assert env_seen["cgi"]["QUERY_STRING"] == "x=1" and env_seen["cgi"]["REQUEST_METHOD"] == "GET"
    assert "Traceback" not in srv.log(), srv.log()


@pytest.mark.skipif(WSGI_ENGINE == "threads", reason="the loop's app-thread pool (the thread engine has no "
                    "hand-off to schedule: the thread that reads a request runs it)")
def test_scheduling_classes_follow_the_load():
    """The pool's idle watcher runs in the idle class; app threads run in the normal class
    at rest, in the batch class while the process keeps a CPU busy, and in the normal class
    again once it rests."""
    def policy(port, burn=0):
        status, body = http(port, f"/sched?burn={burn}")
        assert status == 200, body
        return json.loads(body)

    def until(port, wanted, burn, pause=0.0):
        deadline = time.monotonic() + DEADLINE
        while (seen := policy(port, burn))["policy"] != wanted:
            assert time.monotonic() < deadline, seen
            time.sleep(pause)
        return seen

    with Cli("--port", "0", "--interface", "wsgi", "--threads", "4") as srv:
        port = srv.port()
        at_rest = policy(port)
        assert at_rest["policy"] == os.SCHED_OTHER
        # The watcher's thread is started by the first request: on a busy machine it may
        # not have run (named itself) by the time that request is answered.
        deadline = time.monotonic() + DEADLINE
        while not at_rest["watchers"] and time.monotonic() < deadline:
            at_rest = policy(port)
        assert at_rest["watchers"] == [os.SCHED_IDLE]
        # Three clients keep the app burning CPU until one of them is served in the batch class.
        with ThreadPoolExecutor(3) as pool:
            loaded = list(pool.map(lambda _: until(port, os.SCHED_BATCH, burn=5), range(3)))
        assert all(seen["policy"] == os.SCHED_BATCH for seen in loaded)
        # Requests that cost nothing, 20 a second: the rest itself is what is tested, and
        # the load fades within a fraction of a second of it.
        assert until(port, os.SCHED_OTHER, burn=0, pause=0.05)["watchers"] == [os.SCHED_IDLE]
        assert srv.stop() == 0, srv.log()


def test_app_threads_wait_without_timer_slack():
    """An app thread's timed waits end at their deadline: its timer slack is the least the
    kernel allows (1 ns), where the process's main thread keeps the default."""
    with Cli("--port", "0", "--interface", "wsgi", "--threads", "2") as srv:
        status, body = http(srv.port(), "/sched")
        assert status == 200, body
        assert json.loads(body)["slack_ns"] == 1
        with open(f"/proc/{pid_of(srv.port())}/timerslack_ns") as f:
            assert int(f.read()) > 1
        assert srv.stop() == 0, srv.log()


@pytest.mark.parametrize("args,message", [
    (["--threads", "0"], "argument --threads: must be at least 1"),
    (["--interface", "psgi"], "argument --interface: invalid choice: 'psgi'"),
])
def test_cli_rejects_invalid_interface_options(args, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
    r = subprocess.run([sys.executable, "-m", "swordfish", "serve", APP, "--app-dir", TESTS, *args],
                       env=env, capture_output=True, text=True, timeout=DEADLINE)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_sigterm_lets_the_request_in_flight_finish():
    with Cli("--port", "0", "--interface", "wsgi", "--timeout-graceful-shutdown", "20") as srv:
        s, data, t0 = sigterm_in_flight(srv, "/slow?t=0.5")
        assert split_response(read_rest(s, data)) == (200, b"begin\nend\n")
        assert srv.wait() == 0, srv.log()
        assert time.monotonic() - t0 < 15


def test_idle_keep_alive_connections_do_not_hold_up_shutdown():
    with Cli("--port", "0", "--interface", "wsgi", "--timeout-keep-alive", "60",
             "--timeout-graceful-shutdown", "60") as srv:
        port = srv.port()
        answering(port)
        idle = []
        for _ in range(3):
            s = socket_to(port, timeout=DEADLINE)
            s.sendall(b"GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
            data = b""
            while not data.endswith(str(srv.proc.pid).encode()):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
            idle.append(s)  # answered, kept alive, idle
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait() == 0, srv.log()
        assert time.monotonic() - t0 < 10, "idle connections held the shutdown up"
        for s in idle:
            assert read_rest(s) == b""  # closed by the server, with nothing more sent


def test_graceful_timeout_ends_with_an_app_thread_still_busy():
    # A WSGI app cannot be cancelled: at the graceful timeout the connection is closed and
    # the process exits anyway, without waiting for the thread.
    with Cli("--port", "0", "--interface", "wsgi", "--timeout-graceful-shutdown", "0.5") as srv:
        s, data, t0 = sigterm_in_flight(srv, "/slow?t=60")
        data = read_rest(s, data)
        assert b"end" not in data
        assert srv.wait(20) == 0, srv.log()
        assert time.monotonic() - t0 < 15
    assert "1 WSGI request(s) still running in the app at shutdown" in srv.log(), srv.log()


def test_two_workers_are_multiprocess():
    with Cli("--port", "0", "--interface", "wsgi", "--workers", "2", "--no-access-log") as srv:
        srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
        port = srv.port()
        pids, envs = set(), []
        deadline = time.monotonic() + DEADLINE
        with ThreadPoolExecutor(4) as pool:
            while len(pids) < 2:
                assert time.monotonic() < deadline, (pids, srv.log())
                for status, body in pool.map(lambda _: http(port, "/env"), range(8)):
                    assert status == 200, body
                    envs.append(json.loads(body))
                    pids.add(envs[-1]["pid"])
        assert srv.proc.pid not in pids
        assert srv.stop() == 0, srv.log()
    assert all(e["wsgi"]["wsgi.multiprocess"] is True for e in envs)


ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
pinning = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity")


def thread_cpus(pid):
    """The CPUs each thread of pid may run on: {tid: [cpu, ...]}."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        except ProcessLookupError:  # ended meanwhile
            pass
    return found


def app_thread_cpus(port, pids):
    """GET /cpus until each pid has answered: {pid: the CPUs of the app thread that served}."""
    seen = {}
    deadline = time.monotonic() + DEADLINE
    with ThreadPoolExecutor(4) as pool:
        while set(seen) != pids:
            assert time.monotonic() < deadline, seen
            for status, body in pool.map(lambda _: http(port, "/cpus"), range(8)):
                assert status == 200, body
                answer = json.loads(body)
                seen[answer["pid"]] = answer["cpus"]
    return seen


def started_on(srv, count, start=0):
    """The CPU of each of the next count workers the supervisor started, from its log
    ({pid: cpu or None}), and the log line of the last."""
    found, at = {}, start
    for _ in range(count):
        m, at = srv.wait_line(r"started worker (\d+)(?: to replace \d+)?(?: on CPU (\d+))?$", start=at)
        found[int(m.group(1))] = None if m.group(2) is None else int(m.group(2))
        at += 1
    return found, at


@pinning
def test_worker_cpu_affinity_on_pins_each_worker_and_its_replacement():
    with Cli("--port", "0", "--interface", "wsgi", "--workers", "2", "--worker-cpu-affinity", "on",
             "--no-access-log") as srv:
        cpu_of, at = started_on(srv, 2)
        assert sorted(cpu_of.values()) == sorted([ALLOWED[0], ALLOWED[1 % len(ALLOWED)]]), srv.log()
        srv.wait_line(r"serving on .*\(pid \d+\)", count=2)
        port = srv.port()
        # Threads started after the worker was (its app threads) are confined too.
        assert app_thread_cpus(port, set(cpu_of)) == {pid: [cpu] for pid, cpu in cpu_of.items()}
        for pid, cpu in cpu_of.items():
            assert set(map(tuple, thread_cpus(pid).values())) == {(cpu,)}, (pid, cpu)
        victim = max(cpu_of, key=cpu_of.get)
        os.kill(victim, signal.SIGKILL)
        replacement, _ = started_on(srv, 1, start=at)
        assert list(replacement.values()) == [cpu_of[victim]], srv.log()
        assert srv.stop() == 0, srv.log()


@pinning
@pytest.mark.skipif(not 2 <= len(ALLOWED) <= 8, reason="as many workers as CPUs: 2 to 8 CPUs")
@pytest.mark.parametrize("workers, mode, pinned", [
    (len(ALLOWED), "auto", True),
    (len(ALLOWED) + 1, "auto", False),
    (len(ALLOWED), "off", False),
])
def test_worker_cpu_affinity_auto_pins_as_many_workers_as_cpus(workers, mode, pinned):
    # auto leaves the thread engine's workers unpinned (affinity.py says why).
    pinned = pinned and not (mode == "auto" and WSGI_ENGINE == "threads")
    with Cli("--port", "0", "--interface", "wsgi", "--workers", str(workers), "--worker-cpu-affinity", mode,
             "--no-access-log") as srv:
        cpu_of, _ = started_on(srv, workers)
        srv.wait_line(r"serving on .*\(pid \d+\)", count=workers)
        if pinned:
            assert sorted(cpu_of.values()) == ALLOWED, srv.log()
        else:
            assert set(cpu_of.values()) == {None}, srv.log()
        for pid, cpu in cpu_of.items():
            want = [cpu] if pinned else ALLOWED
            assert all(cpus == want for cpus in thread_cpus(pid).values()), (pid, thread_cpus(pid))
        assert srv.stop() == 0, srv.log()


@pinning
def test_worker_cpu_affinity_on_confines_a_single_process():
    with Cli("--port", "0", "--interface", "wsgi", "--worker-cpu-affinity", "on") as srv:
        port = srv.port()
        pid = answering(port)
        assert pid == srv.proc.pid
        assert app_thread_cpus(port, {pid}) == {pid: [ALLOWED[0]]}
        assert all(cpus == [ALLOWED[0]] for cpus in thread_cpus(pid).values()), thread_cpus(pid)
        assert srv.stop() == 0, srv.log()


@pinning
@pytest.mark.skipif(not 2 <= len(ALLOWED) <= 8, reason="as many workers as CPUs: 2 to 8 CPUs")
def test_auto_engine_takes_back_the_cpus_auto_affinity_confined_a_wsgi_worker_to():
    # The defaults (--wsgi-engine auto, --worker-cpu-affinity auto): the supervisor, which
    # does not import the app, pins each of as many workers as CPUs; each worker, finding
    # a WSGI app, takes back every CPU and serves it on the thread engine.
    workers = len(ALLOWED)
    with ServeProcess("--port", "0", "--interface", "wsgi", "--workers", str(workers), "--no-access-log",
                      app=APP) as srv:
        cpu_of, _ = started_on(srv, workers)
        assert sorted(cpu_of.values()) == ALLOWED, srv.log()
        srv.wait_line(r"WSGI served by the thread engine", count=workers)
        srv.wait_line(r"serving on .*\(pid \d+\)", count=workers)
        assert "WSGI served by the loop" not in srv.log()
        assert app_thread_cpus(srv.port(), set(cpu_of)) == {pid: ALLOWED for pid in cpu_of}
        for pid in cpu_of:
            assert all(cpus == ALLOWED for cpus in thread_cpus(pid).values()), (pid, thread_cpus(pid))
        assert srv.stop() == 0, srv.log()


@pinning
def test_auto_engine_on_one_cpu_is_the_loop():
    run = ("import os, runpy, sys; os.sched_setaffinity(0, {%d}); sys.argv[0] = 'swordfish'; "
           "runpy.run_module('swordfish', run_name='__main__')" % ALLOWED[0])
    cmd = [sys.executable, "-c", run, "serve", APP, "--app-dir", TESTS, "--port", "0", "--interface", "wsgi"]
    with ServeProcess(cmd=cmd) as srv:
        srv.wait_line(r"WSGI served by the loop")
        assert answering(srv.port()) == srv.proc.pid
        assert http(srv.port(), "/echo", "POST", b"one cpu") == (200, b"one cpu")
        assert srv.stop() == 0, srv.log()


def test_unix_socket(tmp_path):
    path = str(tmp_path / "wsgi.sock")
    with Cli("--uds", path, "--interface", "wsgi") as srv:
        assert answering(path) == srv.proc.pid
        status, body = http(path, "/env")
        assert status == 200, body  # the validator found nothing wrong without a peer address
        assert http(path, "/echo", "POST", b"over unix") == (200, b"over unix")
        assert srv.stop() == 0, srv.log()
    assert not os.path.exists(path)


@pytest.mark.parametrize("workers", [1, 2])
def test_inherited_socket(workers):
    with listening_socket() as (fd, port), \
            Cli("--fd", str(fd), "--interface", "wsgi", "--workers", str(workers), "--no-access-log",
                pass_fds=(fd,)) as srv:
        pid = answering(port)
        assert (pid == srv.proc.pid) == (workers == 1)
        assert http(port, "/echo", "POST", b"inherited") == (200, b"inherited")
        assert srv.stop() == 0, srv.log()


def test_tls(tls_files):
    cert, key = tls_files
    ctx = ssl.create_default_context(cafile=cert)
    with Cli("--port", "0", "--interface", "wsgi", "--ssl-certfile", cert, "--ssl-keyfile", key) as srv:
        port = srv.port()
        answering(port, ctx)
        status, body = http(port, "/env", ctx=ctx)
        assert status == 200 and json.loads(body)["wsgi"]["wsgi.url_scheme"] == "https"
        payload = os.urandom(300_000)
        assert http(port, "/echo", "POST", payload, ctx=ctx) == (200, payload)
        assert srv.stop() == 0, srv.log()


def test_limit_concurrency():
    with Cli("--port", "0", "--interface", "wsgi", "--limit-concurrency", "1", "--threads", "4") as srv:
        port = srv.port()
        answering(port)
        s, data = start_in_flight(port, "/slow?t=1")
        assert http(port, "/pid")[0] == 503  # the one request allowed is in the app
        assert split_response(read_rest(s, data)) == (200, b"begin\nend\n")
        assert http(port, "/pid") == (200, str(srv.proc.pid).encode())
        assert srv.stop() == 0, srv.log()


def closed_after(port, raw):
    """raw sent on a new connection: (what the server sent before it closed the connection,
    the seconds it took)."""
    s = socket_to(port, timeout=DEADLINE)
    t0 = time.monotonic()
    s.sendall(raw)
    data = read_rest(s)
    return data, time.monotonic() - t0


def test_request_limits_and_timeouts():
    # The connection refuses what is over a limit before the app sees it, and closes a
    # connection at its timeouts, as for ASGI.
    with Cli("--port", "0", "--interface", "wsgi", "--limit-request-line", "100", "--limit-header-count", "5",
             "--limit-body-size", "10", "--timeout-header-read", "0.3", "--timeout-keep-alive", "0.3") as srv:
        port = srv.port()
        answering(port)
        head = b"Host: t\r\nConnection: close\r\n"
        assert exchange(port, b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n" + head + b"\r\n")[0] == 414
        fields = b"".join(b"x-%d: 1\r\n" % i for i in range(6))
        assert exchange(port, b"GET /pid HTTP/1.1\r\n" + head + fields + b"\r\n")[0] == 431
        assert exchange(port, b"POST /echo HTTP/1.1\r\n" + head + b"Content-Length: 11\r\n\r\n" + b"x" * 11)[0] == 413
        assert http(port, "/echo", "POST", b"x" * 10) == (200, b"x" * 10)
        # Both timeouts are well under the defaults (10 s and 5 s).
        data, took = closed_after(port, b"GET /pid HTTP/1.1\r\nHost: t\r\n")  # a head that never ends
        assert took < 3 and data == b"", (data, took)
        data, took = closed_after(port, b"GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")  # then idle
        assert took < 3 and split_response(data) == (200, str(srv.proc.pid).encode()), (data, took)
        assert srv.stop() == 0, srv.log()


def test_max_requests():
    with Cli("--port", "0", "--interface", "wsgi", "--max-requests", "3") as srv:
        port = srv.port()
        pid = answering(port)
        for _ in range(2):
            assert http(port, "/pid") == (200, str(pid).encode())
        assert srv.wait() == 0, srv.log()
        assert "max requests reached" in srv.log()


def test_serve_function():
    port = free_port()
    code = (f"import sys; sys.path.insert(0, {TESTS!r}); import swordfish; from apps.wsgi_app import app; "
            f"sys.exit(swordfish.serve(app, port={port}, interface='wsgi', threads=2))")
    with Cli(cmd=[sys.executable, "-c", code]) as srv:
        assert answering(port) == srv.proc.pid
        status, body = http(port, "/env")
        assert status == 200 and json.loads(body)["wsgi"]["wsgi.multithread"] is True
        assert srv.stop() == 0, srv.log()
