"""`--static-path-dir`: files answered by the connection before the app, over real sockets,
on both loops (swordfish's and the stdlib's) and in front of ASGI, WSGI on the loop and WSGI
on the thread engine: the headers, bodies larger than the socket
buffers (sendfile), HEAD, content types, conditional requests (304, 412), ranges (206, 416),
405, 404 for anything that is not a regular file inside the directory (traversal in every
spelling, links out, NUL, a FIFO), keep-alive and pipelining with the app's requests,
ASGI and WSGI apps, TLS, a loop without sendfile, a client that leaves mid-file, graceful
shutdown, the access log and the settings."""

import asyncio
import email.utils
import logging
import os
import socket
import struct
import threading

import pytest

from apps.serving import ServeProcess
from apps.serving import get as cli_get
from httputil import connect, read_response, serving
from netutil import tls_files  # noqa: F401 (fixture)
from swordfish.server import Config
from wsgiutil import read_head, read_until_close, responses_on, server_errors

H = b"Host: t\r\n"
BIG = 4 * 1024 * 1024  # past the socket buffers' defaults, and far past the read limit
SECRET = b"the secret outside"


def run(loop, coro, timeout=30):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def get(path, *fields, method="GET"):
    return f"{method} {path} HTTP/1.1\r\n".encode() + H + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


@pytest.fixture
def files(tmp_path):
    """tmp_path/secret, and tmp_path/pub: the static directory, with small and large files,
    a subdirectory, links in and out, and a FIFO."""
    (tmp_path / "secret").write_bytes(SECRET)
    pub = tmp_path / "pub"
    (pub / "sub").mkdir(parents=True)
    (pub / "a.txt").write_bytes(b"hello")
    (pub / "big.bin").write_bytes(os.urandom(BIG))
    (pub / "sub" / "b.css").write_bytes(b"body{}")
    (pub / "empty").write_bytes(b"")
    os.symlink(tmp_path / "secret", pub / "out")
    os.symlink("sub/b.css", pub / "in.css")
    os.symlink("..", pub / "up")
    os.mkfifo(pub / "fifo")
    return pub


@pytest.fixture
def tree(files, served_by):
    """`files`, served (`static()`) in front of each interface in turn."""
    return files


calls = []


async def app(scope, receive, send):
    """The app behind the static files: says which path reached it."""
    if scope["type"] != "http":
        return
    calls.append(scope["path"])
    while (await receive())["more_body"]:
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]})
    await send({"type": "http.response.body", "body": b"app"})


def wsgi_app(environ, start_response):
    calls.append(environ["PATH_INFO"])
    start_response("200 OK", [("Content-Length", "4")])
    return [b"wsgi"]


def app_wsgi(environ, start_response):
    """`app` for WSGI."""
    calls.append(environ["PATH_INFO"])
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Length", "3")])
    return [b"app"]


# The files are answered by the connection, whichever interface serves the rest: ASGI's and
# WSGI's on the loop, and WSGI's thread engine, which has a connection core of its own.
INTERFACES = {
    "asgi": (app, {}),
    "wsgi-threads": (app_wsgi, {"interface": "wsgi", "wsgi_engine": "threads", "threads": 4}),
    "wsgi-loop": (app_wsgi, {"interface": "wsgi", "wsgi_engine": "loop", "threads": 4}),
}
SERVED = INTERFACES["asgi"]


@pytest.fixture(params=list(INTERFACES))
def served_by(request):
    global SERVED
    SERVED = INTERFACES[request.param]
    yield request.param
    SERVED = INTERFACES["asgi"]


def static(tree, **options):
    calls.clear()
    behind, interface = SERVED
    return serving(options.pop("the_app", behind), static_path_dir=str(tree), **{**interface, **options})


