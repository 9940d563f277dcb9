"""HTTP/2 with the clients and the conformance suite people use: h2spec (every case, strict
mode too, over h2c and over TLS), curl (prior knowledge, `Upgrade: h2c`, TLS), nghttp's
upgrade, httpx with `http2=True`; and the keep-alive PINGs. Each server runs in a thread
of its own (tests/apps/serving.py), the clients in subprocesses or this thread."""

import asyncio
import contextlib
import os
import shutil
import ssl
import subprocess

import httpx
import pytest

from apps.serving import ThreadServer
from h2util import H2Client, read_all, read_frames
from netutil import tls_files  # noqa: F401 (fixture)

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
H2SPEC = os.path.join(TOOLS, ".bin", "h2spec")


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = await read_all(receive)
    text = f"{scope['http_version']} {scope['method']} {scope['path']} {len(body)}"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": text.encode()})


def need(program):
    path = shutil.which(program)
    if path is None:
        pytest.fail(f"{program} is not installed: run tools/install-test-deps.sh")
    return path


def h2spec(*args):
    if not os.access(H2SPEC, os.X_OK):
        pytest.fail("h2spec is not built: run tools/install-test-deps.sh")
    out = subprocess.run([H2SPEC, *args, "-o", "5"], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("strict", [False, True])
def test_h2spec_over_h2c(strict):
    with ThreadServer(app, lifespan="off", http="2") as server:
        code, out = h2spec("-h", "127.0.0.1", "-p", str(server.port), *(["-S"] if strict else []))
    assert code == 0, out[-3000:]
    assert " 0 failed" in out.splitlines()[-1], out[-3000:]


def test_h2spec_over_tls(tls_files):
    cert, key = tls_files
    with ThreadServer(app, lifespan="off", ssl_certfile=cert, ssl_keyfile=key) as server:
        code, out = h2spec("-h", "127.0.0.1", "-p", str(server.port), "-t", "-k", "-S")
    assert code == 0, out[-3000:]


def test_h2spec_on_a_port_that_serves_http11_too():
    """`--http auto`: every case but the invalid preface, which is HTTP/1.1's to answer
    (a 400) on a port that serves both."""
    with ThreadServer(app, lifespan="off") as server:
        code, out = h2spec("-h", "127.0.0.1", "-p", str(server.port), "-S")
    last = out.splitlines()[-1]
    assert "1 failed" in last or " 0 failed" in last, out[-3000:]
    if "1 failed" in last:
        assert "Sends invalid connection preface" in out.split("Failures:")[1], out[-3000:]


def test_curl_prior_knowledge_upgrade_and_tls(tls_files):
    curl = need("curl")
    cert, key = tls_files

    def run(*args):
        return subprocess.run([curl, "-sS", "--max-time", "10", *args], capture_output=True, text=True,
                              check=True).stdout

    with ThreadServer(app, lifespan="off") as server:
        assert run("--http2-prior-knowledge", f"{server.url}/pk") == "2 GET /pk 0"
        # Upgrade: h2c, answered as stream 1 of the HTTP/2 connection.
        assert run("--http2", f"{server.url}/up") == "2 GET /up 0"
        # A request with a body is served as HTTP/1.1 (RFC 7540 §3.2 lets the server choose).
        assert run("--http2", "-d", "abc", f"{server.url}/post") == "1.1 POST /post 3"
    with ThreadServer(app, lifespan="off", ssl_certfile=cert, ssl_keyfile=key) as server:
        url = f"https://localhost:{server.port}"
        out = run("--http2", "--cacert", cert, "--resolve", f"localhost:{server.port}:127.0.0.1",
                  "-d", "x" * 100000, f"{url}/tls")
        assert out == "2 POST /tls 100000"


def test_nghttp_upgrade():
    nghttp = need("nghttp")
    with ThreadServer(app, lifespan="off") as server:
        out = subprocess.run([nghttp, "-u", f"{server.url}/ng"], capture_output=True, text=True, check=True,
                             timeout=10).stdout
        assert out == "2 GET /ng 0"
        out = subprocess.run([nghttp, "-u", "-m", "20", f"{server.url}/many"], capture_output=True, text=True,
                             check=True, timeout=10).stdout
        assert out == "2 GET /many 0" * 20


def test_httpx_http2_over_tls(tls_files):
    cert, key = tls_files
    with ThreadServer(app, lifespan="off", ssl_certfile=cert, ssl_keyfile=key) as server:
        async def main():
            ctx = ssl.create_default_context(cafile=cert)
            async with httpx.AsyncClient(http2=True, verify=ctx, trust_env=False) as client:
                url = f"https://localhost:{server.port}"
                rs = await asyncio.gather(*(client.post(f"{url}/{i}", content=b"p" * i) for i in range(30)))
                for i, r in enumerate(rs):
                    assert r.http_version == "HTTP/2" and r.text == f"2 POST /{i} {i}"

        asyncio.run(main())


def test_keep_alive_pings_close_a_client_that_does_not_answer():
    with ThreadServer(app, lifespan="off", http2_keep_alive_interval=0.2, http2_keep_alive_timeout=0.2,
                      timeout_keep_alive=60) as server:
        async def main():
            # This client answers PINGs (the h2 library does, as it reads): it stays open.
            answering = await H2Client.open(server.port)
            assert (await answering.request(b"GET", b"/")).status == 200

            async def keep_reading():
                while await answering.pump(timeout=10):
                    pass

            reading = asyncio.ensure_future(keep_reading())
            # This one reads frames but answers none: it is closed.
            silent = await H2Client.open(server.port)
            pings = 0
            while True:
                try:
                    frame = await read_frames(silent.reader)
                except (asyncio.IncompleteReadError, ConnectionResetError):
                    break
                pings += type(frame).__name__ == "PingFrame"
            assert pings == 1
            await asyncio.sleep(0.5)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            assert not answering.closed
            assert sum(type(e).__name__ == "PingReceived" for e in answering.events) >= 2
            assert (await answering.request(b"GET", b"/again")).status == 200
            answering.close()

        asyncio.run(main())
