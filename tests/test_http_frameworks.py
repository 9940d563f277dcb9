"""The HTTP server under real frameworks (Starlette, FastAPI, Django's ASGI handler) and a
real client (httpx), and `swordfish serve --loop swordfish|asyncio|uvloop`.

In-process servers run `swordfish.server.Server` on a loop of their own in a thread (on
swordfish, and on the stdlib loop to show that the tests encode the right behaviour); the
client (httpx, sync or async on a loop of its own) runs in the test's thread. The CLI
tests run `python -m swordfish serve` in a subprocess. The apps are in tests/apps/; they
report through a `Probe` whose threading events the tests wait on, with timeouts; the
harness is tests/apps/serving.py."""

import asyncio
import gc
import hashlib
import logging
import socket
import time

import httpx
import pytest

from apps import Probe, Watched, django_app, fastapi_app, starlette_app
from apps.serving import (
    WAIT, CliServer, ErrorLog, MiB, Served, client_for, payload, pieces_of, raw_connection, read_raw_response,
    run_client,
)


@pytest.fixture(params=["swordfish", "asyncio"])
def server_loop(request):
    """The loop the in-process server runs on."""
    return request.param


@pytest.fixture
def http2():
    """The clients speak HTTP/1.1 here (tests/test_http2_frameworks.py: HTTP/2)."""
    return False


@pytest.fixture
def star(server_loop, tmp_path, http2):
    probe = Probe(file_dir=str(tmp_path))
    with Served(starlette_app.create_app(probe), probe, server_loop, http2) as served:
        yield served


@pytest.fixture
def fast(server_loop, http2):
    probe = Probe()
    with Served(fastapi_app.create_app(probe), probe, server_loop, http2) as served:
        yield served


@pytest.fixture
def dj(server_loop, http2):
    handler = django_app.get_application()
    probe = django_app.reset()
    # Django refuses the lifespan scope: "auto" goes on without it (as the CLI's default).
    with Served(Watched(handler, probe), probe, server_loop, http2, lifespan="auto") as served:
        yield served


@pytest.fixture
def error_log():
    handler = ErrorLog()
    logger = logging.getLogger("swordfish.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


# -- Starlette ----------------------------------------------------------------------------

def test_starlette_path_and_query_params(star):
    r = star.client.get("/items/42/caf%C3%A9%20bar", params=[("q", "a&b=c"), ("tag", "x"), ("tag", "y z")])
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.json() == {"item_id": 42, "name": "café bar", "q": "a&b=c", "tags": ["x", "y z"]}
    assert star.client.get("/items/not-a-number/x").status_code == 404  # the int convertor


def test_starlette_not_found_and_method_not_allowed(star):
    r = star.client.get("/no/such/route")
    assert (r.status_code, r.text) == (404, "Not Found")
    r = star.client.post("/items/1/x")
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "HEAD"}
    r = star.client.get("/empty")
    assert r.status_code == 204 and r.content == b"" and "transfer-encoding" not in r.headers


def test_starlette_streaming_response(star):
    with star.client.stream("GET", "/stream", params={"n": 300}) as r:
        assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in r.headers
        received = list(r.iter_bytes())
    assert b"".join(received) == b"".join(starlette_app.chunk(i) for i in range(300))
    assert len(received) > 1


def test_starlette_stream_is_sent_as_it_is_produced(star):
    # The generator yields "first|", then waits for the gate that the test opens only
    # after it has read "first|": a server holding chunks back would time out here.
    with star.client.stream("GET", "/gated") as r:
        raw = r.iter_raw()
        got = b""
        while len(got) < len(b"first|"):
            got += next(raw)
        assert got == b"first|"
        star.probe.gate.set()
        assert b"".join(raw) == b"second"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("endpoint", ["/body", "/stream-in"])
def test_starlette_large_request_body(star, framing, endpoint):
    data = payload(MiB + 17)
    r = star.client.post(endpoint, content=data if framing == "content-length" else pieces_of(data))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["length"], got["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    if endpoint == "/body":
        assert got["transfer_encoding"] == ("chunked" if framing == "chunked" else None)
    else:
        assert got["pieces"] >= 2  # the body reached the app as it arrived, not in one piece


def test_starlette_urlencoded_form(star):
    r = star.client.post("/form", data={"name": "Zoë & co", "tag": ["a", "b=c"], "empty": ""})
    assert r.status_code == 200, r.text
    assert r.json() == {"name": ["Zoë & co"], "tag": ["a", "b=c"], "empty": [""]}


def test_starlette_file_response(star, tmp_path):
    small = b"small file\n" * 3
    big = payload(3 * MiB + 123, seed=2)
    (tmp_path / "small.txt").write_bytes(small)
    (tmp_path / "big.bin").write_bytes(big)
    for name, data in (("small.txt", small), ("big.bin", big)):
        r = star.client.get(f"/file/{name}")
        assert r.status_code == 200
        assert int(r.headers["content-length"]) == len(data)
        assert hashlib.sha256(r.content).hexdigest() == hashlib.sha256(data).hexdigest()
        assert (f"/file/{name}", "http.response.pathsend") in star.probe.sent
    r = star.client.head("/file/big.bin")
    assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) == len(big)
    r = star.client.get("/file/big.bin", headers={"range": "bytes=1000-1999"})
    assert r.status_code == 206 and r.content == big[1000:2000]
    # And the connection that carried the files is still good for another request.
    assert star.client.get("/items/1/a").status_code == 200