async def one(server, raw, head_request=False, after=True):
    """The response to raw on a connection of its own, and whether the connection stays open
    (asked by a request to the app after it, unless `after` is false)."""
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        resp = await asyncio.wait_for(read_response(reader, head_request), 10)
        if not after:
            return resp, None
        writer.write(get("/after"))
        try:
            after = await asyncio.wait_for(read_response(reader), 10)
        except ConnectionResetError:  # closed, and the request after it met the closed socket
            after = None
        assert after is None or after.body == b"app", after
        return resp, after is not None
    finally:
        writer.close()


def answer(loop, tree, raw):
    """`one(server, raw)` on a static server of its own over `tree`."""
    async def main():
        async with static(tree) as server:
            return await one(server, raw)

    return run(loop, main())


async def pipelined(reader, writer, raw, count, heads=()):
    """Send raw (requests one after another) in one write, then read `count` responses (the
    i-th one to a HEAD when i is in heads); closes the connection."""
    try:
        writer.write(raw)
        await writer.drain()
        return [await asyncio.wait_for(read_response(reader, i in heads), 10) for i in range(count)]
    finally:
        writer.close()


def http_date(path):
    return email.utils.formatdate(os.stat(path).st_mtime, usegmt=True)


def test_file_with_its_headers(loop, tree):
    resp, kept = answer(loop, tree, get("/static/a.txt"))
    assert resp.status == 200 and resp.body == b"hello" and kept
    names = [n for n, _ in resp.headers]
    assert len(names) == len(set(names)), names
    h = dict(resp.headers)
    assert h["content-type"] == "text/plain; charset=utf-8"
    assert h["content-length"] == "5"
    assert h["accept-ranges"] == "bytes"
    assert h["last-modified"] == http_date(tree / "a.txt")
    assert h["etag"].startswith('"') and h["etag"].endswith('-5"')
    assert h["cache-control"] == "max-age=86400"
    assert h["server"] == "swordfish" and "date" in h
    assert calls == ["/after"]


def test_large_files_go_out_whole_and_the_connection_goes_on(loop, tree):
    data = (tree / "big.bin").read_bytes()

    async def main():
        async with static(tree) as server:
            raw = get("/static/big.bin") + get("/static/big.bin", b"Range: bytes=100-") + get("/next")
            return await pipelined(*await connect(server), raw, 3)

    whole, tail, after = run(loop, main())
    assert whole.status == 200 and whole.header("content-length") == str(BIG) and whole.body == data
    assert tail.status == 206 and tail.body == data[100:]
    assert tail.header("content-range") == f"bytes 100-{BIG - 1}/{BIG}"
    assert after.body == b"app" and calls == ["/next"]


def test_head(loop, tree):
    async def main():
        async with static(tree) as server:
            return [await one(server, get(p, method="HEAD"), head_request=True)
                    for p in ("/static/a.txt", "/static/big.bin", "/static/missing")]

    (small, kept1), (big, kept2), (missing, kept3) = run(loop, main())
    assert kept1 and kept2 and kept3, "nothing but the heads was sent"
    assert small.status == 200 and small.header("content-length") == "5" and small.header("etag")
    assert big.status == 200 and big.header("content-length") == str(BIG) and big.header("last-modified")
    assert missing.status == 404 and missing.header("content-length") == "9"


@pytest.mark.parametrize("name,expected", [
    ("index.html", "text/html; charset=utf-8"),
    ("style.css", "text/css; charset=utf-8"),
    ("app.js", "text/javascript; charset=utf-8"),
    ("data.json", "application/json"),
    ("logo.png", "image/png"),
    ("font.woff2", "font/woff2"),
    ("README", "application/octet-stream"),
])
def test_content_types(loop, tree, name, expected):
    (tree / name).write_bytes(b"x")

    resp, _ = answer(loop, tree, get("/static/" + name))
    assert resp.status == 200 and resp.header("content-type") == expected


