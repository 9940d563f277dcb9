"""Which TLS implementation serves HTTPS (`--ssl-engine`: rustls where it can, OpenSSL
otherwise), and what rustls serves as OpenSSL does: client certificates from a CA, ALPN
for HTTP/2, large bodies both ways, the peer's close; and what it refuses at start."""

import asyncio
import logging
import os
import shutil
import ssl
import subprocess

import pytest

from httputil import read_response, run, serving
from netutil import tls_files  # noqa: F401 (fixture)
from swordfish.server import Config
from test_http_tls import client_context, encrypted_key, open_tls, scheme_app


def swordfish_loop(loop):
    from swordfish._tls import TlsMixin

    return isinstance(loop, TlsMixin)


def openssl(*args):
    if shutil.which("openssl") is None:
        pytest.skip("the certificates are made with the openssl command")
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def client_ca(tmp_path_factory):
    """A CA, and a client certificate it signed: {"ca", "cert", "key"} file names."""
    d = tmp_path_factory.mktemp("client-ca")
    f = {name: str(d / f"{name}.pem") for name in ("ca", "ca_key", "cert", "key", "csr")}
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=swordfish test CA", "-keyout", f["ca_key"], "-out", f["ca"])
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", "/CN=swordfish-client", "-keyout", f["key"], "-out", f["csr"])
    ext = d / "client.ext"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f["csr"], "-CA", f["ca"], "-CAkey", f["ca_key"], "-CAcreateserial",
            "-days", "2", "-extfile", str(ext), "-out", f["cert"])
    return f


async def get(server, ctx, path="/"):
    reader, writer = await open_tls(server, ctx)
    try:
        writer.write(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
        return await asyncio.wait_for(read_response(reader), 5)
    finally:
        writer.close()


def test_rustls_serves_by_default_and_openssl_where_asked(loop, tls_files, tmp_path, caplog):
    cert, key = tls_files
    settings = [
        ({}, "rustls" if swordfish_loop(loop) else "OpenSSL"),
        ({"ssl_engine": "openssl"}, "OpenSSL"),
        # rustls reads no encrypted key: auto leaves it to OpenSSL.
        ({"ssl_keyfile": encrypted_key(key, tmp_path, "pw"), "ssl_keyfile_password": "pw"}, "OpenSSL"),
        ({"ssl_ciphers": "ECDHE+AESGCM"}, "OpenSSL"),
    ]

    async def main():
        for options, engine in settings:
            options = {"ssl_certfile": cert, "ssl_keyfile": key, **options}
            with caplog.at_level(logging.INFO, logger="swordfish.error"):
                async with serving(scheme_app, **options) as server:
                    assert server.tls_engine == engine, options
                    assert (await get(server, client_context(cert))).body == b"https GET 0"
            assert f"TLS by {engine})" in caplog.text
            caplog.clear()

    run(loop, main())


@pytest.mark.parametrize("options,message", [
    ({"ssl_ciphers": "ECDHE+AESGCM"}, "an OpenSSL cipher list"),
    ({"ssl_keyfile_password": "pw"}, "an encrypted key"),
    ({"loop": "asyncio"}, "loop 'asyncio'"),
])
def test_rustls_refuses_what_it_cannot_serve(tls_files, options, message):
    cert, key = tls_files
    with pytest.raises(ValueError, match=f"ssl_engine 'rustls' does not serve {message}"):
        Config("m:app", ssl_certfile=cert, ssl_keyfile=key, ssl_engine="rustls", **options)
    with pytest.raises(ValueError, match="ssl_engine needs ssl_certfile"):
        Config("m:app", ssl_engine="openssl")


def test_a_key_rustls_does_not_take_is_served_by_openssl_under_auto(loop, tmp_path, caplog):
    # Ed448: OpenSSL signs with it, ring (under rustls) does not.
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    openssl("req", "-x509", "-newkey", "ed448", "-nodes", "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert)
    with pytest.raises(ssl.SSLError, match="rustls|key"):
        Config("m:app", ssl_certfile=cert, ssl_keyfile=key, ssl_engine="rustls").ssl_context()

    async def main():
        with caplog.at_level(logging.WARNING, logger="swordfish.error"):
            async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key) as server:
                assert server.tls_engine == "OpenSSL"
                assert (await get(server, client_context(cert))).body == b"https GET 0"
        assert "TLS served by OpenSSL: rustls refused the certificate or key" in caplog.text

    run(loop, main())


@pytest.mark.parametrize("reqs", ["required", "optional"])
def test_rustls_verifies_client_certificates_with_the_ca(loop, tls_files, client_ca, reqs):
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key, ssl_engine="rustls",
                           ssl_ca_certs=client_ca["ca"], ssl_cert_reqs=reqs) as server:
            assert server.tls_engine == ("rustls" if swordfish_loop(loop) else "OpenSSL")
            with_cert = client_context(cert)
            with_cert.load_cert_chain(client_ca["cert"], client_ca["key"])
            assert (await get(server, with_cert)).body == b"https GET 0"
            # A certificate the CA did not sign is refused either way.
            stranger = client_context(cert)
            stranger.load_cert_chain(cert, key)
            without = client_context(cert)
            for ctx in ([stranger, without] if reqs == "required" else [stranger]):
                try:
                    resp = await get(server, ctx)
                except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError):
                    resp = None
                assert resp is None
            if reqs == "optional":
                assert (await get(server, without)).body == b"https GET 0"

    if not swordfish_loop(loop):
        pytest.skip("ssl_engine 'rustls' needs swordfish's loop")
    run(loop, main())


