"""WSGI under real frameworks and a real client (httpx), and how `interface="auto"` tells
an ASGI app from a WSGI one:

- Flask (tests/apps/wsgi_flask.py) and bare Werkzeug (tests/apps/wsgi_werkzeug.py) on an
  in-process server (a loop of its own in a thread: tests/apps/serving.py), on swordfish
  and on the stdlib loop: routes, JSON (also sent chunked), forms with files, cookies,
  redirects, a streamed response, send_file through wsgi.file_wrapper, a failing view;
- Django's WSGI handler (tests/apps/wsgi_django.py) under `python -m swordfish serve` in a
  subprocess, since Django's settings are global to a process;
- auto-detection: async functions and objects with an async __call__ are ASGI; plain
  functions, objects with a plain __call__ and a Flask app are WSGI."""

import asyncio
import functools
import hashlib
import json
import os

import flask
import pytest
import werkzeug.wrappers

from apps import Probe, wsgi_flask, wsgi_werkzeug
from apps.serving import CliServer, Served, payload, pieces_of
from httputil import connect, read_response, serving

H = b"Host: example.com\r\n"
APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")


@pytest.fixture(params=["swordfish", "asyncio"])
def server_loop(request):
    return request.param


@pytest.fixture
def http2():
    """The clients speak HTTP/1.1 here (tests/test_http2_wsgi.py: HTTP/2)."""
    return False


def wsgi_served(app, loop, probe=None, http2=False):
    """The WSGI app on a ThreadServer (4 threads, no lifespan) with an httpx client; over
    h2c with `http2` (`--http 2`, which the loop serves)."""
    options = {"http": "2"} if http2 else {}
    return Served(app, probe, loop, http2, interface="wsgi", threads=4, lifespan="off", **options)


@pytest.fixture
def fl(server_loop, tmp_path, http2):
    path = tmp_path / "download.bin"
    path.write_bytes(payload(700_000, seed=4))
    probe = Probe(file_dir=str(tmp_path))
    with wsgi_served(wsgi_flask.create_app(probe, str(path)), server_loop, probe, http2) as served:
        served.file = path
        yield served


@pytest.fixture
def wz(server_loop, http2):
    with wsgi_served(wsgi_werkzeug.app, server_loop, http2=http2) as served:
        yield served


# -- Flask --------------------------------------------------------------------------------

def test_flask_routes_and_query(fl):
    r = fl.client.get("/hello/caf%C3%A9", params={"lang": "fr"})
    assert r.status_code == 200 and r.text == "hello café (fr)"
    assert r.headers["content-type"].startswith("text/html")
    assert int(r.headers["content-length"]) == len(r.content)
    assert fl.client.get("/no/such/route").status_code == 404
    assert fl.client.post("/hello/x").status_code == 405


