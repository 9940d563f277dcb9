"""An RSGI app served as users run one: `swordfish serve` picking RSGI by itself for an
object with `__rsgi__` (its `__rsgi_init__` and `__rsgi_del__` called with the loop not
running), on each loop (uvloop has no `sendfile`: files go through the fallback), with
workers, the access log, under gunicorn's worker class, and over TLS (files through the
loop's sender rather than the native one). The app is tests/apps/rsgi_app.py."""

import asyncio
import json
import ssl
import sys

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

from apps import rsgi_app
from apps.serving import TESTS, CliServer, ServeProcess, pid_of
from httputil import port_of, read_response, run, serving
from netutil import tls_files  # noqa: F401 (fixture)

APP = "apps.rsgi_app:app"
APP_FILE = f"{TESTS}/apps/rsgi_app.py"


def _exercise(base, ws_base):
    """Every kind of response on a running server; returns the /info JSON."""
    with httpx.Client(base_url=base, trust_env=False, timeout=10) as client:
        info = client.get("/info", params={"q": "1"}).json()
        assert client.post("/echo", content=b"abc").content == b"abc"
        assert client.post("/echos", content=iter([b"a" * 100000, b"b" * 100000])).content == b"a" * 100000 + b"b" * 100000
        assert client.get("/stream").content == b"testtesttest"
        with open(APP_FILE, "rb") as f:
            content = f.read()
        assert client.get("/file").content == content
        r = client.get("/file_range", headers={"file-path": APP_FILE, "range": "bytes=3-9"})
        assert (r.status_code, r.content) == (206, content[3:10])
        assert client.get("/err_app").status_code == 500

    async def ws():
        async with ws_connect(ws_base + "/ws_echo") as conn:
            await conn.send("hi")
            return await conn.recv()

    assert asyncio.run(ws()) == "hi"
    return info


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop", ["swordfish", "asyncio", "uvloop"])
def test_cli_serves_an_rsgi_object_on_each_loop(loop, tmp_path):
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    init, done = tmp_path / "init", tmp_path / "del"
    env = {"RSGI_INIT_FILE": str(init), "RSGI_DEL_FILE": str(done)}
    # No --interface: the object's __rsgi__ says it.
    srv = ServeProcess("--port", "0", "--loop", loop, app=APP, env=env)
    try:
        m, _ = srv.wait_line(r"serving on http://127\.0\.0\.1:(\d+)")
        port = int(m.group(1))
        info = _exercise(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}")
        assert info["proto"] == "http" and info["rsgi_version"] == "1.6" and info["query_string"] == "q=1"
        assert info["server"] == f"127.0.0.1:{port}"
        # The access log has RSGI requests as any other.
        srv.wait_line(r'"GET /info\?q=1 HTTP/1\.1" 200')
        assert init.read_text() == "running=False closed=False"
        assert not done.exists()
    finally:
        assert srv.stop() == 0, srv.log()
    assert done.read_text() == "running=False closed=False"


@pytest.mark.timeout(60)
def test_cli_workers_serve_rsgi():
    srv = ServeProcess("--port", "0", "--workers", "2", "--interface", "rsgi", app=APP)
    try:
        m, _ = srv.wait_line(r"serving on http://127\.0\.0\.1:(\d+)")
        port = int(m.group(1))
        srv.wait_line(r"serving on", count=2)
        _exercise(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}")
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.timeout(60)
def test_gunicorn_worker_serves_rsgi():
    cmd = [sys.executable, "-m", "gunicorn", "-k", "swordfish.gunicorn.Worker", "--chdir", TESTS,
           "--bind", "127.0.0.1:0", "--graceful-timeout", "10", APP]
    srv = ServeProcess(cmd=cmd)
    try:
        m, _ = srv.wait_line(r"Listening at: http://127\.0\.0\.1:(\d+)")
        port = int(m.group(1))
        srv.wait_line(r"swordfish worker serving")
        _exercise(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}")
    finally:
        assert srv.stop() == 0, srv.log()


def test_help_names_every_interface():
    with CliServer("--help") as srv:
        srv.proc.wait(30)
        srv.reader.join(10)
    assert "ASGI, WSGI or RSGI" in srv.output()
    assert "rsgi" in srv.output()


def test_https_responses_and_files(loop, tls_files):
    cert, key = tls_files
    ctx = ssl.create_default_context(cafile=cert)

    async def main():
        async with serving(rsgi_app.routes, interface="rsgi", ssl_certfile=cert, ssl_keyfile=key) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server), ssl=ctx,
                                                           server_hostname="localhost")
            out = []
            for path in (b"/info", b"/file", b"/stream"):
                writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n\r\n")
                out.append(await asyncio.wait_for(read_response(reader), 5))
            extra = f"file-path: {APP_FILE}\r\nrange: bytes=5-20\r\n".encode()
            writer.write(b"GET /file_range HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n")
            out.append(await asyncio.wait_for(read_response(reader), 5))
            writer.close()
            return out

    info, file, stream, rng = run(loop, main())
    assert json.loads(info.body)["scheme"] == "https"
    with open(APP_FILE, "rb") as f:
        content = f.read()
    assert file.body == content
    assert stream.body == b"testtesttest"
    assert (rng.status, rng.body) == (206, content[5:21])