def test_not_modified(loop, tree):
    async def main():
        async with static(tree) as server:
            first, _ = await one(server, get("/static/a.txt"))
            etag, date = first.header("etag"), first.header("last-modified")
            asks = [
                f"If-None-Match: {etag}",
                f"If-None-Match: W/{etag}",
                "If-None-Match: *",
                f'If-None-Match: "other", {etag}',
                f"If-Modified-Since: {date}",
                'If-None-Match: "other", "another"',
                "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
            ]
            out = [await one(server, get("/static/a.txt", a.encode())) for a in asks]
            # With If-None-Match, If-Modified-Since is not looked at.
            out.append(await one(server, get("/static/a.txt", b'If-None-Match: "x"', f"If-Modified-Since: {date}".encode())))
            return etag, out

    etag, out = run(loop, main())
    assert [r.status for r, _ in out] == [304] * 5 + [200] * 3
    assert all(kept for _, kept in out)
    for resp, _ in out[:5]:
        assert resp.body == b"" and resp.header("etag") == etag and resp.header("content-length") is None
        assert resp.header("cache-control") == "max-age=86400" and resp.header("last-modified")
    assert out[5][0].body == b"hello"


def test_preconditions(loop, tree):
    async def main():
        async with static(tree) as server:
            first, _ = await one(server, get("/static/a.txt"))
            asks = [b'If-Match: "other"', f"If-Match: {first.header('etag')}".encode(),
                    b"If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT"]
            return [(await one(server, get("/static/a.txt", a)))[0] for a in asks]

    failed, matched, unmodified = run(loop, main())
    assert failed.status == 412 and matched.status == 200 and unmodified.status == 412


def test_ranges(loop, tree):
    data = (tree / "big.bin").read_bytes()

    async def main():
        async with static(tree) as server:
            first, _ = await one(server, get("/static/big.bin", method="HEAD"), head_request=True)
            etag, date = first.header("etag"), first.header("last-modified")
            asks = [
                b"Range: bytes=10-19",
                b"Range: bytes=4194000-",
                b"Range: bytes=-7",
                b"Range: bytes=-200000",  # a suffix past the read limit: sent with sendfile
                b"Range: bytes=99999999-",
                b"Range: bytes=0-1, 5-6",
                b"Range: bytes=9-3",
                b"Range: bytes=10-19\r\nIf-Range: " + etag.encode(),
                b'Range: bytes=10-19\r\nIf-Range: "stale"',
                b"Range: bytes=10-19\r\nIf-Range: " + date.encode(),
                b"Range: bytes=10-19\r\nIf-Range: Sun, 06 Nov 1994 08:49:37 GMT",
            ]
            return [await one(server, get("/static/big.bin", a)) for a in asks]

    out = run(loop, main())
    assert all(kept for _, kept in out)
    r = [resp for resp, _ in out]
    assert (r[0].status, r[0].body, r[0].header("content-range")) == (206, data[10:20], f"bytes 10-19/{BIG}")
    assert (r[1].status, r[1].body) == (206, data[4194000:])
    assert (r[2].status, r[2].body, r[2].header("content-range")) == (206, data[-7:], f"bytes {BIG - 7}-{BIG - 1}/{BIG}")
    assert (r[3].status, r[3].body) == (206, data[-200000:])
    assert (r[4].status, r[4].header("content-range")) == (416, f"bytes */{BIG}")
    for whole in (r[5], r[6], r[8], r[10]):
        assert whole.status == 200 and whole.body == data and whole.header("content-range") is None
    assert (r[7].status, r[7].body) == (206, data[10:20])
    assert (r[9].status, r[9].body) == (206, data[10:20])


def test_empty_file(loop, tree):
    async def main():
        async with static(tree) as server:
            return [(await one(server, get("/static/empty", *a)))[0] for a in [(), (b"Range: bytes=0-",)]]

    whole, ranged = run(loop, main())
    assert whole.status == 200 and whole.body == b"" and whole.header("content-length") == "0"
    assert ranged.status == 416 and ranged.header("content-range") == "bytes */0"


