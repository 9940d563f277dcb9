"""A real nginx (Debian's package, installed by tools/install-test-deps.sh) as the reverse
proxy in front of `swordfish serve`, configured as docs/deploying.md shows (HTTP/1.1
upstream with keep-alive, X-Forwarded-For/Proto, WebSocket upgrade, no response
buffering): the scope's client is the real client's with --proxy-headers; a streamed
response reaches the client chunk by chunk; an upload larger than nginx's buffer arrives
whole; a client that goes away mid-response is a disconnect to the app; a graceful
shutdown loses no request in flight; a WebSocket works through it."""

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from apps.serving import DEADLINE, ServeProcess, read_rest, socket_to, split_response, wait_listening
from httputil import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOYING = os.path.join(os.path.dirname(HERE), "docs", "deploying.md")
APP = "apps.proxied_app:app"


def nginx_snippet():
    """The `http { ... }` snippet of docs/deploying.md: the test runs what the docs show."""
    text = open(DEPLOYING, encoding="utf-8").read()
    start = text.index("<!-- nginx snippet -->")
    block = text[start:].split("```nginx\n", 1)[1].split("```", 1)[0]
    return block


class Nginx:
    """nginx in the foreground, in one process, everything under tmp."""

    def __init__(self, tmp, upstream):
        self.port = free_port()
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (tmp / d).mkdir()
        snippet = nginx_snippet().replace("127.0.0.1:8000", f"127.0.0.1:{upstream}") \
                                 .replace("listen 80;", f"listen 127.0.0.1:{self.port};")
        conf = tmp / "nginx.conf"
        conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
{snippet}
}}
""")
        self.log = tmp / "error.log"
        check = subprocess.run([NGINX, "-t", "-p", str(tmp), "-c", str(conf)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        self.proc = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_listening(self.port, self.proc, "nginx")

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def proxied(tmp_path):
    """(swordfish, nginx) with --proxy-headers trusting nginx."""
    srv = ServeProcess("--port", "0", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1",
                       "--timeout-graceful-shutdown", "20", app=APP)
    proxy = None
    try:
        proxy = Nginx(tmp_path, srv.port())
        yield srv, proxy
    finally:
        if proxy is not None:
            proxy.close()
        srv.stop()


def request(port, method, path, body=b"", headers=b""):
    s = socket_to(port)
    s.sendall(b"%s %s HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\nContent-Length: %d\r\n%s\r\n"
              % (method.encode(), path.encode(), len(body), headers) + body)
    return split_response(read_rest(s))


def test_scope_client_is_the_real_clients(proxied):
    srv, proxy = proxied
    status, body = request(proxy.port, "GET", "/where", headers=b"X-Forwarded-For: 203.0.113.9\r\n")
    got = json.loads(body)
    # nginx appended the client it saw (127.0.0.1, trusted) to what the client sent: the
    # rightmost address that is not a trusted proxy is the client.
    assert status == 200 and got["client"] == ["203.0.113.9", 0] and got["scheme"] == "http"
    status, body = request(proxy.port, "GET", "/where")
    assert json.loads(body)["client"] == ["127.0.0.1", 0]


def test_streamed_response_reaches_the_client_chunk_by_chunk(proxied):
    _, proxy = proxied
    s = socket_to(proxy.port)
    s.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    while b"one\n" not in data:  # the app waits for /release before its second chunk
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    assert request(proxy.port, "GET", "/release")[0] == 200
    status, body = split_response(read_rest(s, data))
    assert (status, body) == (200, b"one\ntwo\n")


def test_upload_larger_than_nginxs_buffer_arrives_whole(proxied):
    _, proxy = proxied
    body = os.urandom(5 * 1024 * 1024)
    status, got = request(proxy.port, "POST", "/digest", body)
    assert status == 200
    assert json.loads(got) == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_client_gone_mid_response_is_a_disconnect(proxied):
    _, proxy = proxied
    s = socket_to(proxy.port)
    s.sendall(b"GET /endless HTTP/1.1\r\nHost: t\r\n\r\n")
    assert s.recv(65536)
    s.close()
    deadline = time.monotonic() + DEADLINE
    while request(proxy.port, "GET", "/gone")[1] != b"1":
        assert time.monotonic() < deadline, "the app never saw the client go"
        time.sleep(0.05)


def test_graceful_shutdown_through_the_proxy_loses_no_request(proxied):
    srv, proxy = proxied
    results = []

    def slow():
        results.append(request(proxy.port, "GET", "/slow?t=1"))

    threads = [threading.Thread(target=slow) for _ in range(20)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE
    while request(proxy.port, "GET", "/inflight")[1] != b"20":
        assert time.monotonic() < deadline, "the requests did not all reach the app"
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(DEADLINE)
    assert results == [(200, b"done")] * 20
    assert srv.wait() == 0, srv.log()


def test_websocket_through_nginx(proxied):
    import websockets

    _, proxy = proxied

    async def main():
        async with websockets.connect(f"ws://127.0.0.1:{proxy.port}/ws") as ws:
            await ws.send("hello through nginx")
            text = await ws.recv()
            await ws.send(b"\x00\x01" * 1000)
            data = await ws.recv()
            return text, data

    assert asyncio.run(main()) == ("hello through nginx", b"\x00\x01" * 1000)
