"""Real RSGI frameworks from PyPI under `swordfish serve` (no --interface: their app
objects have `__rsgi__`): an Emmett app (tests/apps/emmett_app.py) and an emmett55 app
(tests/apps/emmett55_app.py), driven by httpx and the `websockets` client."""

import asyncio

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

from apps.serving import ServeProcess

pytestmark = pytest.mark.timeout(90)


def served(app):
    srv = ServeProcess("--port", "0", app=app)
    m, _ = srv.wait_line(r"serving on http://127\.0\.0\.1:(\d+)")
    return srv, int(m.group(1))


def ws_exchange(port, messages):
    async def main():
        async with ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
            replies = []
            for m in messages:
                await ws.send(m)
                replies.append(await ws.recv())
            return replies

    return asyncio.run(main())


def test_emmett_app():
    srv, port = served("apps.emmett_app:app")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=10) as client:
            assert client.get("/").text == "hello from emmett"
            page = client.get("/page/Hi")
            assert page.status_code == 200
            assert "<h1>Hi</h1>" in page.text and "<li>&lt;two&gt;</li>" in page.text
            r = client.post("/form", data={"name": "ada", "blob": "x" * 100000})
            assert r.text == "name=ada size=100000"
            r = client.get("/api/items/7", params={"q": "search"}, headers={"user-agent": "probe/1"})
            assert r.json() == {"item": 7, "q": "search", "agent": "probe/1"}
            assert r.headers["content-type"].startswith("application/json")
            assert client.get("/nowhere").status_code == 404
        assert ws_exchange(port, ["a", "bc"]) == ["echo a", "echo bc"]
        srv.wait_line(r'"GET /page/Hi HTTP/1\.1" 200')
    finally:
        assert srv.stop() == 0, srv.log()
    assert "Traceback" not in srv.log(), srv.log()


def test_emmett55_app():
    srv, port = served("apps.emmett55_app:app")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=10) as client:
            assert client.get("/").text == "hello from emmett55"
            assert client.post("/api/sum", json={"numbers": [1, 2, 3.5]}).json() == {"sum": 6.5}
            assert client.post("/form", data={"name": "bob"}).text == "name=bob"
        assert ws_exchange(port, ["abc", "xyz"]) == ["cba", "zyx"]
    finally:
        assert srv.stop() == 0, srv.log()
    assert "Traceback" not in srv.log(), srv.log()
