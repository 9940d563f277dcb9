"""systemd socket activation: a listening socket passed as descriptor 3 with LISTEN_FDS and
LISTEN_PID (this process's pid, as systemd sets it between fork and exec) is served as
`--fd` is, by one process or a supervisor and its workers; the variables are not left for
children to take. The test plays systemd: a wrapper puts the socket at 3, sets the
variables to its own pid and execs `swordfish serve` (exec keeps the pid)."""

import os
import socket
import sys

import pytest

from apps.serving import TESTS, ServeProcess, get
from swordfish.server.process import activated_socket

WRAPPER = """
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = sys.argv[2]
os.environ["LISTEN_FDNAMES"] = "http"
os.execv(sys.executable, [sys.executable, "-m", "swordfish", "serve", *sys.argv[3:]])
"""


def activated(sock, *args, count="1"):
    fd = sock.fileno()
    cmd = [sys.executable, "-c", WRAPPER, str(fd), count, "apps.env_app:app", "--app-dir", TESTS, *args]
    return ServeProcess(cmd=cmd, pass_fds=(fd,))


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_serves_the_socket_systemd_passed(listener, workers):
    port = listener.getsockname()[1]
    # --port 1 would fail to bind: the passed socket is taken instead.
    srv = activated(listener, "--port", "1", "--workers", str(workers))
    try:
        assert srv.port() == port
        for _ in range(4):
            assert get(port, "/PATH")[0] == 200
        # The app's process (a worker, with workers) does not see the variables.
        assert get(port, "/LISTEN_FDS") == (404, b"unset")
    finally:
        assert srv.stop() == 0, srv.log()


def test_more_than_one_socket_is_refused(listener):
    srv = activated(listener, count="2")
    assert srv.wait() == 2
    assert "systemd passed 2 sockets" in srv.log()


def test_variables_for_another_process_are_left_alone():
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
    assert activated_socket(env) is None
    assert env == {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
    mine = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "web"}
    assert activated_socket(mine) == 3 and mine == {}
    assert activated_socket({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) is None
