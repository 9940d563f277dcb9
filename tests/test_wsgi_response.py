"""WSGI responses over real sockets (PEP 3333 "The start_response() Callable", "Buffering
and Streaming", "Optional Platform-Specific File Handling"), on the stdlib loop and on
swordfish: streaming (each chunk reaches the client before the app makes the next one),
framing (chunked for an unknown length, the app's Content-Length honoured and checked,
HEAD, HTTP/1.0), the write() callable, start_response taken lazily and with exc_info, the
iterable's close() on every path, what the server refuses from an app (invalid and
hop-by-hop headers, non-bytes chunks, errors) and how the client sees it, backpressure
towards a client that does not read, and wsgi.file_wrapper (files, file-likes without a
descriptor, HEAD, TLS)."""

import asyncio
import io
import logging
import ssl
import sys
import threading
from wsgiref.validate import validator

import pytest

from httputil import closed, connect, port_of, read_response
from netutil import tls_files  # noqa: F401 (fixture)
from wsgiutil import (
    GET, H, event_set, exchange, logged_error, read_chunk, read_head, read_until_close, responses_of, responses_on, run,
    until, wsgi_serving,
)

TEXT = [("Content-Type", "text/plain")]


class Tracked:
    """A response iterable that records its iteration and its close() for the test; with
    a gate, it waits for the gate before it goes on past its first chunk."""

    def __init__(self, chunks, endless=False, gate=None):
        self.chunks = list(chunks)
        self.endless = endless
        self.gate = gate
        self.count = 0  # next() calls that gave a chunk
        self.count_at_close = None
        self.closed = threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        if self.gate is not None and self.count == 1:
            self.gate.wait(5)
        if self.endless:
            chunk = b"%08d" % self.count + b"x" * 65528
        elif not self.chunks:
            raise StopIteration
        else:
            chunk = self.chunks.pop(0)
        if isinstance(chunk, Exception):
            raise chunk
        self.count += 1
        return chunk

    def close(self):
        self.count_at_close = self.count
        self.closed.set()


# -- streaming and framing --------------------------------------------------------------

def test_chunks_reach_the_client_as_the_app_yields_them(loop):
    go = threading.Event()
    waited = []

    def app(environ, start_response):
        start_response("200 OK", TEXT)

        def body():
            yield b"first"
            waited.append(go.wait(5))  # until the client has "first"
            yield b"second"

        return body()

    async def main():
        async with wsgi_serving(validator(app)) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            status, headers, _ = await read_head(reader)
            first = await read_chunk(reader)
            go.set()
            rest = [await read_chunk(reader), await read_chunk(reader)]
            writer.write(GET)  # the connection goes on
            again = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return status, headers, first, rest, again

    status, headers, first, rest, again = run(loop, main())
    assert status == 200 and ("transfer-encoding", "chunked") in headers
    assert "content-length" not in dict(headers)
    assert first == b"first" and rest == [b"second", b""] and waited[0] is True
    assert again.status == 200 and again.body == b"firstsecond"


def test_write_callable_sends_before_the_iterable(loop):
    go = threading.Event()
    waited = []

    def app(environ, start_response):
        write = start_response("200 OK", TEXT)
        write(b"written ")
        waited.append(go.wait(5))  # until the client has what write() sent
        return [b"then returned"]

    async def main():
        async with wsgi_serving(validator(app)) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await read_head(reader)
            first = await read_chunk(reader)
            go.set()
            rest = b""
            while chunk := await read_chunk(reader):
                rest += chunk
            writer.close()
            return first, rest

    first, rest = run(loop, main())
    assert (first, rest, waited) == (b"written ", b"then returned", [True])


def test_content_length_from_the_app_frames_the_body(loop):
    def app(environ, start_response):
        write = start_response("200 OK", TEXT + [("Content-Length", "15")])
        write(b"abcde")

        def body():
            yield b"hello"
            yield b""
            yield b"world"

        return body()

    for resp in responses_of(loop, validator(app)):
        assert resp.status == 200 and resp.header("content-length") == "15"
        assert "transfer-encoding" not in dict(resp.headers)
        assert resp.body == b"abcdehelloworld"


@pytest.mark.parametrize("body", [[b"a", b"bc", b""], [b"only"], []], ids=["three", "one", "empty"])
def test_a_list_body_is_framed(loop, body):
    def app(environ, start_response):
        start_response("200 OK", TEXT)
        return list(body)

    for resp in responses_of(loop, validator(app)):
        names = [n for n, _ in resp.headers]
        assert resp.status == 200 and resp.body == b"".join(body)
        assert ("content-length" in names) != ("transfer-encoding" in names)


