"""Lifespan, the Server runner and the CLI."""

import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from httputil import echo_app, free_port, request, run, serving
from swordfish.server import Config, LifespanFailed, Server

GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def lifespan_app(fail=False, log=None):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                log.append(m["type"])
                if m["type"] == "lifespan.startup":
                    if fail:
                        await send({"type": "lifespan.startup.failed", "message": "no database"})
                        return
                    scope["state"]["db"] = "connected"
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = scope["state"]["db"].encode()
        scope["state"]["db"] = "changed"  # a shallow copy per request
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
    return app


def test_lifespan_state(loop):
    log = []

    async def main():
        async with serving(lifespan_app(log=log), lifespan="on") as server:
            one, _ = await request(server, GET)
            two, _ = await request(server, GET)
            return one.body, two.body

    assert run(loop, main()) == (b"connected", b"connected")
    assert log == ["lifespan.startup", "lifespan.shutdown"]


def test_lifespan_startup_failure(loop):
    async def main():
        async with serving(lifespan_app(fail=True, log=[]), lifespan="auto"):
            pass

    with pytest.raises(LifespanFailed, match="no database"):
        run(loop, main())


def test_lifespan_auto_unsupported(loop):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            raise RuntimeError("only http")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        async with serving(app, lifespan="auto") as server:
            return await request(server, GET)

    assert run(loop, main())[0].body == b"ok"


def test_shutdown_before_serve_has_started(loop):
    # Kept, as uvicorn's should_exit set early: serve() starts up, then shuts down at once.
    log = []

    async def main():
        server = Server(Config(lifespan_app(log=log), port=0, lifespan="on", access_log=False))
        task = asyncio.ensure_future(server.serve())
        server.shutdown()
        await asyncio.wait_for(task, 10)
        return server

    server = run(loop, main())
    assert server.started and server.exit_code == 0
    assert log == ["lifespan.startup", "lifespan.shutdown"]


def test_shutdown_from_another_thread(loop):
    async def main():
        server = Server(Config(echo_app, port=0, lifespan="off", access_log=False))
        task = asyncio.ensure_future(server.serve())
        while not server.started:
            assert not task.done(), task
            await asyncio.sleep(0.005)  # polling interval
        resp, _ = await request(server, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
        assert resp.body == b"hi"
        thread = threading.Thread(target=server.shutdown)
        thread.start()
        await asyncio.wait_for(task, 10)
        thread.join()

    run(loop, main())


def _get(port, deadline):
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                return data
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("how", ["module", "env"])
def test_cli_serves(how):
    port = free_port()
    env = dict(os.environ)
    if how == "module":
        cmd = [sys.executable, "-m", "swordfish", "serve", "app:app", "--app-dir", EXAMPLES, "--port", str(port)]
    else:
        cmd = [sys.executable, "-m", "swordfish", "serve"]
        env.update(SWORDFISH_APP="app:app", SWORDFISH_APP_DIR=EXAMPLES, SWORDFISH_PORT=str(port),
                   SWORDFISH_LOOP="asyncio")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        data = _get(port, time.monotonic() + 15)
        assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"Hello from swordfish!\n")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out.decode()
    assert b"GET /" in out  # the access log


def test_cli_help_and_failures(tmp_path):
    helptext = subprocess.run([sys.executable, "-m", "swordfish", "serve", "--help"],
                              capture_output=True, text=True, check=True).stdout
    assert "--timeout-keep-alive" in helptext and "default: 5.0" in helptext
    (tmp_path / "bad.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await receive()\n"
        "    await send({'type': 'lifespan.startup.failed', 'message': 'nope'})\n"
    )
    r = subprocess.run([sys.executable, "-m", "swordfish", "serve", "bad:app", "--app-dir", str(tmp_path),
                        "--port", str(free_port())], capture_output=True, text=True, timeout=20)
    assert r.returncode == 3 and "nope" in r.stderr
    r = subprocess.run([sys.executable, "-m", "swordfish", "serve", "missing_mod:app"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "cannot load" in r.stderr


def _listening_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("workers", ["1", "2"])
def test_cli_port_in_use(workers):
    with _listening_port() as taken:
        port = str(taken.getsockname()[1])
        r = subprocess.run([sys.executable, "-m", "swordfish", "serve", "app:app", "--app-dir", EXAMPLES,
                            "--port", port, "--workers", workers], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "address already in use" in errors[0] and port in errors[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args,env,message", [
    (["--limit-body-size", "-1"], {}, "argument --limit-body-size: must be at least 0"),
    (["--timeout-keep-alive", "-1"], {}, "argument --timeout-keep-alive: must be at least 0"),
    (["--timeout-header-read", "0"], {}, "argument --timeout-header-read: must be more than 0"),
    (["--workers", "0"], {}, "argument --workers: must be at least 1"),
    (["--workers", "-2"], {}, "argument --workers: must be at least 1"),
    (["--port", "65536"], {}, "argument --port: must be at least 0 and at most 65535"),
    ([], {"SWORDFISH_PORT": "abc"}, "SWORDFISH_PORT: invalid int value: 'abc'"),
    ([], {"SWORDFISH_LOOP": "fast"}, "SWORDFISH_LOOP: invalid choice: 'fast'"),
])
def test_cli_rejects_invalid_options(args, env, message):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}, **env}
    r = subprocess.run([sys.executable, "-m", "swordfish", "serve", "app:app", "--app-dir", EXAMPLES, *args],
                       env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("usage: swordfish serve") and f"error: {message}" in r.stderr, r.stderr


def test_config_checks_and_normalises_values():
    from swordfish.server.cli import build_parser, config_from, worker_argv

    for bad in ({"workers": 0}, {"max_requests": 0}, {"limit_concurrency": 0}, {"port": 70000},
                {"timeout_header_read": 0}, {"log_level": "loud"}):
        with pytest.raises(ValueError):
            Config("m:app", **bad)
    config = Config("m:app", log_level="WARNING", timeout_graceful_shutdown=float("inf"))
    assert config.log_level == "warning" and config.timeout_graceful_shutdown is None
    # What a supervisor hands its workers parses back into the same settings.
    config = Config("m:app", workers=3, forwarded_allow_ips=["10.0.0.1", "*"], timeout_graceful_shutdown=None,
                    log_level="DEBUG", headers=["X-A: 1;2", "X-B: x:y"], root_path="/a b", access_log=False,
                    limit_body_size=5)
    again, _ = config_from(build_parser(), worker_argv(config))
    assert again.forwarded_allow_ips == "10.0.0.1,*" and again.default_headers() == config.default_headers()
    same = {"forwarded_allow_ips": config.forwarded_allow_ips, "headers": config.headers, "app_dir": None}
    assert dataclasses.replace(again, **same) == config


def test_config_calls_a_factory_once():
    calls = []

    def factory():
        calls.append(1)
        return echo_app

    config = Config(factory, factory=True)
    assert config.load_app() is config.load_app() is echo_app and calls == [1]
