"""Helpers for the WSGI tests (tests/test_wsgi_*.py): a WSGI server on the test's loop, a
WSGI echo app (also used by tests/test_http_corpus.py), requests sent one after the other
on one connection with their whole responses read, raw response readers that go step by
step (a head, one chunk, everything until the close), waiting on what the app's threads
report, and finding the server's log records.

The server runs on the test's loop and the app on the server's threads: a test coroutine
never blocks on a `threading.Event` (it would block the server too); it polls with
`until()` instead, which yields to the loop between looks."""

import asyncio
import json
import logging
import os
import time
import traceback

from httputil import connect, read_response, serving

H = b"Host: example.com\r\n"
GET = b"GET / HTTP/1.1\r\n" + H + b"\r\n"
WAIT = 5.0  # seconds: the upper bound for anything a test waits on


def run(loop, coro, timeout=30):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


# The WSGI tests run with each engine (`--wsgi-engine`): the thread engine by default (what
# `auto` serves with more than one CPU), the loop's with SWORDFISH_TEST_WSGI_ENGINE=loop
# (`make test` runs both).
WSGI_ENGINE = os.environ.get("SWORDFISH_TEST_WSGI_ENGINE", "threads")


def wsgi_serving(app, threads=4, **options):
    """`serving()` with the WSGI interface and a pool of `threads` threads."""
    options.setdefault("wsgi_engine", WSGI_ENGINE)
    return serving(app, interface="wsgi", threads=threads, **options)


async def responses_on(server, requests, timeout=WAIT):
    """Sends each raw request on one new connection, the next once the last one's response
    is read (httputil.read_response): the responses."""
    reader, writer = await connect(server)
    try:
        responses = []
        for raw in requests:
            writer.write(raw)
            responses.append(await asyncio.wait_for(read_response(reader), timeout))
        return responses
    finally:
        writer.close()


def responses_of(loop, app, raw=GET, count=2, timeout=WAIT):
    """Serves app (wsgi_serving) and sends it raw `count` times on one connection, or, with
    a list as raw, each request of the list: the responses (responses_on)."""
    requests = raw if isinstance(raw, list) else [raw] * count

    async def main():
        async with wsgi_serving(app) as server:
            return await responses_on(server, requests, timeout)

    return run(loop, main())


def wsgi_echo_app(environ, start_response):
    """The WSGI counterpart of httputil.echo_app: answers with the request body, and the
    method and PATH_INFO in headers."""
    body = environ["wsgi.input"].read()
    start_response("200 OK", [
        ("X-Method", environ["REQUEST_METHOD"]),
        ("X-Path", environ["PATH_INFO"]),
        ("Content-Length", str(len(body))),
    ])
    return [body]


def json_app(make):
    """A WSGI app answering 200 with `make(environ)` as JSON (with a Content-Length)."""
    def app(environ, start_response):
        body = json.dumps(make(environ)).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    return app


async def until(predicate, timeout=WAIT, what="the condition"):
    """Polls `predicate()` (a thread's report) until it is true; fails after timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.005)  # polling interval


async def event_set(event, timeout=WAIT):
    """Whether the threading.Event is set within timeout (polled from the loop)."""
    deadline = time.monotonic() + timeout
    while not event.is_set():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)  # polling interval
    return True


async def read_head(reader, timeout=WAIT):
    """A response head: (status, [(lower-case name, value)], raw head bytes)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    lines = head[:-4].split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.decode("latin-1").lower(), value.strip().decode("latin-1")))
    return status, headers, head


async def read_chunk(reader, timeout=WAIT):
    """One chunk of a chunked body; b"" for the last chunk (its trailer section read too)."""
    size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
    size = int(size_line[:-2].split(b";")[0], 16)
    if size == 0:
        while await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout) != b"\r\n":
            pass
        return b""
    data = await asyncio.wait_for(reader.readexactly(size), timeout)
    assert await asyncio.wait_for(reader.readexactly(2), timeout) == b"\r\n"
    return data


async def read_until_close(reader, timeout=WAIT):
    """Everything until the server closes (EOF or reset); fails if it does not within timeout."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the connection was not closed within {timeout}s; got {data[:200]!r}")
        try:
            chunk = await asyncio.wait_for(reader.read(65536), left)
        except ConnectionError:
            return data
        except asyncio.TimeoutError:
            continue
        if not chunk:
            return data
        data += chunk


async def exchange(server, raw, timeout=WAIT):
    """Send raw on a new connection and read until the server closes it."""
    reader, writer = await connect(server)
    try:
        writer.write(raw)
        return await read_until_close(reader, timeout)
    finally:
        writer.close()


def dechunk(body):
    """The data of a complete chunked body (fails on a truncated one)."""
    out = b""
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        assert sep, "truncated chunked body"
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        assert len(body) >= size + 2 and body[size:size + 2] == b"\r\n", "truncated chunked body"
        out += body[:size]
        body = body[size + 2:]


def mentions(record, text):
    """Whether a log record says `text`: in its message, exception or traceback."""
    if text in record.getMessage():
        return True
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        if text in str(exc) or text in "".join(traceback.format_exception(exc)):
            return True
    return bool(record.exc_text) and text in record.exc_text


def server_errors(caplog):
    """The records of the server's loggers (swordfish.*) at ERROR or above."""
    return [r for r in caplog.records if r.name.startswith("swordfish") and r.levelno >= logging.ERROR]


async def logged_error(caplog, text, timeout=WAIT):
    """Waits until the server logged an error that mentions text; the record."""
    found = []

    def look():
        found[:] = [r for r in server_errors(caplog) if mentions(r, text)]
        return bool(found)

    await until(look, timeout, f"an error log that mentions {text!r}")
    return found[0]
