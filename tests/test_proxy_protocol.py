"""`--proxy-protocol` over real sockets: the v1 and v2 headers give the ASGI scope's
`client` and `server` and the WSGI environ's REMOTE_ADDR/SERVER_NAME, for every request
of the connection; LOCAL and UNKNOWN keep the connection's own addresses; a missing or
malformed header, or one from a peer not in --forwarded-allow-ips, closes the connection
with nothing passed to the app; the header may arrive in pieces, but within the
header-read timeout; and the PROXY cases of gunicorn's request corpus; with ASGI, and with
WSGI on the thread engine. (A real HAProxy in
front: tests/test_haproxy.py.)"""

import json
import socket
import struct

import pytest

import gunicorn_corpus
from httputil import closed, connect, read_response, read_until_closed, run, serving

SIG = b"\r\n\r\n\x00\r\nQUIT\n"
GET = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
V1 = b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\n"


def v2(command, family, body):
    return SIG + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body


V2_IPV4 = v2(1, 0x11, socket.inet_aton("192.168.0.1") + socket.inet_aton("10.0.0.2") + struct.pack("!HH", 56324, 443))
V2_IPV6 = v2(1, 0x21, socket.inet_pton(socket.AF_INET6, "2001:db8::7") + socket.inet_pton(socket.AF_INET6, "::1")
             + struct.pack("!HH", 1234, 80))


def answer_to(loop, raw, **options):
    """What a --proxy-protocol server (where_app) sends back to raw until it closes; the
    app's calls are cleared first."""
    calls.clear()

    async def main():
        async with proxied(**options) as srv:
            return await read_until_closed(srv, raw)

    return run(loop, main())


calls = []


