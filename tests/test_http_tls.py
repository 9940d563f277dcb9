"""HTTPS: the server with a certificate (`--ssl-certfile` and friends), on swordfish's TLS
transport and on the stdlib's; client certificates; the CLI's TLS options."""

import asyncio
import os
import socket
import ssl
import subprocess
import sys

import pytest

from httputil import closed, echo_app, free_port, port_of, read_response, run, serving
from netutil import tls_files  # noqa: F401 (fixture)
from swordfish.server import Config, Server

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


async def scheme_app(scope, receive, send):
    """Answers with the scope's scheme, the method and the size of the request body."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message["body"])
        if not message["more_body"]:
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": f"{scope['scheme']} {scope['method']} {size}".encode()})


def client_context(cert, alpn=("http/1.1",)):
    ctx = ssl.create_default_context(cafile=cert)
    ctx.set_alpn_protocols(list(alpn))
    return ctx


async def open_tls(server, ctx):
    return await asyncio.open_connection("127.0.0.1", port_of(server), ssl=ctx, server_hostname="localhost")


def test_https_keep_alive_and_bodies(loop, tls_files):
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await open_tls(server, client_context(cert))
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
            writer.write(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(reader)).body == b"https GET 0"
            body = os.urandom(1 << 20)
            writer.write(b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            assert (await read_response(reader)).body == b"https POST 1048576"
            writer.close()

    run(loop, main())


def test_https_large_echo_and_pathsend(loop, tls_files, tmp_path):
    cert, key = tls_files
    data = os.urandom(3 << 20)
    path = tmp_path / "file.bin"
    path.write_bytes(data)

    async def app(scope, receive, send):
        if scope["path"] == "/file":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.pathsend", "path": str(path)})
        else:
            await echo_app(scope, receive, send)

    async def main():
        async with serving(app, ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await open_tls(server, client_context(cert))
            writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(data), 100_000):
                piece = data[i:i + 100_000]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
            assert (await read_response(reader)).body == data
            # The file goes out through TLS (no zero-copy sendfile there).
            writer.write(b"GET /file HTTP/1.1\r\nHost: t\r\n\r\n")
            resp = await read_response(reader)
            assert resp.header("content-length") == str(len(data)) and resp.body == data
            writer.close()

    run(loop, main())


def test_tls_records_are_held_for_the_end_of_the_iteration(sf_loop, tls_files):
    """On swordfish's loop and TLS transport, a streamed response's first chunk is held for
    the end of the loop iteration as it is over a plain socket (what the same step sends
    next joins it): the app finds nothing new on the client's socket right after sending
    it, and the client gets the whole response once the app goes on."""
    cert, key = tls_files
    shared = {}

    def waiting():
        try:
            return len(shared["socket"].recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            return 0

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        before = waiting()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        shared["added"] = waiting() - before
        await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"second"})

    async def main():
        async with serving(app, ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await open_tls(server, client_context(cert))
            # A duplicate of the client's descriptor: peeking at it leaves the bytes to the
            # client's transport.
            shared["socket"] = socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno()))
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                assert (await read_response(reader)).body == b"first second"
            finally:
                shared["socket"].close()
            writer.close()

    run(sf_loop, main())
    assert shared["added"] == 0


def test_plain_http_on_the_https_port_is_refused(loop, tls_files):
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            # Closed with no answer but, from rustls, the TLS alert that says why (a record of
            # type 21: decode_error).
            try:
                data = await asyncio.wait_for(reader.read(), 5)
            except ConnectionResetError:
                data = b""
            assert data in (b"", b"\x15\x03\x03\x00\x02\x02\x32"), data
            writer.close()
            # ... and the server goes on serving.
            reader, writer = await open_tls(server, client_context(cert))
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(reader)).body == b"https GET 0"
            writer.close()

    run(loop, main())


def test_a_silent_client_is_closed_at_the_header_timeout(loop, tls_files):
    # The header-read timeout starts at accept: a client that never starts the handshake
    # is closed when it runs out, as one that never sends its request head would be.
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key, timeout_header_read=0.3) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            started = loop.time()
            assert await closed(reader, 5)
            assert 0.25 < loop.time() - started < 3
            writer.close()

    run(loop, main())


def test_client_certificates(loop, tls_files):
    # The test certificate is self-signed: as the CA of clients, it vouches for itself.
    cert, key = tls_files

    async def main():
        async with serving(scheme_app, ssl_certfile=cert, ssl_keyfile=key, ssl_ca_certs=cert,
                           ssl_cert_reqs="required") as server:
            ctx = client_context(cert)
            ctx.load_cert_chain(cert, key)
            reader, writer = await open_tls(server, ctx)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(reader)).body == b"https GET 0"
            writer.close()
            # Without a certificate: no request is served. TLS 1.3 completes the client's
            # side of the handshake first, so the refusal may come at the first read.
            try:
                reader, writer = await open_tls(server, client_context(cert))
                writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                resp = await asyncio.wait_for(read_response(reader), 5)
                writer.close()
            except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError):
                resp = None
            assert resp is None

    run(loop, main())


def test_tls_settings_are_checked(tls_files, tmp_path):
    cert, key = tls_files
    for bad, message in [
        ({"ssl_keyfile": key}, "ssl_keyfile needs ssl_certfile"),
        ({"ssl_ca_certs": cert}, "ssl_ca_certs needs ssl_certfile"),
        ({"ssl_cert_reqs": "required"}, "ssl_cert_reqs needs ssl_certfile"),
        ({"ssl_certfile": cert, "ssl_cert_reqs": "optional"}, "needs ssl_ca_certs"),
        ({"ssl_certfile": cert, "ssl_cert_reqs": "always"}, "ssl_cert_reqs must be one of none, optional, required"),
    ]:
        with pytest.raises(ValueError, match=message):
            Config("m:app", **bad)
    assert Config("m:app").ssl_context() is None
    with pytest.raises(FileNotFoundError):
        Config("m:app", ssl_certfile=str(tmp_path / "missing.pem")).ssl_context()
    with pytest.raises(ssl.SSLError):
        Config("m:app", ssl_certfile=cert, ssl_keyfile=cert).ssl_context()  # not a key
    with pytest.raises(ssl.SSLError):
        Config("m:app", ssl_certfile=cert, ssl_keyfile=key, ssl_ciphers="NO-SUCH-CIPHER").ssl_context()
    ctx = Config("m:app", ssl_certfile=cert, ssl_keyfile=key, ssl_ca_certs=cert,
                 ssl_cert_reqs="optional").ssl_context()
    assert ctx.verify_mode == ssl.CERT_OPTIONAL


def test_a_certificate_that_cannot_be_loaded_stops_serve(loop, tmp_path):
    async def main():
        server = Server(Config(scheme_app, port=0, lifespan="off", ssl_certfile=str(tmp_path / "none.pem")))
        with pytest.raises(FileNotFoundError):
            await server.serve()
        return server

    server = run(loop, main())
    assert server.exit_code == 1 and not server.started


def encrypted_key(key, tmp_path, password):
    out = tmp_path / "key-encrypted.pem"
    subprocess.run(["openssl", "pkey", "-in", key, "-aes256", "-passout", f"pass:{password}", "-out", str(out)],
                   check=True, capture_output=True)
    return str(out)


def test_workers_get_the_key_password_outside_their_command_line(tls_files, tmp_path):
    from swordfish.server.cli import build_parser, worker_argv, worker_env

    cert, key = tls_files
    config = Config("m:app", workers=2, ssl_certfile=cert, ssl_keyfile=encrypted_key(key, tmp_path, "s3cret"),
                    ssl_keyfile_password="s3cret", ssl_ca_certs=cert, ssl_cert_reqs="optional",
                    ssl_ciphers="ECDHE+AESGCM")
    argv = worker_argv(config)
    assert not any("s3cret" in a for a in argv)
    assert worker_env(config) == {"SWORDFISH_SSL_KEYFILE_PASSWORD": "s3cret"}
    args = vars(build_parser().parse_args(argv))
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "ssl_cert_reqs", "ssl_ciphers"):
        assert args[name] == getattr(config, name)
    config.ssl_context()  # the password opens the key
    with pytest.raises(ssl.SSLError):
        Config("m:app", ssl_certfile=cert, ssl_keyfile=config.ssl_keyfile, ssl_keyfile_password="wrong").ssl_context()


def test_cli_serves_https_with_workers(tls_files, tmp_path):
    import httpx

    cert, key = tls_files
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
    env["SWORDFISH_SSL_KEYFILE_PASSWORD"] = "pw"
    cmd = [sys.executable, "-m", "swordfish", "serve", "app:app", "--app-dir", EXAMPLES, "--port", str(port),
           "--workers", "2", "--ssl-certfile", cert, "--ssl-keyfile", encrypted_key(key, tmp_path, "pw")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines = []
        while len([line for line in lines if "serving on https://127.0.0.1" in line]) < 2:
            line = proc.stdout.readline().decode()
            assert line, "".join(lines)
            lines.append(line)
        with httpx.Client(verify=client_context(cert)) as client:
            r = client.get(f"https://localhost:{port}/")
            assert r.status_code == 200 and r.text == "Hello from swordfish!\n"
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
    assert proc.returncode == 0


@pytest.mark.parametrize("args,message", [
    (["--ssl-keyfile", "key.pem"], "error: ssl_keyfile needs ssl_certfile (HTTPS)"),
    (["--ssl-cert-reqs", "maybe"], "argument --ssl-cert-reqs: invalid choice: 'maybe'"),
    (["--ssl-certfile", "/nonexistent/cert.pem"], "cannot load the TLS certificate '/nonexistent/cert.pem'"),
])
def test_cli_rejects_tls_options(args, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
    r = subprocess.run([sys.executable, "-m", "swordfish", "serve", "app:app", "--app-dir", EXAMPLES, *args],
                       env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