def test_other_methods_get_405_and_their_body_is_read(loop, tree):
    resp, kept = answer(loop, tree, get("/static/a.txt", b"Content-Length: 5", method="POST") + b"abcde")
    assert resp.status == 405 and resp.header("allow") == "GET, HEAD" and kept
    assert calls == ["/after"], "the body was not taken for a request"


def test_a_body_on_a_get_is_read_and_dropped(loop, tree):
    async def main():
        async with static(tree) as server:
            chunked = get("/static/a.txt", b"Transfer-Encoding: chunked") + b"3\r\nabc\r\n0\r\n\r\n"
            return [await one(server, raw) for raw in (get("/static/big.bin", b"Content-Length: 3") + b"xyz", chunked)]

    (big, kept1), (small, kept2) = run(loop, main())
    assert big.status == 200 and len(big.body) == BIG and kept1
    assert small.body == b"hello" and kept2


@pytest.mark.parametrize("path", [
    "/static/missing",
    "/static/sub",
    "/static/sub/",
    "/static",
    "/static/",
    "/static/a.txt/",
    "/static/fifo",
])
def test_not_found(loop, tree, path):
    resp, kept = answer(loop, tree, get(path))
    assert (resp.status, resp.body) == (404, b"Not Found") and kept
    assert calls == ["/after"]


@pytest.mark.parametrize("path", [
    "/static/../secret",
    "/static/%2e%2e/secret",
    "/static/%2E%2E/secret",
    "/static/..%2fsecret",
    "/static/%2e%2e%2fsecret",
    "/static/sub/../../secret",
    "/static/sub/%2e%2e/%2e%2e/secret",
    "/static/./../secret",
    "/static/out",
    "/static/up/secret",
    "/static/a.txt%00",
    "/static/%00",
    "/static/a%2",
    "/static/a.txt%zz",
])
def test_traversal_is_refused(loop, tree, path):
    resp, _ = answer(loop, tree, get(path))
    assert resp.status in (400, 404), resp
    assert SECRET not in resp.body
    assert resp.status == 404 or "%00" in path, "only a NUL may be refused by the parser first"


def test_a_link_inside_the_directory_is_served(loop, tree):
    resp, _ = answer(loop, tree, get("/static/in.css"))
    assert resp.status == 200 and resp.body == b"body{}"
    assert resp.header("content-type") == "text/css; charset=utf-8"


def test_paths_outside_the_route_reach_the_app(loop, tree):
    async def main():
        async with static(tree, static_path_route="/assets/") as server:
            return [await one(server, get(p)) for p in ("/static/a.txt", "/assetsa.txt", "/", "/assets/a.txt")]

    out = run(loop, main())
    assert [r.body for r, _ in out] == [b"app", b"app", b"app", b"hello"]
    assert calls == ["/static/a.txt", "/after", "/assetsa.txt", "/after", "/", "/after", "/after"]


def test_pipelined_with_the_app(loop, tree):
    async def main():
        async with static(tree) as server:
            raw = (get("/static/a.txt") + get("/one") + get("/static/sub/b.css") + get("/static/missing")
                   + get("/static/big.bin", method="HEAD") + get("/two"))
            return await pipelined(*await connect(server), raw, 6, heads={4})

    out = run(loop, main())
    assert [r.body for r in out] == [b"hello", b"app", b"body{}", b"Not Found", b"", b"app"]
    assert calls == ["/one", "/two"]


