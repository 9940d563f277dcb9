"""The WSGI environ (PEP 3333 "environ Variables"), over real sockets, on the stdlib loop
and on swordfish: every required CGI key and its exact value for what the client sent
(percent-decoded PATH_INFO as latin-1 text, raw QUERY_STRING, CONTENT_TYPE/LENGTH only
when sent, HTTP_* with repeated fields joined), the wsgi.* keys, SCRIPT_NAME from
root_path, the scheme over TLS and from trusted proxy headers, wsgi.errors going to the
log, a fresh environ per request, no os.environ leaking in, and the app running on the
server's thread pool (never on the loop's thread, as many at once as `threads`).

Probe apps run under `wsgiref.validate.validator`: it raises AssertionError inside the app
on any violation, which the server answers with a 500, so a 200 proves conformance."""

import asyncio
import logging
import ssl
import threading
from wsgiref.validate import validator

from httputil import connect, port_of, read_response
from netutil import tls_files  # noqa: F401 (fixture)
from wsgiutil import H, event_set, mentions, run, until, wsgi_serving


def probe():
    """A validated app, and the environs it got: each copied as the server made it (before
    the validator wraps wsgi.input and wsgi.errors), with the thread it ran on."""
    seen = []

    def inner(environ, start_response):
        size = int(environ.get("CONTENT_LENGTH") or 0)
        seen[-1]["probe.body"] = environ["wsgi.input"].read(size) if size else b""
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    checked = validator(inner)

    def app(environ, start_response):
        seen.append(dict(environ, **{"probe.thread": threading.get_ident()}))
        return checked(environ, start_response)

    return app, seen


async def one(server, raw, head_request=False):
    """Send raw on a new connection: (response, client address of that connection)."""
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        resp = await asyncio.wait_for(read_response(reader, head_request), 5)
        return resp, writer.get_extra_info("sockname")
    finally:
        writer.close()


def test_required_keys_of_a_get(loop):
    app, seen = probe()

    async def main():
        async with wsgi_serving(app) as server:
            port = port_of(server)
            raw = (b"GET /caf%C3%A9/a%20b?a=1&b=%20c&d=caf%C3%A9&e=%2F HTTP/1.1\r\n"
                   b"Host: 127.0.0.1:" + str(port).encode() + b"\r\n"
                   b"X-Custom-Thing: v1\r\n"
                   b"X-Multi: a\r\nX-Multi: b\r\n"
                   b"Cookie: a=1\r\nCookie: b=2\r\n"
                   b"X-Empty:\r\n"
                   b"X-Latin: caf\xe9\r\n"
                   b"User-Agent: probe/1\r\n\r\n")
            resp, client = await one(server, raw)
            return port, resp, client

    port, resp, client = run(loop, main())
    assert resp.status == 200, resp
    env = seen[0]
    assert env["REQUEST_METHOD"] == "GET"
    assert env["SCRIPT_NAME"] == ""
    # Percent-decoded, then the bytes as latin-1 text ("native strings").
    assert env["PATH_INFO"] == "/caf\xc3\xa9/a b"
    assert env["QUERY_STRING"] == "a=1&b=%20c&d=caf%C3%A9&e=%2F"  # raw
    assert "CONTENT_TYPE" not in env and "CONTENT_LENGTH" not in env
    assert "HTTP_CONTENT_TYPE" not in env and "HTTP_CONTENT_LENGTH" not in env
    assert env["SERVER_NAME"] == "127.0.0.1"
    assert env["SERVER_PORT"] == str(port)
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["HTTP_HOST"] == f"127.0.0.1:{port}"
    assert env["HTTP_X_CUSTOM_THING"] == "v1"
    assert env["HTTP_X_MULTI"] == "a, b"
    assert env["HTTP_COOKIE"] == "a=1; b=2"  # the one separator a cookie header knows
    assert env["HTTP_X_EMPTY"] == ""
    assert env["HTTP_X_LATIN"] == "caf\xe9"
    assert env["HTTP_USER_AGENT"] == "probe/1"
    assert env["REMOTE_ADDR"] == "127.0.0.1"
    assert env["REMOTE_PORT"] == str(client[1])
    assert env["wsgi.version"] == (1, 0)
    assert env["wsgi.url_scheme"] == "http"
    assert env["wsgi.multithread"] is True
    assert env["wsgi.multiprocess"] is False
    assert env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert callable(env["wsgi.file_wrapper"])
    for name in ("read", "readline", "readlines", "__iter__"):
        assert callable(getattr(env["wsgi.input"], name)), name
    for name in ("write", "writelines", "flush"):
        assert callable(getattr(env["wsgi.errors"], name)), name
    assert env["probe.thread"] != threading.get_ident()  # not on the loop's thread
    for key, value in env.items():
        if "." not in key:
            assert type(value) is str, (key, value)  # native str, not a subclass or bytes