async def where_app(scope, receive, send):
    calls.append(scope["path"])
    body = json.dumps({"client": scope["client"], "server": scope["server"]}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def where_wsgi(environ, start_response):
    calls.append(environ["PATH_INFO"])
    body = json.dumps({k: environ[k] for k in ("REMOTE_ADDR", "REMOTE_PORT", "SERVER_NAME", "SERVER_PORT")}).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


def where_wsgi_json(environ, start_response):
    """`where_app` for WSGI."""
    calls.append(environ["PATH_INFO"])
    where = {"client": [environ["REMOTE_ADDR"], int(environ["REMOTE_PORT"])],
             "server": [environ["SERVER_NAME"], int(environ["SERVER_PORT"])]}
    body = json.dumps(where).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


# The header is read by the connection, whichever interface serves: ASGI on the loop, and
# WSGI on the thread engine, which has a connection core of its own.
INTERFACES = {
    "asgi": (where_app, {}),
    "wsgi-threads": (where_wsgi_json, {"interface": "wsgi", "wsgi_engine": "threads", "threads": 2}),
}
SERVED = INTERFACES["asgi"]


@pytest.fixture(autouse=True, params=list(INTERFACES))
def served_by(request):
    global SERVED
    SERVED = INTERFACES[request.param]
    yield request.param
    SERVED = INTERFACES["asgi"]


def proxied(**options):
    """`serving()` the app of the interface under test with --proxy-protocol."""
    app, interface = SERVED
    return serving(app, **{"proxy_protocol": True, **interface, **options})


async def exchange(server, *pieces, requests=1):
    """Send the pieces one write each, read `requests` responses: their JSON bodies."""
    reader, writer = await connect(server)
    for piece in pieces:
        writer.write(piece)
        await writer.drain()
    out = []
    for _ in range(requests):
        out.append(json.loads((await read_response(reader)).body))
    writer.close()
    return out


@pytest.mark.parametrize("header,client,server", [
    (V1, ["192.168.0.1", 56324], ["10.0.0.2", 443]),
    (V2_IPV4, ["192.168.0.1", 56324], ["10.0.0.2", 443]),
    (V2_IPV6, ["2001:db8::7", 1234], ["::1", 80]),
    (b"PROXY TCP6 2001:db8::1 ::1 4000 8080\r\n", ["2001:db8::1", 4000], ["::1", 8080]),
])
def test_headers_give_the_addresses_of_every_request(loop, header, client, server):
    async def main():
        async with proxied() as srv:
            return await exchange(srv, header + GET + GET, requests=2)

    assert run(loop, main()) == [{"client": client, "server": server}] * 2


@pytest.mark.parametrize("header", [b"PROXY UNKNOWN\r\n", b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n",
                                    v2(0, 0x00, b""), v2(0, 0x11, V2_IPV4[16:]), v2(1, 0x00, b"")],
                         ids=["v1-unknown", "v1-unknown-addresses", "v2-local", "v2-local-addresses", "v2-unspec"])
def test_local_and_unknown_keep_the_connections_addresses(loop, header):
    async def main():
        async with proxied() as srv:
            [got] = await exchange(srv, header + GET)
            return got, srv.sockets[0].getsockname()[1]

    got, port = run(loop, main())
    assert got["client"][0] == "127.0.0.1" and got["server"] == ["127.0.0.1", port]


def test_v2_tlvs_are_skipped(loop):
    tlvs = b"\x01\x00\x02h2" + b"\x04\x00\x03\x00\x00\x00"
    header = v2(1, 0x11, V2_IPV4[16:] + tlvs)

    async def main():
        async with proxied() as srv:
            return await exchange(srv, header + GET)

    assert run(loop, main()) == [{"client": ["192.168.0.1", 56324], "server": ["10.0.0.2", 443]}]


@pytest.mark.parametrize("header", [V1, V2_IPV4])
def test_header_in_pieces(loop, header):
    pieces = [header[i:i + 5] for i in range(0, len(header), 5)] + [GET]

    async def main():
        async with proxied() as srv:
            return await exchange(srv, *pieces)

    assert run(loop, main())[0]["client"] == ["192.168.0.1", 56324]


@pytest.mark.parametrize("raw", [
    GET,  # no header at all
    b"PROXY TCP4 192.168.0.1 10.0.0.2 56324\r\n" + GET,
    b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 99999\r\n" + GET,
    b"PROXY TCP9 1.2.3.4 5.6.7.8 1 2\r\n" + GET,
    b"PROXY TCP4 " + b"1" * 120 + b"\r\n" + GET,
    v2(1, 0x12, V2_IPV4[16:]) + GET,  # a datagram
    v2(1, 0x11, V2_IPV4[16:24]) + GET,  # addresses cut short
    SIG + b"\x31\x11\x00\x0c" + V2_IPV4[16:] + GET,  # version 3
], ids=["missing", "v1-no-port", "v1-bad-port", "v1-bad-protocol", "v1-too-long", "v2-dgram", "v2-short", "v2-version"])
def test_missing_or_malformed_header_closes_unanswered(loop, raw):
    assert answer_to(loop, raw) == b"" and calls == []


def test_untrusted_peer_is_closed_unanswered(loop):
    """Closed as it is accepted, unread: what it sent may meet the closed socket (a reset)."""
    try:
        got = answer_to(loop, V1 + GET, forwarded_allow_ips="10.1.2.3")
    except ConnectionResetError:
        got = b""
    assert got == b"" and calls == []


def test_header_counts_against_the_header_read_timeout(loop):
    async def main():
        async with proxied(timeout_header_read=0.3) as srv:
            reader, writer = await connect(srv)
            writer.write(V1[:10])
            started = loop.time()
            assert await closed(reader, 5)
            writer.close()
            return loop.time() - started

    assert 0.2 < run(loop, main()) < 3


def test_off_by_default(loop):
    """Without --proxy-protocol a PROXY line is a malformed request line: 400."""
    async def main():
        async with proxied(proxy_protocol=False) as srv:
            reader, writer = await connect(srv)
            writer.write(V1 + GET)
            response = await read_response(reader)
            writer.close()
            return response.status

    assert run(loop, main()) == 400


@pytest.mark.parametrize("engine", ["threads", "loop"])
def test_wsgi_environ(loop, engine):
    async def main():
        async with serving(where_wsgi, proxy_protocol=True, interface="wsgi", wsgi_engine=engine) as srv:
            return await exchange(srv, V2_IPV4 + GET)

    assert run(loop, main()) == [{"REMOTE_ADDR": "192.168.0.1", "REMOTE_PORT": "56324",
                                  "SERVER_NAME": "10.0.0.2", "SERVER_PORT": "443"}]


def test_not_with_tls(tmp_path):
    from swordfish.server import Config
    with pytest.raises(ValueError, match="proxy_protocol does not go with ssl_certfile"):
        Config("m:app", proxy_protocol=True, ssl_certfile=str(tmp_path / "c.pem"))


# gunicorn's PROXY protocol cases (tests/requests/{valid,invalid}/pp_*.http of its sdist,
# fetched by gunicorn_corpus), with the addresses each valid one gives.
PP_VALID = [
    ("pp_01", ["192.168.0.1", 56324], ["192.168.0.11", 443]),
    ("pp_04", ["192.168.1.10", 12345], ["192.168.1.1", 443]),
    ("pp_05", ["2001:db8::1", 54321], ["2001:db8::2", 80]),
]


@pytest.mark.parametrize("name,client,server", PP_VALID, ids=[c[0] for c in PP_VALID])
def test_gunicorn_corpus_valid_headers(loop, name, client, server):
    raw = gunicorn_corpus.case("valid", name)

    async def main():
        async with proxied() as srv:
            return await exchange(srv, raw)

    assert run(loop, main()) == [{"client": client, "server": server}]


def test_gunicorn_corpus_pp_02(loop):
    """A v1 header, then two HTTP/1.1 requests without the Host field, which RFC 9112 §3.2
    answers with 400 (gunicorn's corpus checks its parser, not that rule): the header is
    taken, the request is answered, the connection closed; the app is not called."""
    calls.clear()
    raw = gunicorn_corpus.case("valid", "pp_02")

    async def main():
        async with proxied() as srv:
            reader, writer = await connect(srv)
            writer.write(raw)
            response = await read_response(reader)
            assert await closed(reader)
            writer.close()
            return response.status

    assert run(loop, main()) == 400 and calls == []


@pytest.mark.parametrize("kind,name", [("invalid", "pp_01"), ("invalid", "pp_02"), ("invalid", "pp_03"),
                                       ("valid", "pp_03")],
                         ids=["invalid-pp_01", "invalid-pp_02", "invalid-pp_03", "valid-pp_03-no-header"])
def test_gunicorn_corpus_refused_headers(loop, kind, name):
    """The malformed headers, and a request without one (gunicorn's header is optional;
    swordfish's is not: a peer that may send one and did not is not believed either)."""
    assert answer_to(loop, gunicorn_corpus.case(kind, name)) == b"" and calls == []