def test_flask_json_with_a_length_and_chunked(fl):
    doc = {"numbers": [1, 2, 3, 4], "name": "ünïcode"}
    r = fl.client.post("/json", json=doc)
    assert r.status_code == 200 and r.json() == {"got": doc, "total": 10, "chunked": False}
    # No Content-Length: Werkzeug reads the body only because wsgi.input_terminated says it may.
    body = json.dumps(doc).encode()
    r = fl.client.post("/json", content=iter([body[:5], body[5:]]), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json() == {"got": doc, "total": 10, "chunked": True}


def test_flask_form_with_a_file(fl):
    data = payload(300_000, seed=5)
    r = fl.client.post("/form", data={"field": "value"}, files={"doc": ("report.bin", data)})
    assert r.status_code == 200
    assert r.json() == {"field": "value", "filename": "report.bin", "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()}


def test_flask_streamed_response(fl):
    with fl.client.stream("GET", "/stream") as r:
        assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
        pieces = r.iter_raw()
        first = next(pieces)
        fl.probe.gate.set()
        rest = b"".join(pieces)
    assert first == b"first\n" and rest == b"second\n"
    assert fl.probe.events == [("gate", True)]  # the first piece came while the app waited


def test_flask_send_file_goes_through_the_file_wrapper(fl):
    r = fl.client.get("/file")
    data = fl.file.read_bytes()
    assert r.status_code == 200 and r.content == data
    assert r.headers["content-length"] == str(len(data))
    assert ("file_wrapper", "/file") in fl.probe.sent


def test_flask_error_is_its_own_500(fl, caplog):
    r = fl.client.get("/error")
    assert r.status_code == 500 and "Internal Server Error" in r.text
    # Flask answered it: nothing for the server to log.
    assert not [rec for rec in caplog.records if rec.name.startswith("swordfish") and rec.levelname == "ERROR"]


# -- Werkzeug -----------------------------------------------------------------------------

def test_werkzeug_request_data(wz):
    r = wz.client.get("/info", params=[("a", "1"), ("a", "2"), ("b", "x y")],
                      headers={"X-Test": "yes", "Cookie": "flavour=lemon"})
    assert r.status_code == 200
    assert r.json() == {
        "method": "GET", "path": "/info", "args": {"a": ["1", "2"], "b": ["x y"]}, "header": "yes",
        "cookie": "lemon", "remote_addr": "127.0.0.1", "scheme": "http", "host": f"127.0.0.1:{wz.server.port}",
        "url": f"http://127.0.0.1:{wz.server.port}/info?a=1&a=2&b=x+y",
    }


def test_werkzeug_form_files_and_streamed_body(wz):
    one, two = payload(100_000, seed=6), payload(2_000, seed=7)
    r = wz.client.post("/form", data={"k": ["v1", "v2"]}, files={"one": ("one.bin", one), "two": ("two.txt", two)})
    assert r.status_code == 200
    assert r.json() == {"form": {"k": ["v1", "v2"]}, "files": {
        "one": {"filename": "one.bin", "sha256": hashlib.sha256(one).hexdigest()},
        "two": {"filename": "two.txt", "sha256": hashlib.sha256(two).hexdigest()}}}
    big = payload(3 << 20, seed=8)
    r = wz.client.post("/stream-in", content=pieces_of(big))  # chunked
    assert r.json() == {"length": len(big), "sha256": hashlib.sha256(big).hexdigest()}


def test_werkzeug_cookies_and_redirects(wz):
    r = wz.client.get("/cookie")
    assert r.text == "cookie set" and r.headers["set-cookie"].startswith("flavour=mint;")
    assert "HttpOnly" in r.headers["set-cookie"]
    r = wz.client.get("/redirect")
    assert r.status_code == 302 and r.headers["location"] == "/info?from=redirect"
    r = wz.client.get("/redirect", follow_redirects=True)
    assert r.status_code == 200 and r.json()["args"] == {"from": ["redirect"]}


# -- Django (WSGI handler, in a subprocess) -------------------------------------------------

@pytest.fixture(scope="module")
def dj():
    server = CliServer("apps.wsgi_django:application", "--interface", "wsgi", "--no-access-log")
    with server:
        client = server.client()
        try:
            yield client
        finally:
            client.close()
            assert server.stop() == 0, server.output()


def test_django_views(dj):
    r = dj.get("/hello", params={"name": "wsgi"})
    assert r.status_code == 200 and r.text == "hello wsgi"
    r = dj.get("/info/7", params=[("q", "a"), ("q", "b")], headers={"X-Test": "t", "Cookie": "flavour=mint"})
    assert r.json() == {"num": 7, "method": "GET", "path": "/info/7", "query": ["a", "b"], "header": "t",
                        "cookie": "mint", "scheme": "http", "multithread": True, "protocol": "HTTP/1.1"}
    assert dj.get("/missing").status_code == 404


def test_django_uploads_and_csrf(dj):
    # With a Content-Length only: Django's WSGIRequest reads CONTENT_LENGTH bytes of
    # wsgi.input and ignores wsgi.input_terminated (a chunked body is empty to it).
    data = payload(1 << 20, seed=9)
    r = dj.post("/upload", content=data, headers={"content-type": "application/octet-stream"})
    assert r.json() == {"length": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "content_type": "application/octet-stream"}
    assert dj.post("/guarded", content=b"x").status_code == 403


def test_django_streaming_file_and_error(dj):
    r = dj.get("/stream", params={"n": 50})
    assert r.status_code == 200 and r.text == "".join(f"django piece {i}\n" for i in range(50))
    r = dj.get("/source")
    with open(os.path.join(APPS, "wsgi_django.py"), "rb") as f:
        source = f.read()
    assert r.status_code == 200 and r.content == source and r.headers["content-length"] == str(len(source))
    assert dj.get("/error").status_code == 500


# -- interface auto-detection -----------------------------------------------------------

async def asgi_function(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
    await send({"type": "http.response.body", "body": b"asgi"})


class AsgiObject:
    async def __call__(self, scope, receive, send):
        await asgi_function(scope, receive, send)


def wsgi_function(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
    return [b"wsgi"]


class WsgiObject:
    def __call__(self, environ, start_response):
        return wsgi_function(environ, start_response)


def asgi_decorated():
    """A decorator of an ASGI function that takes `*args` and is not `async def` itself."""

    @functools.wraps(asgi_function)
    def logged(*args):
        return asgi_function(*args)

    return logged


def asgi_sync_function(scope, receive, send):
    return asgi_function(scope, receive, send)  # the coroutine, from a plain function


def werkzeug_request_application():
    """Werkzeug's decorator: `application(*args)`, wrapping a function of the request."""

    @werkzeug.wrappers.Request.application
    def app(request):
        return werkzeug.wrappers.Response("wsgi", mimetype="text/plain")

    return app


def flask_app():
    app = flask.Flask("detected")
    app.add_url_rule("/", "index", lambda: flask.Response("wsgi", mimetype="text/plain"))
    return app


APPS_BY_KIND = {
    "asgi-function": (lambda: asgi_function, b"asgi"),
    "asgi-object": (AsgiObject, b"asgi"),
    "asgi-partial": (lambda: functools.partial(asgi_function), b"asgi"),
    "wsgi-function": (lambda: wsgi_function, b"wsgi"),
    "wsgi-object": (WsgiObject, b"wsgi"),
    "flask": (flask_app, b"wsgi"),
    "asgi-decorated": (asgi_decorated, b"asgi"),
    "asgi-sync-three-arguments": (lambda: asgi_sync_function, b"asgi"),
    "werkzeug-request-application": (werkzeug_request_application, b"wsgi"),
}


@pytest.mark.parametrize("kind", list(APPS_BY_KIND))
def test_interface_auto_detection(loop, kind):
    make, expected = APPS_BY_KIND[kind]

    async def main():
        async with serving(make(), interface="auto") as server:
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            resp = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return resp

    resp = loop.run_until_complete(asyncio.wait_for(main(), 20))
    assert resp.body == expected, resp