def test_rustls_carries_large_bodies_and_many_records(loop, tls_files):
    cert, key = tls_files

    async def echo(scope, receive, send):
        chunks = []
        while True:
            message = await receive()
            chunks.append(message["body"])
            if not message["more_body"]:
                break
        body = b"".join(chunks)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        # Many small writes, then one large: records of every size on the way out.
        for i in range(0, 4096, 64):
            await send({"type": "http.response.body", "body": body[i:i + 64], "more_body": True})
        await send({"type": "http.response.body", "body": body[4096:]})

    async def main():
        async with serving(echo, ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await open_tls(server, client_context(cert))
            for size in (5000, 3 << 20):
                body = os.urandom(size)
                writer.write(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
                # Unevenly: a body arrives across record and read boundaries.
                for i in range(0, size, 70_001):
                    writer.write(body[i:i + 70_001])
                    await writer.drain()
                resp = await asyncio.wait_for(read_response(reader), 30)
                assert resp.body == body
            writer.close()
            # The peer's close_notify (and then its close) ends the connection cleanly.
            await writer.wait_closed()

    run(loop, main())


def test_rustls_offers_h2_by_alpn(loop, tls_files):
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key) as server:
            for offer, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")):
                reader, writer = await open_tls(server, client_context(cert, offer))
                assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == chosen
                if chosen == "h2":
                    # The server's preface (SETTINGS) comes first: HTTP/2 serves it.
                    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                    head = await asyncio.wait_for(reader.readexactly(9), 5)
                    assert head[3] == 4  # a SETTINGS frame
                writer.close()

    run(loop, main())


def test_rustls_refuses_a_client_with_no_protocol_in_common(loop, tls_files):
    # RFC 7301 §3.2: no_application_protocol. (OpenSSL, through the ssl module, goes on
    # without ALPN instead.)
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key, http="1") as server:
            with pytest.raises(ssl.SSLError, match="no application protocol"):
                await get(server, client_context(cert, ["h2"]))
            assert (await get(server, client_context(cert, ["h2", "http/1.1"]))).body == b"https GET 0"

    if not swordfish_loop(loop):
        pytest.skip("the ssl module's server goes on without ALPN")
    run(loop, main())


def test_the_options_reach_rustls_from_the_command_line(tls_files):
    from swordfish.server.cli import build_parser, worker_argv

    cert, key = tls_files
    config = Config("m:app", workers=2, ssl_certfile=cert, ssl_keyfile=key, ssl_engine="rustls")
    args = vars(build_parser().parse_args(worker_argv(config)))
    assert args["ssl_engine"] == "rustls"
    assert config.ssl_context().rustls is not None
    openssl_context = Config("m:app", ssl_certfile=cert, ssl_keyfile=key, ssl_engine="openssl").ssl_context()
    assert getattr(openssl_context, "rustls", None) is None