@pytest.mark.parametrize("size,count", [(60 * 1024, 300), (200 * 1024, 100)], ids=["read", "sendfile"])
def test_many_pipelined_files_to_a_client_that_reads_late(loop, tree, size, count):
    """More answers than the transport takes before it pauses: the requests after them wait
    until the client reads, then all are answered, in order (18 and 20 MB of answers, with
    the files read into the answer and sent with sendfile)."""
    piece = os.urandom(size)
    (tree / "piece").write_bytes(piece)

    async def main():
        async with static(tree) as server:
            raw = get("/static/piece") * (count // 2) + get("/middle") + get("/static/piece") * (count // 2)
            return await pipelined(*await connect(server), raw, count + 1)

    out = run(loop, main(), timeout=60)
    assert [r.body for r in out] == [piece] * (count // 2) + [b"app"] + [piece] * (count // 2)


@pytest.mark.parametrize("request_line,closes", [
    (b"GET /static/a.txt HTTP/1.0\r\n\r\n", True),
    (b"GET /static/a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", False),
    (b"GET /static/a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", True),
    (b"GET /static/big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", True),
])
def test_connection_close_and_http_1_0(loop, tree, request_line, closes):
    resp, kept = answer(loop, tree, request_line)
    assert resp.status == 200 and len(resp.body) in (5, BIG)
    assert kept is not closes


def test_wsgi_app(loop, files):
    async def main():
        async with static(files, the_app=wsgi_app, interface="wsgi", threads=2) as server:
            return await responses_on(server, [get("/static/big.bin"), get("/page"), get("/static/a.txt"),
                                               get("/static/a.txt", method="DELETE")])

    big, page, small, delete = run(loop, main())
    assert big.status == 200 and len(big.body) == BIG
    assert (page.body, small.body, delete.status) == (b"wsgi", b"hello", 405)
    assert calls == ["/page"]


@pytest.mark.parametrize("engine", ["threads", "loop"])
def test_files_do_not_wait_for_the_app(loop, files, engine):
    """WSGI with two threads, an app holding one: a file is answered meanwhile, on the thread
    engine (by the thread that polls) as on the loop."""
    release = threading.Event()

    def held(environ, start_response):
        release.wait(30)
        start_response("200 OK", [("Content-Length", "4")])
        return [b"held"]

    async def main():
        async with static(files, the_app=held, interface="wsgi", threads=2, wsgi_engine=engine) as server:
            reader, writer = await connect(server)
            writer.write(get("/hold"))
            await writer.drain()
            try:
                # Well before the app lets its thread go (30 s).
                resp, _ = await asyncio.wait_for(one(server, get("/static/a.txt"), after=False), 5)
            finally:
                release.set()
            held_resp = await asyncio.wait_for(read_response(reader), 10)
            writer.close()
            return resp, held_resp

    resp, held_resp = run(loop, main())
    assert (resp.status, resp.body, held_resp.body) == (200, b"hello", b"held")


def test_tls(loop, tree, tls_files):
    import ssl

    cert, key = tls_files
    data = (tree / "big.bin").read_bytes()

    async def main():
        async with static(tree, ssl_certfile=cert, ssl_keyfile=key) as server:
            ctx = ssl.create_default_context(cafile=cert)
            connection = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1],
                                                       ssl=ctx, server_hostname="localhost")
            raw = get("/static/big.bin") + get("/static/big.bin", b"Range: bytes=1000-") + get("/x")
            return await pipelined(*connection, raw, 3)

    whole, tail, app_resp = run(loop, main())
    assert whole.body == data and tail.status == 206 and tail.body == data[1000:] and app_resp.body == b"app"


def no_sendfile_loop():
    class NoSendfile(asyncio.SelectorEventLoop):
        sendfile = asyncio.AbstractEventLoop.sendfile  # as uvloop's

    return NoSendfile()


def uvloop_loop():
    return pytest.importorskip("uvloop").new_event_loop()


@pytest.mark.parametrize("make_loop", [no_sendfile_loop, uvloop_loop])
def test_a_loop_without_sendfile(tree, make_loop):
    """The file is written in pieces, each once the transport has taken the one before."""
    data = (tree / "big.bin").read_bytes()

    async def main():
        async with static(tree) as server:
            raw = get("/static/big.bin") + get("/static/big.bin", b"Range: bytes=5-300004") + get("/x")
            return await pipelined(*await connect(server), raw, 3)

    lp = make_loop()
    try:
        whole, part, after = run(lp, main())
    finally:
        lp.close()
    assert whole.body == data and part.body == data[5:300005] and after.body == b"app"


