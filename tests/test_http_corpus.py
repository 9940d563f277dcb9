"""A raw-request corpus from RFC 9112 (and RFC 9110 where it rules on fields): each
request is sent on its own connection to an echo app; the test checks the status and
whether the server keeps the connection (a second request is answered) or closes it.
Every request goes to the ASGI echo app and to its WSGI counterpart, with the same verdicts.

Written for swordfish; named after the section each request exercises."""

import asyncio

import pytest

from httputil import echo_app, read_response, serving, connect
from wsgiutil import wsgi_echo_app

H = b"Host: example.com\r\n"

# (id, raw request, expected status, connection stays open)
VALID = [
    ("3-simple-get", b"GET / HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("3-http10-get", b"GET / HTTP/1.0\r\n\r\n", 200, False),
    ("3-http10-keepalive", b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 200, True),
    ("3-connection-close", b"GET / HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n", 200, False),
    ("3-custom-method", b"PURGE / HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("3.2.1-origin-query", b"GET /a/b?c=d&e HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("3.2.2-absolute-form", b"GET http://example.com/x?y HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("3.2.2-absolute-no-path", b"GET http://example.com HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("3.2.4-asterisk-options", b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("2.2-leading-crlf", b"\r\nGET / HTTP/1.1\r\n" + H + b"\r\n", 200, True),
    ("5.1-ows-in-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: \t v \t\r\n\r\n", 200, True),
    ("5.1-empty-value", b"GET / HTTP/1.1\r\n" + H + b"X-Empty:\r\n\r\n", 200, True),
    ("5.5-obs-text-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: caf\xe9\r\n\r\n", 200, True),
    ("6.2-content-length", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhello", 200, True),
    ("6.2-content-length-zero", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n", 200, True),
    ("6.2-leading-zeros", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 005\r\n\r\nhello", 200, True),
    ("6.2-many-leading-zeros", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 000000000000000000005\r\n\r\nhello", 200, True),
    ("3.2-host-port", b"GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 200, True),
    ("3.2-host-ipv6", b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200, True),
    ("3.2-host-empty", b"GET / HTTP/1.1\r\nHost:\r\n\r\n", 200, True),
    ("3.2-host-pct-encoded", b"GET / HTTP/1.1\r\nHost: ex%41mple.com\r\n\r\n", 200, True),
    ("7.1-chunked", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 200, True),
    ("7.1-chunked-upper-hex", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", 200, True),
    ("7.1-chunked-case", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", 200, True),
    ("7.1.1-chunk-ext", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n0;x\r\n\r\n", 200, True),
    ("7.1.1-chunk-ext-bws", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5 ;a\r\nhello\r\n0\r\n\r\n", 200, True),
    ("7.1.2-trailer", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n", 200, True),
    ("7.1-chunk-leading-zeros", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0005\r\nhello\r\n0\r\n\r\n", 200, True),
    ("9.3-pipelined-pair", b"GET /1 HTTP/1.1\r\n" + H + b"\r\nGET /2 HTTP/1.1\r\n" + H + b"\r\n", 200, True),
]

INVALID = [
    ("2.2-bare-lf-request-line", b"GET / HTTP/1.1\n" + H + b"\r\n", 400),
    ("2.2-bare-lf-header", b"GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
    ("2.2-bare-cr", b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400),
    ("2.2-bare-lf-end", b"GET / HTTP/1.1\r\n" + H + b"\n", 400),
    ("2.3-http2-version", b"GET / HTTP/2.0\r\n" + H + b"\r\n", 400),
    ("2.3-http09-version", b"GET / HTTP/0.9\r\n" + H + b"\r\n", 400),
    ("2.3-lowercase-version", b"GET / http/1.1\r\n" + H + b"\r\n", 400),
    ("2.3-version-missing", b"GET /\r\n" + H + b"\r\n", 400),
    ("2.3-version-trailing-space", b"GET / HTTP/1.1 \r\n" + H + b"\r\n", 400),
    ("3-invalid-method-char", b"G@T / HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3-double-space", b"GET  / HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3-tab-separator", b"GET\t/ HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2-missing-host", b"GET / HTTP/1.1\r\n\r\n", 400),
    ("3.2-duplicate-host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("3.2-duplicate-host-case", b"GET / HTTP/1.1\r\nHost: a\r\nhOST: a\r\n\r\n", 400),
    ("3.2-target-control", b"GET /\x01 HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2-target-fragment", b"GET /a#b HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2-host-space", b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    ("3.2-host-userinfo", b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", 400),
    ("3.2-host-path", b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
    ("3.2-host-bad-port", b"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n", 400),
    ("3.2-host-unclosed-ipv6", b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
    ("3.2-host-two-colons", b"GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n", 400),
    ("3.2.2-absolute-userinfo", b"GET http://user@example.com/ HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2.2-absolute-no-host", b"GET http:///x HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2-target-relative", b"GET a/b HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("3.2.4-asterisk-get", b"GET * HTTP/1.1\r\n" + H + b"\r\n", 400),
    ("5-space-before-colon", b"GET / HTTP/1.1\r\n" + H + b"X-A : 1\r\n\r\n", 400),
    ("5-empty-name", b"GET / HTTP/1.1\r\n" + H + b": 1\r\n\r\n", 400),
    ("5-name-invalid-char", b"GET / HTTP/1.1\r\n" + H + b"X(A): 1\r\n\r\n", 400),
    ("5-no-colon", b"GET / HTTP/1.1\r\n" + H + b"X-A 1\r\n\r\n", 400),
    ("5.2-obs-fold-space", b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\r\n 2\r\n\r\n", 400),
    ("5.2-obs-fold-tab", b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\r\n\t2\r\n\r\n", 400),
    ("5.5-nul-in-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400),
    ("5.5-bel-in-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x07b\r\n\r\n", 400),
    ("5.5-del-in-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x7fb\r\n\r\n", 400),
    ("6.1-te-and-cl", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400),
    ("6.1-cl-and-te", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("6.1-chunked-not-last", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400),
    ("6.1-chunked-twice-list", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
    ("6.1-chunked-twice-fields", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("6.1-te-empty", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: \r\n\r\n", 400),
    ("6.1-te-http10", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("6.1-te-unknown", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\n", 501),
    ("6.1-te-gzip-chunked", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ("6.2-cl-negative", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n", 400),
    ("6.2-cl-plus", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +1\r\n\r\nx", 400),
    ("6.2-cl-underscore", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1_0\r\n\r\n", 400),
    ("6.2-cl-list", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5, 5\r\n\r\nhello", 400),
    ("6.2-cl-duplicate", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("9110-8.3-ct-duplicate", b"POST / HTTP/1.1\r\n" + H + b"Content-Type: text/plain\r\nContent-Type: text/html\r\nContent-Length: 0\r\n\r\n", 400),
    ("9110-8.3-ct-duplicate-case", b"POST / HTTP/1.1\r\n" + H + b"Content-Type: a/b\r\ncontent-TYPE: a/b\r\nContent-Length: 0\r\n\r\n", 400),
    ("6.2-cl-empty", b"POST / HTTP/1.1\r\n" + H + b"Content-Length:\r\n\r\n", 400),
    ("6.2-cl-hex", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x5\r\n\r\nhello", 400),
    ("6.2-cl-space-inside", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1 0\r\n\r\n", 400),
    ("6.2-cl-overflow", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n", 400),
    ("7.1-size-missing", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-size-not-hex", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nxyz\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-size-0x", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-size-negative", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-size-leading-space", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-last-chunk-trailing-space", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0 \r\n\r\n", 400),
    ("7.1-size-bare-lf", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400),
    ("7.1-data-too-long", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", 400),
    ("7.1-data-bare-lf", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", 400),
    ("7.1-size-overflow", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n", 413),
    ("7.1.2-trailer-host", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nHost: evil\r\n\r\n", 400),
    ("7.1.2-trailer-cl", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n", 400),
    ("7.1.2-trailer-te", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    ("7.1.2-trailer-no-colon", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX-A 1\r\n\r\n", 400),
    ("7.1.2-trailer-bare-lf", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX-A: 1\n\r\n", 400),
]


# The echo app and the server's options, per way of serving it: ASGI, WSGI on the loop,
# and WSGI on the thread engine (`--wsgi-engine threads`).
ECHO_APPS = {
    "asgi": (echo_app, {"interface": "asgi"}),
    "wsgi": (wsgi_echo_app, {"interface": "wsgi"}),
    "wsgi-threads": (wsgi_echo_app, {"interface": "wsgi", "wsgi_engine": "threads"}),
}


@pytest.fixture(params=list(ECHO_APPS))
def interface(request):
    """How the echo app the corpus goes to is served (a key of ECHO_APPS)."""
    return request.param


def serving_echo(interface):
    app, options = ECHO_APPS[interface]
    return serving(app, **options)


def _run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 20))


async def _probe(raw, interface):
    async with serving_echo(interface) as server:
        reader, writer = await connect(server)
        try:
            writer.write(raw)
            first = await asyncio.wait_for(read_response(reader), 5)
            if raw.count(b"HTTP/1.") == 2 and first.status == 200:
                assert (await read_response(reader)).status == 200
            try:
                writer.write(b"GET /again HTTP/1.1\r\nHost: a\r\n\r\n")
                again = await asyncio.wait_for(read_response(reader), 5)
            except (ConnectionError, asyncio.IncompleteReadError):
                again = None
            return first, again
        finally:
            writer.close()


@pytest.mark.parametrize("name,raw,status,stays_open", VALID, ids=[v[0] for v in VALID])
def test_valid_request(loop, interface, name, raw, status, stays_open):
    first, again = _run(loop, _probe(raw, interface))
    assert first.status == status, first
    assert (again is not None) == stays_open
    if again is not None:
        assert again.status == 200 and again.header("x-path") == "/again"


@pytest.mark.parametrize("name,raw,status", INVALID, ids=[v[0] for v in INVALID])
def test_invalid_request(loop, interface, name, raw, status):
    first, again = _run(loop, _probe(raw, interface))
    assert first.status == status, first
    assert first.header("connection") == "close"
    assert again is None, "the connection must close after a rejected request"


def test_bodies_and_paths(loop, interface):
    async def main():
        async with serving_echo(interface) as server:
            reader, writer = await connect(server)
            writer.write(
                b"POST /a%20b/%E2%82%AC?q=%20 HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
                b"POST http://h/abs?x HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc"
            )
            one = await read_response(reader)
            two = await read_response(reader)
            writer.close()
            return one, two

    one, two = _run(loop, main())
    assert one.body == b"hello world" and one.header("x-path") == "/a b/\u20ac"
    assert two.body == b"abc" and two.header("x-path") == "/abs"
