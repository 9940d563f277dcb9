"""Worker health under the supervisor: a worker whose loop is stuck in a blocking call
stops answering the heartbeat and is killed and replaced after
`--timeout-worker-healthcheck`, while the other workers go on serving; a worker whose
memory passes `--workers-max-rss` is replaced gracefully (its replacement first), also with
one worker; a healthy idle worker is left alone."""

import re
import time

from apps.serving import DEADLINE, ServeProcess, get, pid_of, socket_to

APP = "apps.env_app:app"


def test_a_worker_with_a_blocked_loop_is_killed_and_replaced():
    srv = ServeProcess("--port", "0", "--workers", "2", "--timeout-worker-healthcheck", "1", app=APP)
    try:
        port = srv.port()
        srv.wait_line(r"started worker \d+", count=2)
        stuck = socket_to(port)
        stuck.sendall(b"GET /block?t=60 HTTP/1.1\r\nHost: t\r\n\r\n")
        m, i = srv.wait_line(r"worker (\d+) has not answered for [\d.]+ s \(its loop is blocked\): killing it")
        blocked = int(m.group(1))
        srv.wait_line(r"worker %d died .*: starting a new one" % blocked, start=i)
        srv.wait_line(r"started worker \d+", start=i)
        # The others served meanwhile, and serve now; the blocked one is gone.
        deadline = time.monotonic() + DEADLINE
        pids = set()
        while len(pids) < 2 and time.monotonic() < deadline:
            pids.add(pid_of(port))
        assert blocked not in pids and len(pids) == 2
        try:  # its connection died with it
            assert stuck.recv(100) == b""
        except ConnectionResetError:
            pass
        stuck.close()
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_healthy_idle_worker_is_left_alone():
    srv = ServeProcess("--port", "0", "--workers", "2", "--timeout-worker-healthcheck", "1", app=APP)
    try:
        port = srv.port()
        srv.wait_line(r"started worker \d+", count=2)
        time.sleep(2.5)  # two and a half healthcheck periods with nothing to do
        pid_of(port)
        log = srv.log()
        assert "has not answered" not in log and len(re.findall(r"started worker", log)) == 2, log
    finally:
        assert srv.stop() == 0, srv.log()


def test_a_worker_over_max_rss_is_replaced_gracefully():
    srv = ServeProcess("--port", "0", "--workers-max-rss", "120", app=APP)
    try:
        port = srv.port()
        m, _ = srv.wait_line(r"started worker (\d+)")
        first = int(m.group(1))
        assert get(port, "/grow?mib=150")[0] == 200
        m, i = srv.wait_line(r"worker (\d+) uses (\d+) MiB, over --workers-max-rss 120: starting its replacement")
        assert int(m.group(1)) == first and int(m.group(2)) > 120
        srv.wait_line(r"worker \d+ listens: retiring worker %d" % first, start=i)
        deadline = time.monotonic() + DEADLINE
        while pid_of(port) == first:
            assert time.monotonic() < deadline, "the worker over the limit still serves"
        assert re.search(r"worker %d died" % first, srv.log()) is None  # stopped, not died
    finally:
        assert srv.stop() == 0, srv.log()