def test_a_client_that_leaves_mid_file(loop, tree, tmp_path, caplog):
    huge = tmp_path / "pub" / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # more than the loopback's buffers hold

    async def main():
        async with static(tree) as server:
            reader, writer = await connect(server)
            writer.write(get("/static/huge.bin"))
            status, _, _ = await read_head(reader)
            await reader.readexactly(1024 * 1024)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            writer.close()
            resp, kept = await one(server, get("/static/a.txt"))
            return status, resp, kept

    status, resp, kept = run(loop, main())
    assert status == 200 and resp.body == b"hello" and kept
    assert server_errors(caplog) == []


def test_graceful_shutdown_lets_a_file_finish(loop, tree):
    data = (tree / "big.bin").read_bytes()

    async def main():
        async with static(tree) as server:
            reader, writer = await connect(server)
            writer.write(get("/static/big.bin"))
            status, headers, _ = await read_head(reader)
            first = await reader.readexactly(1000)
            server.shutdown()
            rest = await read_until_close(reader, 10)
            writer.close()
            return status, dict(headers), first + rest

    status, headers, body = run(loop, main())
    assert status == 200 and body == data
    assert headers["content-length"] == str(BIG)


def test_access_log(loop, tree, caplog):
    async def main():
        async with static(tree, access_log=True) as server:
            await one(server, get("/static/a.txt"))
            await one(server, get("/static/big.bin"))
            await one(server, get("/static/missing?q=1"))

    with caplog.at_level(logging.INFO, logger="swordfish.access"):
        run(loop, main())
    lines = [r.getMessage() for r in caplog.records if r.name == "swordfish.access"]
    assert len(lines) == 6, lines
    assert '"GET /static/a.txt HTTP/1.1" 200 5 ' in lines[0]
    assert f'"GET /static/big.bin HTTP/1.1" 200 {BIG} ' in lines[2]
    assert '"GET /static/missing?q=1 HTTP/1.1" 404 9 ' in lines[4]
    assert all('"GET /after HTTP/1.1" 200 3 ' in line for line in lines[1::2])


@pytest.mark.parametrize("expires,header", [(None, None), (0, "max-age=0"), (3600, "max-age=3600")])
def test_expires(loop, tree, expires, header):
    async def main():
        async with static(tree, static_path_expires=expires, headers=["cache-control: private"]) as server:
            return (await one(server, get("/static/a.txt")))[0], (await one(server, get("/x")))[0]

    resp, app_resp = run(loop, main())
    assert resp.header("cache-control") == (header or "private"), "the setting, else the default header"
    assert app_resp.header("cache-control") == "private"


def test_settings(tmp_path):
    assert Config("m:app").static_path_dir is None
    assert Config("m:app").static_path_route == "/static"
    assert Config("m:app", static_path_dir=str(tmp_path), static_path_route="/files/").static_path_route == "/files"
    assert Config("m:app", static_path_route="/").static_path_route == "/"
    with pytest.raises(ValueError, match="must begin with '/'"):
        Config("m:app", static_path_route="static")
    with pytest.raises(ValueError, match="not a directory"):
        Config("m:app", static_path_dir=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="static_path_expires"):
        Config("m:app", static_path_expires=-1)


def test_the_command_line_and_its_workers(files):
    srv = ServeProcess("--port", "0", "--workers", "2", "--static-path-dir", str(files), "--static-path-route",
                       "/files", "--static-path-expires", "none", app="workerapp:app")
    try:
        port = srv.port()
        answers = [cli_get(port, "/files/a.txt") for _ in range(4)]
        pid_status, _ = cli_get(port, "/pid")
    finally:
        code = srv.stop()
    assert code == 0, srv.log()
    assert answers == [(200, b"hello")] * 4 and pid_status == 200