def test_content_type_and_length_of_a_post(loop):
    app, seen = probe()

    async def main():
        async with wsgi_serving(app) as server:
            return await one(server, b"POST /form HTTP/1.1\r\n" + H + b"Content-Type: application/x-www-form-urlencoded\r\n"
                             b"Content-Length: 7\r\n\r\na=1&b=2")

    resp, _ = run(loop, main())
    assert resp.status == 200, resp
    env = seen[0]
    assert env["REQUEST_METHOD"] == "POST" and env["PATH_INFO"] == "/form" and env["QUERY_STRING"] == ""
    assert env["CONTENT_TYPE"] == "application/x-www-form-urlencoded"
    assert env["CONTENT_LENGTH"] == "7"
    assert "HTTP_CONTENT_TYPE" not in env and "HTTP_CONTENT_LENGTH" not in env
    assert env["probe.body"] == b"a=1&b=2"


def test_http10_and_other_methods(loop):
    app, seen = probe()

    async def main():
        async with wsgi_serving(app) as server:
            port = port_of(server)
            r1, _ = await one(server, b"GET /old HTTP/1.0\r\n\r\n")
            r2, _ = await one(server, b"DELETE /thing/1 HTTP/1.1\r\n" + H + b"\r\n")
            r3, _ = await one(server, b"HEAD / HTTP/1.1\r\n" + H + b"\r\n", head_request=True)
            r4, _ = await one(server, b"GET http://example.org:8080/abs?x=1 HTTP/1.1\r\n" + H + b"\r\n")
            return port, [r1, r2, r3, r4]

    port, responses = run(loop, main())
    assert [r.status for r in responses] == [200, 200, 200, 200], responses
    old, delete, head, absolute = seen
    assert old["SERVER_PROTOCOL"] == "HTTP/1.0" and old["PATH_INFO"] == "/old"
    assert "HTTP_HOST" not in old
    # No Host: the server's own address.
    assert old["SERVER_NAME"] == "127.0.0.1" and old["SERVER_PORT"] == str(port)
    assert delete["REQUEST_METHOD"] == "DELETE" and delete["PATH_INFO"] == "/thing/1"
    assert head["REQUEST_METHOD"] == "HEAD"
    assert absolute["PATH_INFO"] == "/abs" and absolute["QUERY_STRING"] == "x=1"
    # The target's host, not the Host field's (RFC 9112 §3.2.2).
    assert absolute["HTTP_HOST"] == "example.org:8080"


def test_root_path_is_script_name(loop):
    app, seen = probe()

    async def main():
        async with wsgi_serving(app, root_path="/mount") as server:
            return await one(server, b"GET /x/y?q HTTP/1.1\r\n" + H + b"\r\n")

    resp, _ = run(loop, main())
    assert resp.status == 200, resp
    assert seen[0]["SCRIPT_NAME"] == "/mount"
    assert seen[0]["PATH_INFO"] == "/x/y" and seen[0]["QUERY_STRING"] == "q"


def test_https_scheme(loop, tls_files):
    cert, key = tls_files
    app, seen = probe()

    async def main():
        async with wsgi_serving(app, ssl_certfile=cert, ssl_keyfile=key) as server:
            ctx = ssl.create_default_context(cafile=cert)
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server), ssl=ctx,
                                                           server_hostname="localhost")
            writer.write(b"POST /s HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc")
            resp = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return resp

    resp = run(loop, main())
    assert resp.status == 200, resp
    assert seen[0]["wsgi.url_scheme"] == "https" and seen[0]["probe.body"] == b"abc"