def test_starlette_headers_and_cookies(star):
    headers = [("x-custom", "one"), ("x-custom", "two"), ("user-agent", "frameworks-test/1"), ("cookie", "flavour=oat")]
    r = star.client.get("/headers", headers=headers)
    assert r.status_code == 200
    assert r.json() == {"x-custom": ["one", "two"], "cookies": {"flavour": "oat"}, "user-agent": "frameworks-test/1"}
    assert r.headers["x-reply"] == "replied"
    cookies = r.headers.get_list("set-cookie")
    assert len(cookies) == 2 and "HttpOnly" in cookies[0] and cookies[1].startswith("theme=dark")
    # The client's jar sends them back.
    r = star.client.get("/headers")
    assert r.json()["cookies"] == {"session": "abc123", "theme": "dark"}


def test_starlette_endpoint_exception_is_500(star, error_log):
    r = star.client.get("/boom")
    assert (r.status_code, r.text) == (500, "Internal Server Error")
    # Starlette answers 500, then re-raises for the server to log (after the response:
    # hence the wait).
    (record,) = error_log.wait(1)
    assert record.getMessage() == "Exception in ASGI application"
    assert isinstance(record.exc_info[1], RuntimeError)
    assert star.client.get("/items/1/a").status_code == 200


@pytest.mark.parametrize("body", ["complete", "incomplete"])
def test_starlette_exception_after_the_response_is_logged(server_loop, error_log, body):
    # As above, with a request body the endpoint never reads, complete or still arriving
    # when the app raises (after its 500 went out): either way the server must log it.
    probe = Probe()
    with Served(Watched(starlette_app.create_app(probe), probe), probe, server_loop) as served:
        with raw_connection(served.server) as s:
            sent = 1000 if body == "complete" else 10
            s.sendall(b"POST /boom HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n" + b"x" * sent)
            assert read_raw_response(s) == (500, b"Internal Server Error")
            assert probe.app_returned.wait(WAIT) and probe.app_errors == [RuntimeError]
            # The server takes the outcome in the task's done-callback, on the loop's
            # next iteration: 2 s is ample.
            records = error_log.wait(1, timeout=2)
            assert [rec.getMessage() for rec in records] == ["Exception in ASGI application"]
            s.sendall(b"x" * (1000 - sent) + b"GET /items/1/a HTTP/1.1\r\nHost: t\r\n\r\n")
            assert read_raw_response(s)[0] == 200


