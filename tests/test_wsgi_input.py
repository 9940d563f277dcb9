"""wsgi.input over real sockets (PEP 3333 "Input and Error Streams", wsgi.input_terminated),
on the stdlib loop and on swordfish: read(), read(n), read(-1), readline(), readline(n),
readlines(), readlines(hint) and iteration give what the same calls give on a BytesIO of
the body, for Content-Length and chunked bodies; a body the app leaves unread does not
break the next request on the connection; `Expect: 100-continue` is answered when the app
first reads; a large upload read slowly arrives whole while the server stops taking it
from a client faster than the app; a body cut short while the app reads it (the client
leaves, or it goes over --limit-body-size) fails the read instead of passing for whole;
and clients that trickle their request (head or body) do not pin the app's threads."""

import asyncio
import hashlib
import io
import json
import random
import threading
import time

import pytest

from httputil import connect, read_response
from wsgiutil import H, event_set, json_app, run, until, wsgi_serving

BODY = b"first line\nsecond\n\n" + b"x" * 40 + b"\nabcdefgh-no-newline"

# Each reads the whole input its own way and returns the pieces it got (and what comes after).
READERS = {
    "read": lambda f: [f.read(), f.read()],
    "read-minus-1": lambda f: [f.read(-1), f.read(-1)],
    "read-n": lambda f: [f.read(7) for _ in range(len(BODY) // 7 + 3)],
    "read-0-and-past-the-end": lambda f: [f.read(0), f.read(len(BODY) + 100), f.read(5), f.read()],
    "readline": lambda f: [f.readline() for _ in range(8)],
    "readline-n": lambda f: [f.readline(4) for _ in range(len(BODY) // 4 + 10)],
    "readline-then-read": lambda f: [f.readline(), f.read(3), f.readline(), f.read()],
    "readlines": lambda f: f.readlines() + [f.read(1)],
    "iteration": lambda f: list(f),
}


def chunked(body, size):
    """body in chunks of `size` (lines cross chunk boundaries), with a trailer."""
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


def post(body, framing, path=b"/"):
    if framing == "length":
        return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, H, len(body), body)
    return b"POST %s HTTP/1.1\r\n%sTransfer-Encoding: chunked\r\n\r\n%s" % (path, H, chunked(body, 5))


async def ask(server, raw):
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        return await asyncio.wait_for(read_response(reader), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("how", list(READERS))
def test_input_methods_read_as_a_file_would(loop, how, framing):
    seen = []

    def make(environ):
        seen.append({k: environ.get(k) for k in ("CONTENT_LENGTH", "wsgi.input_terminated")})
        return [p.decode("latin-1") for p in READERS[how](environ["wsgi.input"])]

    async def main():
        async with wsgi_serving(json_app(make)) as server:
            return await ask(server, post(BODY, framing))

    resp = run(loop, main())
    assert resp.status == 200, resp
    got = [p.encode("latin-1") for p in json.loads(resp.body)]
    assert got == READERS[how](io.BytesIO(BODY))
    assert seen[0]["CONTENT_LENGTH"] == (str(len(BODY)) if framing == "length" else None)
    assert seen[0]["wsgi.input_terminated"] is True


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_readlines_with_a_hint_gives_whole_lines(loop, framing):
    # The server may ignore the hint (PEP 3333); what it gives must still be whole lines
    # from the start, and the rest must follow.
    def make(environ):
        f = environ["wsgi.input"]
        return {"first": [x.decode() for x in f.readlines(5)], "rest": f.read().decode()}

    async def main():
        async with wsgi_serving(json_app(make)) as server:
            return await ask(server, post(BODY, framing))

    resp = run(loop, main())
    got = json.loads(resp.body)
    lines = [x.encode() for x in got["first"]]
    assert lines and lines[0] == b"first line\n"
    assert all(line.endswith(b"\n") for line in lines[:-1])
    assert b"".join(lines) + got["rest"].encode() == BODY


def test_long_lines_and_bounded_readline(loop):
    big = random.Random(3).randbytes(300_000).replace(b"\n", b"-")

    def make(environ):
        f = environ["wsgi.input"]
        bounded = f.readline(1000)
        return {"bounded": len(bounded), "prefix": bounded == big[:1000], "line": hashlib.sha256(f.readline()).hexdigest(),
                "eof": f.readline().decode()}

    async def main():
        async with wsgi_serving(json_app(make)) as server:
            return [await ask(server, post(big + b"\n", framing)) for framing in ("length", "chunked")]

    for resp in run(loop, main()):
        assert json.loads(resp.body) == {"bounded": 1000, "prefix": True, "eof": "",
                                         "line": hashlib.sha256(big[1000:] + b"\n").hexdigest()}


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("reads", [0, 10], ids=["unread", "partly-read"])
def test_a_body_the_app_does_not_read_keeps_the_connection_usable(loop, framing, reads):
    body = random.Random(5).randbytes(100_000)

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/echo":
            data = environ["wsgi.input"].read()
        else:
            data = environ["wsgi.input"].read(reads)
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(data)))])
        return [data]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(post(body, framing, b"/ignore") + post(b"second body", framing, b"/echo"))
            first = await asyncio.wait_for(read_response(reader), 5)
            second = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return first, second

    first, second = run(loop, main())
    assert first.status == 200 and first.body == body[:reads]
    assert second.status == 200 and second.body == b"second body"


