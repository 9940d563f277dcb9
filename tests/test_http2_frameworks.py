"""Starlette, FastAPI and Django apps over HTTP/2 (h2c with prior knowledge), with httpx's
HTTP/2 client: the framework tests of tests/test_http_frameworks.py that hold for any HTTP
version run again here, with that module's fixtures on clients that check every response
came over HTTP/2. Also HAProxy in front, speaking HTTP/2 to swordfish (`proto h2`) for
HTTP/1.1 clients."""

import hashlib

import pytest

from apps import starlette_app
from apps.serving import MiB, ServeProcess, payload, pieces_of, read_rest, socket_to, split_response
from test_haproxy import Haproxy
# The fixtures, and the tests that hold for any HTTP version: collected here, where the
# `http2` fixture below makes their clients speak HTTP/2.
from test_http_frameworks import (  # noqa: F401
    dj, error_log, fast, server_loop, star, test_django_error_is_500, test_django_views,
    test_fastapi_async_and_sync_path_operations, test_fastapi_dependencies, test_fastapi_model_body,
    test_starlette_endpoint_exception_is_500, test_starlette_file_response, test_starlette_headers_and_cookies,
    test_starlette_not_found_and_method_not_allowed, test_starlette_path_and_query_params,
    test_starlette_urlencoded_form,
)


@pytest.fixture
def http2():
    return True


@pytest.mark.parametrize("chunked", [False, True])
def test_starlette_large_request_body_over_http2(star, chunked):
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


def test_haproxy_speaks_http2_to_swordfish(tmp_path):
    srv = ServeProcess("--port", "0", app="apps.http2_app:app")
    proxy = None
    try:
        proxy = Haproxy(tmp_path, srv.port(), "proto h2")
        for path, want in ((b"/version", b"2"), (b"/", b"hello")):
            s = socket_to(proxy.port)
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            assert split_response(read_rest(s)) == (200, want)
        s = socket_to(proxy.port)
        body = b"e" * 300_000
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        assert split_response(read_rest(s)) == (200, body)
    finally:
        if proxy:
            proxy.close()
        assert srv.stop() == 0, srv.log()
