"""Starlette, FastAPI and Django apps over HTTP/2 (h2c with prior knowledge), with httpx's
HTTP/2 client: the framework tests of tests/test_http_frameworks.py that hold for any HTTP
version run again here, on clients that check every response came over HTTP/2. Also
HAProxy in front, speaking HTTP/2 to swordfish (`proto h2`) for HTTP/1.1 clients."""

import shutil
import subprocess

import httpx
import pytest

from apps import Probe, Watched, django_app, fastapi_app, starlette_app
from apps.serving import WAIT, ServeProcess, read_rest, socket_to, split_response, wait_listening
from httputil import free_port
# The tests that hold for any HTTP version; collected here with this module's fixtures.
from test_http_frameworks import (  # noqa: F401
    error_log, test_django_error_is_500, test_django_views, test_fastapi_async_and_sync_path_operations,
    test_fastapi_dependencies, test_fastapi_model_body, test_starlette_endpoint_exception_is_500,
    test_starlette_file_response, test_starlette_headers_and_cookies, test_starlette_not_found_and_method_not_allowed,
    test_starlette_path_and_query_params, test_starlette_urlencoded_form,
)


def _over_http2(response):
    assert response.http_version == "HTTP/2", response.http_version


class ServedOverHttp2:
    """An app on a ThreadServer, with an httpx client that speaks HTTP/2 only."""

    def __init__(self, app, probe, loop, **options):
        from apps.serving import ThreadServer

        self.app, self.probe = app, probe
        self.server = ThreadServer(app, loop=loop, **options)

    def __enter__(self):
        self.server.start()
        self.client = httpx.Client(base_url=self.server.url, http1=False, http2=True, trust_env=False,
                                   timeout=WAIT, event_hooks={"response": [_over_http2]})
        return self

    def __exit__(self, *exc):
        self.client.close()
        self.server.stop()


@pytest.fixture(params=["swordfish", "asyncio"])
def server_loop(request):
    return request.param


@pytest.fixture
def star(server_loop, tmp_path):
    probe = Probe(file_dir=str(tmp_path))
    with ServedOverHttp2(starlette_app.create_app(probe), probe, server_loop) as served:
        yield served


@pytest.fixture
def fast(server_loop):
    probe = Probe()
    with ServedOverHttp2(fastapi_app.create_app(probe), probe, server_loop) as served:
        yield served


@pytest.fixture
def dj(server_loop):
    handler = django_app.get_application()
    probe = django_app.reset()
    with ServedOverHttp2(Watched(handler, probe), probe, server_loop, lifespan="auto") as served:
        yield served


@pytest.mark.parametrize("chunked", [False, True])
def test_starlette_large_request_body_over_http2(star, chunked):
    import hashlib

    from apps.serving import MiB, payload, pieces_of

    data = payload(MiB + 17)
    r = star.client.post("/stream-in", content=pieces_of(data) if chunked else data)
    got = r.json()
    assert (got["length"], got["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert got["pieces"] >= 2


def test_starlette_streaming_response_over_http2(star):
    with star.client.stream("GET", "/stream", params={"n": 300}) as r:
        assert r.status_code == 200 and "transfer-encoding" not in r.headers
        received = b"".join(r.iter_bytes())
    assert received == b"".join(starlette_app.chunk(i) for i in range(300))


HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HAPROXY_CONFIG = """\
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
    server sf 127.0.0.1:{back} proto h2
"""


def test_haproxy_speaks_http2_to_swordfish(tmp_path):
    srv = ServeProcess("--port", "0", app="apps.http2_app:app")
    proxy = None
    try:
        front = free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(HAPROXY_CONFIG.format(front=front, back=srv.port()))
        proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        wait_listening(front, proxy, "haproxy")
        for path, want in ((b"/version", b"2"), (b"/", b"hello")):
            s = socket_to(front)
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            status, body = split_response(read_rest(s))
            assert (status, body) == (200, want)
        s = socket_to(front)
        body = b"e" * 300_000
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        assert split_response(read_rest(s)) == (200, body)
    finally:
        if proxy:
            proxy.terminate()
            proxy.wait(10)
        assert srv.stop() == 0, srv.log()
