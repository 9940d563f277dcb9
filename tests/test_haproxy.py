"""A real HAProxy (Debian's package, installed by tools/install-test-deps.sh) in front of
`swordfish serve --proxy-protocol`, with `send-proxy` and `send-proxy-v2`: the app sees
the client's own address and port and the address the client connected to, not
HAProxy's connection; without --proxy-protocol the PROXY header is refused."""

import json
import shutil
import subprocess

import pytest

from apps.serving import ServeProcess, read_rest, socket_to, split_response, wait_listening
from httputil import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

CONFIG = """\
global
    maxconn 100

defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s

frontend web
    bind 127.0.0.1:{front}
    default_backend app

backend app
    server sf 127.0.0.1:{back} {send}
"""


class Haproxy:
    def __init__(self, tmp_path, back, send):
        self.port = free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(CONFIG.format(front=self.port, back=back, send=send))
        check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_listening(self.port, self.proc, "haproxy")

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


def where(port):
    s = socket_to(port)
    s.sendall(b"GET /where HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    mine = s.getsockname()
    status, body = split_response(read_rest(s))
    return status, (json.loads(body) if status == 200 else body), mine


@pytest.mark.parametrize("send", ["send-proxy", "send-proxy-v2"])
def test_app_sees_the_client_through_haproxy(tmp_path, send):
    srv = ServeProcess("--port", "0", "--proxy-protocol", app="apps.env_app:app")
    proxy = None
    try:
        proxy = Haproxy(tmp_path, srv.port(), send)
        for _ in range(3):
            status, got, mine = where(proxy.port)
            assert status == 200
            # The client's own port, which HAProxy's connection to swordfish does not have.
            assert got == {"client": list(mine), "server": ["127.0.0.1", proxy.port]}
    finally:
        if proxy:
            proxy.close()
        assert srv.stop() == 0, srv.log()


def test_header_refused_without_proxy_protocol(tmp_path):
    srv = ServeProcess("--port", "0", app="apps.env_app:app")
    proxy = None
    try:
        proxy = Haproxy(tmp_path, srv.port(), "send-proxy")
        status, _, _ = where(proxy.port)
        assert status in (400, 502)  # swordfish's 400, or HAProxy's 502 for it
    finally:
        if proxy:
            proxy.close()
        srv.stop()