def test_set_cookie_twice_and_the_status_code(loop):
    def app(environ, start_response):
        start_response("418 I'm a teapot", TEXT + [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
        return [b"short and stout"]

    resp, = responses_of(loop, validator(app), count=1)
    assert resp.status == 418 and resp.body == b"short and stout"
    assert [v for n, v in resp.headers if n == "set-cookie"] == ["a=1", "b=2"]


def test_head_has_headers_and_no_body(loop):
    iterables = []

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/known":
            start_response("200 OK", TEXT + [("Content-Length", "5")])
            it = Tracked([b"hello"])
        else:
            start_response("200 OK", TEXT)
            it = Tracked([b"streamed ", b"body"])
        iterables.append(it)
        return it

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            heads = []
            for path in (b"/known", b"/unknown"):
                writer.write(b"HEAD " + path + b" HTTP/1.1\r\n" + H + b"\r\n")
                heads.append(await asyncio.wait_for(read_response(reader, head_request=True), 5))
            # No body bytes were sent: the next response is read right after the heads.
            writer.write(b"GET /known HTTP/1.1\r\n" + H + b"\r\n")
            after = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            for it in iterables:
                await until(it.closed.is_set, what="close() of the HEAD response's iterable")
            return heads, after

    heads, after = run(loop, main())
    assert [h.status for h in heads] == [200, 200]
    assert heads[0].header("content-length") == "5"
    assert after.status == 200 and after.body == b"hello"


def test_http10_keep_alive_and_close(loop):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/unknown-length":
            start_response("200 OK", TEXT)
            return iter([b"until ", b"the close"])
        start_response("200 OK", TEXT + [("Content-Length", "2")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(validator(app)) as server:
            reader, writer = await connect(server)
            kept = []
            for _ in range(2):
                writer.write(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                kept.append(await asyncio.wait_for(read_response(reader), 5))
            writer.write(b"GET / HTTP/1.0\r\n\r\n")
            last = await asyncio.wait_for(read_response(reader), 5)
            was_closed = await closed(reader)
            writer.close()
            # No chunked coding towards HTTP/1.0: the body ends with the connection.
            unknown = await exchange(server, b"GET /unknown-length HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            return kept, last, was_closed, unknown

    kept, last, was_closed, unknown = run(loop, main())
    assert [(r.status, r.body) for r in kept + [last]] == [(200, b"ok")] * 3
    assert was_closed
    head, _, body = unknown.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding" not in head.lower()
    assert body == b"until the close"


# -- start_response ---------------------------------------------------------------------

def test_start_response_called_lazily_in_the_iterable(loop):
    def app(environ, start_response):
        yield b""
        if environ["PATH_INFO"] == "/empty":
            start_response("204 No Content", [])
            return
        start_response("201 Created", TEXT + [("X-Late", "yes")])
        yield b"made"

    made, empty = responses_of(loop, app, [b"GET " + path + b" HTTP/1.1\r\n" + H + b"\r\n"
                                           for path in (b"/made", b"/empty")])
    assert made.status == 201 and made.header("x-late") == "yes" and made.body == b"made"
    assert empty.status == 204 and empty.body == b""


@pytest.mark.parametrize("where", ["app", "iterable"])
def test_exc_info_before_anything_was_sent_replaces_the_response(loop, where):
    def handle(start_response):
        try:
            raise ValueError("handled by the app")
        except ValueError:
            start_response("500 Internal Server Error", [("Content-Type", "text/html")], sys.exc_info())

    def app(environ, start_response):
        start_response("200 OK", TEXT + [("X-First", "1")])
        if where == "app":
            handle(start_response)
            return [b"the app's own error page"]

        def body():
            yield b""
            handle(start_response)
            yield b"the app's own error page"

        return body()

    resp, = responses_of(loop, validator(app), count=1)
    assert resp.status == 500 and resp.body == b"the app's own error page"
    assert resp.header("content-type") == "text/html" and resp.header("x-first") is None


def test_exc_info_after_the_headers_were_sent_reraises(loop, caplog):
    sent = threading.Event()
    reraised = []

    def app(environ, start_response):
        start_response("200 OK", TEXT)

        def body():
            yield b"part one"
            sent.wait(5)  # the client has the head and "part one"
            try:
                raise ValueError("late failure")
            except ValueError:
                try:
                    start_response("500 Internal Server Error", TEXT, sys.exc_info())
                except ValueError as exc:
                    reraised.append(exc)
                    raise
            yield b"must not be sent"

        return body()

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            status, _, _ = await read_head(reader)
            first = await read_chunk(reader)
            sent.set()
            rest = await read_until_close(reader)
            writer.close()
            await logged_error(caplog, "late failure")
            return status, first, rest

    status, first, rest = run(loop, main())
    assert status == 200 and first == b"part one"
    assert b"must not be sent" not in rest and not rest.endswith(b"0\r\n\r\n"), rest  # cut, not ended
    assert [str(e) for e in reraised] == ["late failure"]


def test_second_start_response_without_exc_info_is_an_error(loop, caplog):
    raised = []

    def app(environ, start_response):
        start_response("200 OK", TEXT)
        try:
            start_response("201 Created", TEXT)
        except BaseException as exc:
            raised.append(exc)
            raise
        return [b"not this"]

    async def main():
        async with wsgi_serving(app) as server:
            return await exchange(server, b"GET / HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")

    data = run(loop, main())
    assert data.startswith(b"HTTP/1.1 500 ") and b"not this" not in data
    assert len(raised) == 1 and isinstance(raised[0], AssertionError), raised


# -- errors and close() -----------------------------------------------------------------

# (iterable's chunks, start_response called, what the client gets: "ok", "500" or "cut")
PATHS = {
    "normal": ([b"a", b"b"], True, "ok"),
    "error-first": ([ValueError("broken iterable")], True, "500"),
    "error-later": ([b"a", ValueError("broken iterable")], True, "cut"),
    "str-first": (["text, not bytes"], True, "500"),
    "str-later": ([b"a", "text, not bytes"], True, "cut"),
    "no-start-response": ([b"a"], False, "500"),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_close_is_called_on_every_path(loop, caplog, path):
    chunks, start, outcome = PATHS[path]
    made = []
    go = threading.Event()  # "cut": the failure comes once the client has the first chunk

    def app(environ, start_response):
        if start:
            start_response("200 OK", TEXT)
        made.append(Tracked(chunks, gate=go if outcome == "cut" else None))
        return made[-1]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            if outcome == "cut":
                status, _, _ = await read_head(reader)
                first = await read_chunk(reader)
                go.set()
                rest = await read_until_close(reader)
                result = (status, first, rest)
            else:
                result = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            assert await event_set(made[0].closed), "close() was not called"
            if outcome != "ok":
                await until(lambda: server_errors_seen(caplog), what="an error log")
            return result

    result = run(loop, main())
    if outcome == "ok":
        assert result.status == 200 and result.body == b"ab"
    elif outcome == "500":
        assert result.status == 500
    else:
        status, first, rest = result
        assert status == 200 and first == b"a" and not rest.endswith(b"0\r\n\r\n"), rest


def server_errors_seen(caplog):
    return any(r.name.startswith("swordfish") and r.levelno >= logging.ERROR for r in caplog.records)


def refused(loop, caplog, app):
    """What the client gets for a GET (Connection: close) to app, once the server has
    logged an error."""
    async def main():
        async with wsgi_serving(app) as server:
            data = await exchange(server, b"GET / HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
            await until(lambda: server_errors_seen(caplog), what="an error log")
            return data

    return run(loop, main())


def test_app_raising_before_start_response_is_a_logged_500(loop, caplog):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/none":
            start_response("200 OK", TEXT)
            return None
        raise ValueError("the app broke early")

    async def main():
        async with wsgi_serving(app) as server:
            broke = await exchange(server, b"GET /raise HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
            record = await logged_error(caplog, "the app broke early")
            none = await exchange(server, b"GET /none HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
            return broke, record, none

    broke, record, none = run(loop, main())
    assert broke.startswith(b"HTTP/1.1 500 ") and b"the app broke early" not in broke
    assert record.exc_info and isinstance(record.exc_info[1], ValueError)  # with its traceback
    assert none.startswith(b"HTTP/1.1 500 ")


def test_client_leaving_mid_response_stops_the_iteration(loop, caplog):
    caplog.set_level(logging.WARNING)
    its = []

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        its.append(Tracked([], endless=True))
        return its[0]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await read_head(reader)
            await asyncio.wait_for(reader.readexactly(200_000), 5)
            writer.transport.abort()
            assert await event_set(its[0].closed), "close() was not called after the client left"
        # The server has stopped: nothing iterated the body after close().
        return its[0]

    it = run(loop, main())
    assert it.count == it.count_at_close
    # Nothing was written to the connection once it was gone (the stdlib's transport warns
    # "socket.send() raised exception." for such writes).
    assert not [r.getMessage() for r in caplog.records if r.name == "asyncio"]


# -- what the server refuses ----------------------------------------------------------

BAD_HEADERS = {
    "crlf-in-value": ("X-A", "a\r\nX-Injected: 1"),
    "lf-in-value": ("X-A", "a\nX-Injected: 1"),
    "cr-in-value": ("X-A", "a\rX-Injected: 1"),
    "nul-in-value": ("X-A", "a\x00X-Injected"),
    "crlf-in-name": ("X-Injected: 1\r\nX-A", "1"),
    "nul-in-name": ("X-A\x00X-Injected", "1"),
    "non-latin1-value": ("X-A", "X-Injected \u20ac"),
    "non-latin1-name": ("X-Injected-\u20ac", "1"),
    "bytes-pair": (b"X-Injected", b"1"),
}


@pytest.mark.parametrize("name", list(BAD_HEADERS))
def test_invalid_header_from_the_app_is_a_500(loop, caplog, name):
    def app(environ, start_response):
        start_response("200 OK", TEXT + [BAD_HEADERS[name]])
        return [b"body"]

    data = refused(loop, caplog, app)
    assert data.startswith(b"HTTP/1.1 500 "), data
    assert b"injected" not in data.lower() and b"body" not in data, data


@pytest.mark.parametrize("status", ["200 OK\r\nX-Injected: 1", b"200 OK", "abc", "20 OK"])
def test_invalid_status_from_the_app_is_a_500(loop, caplog, status):
    def app(environ, start_response):
        start_response(status, TEXT)
        return [b"body"]

    data = refused(loop, caplog, app)
    assert data.startswith(b"HTTP/1.1 500 ") and b"injected" not in data.lower(), data


HOP_BY_HOP = ["Connection", "keep-alive", "Transfer-Encoding", "Upgrade", "TE", "Trailer",
              "Proxy-Authenticate", "proxy-authorization"]


@pytest.mark.parametrize("name", HOP_BY_HOP)
def test_hop_by_hop_header_from_the_app_is_a_500(loop, caplog, name):
    def app(environ, start_response):
        start_response("200 OK", TEXT + [(name, "x")])
        return [b"body"]

    data = refused(loop, caplog, app)
    assert data.startswith(b"HTTP/1.1 500 ") and b"body" not in data, data


@pytest.mark.parametrize("declared,chunks,stream", [
    (10, [b"hello"], False), (10, [b"hel", b"lo"], True), (3, [b"hello"], False), (3, [b"he", b"llo"], True)],
    ids=["short-list", "short-stream", "long-list", "long-stream"])
def test_body_not_matching_its_content_length_closes_the_connection(loop, declared, chunks, stream):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/next":
            start_response("200 OK", TEXT + [("Content-Length", "4")])
            return [b"next"]
        start_response("200 OK", TEXT + [("Content-Length", str(declared))])
        return (c for c in chunks) if stream else list(chunks)

    async def main():
        async with wsgi_serving(app) as server:
            # The second request is pipelined: its response must never follow on this
            # connection, where the client would take it for the rest of the first body.
            # exchange() fails unless the server closes the connection.
            return await exchange(server, GET + b"GET /next HTTP/1.1\r\n" + H + b"\r\n")

    data = run(loop, main())
    assert data.count(b"HTTP/1.1 ") == 1 and b"next" not in data, data
    head, _, body = data.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 200 "):
        assert len(body) <= declared and b"hello".startswith(body), data
    else:
        assert head.startswith(b"HTTP/1.1 500 "), data


# -- backpressure -------------------------------------------------------------------------

MiB = 1 << 20


def test_a_client_that_does_not_read_holds_the_app_back(loop):
    produced = []
    n = 200

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n * MiB))])

        def body():
            for i in range(n):
                produced.append(i)
                yield bytes([i % 251]) * MiB

        return body()

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(GET)
            await read_head(reader)
            await until(lambda: produced, what="the app's first chunk")
            # The client reads nothing: wait until the app stops making chunks (it is
            # blocked), then see how far it got.
            last, stable_since = -1, asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - stable_since < 0.5 and len(produced) < n:
                await asyncio.sleep(0.05)  # polling interval
                if len(produced) != last:
                    last, stable_since = len(produced), asyncio.get_running_loop().time()
            held_at = len(produced)
            # Now read it all, checking every byte.
            for i in range(n):
                piece = await asyncio.wait_for(reader.readexactly(MiB), 10)
                assert piece == bytes([i % 251]) * MiB, f"chunk {i} differs"
            writer.close()
            return held_at

    held_at = run(loop, main(), timeout=25)
    assert held_at < 64, f"the app made {held_at} MiB for a client that read none"
    assert len(produced) == n


# -- wsgi.file_wrapper --------------------------------------------------------------------

class ReadOnlyFile:
    """The least a file_wrapper must take: read(size) and close(), no fileno()."""

    def __init__(self, data):
        self.data = io.BytesIO(data)
        self.closed = False

    def read(self, size=-1):
        return self.data.read(size)

    def seek(self, offset):  # for the test only
        self.data.seek(offset)

    def close(self):
        self.closed = True


KINDS = ["file-with-length", "file", "file-from-offset", "bytesio", "read-only"]


@pytest.mark.parametrize("kind", KINDS)
def test_file_wrapper_sends_the_whole_file_and_closes_it(loop, tmp_path, kind):
    data = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and a bit
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    files = []
    offset = 1000 if kind == "file-from-offset" else 0
    length = kind in ("file-with-length", "file-from-offset")

    def app(environ, start_response):
        headers = [("Content-Type", "application/octet-stream")]
        if length:
            headers.append(("Content-Length", str(len(data) - offset)))
        start_response("200 OK", headers)
        if kind == "bytesio":
            f = io.BytesIO(data)
        elif kind == "read-only":
            f = ReadOnlyFile(data)
        else:
            f = open(path, "rb")
        f.seek(offset)  # sent from where the file is (PEP 3333)
        files.append(f)
        return environ["wsgi.file_wrapper"](f, 8192)

    async def main():
        async with wsgi_serving(app) as server:
            responses = await responses_on(server, [GET, GET], timeout=10)
            await until(lambda: all(f.closed for f in files), what="the files closed")
            return responses

    for resp in run(loop, main()):
        assert resp.status == 200 and len(resp.body) == len(data) - offset and resp.body == data[offset:]
        if length:
            assert resp.header("content-length") == str(len(data) - offset)


def test_file_wrapper_is_an_iterable_for_the_app_too(loop):
    def app(environ, start_response):
        wrapper = environ["wsgi.file_wrapper"](io.BytesIO(b"0123456789" * 100), 64)
        body = b"".join(wrapper)  # as a middleware that rewrites the body would
        start_response("200 OK", TEXT + [("Content-Length", str(len(body)))])
        return [body]

    resp, = responses_of(loop, validator(app), count=1)
    assert resp.status == 200 and resp.body == b"0123456789" * 100


def test_file_wrapper_to_head_and_over_tls(loop, tmp_path, tls_files):
    # HEAD: the head only, and the file closed; TLS: no zero-copy path, the file whole.
    data = bytes(range(256)) * 12288  # 3 MiB
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    files = []
    cert, key = tls_files

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(data)))])
        files.append(open(path, "rb"))
        return environ["wsgi.file_wrapper"](files[-1], 65536)

    async def exchange_on(reader, writer):
        writer.write(b"HEAD / HTTP/1.1\r\n" + H + b"\r\n")
        head = await asyncio.wait_for(read_response(reader, head_request=True), 5)
        writer.write(GET)
        full = await asyncio.wait_for(read_response(reader), 10)
        writer.close()
        return head, full

    async def main():
        async with wsgi_serving(app) as server:
            plain = await exchange_on(*await connect(server))
        async with wsgi_serving(app, ssl_certfile=cert, ssl_keyfile=key) as server:
            ctx = ssl.create_default_context(cafile=cert)
            tls = await exchange_on(*await asyncio.open_connection(
                "127.0.0.1", port_of(server), ssl=ctx, server_hostname="localhost"))
        await until(lambda: all(f.closed for f in files), what="the files closed")
        return plain, tls

    for head, full in run(loop, main()):
        assert head.status == 200 and head.header("content-length") == str(len(data)) and head.body == b""
        assert full.status == 200 and full.body == data
    assert len(files) == 4