XFF = b"X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n"


def test_proxy_headers_from_a_trusted_peer(loop):
    app, seen = probe()

    async def main():
        async with wsgi_serving(app, proxy_headers=True, forwarded_allow_ips="*") as server:
            await one(server, b"GET / HTTP/1.1\r\n" + H + XFF + b"\r\n")
        async with wsgi_serving(app) as server:  # proxy headers off (the default)
            await one(server, b"GET / HTTP/1.1\r\n" + H + XFF + b"\r\n")

    run(loop, main())
    trusted, off = seen
    assert trusted["wsgi.url_scheme"] == "https" and trusted["REMOTE_ADDR"] == "203.0.113.7"
    assert off["wsgi.url_scheme"] == "http" and off["REMOTE_ADDR"] == "127.0.0.1"
    assert off["HTTP_X_FORWARDED_FOR"] == "203.0.113.7"


def test_wsgi_errors_go_to_the_log(loop, caplog):
    caplog.set_level(logging.DEBUG)

    def app(environ, start_response):
        errors = environ["wsgi.errors"]
        errors.write("first complaint from the app\n")
        errors.writelines(["second ", "complaint from the app\n"])
        errors.flush()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(validator(app)) as server:
            resp, _ = await one(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            assert resp.status == 200, resp
            for text in ("first complaint from the app", "second complaint from the app"):
                await until(lambda: any(mentions(r, text) for r in caplog.records), what=f"a log of {text!r}")

    run(loop, main())


def test_environ_is_the_request_own_and_os_environ_stays_out(loop, monkeypatch):
    monkeypatch.setenv("SWORDFISH_WSGI_LEAK_PROBE", "leaked")
    seen = []

    def app(environ, start_response):
        seen.append(dict(environ))
        environ["app.mark"] = "from the first request"
        environ["HTTP_X_A"] = "changed"
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            for _ in range(2):  # two requests on one connection
                writer.write(b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\r\n\r\n")
                assert (await asyncio.wait_for(read_response(reader), 5)).status == 200
            writer.close()

    run(loop, main())
    first, second = seen
    assert "app.mark" not in second and second["HTTP_X_A"] == "1"
    for env in (first, second):
        for leaked in ("SWORDFISH_WSGI_LEAK_PROBE", "PATH", "HOME"):
            assert leaked not in env, leaked


def test_the_app_runs_on_the_thread_pool(loop):
    # `threads=3`: three requests are in the app at once (each waits for the other two);
    # none of them on the loop's thread (this one).
    barrier = threading.Barrier(3, timeout=5)
    threads = []

    def app(environ, start_response):
        threads.append(threading.get_ident())
        barrier.wait()  # BrokenBarrierError (a 500) unless three threads are in here at once
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(app, threads=3) as server:
            return await asyncio.gather(*(one(server, b"GET / HTTP/1.1\r\n" + H + b"\r\n") for _ in range(3)))

    results = run(loop, main())
    assert [r.status for r, _ in results] == [200, 200, 200]
    assert len(set(threads)) == 3 and threading.get_ident() not in threads


def test_threads_bounds_the_requests_in_the_app(loop):
    # `threads=2`: of three requests, two are in the app and the third waits for a thread.
    inside = []
    gate = threading.Event()
    third = threading.Event()

    def app(environ, start_response):
        inside.append(environ["PATH_INFO"])
        if len(inside) == 3:
            third.set()
        gate.wait(10)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(app, threads=2) as server:
            tasks = [asyncio.ensure_future(one(server, b"GET /%d HTTP/1.1\r\n%s\r\n" % (i, H))) for i in range(3)]
            await until(lambda: len(inside) >= 2, what="two requests in the app")
            # An upper bound, not synchronisation: the third may not come in while both
            # threads are taken, however long we look.
            started_early = await event_set(third, timeout=0.5)
            gate.set()
            results = await asyncio.gather(*tasks)
            return started_early, results

    started_early, results = run(loop, main())
    assert not started_early, inside
    assert [r.status for r, _ in results] == [200, 200, 200] and len(inside) == 3