def test_starlette_unread_upload_does_not_stall_the_connection(star):
    # The endpoint refuses an upload without reading its body, after the server has paused
    # reading (flow control: the unread body passed the server's high-water mark). The
    # server must then read and discard the rest of the body (and serve the next request
    # on the connection) or close the connection, not leave the client hanging.
    length = 64 * MiB
    with raw_connection(star.server) as s:
        s.setblocking(False)
        s.sendall(b"POST /refuse HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % length)
        sent = 0
        while sent < length:  # until the socket buffers are full: the server stopped reading
            try:
                sent += s.send(b"u" * min(64 * 1024, length - sent))
            except BlockingIOError:
                break
        assert sent < length, "the server read a whole unread body without pausing"
        # Whatever is in the socket buffers is more than the server takes before pausing,
        # and the server reads it before the endpoint's next step: it is paused now.
        star.probe.gate.set()
        s.settimeout(5)
        assert read_raw_response(s) == (413, b"too large")
        try:
            s.sendall(b"u" * (length - sent))
        except socket.timeout:
            pytest.fail("the server stopped reading the request body for good")
        except OSError:
            return  # the server closed the connection: fine too
        s.sendall(b"GET /items/1/a HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_raw_response(s)[0] == 200


def test_starlette_lifespan_state(server_loop):
    probe = Probe()
    with Served(starlette_app.create_app(probe), probe, server_loop) as served:
        assert probe.events == ["startup"]
        first = served.client.get("/state").json()
        second = served.client.get("/state").json()
    assert first == {"app_state": "app.state set at startup", "greeting": "hello from lifespan", "counter": 0}
    assert second == first  # a request's changes to its state stay in that request
    assert probe.events == ["startup", "shutdown"]


def test_starlette_background_task_runs_after_the_response(star):
    r = star.client.get("/background")
    # The whole response is here while the task still waits for the gate ...
    assert (r.status_code, r.text) == (200, "queued")
    assert not star.probe.background_done.is_set()
    # ... and the connection serves the next request meanwhile.
    assert star.client.get("/items/7/b").json()["item_id"] == 7
    star.probe.gate.set()
    assert star.probe.background_done.wait(WAIT)
    assert "background ran" in star.probe.events


def test_starlette_sync_endpoint_runs_in_the_threadpool(star):
    assert star.client.get("/thread").json() == {"in_loop_thread": True}
    assert star.client.get("/sync-thread").json() == {"in_loop_thread": False}


def test_client_disconnect_mid_stream(star):
    # The client goes away after the first piece of an endless stream: the generator is
    # closed (its finally runs) and the server goes on serving.
    with star.client.stream("GET", "/endless") as r:
        assert r.status_code == 200
        assert next(r.iter_raw()).startswith(b"00000000x")
    assert star.probe.stream_closed.wait(WAIT), "the endless generator was not closed"
    assert star.client.get("/items/3/c").json()["item_id"] == 3
    with client_for(star.server) as other:
        assert other.get("/stream", params={"n": 3}).status_code == 200


# -- httpx: keep-alive --------------------------------------------------------------------

def test_keep_alive_sync_client(star):
    ports = {star.client.get("/client").json()["port"] for _ in range(5)}
    assert len(ports) == 1  # five requests, one connection
    with client_for(star.server) as other:
        assert other.get("/client").json()["port"] not in ports


def test_keep_alive_async_client(star):
    async def session():
        async with httpx.AsyncClient(base_url=star.server.url, trust_env=False, timeout=WAIT) as client:
            sequential = [(await client.get("/client")).json()["port"] for _ in range(5)]
            concurrent = await asyncio.gather(*(client.get("/items/5/x") for _ in range(8)))
            return sequential, [r.json()["item_id"] for r in concurrent]

    sequential, concurrent = run_client(session())
    assert len(set(sequential)) == 1
    assert concurrent == [5] * 8


# -- FastAPI ------------------------------------------------------------------------------

def test_fastapi_model_body(fast):
    r = fast.client.post("/items/3", json={"name": "bolt", "price": 1.25, "tags": ["m4"]}, params={"limit": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {"item_id": 3, "item": {"name": "bolt", "price": 1.25, "tags": ["m4"]}, "total": 2.5,
                        "page": {"offset": 0, "limit": 2}}
    r = fast.client.post("/items/3", json={"name": "", "price": -1})
    assert r.status_code == 422
    assert sorted(tuple(e["loc"]) for e in r.json()["detail"]) == [("body", "name"), ("body", "price")]
    r = fast.client.post("/items/x", json={"name": "bolt", "price": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "item_id"]
    r = fast.client.post("/items/3", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"


def test_fastapi_dependencies(fast):
    r = fast.client.get("/items/widget", headers={"x-token": "secret"})
    assert r.status_code == 200 and r.json() == {"name": "widget", "price": 2.5, "tags": ["stock"]}
    r = fast.client.get("/items/gadget", headers={"x-token": "secret"})
    assert (r.status_code, r.json()) == (404, {"detail": "no item 'gadget'"})
    r = fast.client.get("/items/widget", headers={"x-token": "wrong"})
    assert (r.status_code, r.json()) == (403, {"detail": "bad token"})
    r = fast.client.get("/items/widget")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["header", "x-token"]
    r = fast.client.post("/items/1?offset=5&limit=oops", json={"name": "n", "price": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"]


def test_fastapi_async_and_sync_path_operations(fast):
    async def session():
        async with httpx.AsyncClient(base_url=fast.server.url, trust_env=False, timeout=WAIT) as client:
            return await asyncio.gather(*(client.get(p) for p in ["/async-thread", "/sync-thread"] * 4))

    responses = run_client(session())
    assert [r.json()["in_loop_thread"] for r in responses] == [True, False] * 4


def test_fastapi_lifespan(server_loop):
    probe = Probe()
    with Served(fastapi_app.create_app(probe), probe, server_loop) as served:
        assert probe.events == ["startup"] and probe.loop_thread == served.server.thread.ident
        r = served.client.get("/items/widget", headers={"x-token": "secret"})  # state from the lifespan
        assert r.json()["name"] == "widget"
    assert probe.events == ["startup", "shutdown"]


# -- Django -------------------------------------------------------------------------------

def test_django_views(dj):
    r = dj.client.get("/hello", params={"name": "django"})
    assert (r.status_code, r.text, r.headers["content-type"]) == (200, "hello django", "text/plain")
    r = dj.client.get("/info/12", params=[("q", "1"), ("q", "two")], headers={"x-test": "yes", "cookie": "flavour=oat"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"num": 12, "method": "GET", "path": "/info/12", "query": ["1", "two"],
                        "header": "yes", "cookie": "oat", "scheme": "http"}
    r = dj.client.get("/missing")
    assert r.status_code == 404 and "Not Found" in r.text
    assert dj.client.get("/info/not-a-number").status_code == 404


def test_django_error_is_500(dj, caplog):
    r = dj.client.get("/error")
    assert r.status_code == 500 and "Server Error (500)" in r.text
    assert any(rec.name == "django.request" and rec.levelname == "ERROR" for rec in caplog.records)
    assert not [rec for rec in caplog.records if rec.name == "swordfish.error"]  # Django answered it
    assert dj.client.get("/hello").status_code == 200


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_django_request_body(dj, framing):
    data = payload(MiB + 5, seed=3)
    r = dj.client.post("/upload", content=data if framing == "content-length" else pieces_of(data),
                       headers={"content-type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:500]
    assert r.json() == {"length": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "content_type": "application/octet-stream"}


def test_django_csrf_refuses_a_post_without_token(dj):
    r = dj.client.post("/guarded", content=b"x=1", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 403


def test_django_streaming_response(dj):
    with dj.client.stream("GET", "/stream", params={"n": 50}) as r:
        assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
        body = r.read()
    assert body == "".join(f"django piece {i}\n" for i in range(50)).encode()


def test_django_client_disconnect_mid_stream(dj):
    with dj.client.stream("GET", "/endless") as r:
        assert next(r.iter_raw()).startswith(b"00000000d")
    # The server ends the request: send() raises ClientDisconnected (an OSError, ASGI 2.4)
    # and Django's handler returns (raising it).
    assert dj.probe.app_returned.wait(WAIT), "the Django handler did not return"
    assert all(issubclass(e, OSError) for e in dj.probe.app_errors), dj.probe.app_errors
    # Django closes only its own wrapper around the view's generator (aclosing(aiter(
    # response))), and the exception's traceback holds the response in a reference cycle:
    # the view's generator is closed when that cycle is collected, not at once. On the
    # stdlib loop too; it is Django's way, not the server's. The server goes on serving
    # (and once it has answered this, it has let go of the request that raised).
    assert dj.client.get("/hello").text == "hello nobody"
    deadline = time.monotonic() + WAIT
    while not dj.probe.stream_closed.wait(0.05):
        assert time.monotonic() < deadline, "the endless generator was not closed"
        gc.collect()


# -- the CLI: `swordfish serve` in a subprocess -------------------------------------------

LOOP_CLASSES = {
    "swordfish": "swordfish._loop.Loop",
    "asyncio": "asyncio.unix_events._UnixSelectorEventLoop",
    "uvloop": "uvloop.Loop",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop", ["swordfish", "asyncio", "uvloop"])
def test_cli_starlette_on_each_loop(loop):
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    with CliServer("--factory", "apps.starlette_app:create_app", "--loop", loop) as srv:
        with srv.client() as client:
            assert client.get("/loop").text == LOOP_CLASSES[loop]
            assert client.get("/items/9/z", params={"q": "cli"}).json()["q"] == "cli"
            assert client.get("/state").json()["greeting"] == "hello from lifespan"
            with client.stream("GET", "/stream", params={"n": 40}) as r:
                assert r.read() == b"".join(starlette_app.chunk(i) for i in range(40))
            data = payload(MiB, seed=4)
            r = client.post("/stream-in", content=pieces_of(data))
            assert r.json()["sha256"] == hashlib.sha256(data).hexdigest()
            ports = {client.get("/client").json()["port"] for _ in range(3)}
            assert len(ports) == 1
        assert srv.stop() == 0, srv.output()
    assert '"GET /loop HTTP/1.1" 200' in srv.output()  # the access log


@pytest.mark.timeout(60)
def test_cli_django_factory():
    with CliServer("--factory", "apps.django_app:get_application", "--no-access-log") as srv:
        with srv.client() as client:
            assert client.get("/hello", params={"name": "cli"}).text == "hello cli"
            r = client.post("/upload", content=b"abc", headers={"content-type": "text/plain"})
            assert r.json()["length"] == 3
        assert srv.stop() == 0, srv.output()