def test_expect_100_continue_is_answered_when_the_app_reads(loop):
    entered = threading.Event()
    gate = threading.Event()

    def app(environ, start_response):
        entered.set()
        gate.wait(5)
        data = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
        return [data]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            assert await event_set(entered), "the app was not called for a request waiting for 100 Continue"
            # An upper bound, not synchronisation: nothing may come before the app reads.
            early = None
            try:
                early = await asyncio.wait_for(reader.read(1), 0.3)
            except asyncio.TimeoutError:
                pass
            gate.set()
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(b"hello")
            final = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return early, interim, final

    early, interim, final = run(loop, main())
    assert early is None, early
    assert interim.startswith(b"HTTP/1.1 100 "), interim
    assert final.status == 200 and final.body == b"hello"


def test_expect_100_continue_not_sent_when_the_app_answers_without_reading(loop):
    def app(environ, start_response):
        start_response("413 Content Too Large", [("Content-Type", "text/plain"), ("Content-Length", "8")])
        return [b"too big!"]

    async def main():
        async with wsgi_serving(app) as server:
            reader, writer = await connect(server)
            writer.write(b"POST /up HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            body = await asyncio.wait_for(reader.readexactly(8), 5)
            writer.close()
            # The server goes on serving (a new connection).
            reader, writer = await connect(server)
            writer.write(b"GET / HTTP/1.1\r\n" + H + b"\r\n")
            again = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return head, body, again

    head, body, again = run(loop, main())
    assert head.startswith(b"HTTP/1.1 413 "), head  # the final response, no 100 before it
    assert body == b"too big!" and again.status == 413


def hashing_app(gate=None, piece=65536, pause=0.0):
    """Reads the body in pieces (after the gate, pausing between pieces): its length and sha256."""
    def make(environ):
        if gate is not None:
            gate.wait(10)
        f = environ["wsgi.input"]
        h, n = hashlib.sha256(), 0
        while data := f.read(piece):
            h.update(data)
            n += len(data)
            if pause:
                time.sleep(pause)  # a slow app, not synchronisation
        return {"length": n, "sha256": h.hexdigest()}
    return json_app(make)


MiB = 1 << 20


def test_large_upload_read_slowly_arrives_whole(loop):
    body = random.Random(7).randbytes(50 * MiB)

    async def main():
        async with wsgi_serving(hashing_app(pause=0.0005)) as server:
            return await ask(server, post(body, "length"))

    resp = run(loop, main(), timeout=25)
    assert json.loads(resp.body) == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_upload_faster_than_the_app_is_held_back(loop):
    # While the app does not read, the server stops taking the body: most of it stays in
    # the client's buffer instead of in the server's memory.
    body = random.Random(8).randbytes(64 * MiB)
    gate = threading.Event()

    async def main():
        async with wsgi_serving(hashing_app(gate=gate)) as server:
            reader, writer = await connect(server)
            writer.write(post(body, "length"))
            buffered = writer.transport.get_write_buffer_size
            last, stable_since = -1, time.monotonic()
            while time.monotonic() - stable_since < 0.5 and buffered():
                await asyncio.sleep(0.05)  # polling interval
                if buffered() != last:
                    last, stable_since = buffered(), time.monotonic()
            taken = len(body) - buffered()
            gate.set()
            resp = await asyncio.wait_for(read_response(reader), 20)
            writer.close()
            return taken, resp

    taken, resp = run(loop, main(), timeout=25)
    assert taken < 40 * MiB, f"the server took {taken / MiB:.1f} MiB of the body before the app read any"
    assert json.loads(resp.body) == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


# What the server collects of a body before it calls the app (src/wsgi/pool.rs, PREFETCH).
PREFETCH = 256 * 1024


@pytest.mark.parametrize("framing,cut", [("length", "client leaves"), ("chunked", "client leaves"),
                                         ("chunked", "over the limit")])
@pytest.mark.parametrize("reading", ["read", "read-n"])
def test_a_body_cut_short_is_never_passed_off_as_whole(loop, framing, cut, reading):
    # More than the server collects before it calls the app, so that the app is reading
    # when the body is cut short: by the client leaving, or by --limit-body-size (a chunked
    # body; a Content-Length over it is refused before the app is called). The app's read
    # fails, whether it reads all at once or piece by piece; a short read would look like
    # the body's end (with chunked framing nothing tells the app otherwise).
    first = b"a" * (PREFETCH + 16 * 1024)
    limit = len(first) + 1000
    entered = threading.Event()
    outcome = []

    def app(environ, start_response):
        entered.set()
        stream, got = environ["wsgi.input"], 0
        try:
            if reading == "read":
                got = len(stream.read())
            else:
                while piece := stream.read(8192):
                    got += len(piece)
            outcome.append(("returned", got))
        except OSError as exc:
            outcome.append(("raised", type(exc).__name__, got))
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    async def main():
        async with wsgi_serving(app, limit_body_size=limit) as server:
            reader, writer = await connect(server)
            if framing == "length":
                writer.write(b"POST / HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (H, limit, first))
            else:
                writer.write(b"POST / HTTP/1.1\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n"
                             % (H, len(first), first))
            assert await event_set(entered), "the app was not called"
            response = None
            if cut == "client leaves":
                writer.transport.abort()
            else:
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (2000, b"b" * 2000))
                response = await asyncio.wait_for(read_response(reader), 10)
                writer.close()
            await until(lambda: outcome, what="the app's read to end")
            return response

    response = run(loop, main())
    assert outcome[0][:2] == ("raised", "ClientDisconnected"), outcome
    assert outcome[0][2] <= len(first), outcome
    if cut == "over the limit":
        assert response.status == 413


@pytest.mark.parametrize("part", ["body", "head"])
def test_trickling_clients_do_not_pin_the_threads(loop, part):
    # threads=2 and six clients sending their request a byte every 0.5 s: a request that
    # comes whole is still answered at once.
    def app(environ, start_response):
        data = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
        return [data]

    slow_head = b"POST /slow HTTP/1.1\r\n" + H + b"Content-Length: 1000\r\n\r\n"

    async def trickle(server, started):
        reader, writer = await connect(server)
        try:
            if part == "body":
                writer.write(slow_head)
                data = b"b" * 1000
            else:
                data = slow_head
            for i, byte in enumerate(data):
                writer.write(bytes([byte]))
                if i == 1:
                    started.append(writer)
                await asyncio.sleep(0.5)  # the client's pace
        finally:
            writer.close()

    async def main():
        async with wsgi_serving(app, threads=2) as server:
            started = []
            tasks = [asyncio.ensure_future(trickle(server, started)) for _ in range(6)]
            try:
                await until(lambda: len(started) == 6, what="six trickling clients")
                t0 = time.monotonic()
                try:
                    resp = await asyncio.wait_for(ask(server, b"GET /fast HTTP/1.1\r\n" + H + b"\r\n"), 5)
                except asyncio.TimeoutError:
                    return None, time.monotonic() - t0
                return resp, time.monotonic() - t0
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    resp, took = run(loop, main())
    assert resp is not None and resp.status == 200 and took < 2.0, f"the fast request took {took:.1f}s"


def test_a_trickled_body_is_served_once_it_has_come(loop):
    # The other side of the test above: the slow request is not dropped, it is served
    # once the last byte is in (here the client speeds up at the end).
    def app(environ, start_response):
        data = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
        return [data]

    async def main():
        async with wsgi_serving(app, threads=1) as server:
            reader, writer = await connect(server)
            writer.write(b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 20\r\n\r\n")
            for byte in b"0123456789":
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)  # the client's pace
            writer.write(b"abcdefghij")
            resp = await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return resp

    resp = run(loop, main())
    assert resp.status == 200 and resp.body == b"0123456789abcdefghij"
