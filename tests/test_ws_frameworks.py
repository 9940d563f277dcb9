"""WebSockets under real frameworks — Starlette's WebSocketRoute and WebSocketEndpoint, FastAPI's
`@app.websocket` (parameters, dependencies, WebSocketException), Django Channels' consumers behind
a ProtocolTypeRouter — driven by a real client, the `websockets` library.

The servers run in a thread (tests/apps/serving.py), on swordfish and on the stdlib loop (which
shows that the tests encode the right behaviour); the apps are in tests/apps/ and report the
disconnect codes they saw to a WsProbe that the tests wait on, with timeouts. No test may leave an
error in the server's log."""

import json
import logging

import pytest

from apps import channels_app, fastapi_ws_app, starlette_ws_app
from apps.serving import WAIT, ErrorLog, ThreadServer, client_for, payload
from apps.ws_clients import closed_by_server, negotiated_extensions, refused_status, ws_connect

SIZES = [0, 1, 126, 65536, 200_000]  # around the frame-length encodings, and past 64 KiB


@pytest.fixture(params=["swordfish", "asyncio"])
def server_loop(request):
    return request.param


@pytest.fixture(autouse=True)
def error_log():
    """Fails the test if the server logged an error (an app exception, a protocol failure)."""
    handler = ErrorLog()
    logger = logging.getLogger("swordfish.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
    assert not handler.records, [r.getMessage() for r in handler.records]


@pytest.fixture
def star(server_loop):
    app = starlette_ws_app.create_app()
    with ThreadServer(app, loop=server_loop) as server:
        server.probe = app.probe
        yield server


@pytest.fixture
def fast(server_loop):
    app = fastapi_ws_app.create_app()
    with ThreadServer(app, loop=server_loop) as server:
        server.probe = app.probe
        yield server


@pytest.fixture
def chan(server_loop):
    app = channels_app.get_application()
    probe = channels_app.reset()
    # ProtocolTypeRouter refuses the lifespan scope: "auto" goes on without it.
    with ThreadServer(app, loop=server_loop, lifespan="auto") as server:
        server.probe = probe
        yield server


def echo_round_trips(ws):
    """Text and bytes of several sizes come back unchanged and of the same type."""
    for n in SIZES:
        text = ("añ€" * n)[:n]
        ws.send(text)
        assert ws.recv(timeout=WAIT) == text
        data = payload(n, seed=n)
        ws.send(data)
        assert ws.recv(timeout=WAIT) == data


def wait_disconnect(probe, code):
    assert probe.wait_for(lambda p: code in p.disconnect_codes, WAIT), probe.disconnect_codes


# -- Starlette ----------------------------------------------------------------------------

def test_starlette_echo(star):
    with ws_connect(star.port, "/ws/echo") as ws:
        assert ws.subprotocol is None
        assert negotiated_extensions(ws).startswith("permessage-deflate")
        echo_round_trips(ws)
    wait_disconnect(star.probe, 1000)


def test_starlette_echo_without_compression(star):
    with ws_connect(star.port, "/ws/echo", compression=None) as ws:
        assert negotiated_extensions(ws) == ""
        echo_round_trips(ws)


@pytest.mark.parametrize("offered, chosen", [
    (["nope", "echo.v1", "echo.v2"], "echo.v2"),  # the server's preference, not the client's order
    (["echo.v1"], "echo.v1"),
    (["nope"], None),
])
def test_starlette_subprotocol_selection(star, offered, chosen):
    with ws_connect(star.port, "/ws/echo", subprotocols=offered) as ws:
        assert ws.subprotocol == chosen
        assert ws.response.headers.get("Sec-WebSocket-Protocol") == chosen
        ws.send("still echoing")
        assert ws.recv(timeout=WAIT) == "still echoing"


@pytest.mark.parametrize("code, reason", [(4321, "going now"), (1000, ""), (4000, "adiós ✓")])
def test_starlette_close_with_code_and_reason(star, code, reason):
    with ws_connect(star.port, "/ws/echo") as ws:
        ws.send(f"close {code} {reason}")
        assert closed_by_server(ws) == (code, reason)


def test_starlette_query_params_and_headers(star):
    path = "/ws/echo?q=a%26b%3Dc&tag=x&tag=y%20z"
    with ws_connect(star.port, path, additional_headers={"X-Test": "value 1"}) as ws:
        ws.send("info")
        assert json.loads(ws.recv(timeout=WAIT)) == {
            "q": "a&b=c", "tags": ["x", "y z"], "x_test": "value 1", "path": "/ws/echo", "scheme": "ws",
        }


def test_starlette_path_convertor_and_unknown_route(star):
    with ws_connect(star.port, "/ws/items/42") as ws:
        assert json.loads(ws.recv(timeout=WAIT)) == {"item_id": 42}
        assert closed_by_server(ws) == (1000, "")
    assert refused_status(star.port, "/ws/items/not-an-int") == 403  # no route: closed before accept
    assert refused_status(star.port, "/deny") == 403


def test_starlette_websocket_endpoint_json(star):
    with ws_connect(star.port, "/ws/json") as ws:
        ws.send('{"a": [1, 2]}')
        assert json.loads(ws.recv(timeout=WAIT)) == {"got": {"a": [1, 2]}}
        ws.send(b'{"b": null}')  # encoding="json" takes bytes too
        assert json.loads(ws.recv(timeout=WAIT)) == {"got": {"b": None}}
    wait_disconnect(star.probe, 1000)


def test_starlette_client_close_code_reaches_the_app(star):
    with ws_connect(star.port, "/ws/echo") as ws:
        ws.send("x")
        assert ws.recv(timeout=WAIT) == "x"
        ws.close(code=4999, reason="client leaving")
    wait_disconnect(star.probe, 4999)


# -- FastAPI ------------------------------------------------------------------------------

def test_fastapi_echo_and_subprotocol(fast):
    with ws_connect(fast.port, "/ws/echo", subprotocols=["echo.v1"]) as ws:
        assert ws.subprotocol == "echo.v1"
        assert negotiated_extensions(ws).startswith("permessage-deflate")
        echo_round_trips(ws)
    wait_disconnect(fast.probe, 1000)


def test_fastapi_close_with_code_and_reason(fast):
    with ws_connect(fast.port, "/ws/echo") as ws:
        ws.send("close")
        assert closed_by_server(ws) == (4000, "fastapi says bye")


def test_fastapi_query_and_header_parameters(fast):
    with ws_connect(fast.port, "/ws/echo?q=caf%C3%A9", additional_headers={"X-Test": "from header"}) as ws:
        ws.send("info")
        assert json.loads(ws.recv(timeout=WAIT)) == {"q": "café", "x_test": "from header"}


def test_fastapi_path_query_header_and_dependency(fast):
    path = "/ws/items/7?token=secret&q=hello%20there"
    with ws_connect(fast.port, path, additional_headers={"X-Test": "h"}) as ws:
        assert json.loads(ws.recv(timeout=WAIT)) == {"item_id": 7, "q": "hello there", "x_test": "h"}
        assert closed_by_server(ws) == (1000, "")


def test_fastapi_dependency_raising_websocket_exception_denies_the_handshake(fast):
    # WebSocketException before accept: Starlette sends websocket.close, which the server turns
    # into an HTTP 403 refusal of the upgrade.
    assert refused_status(fast.port, "/ws/items/7") == 403
    assert refused_status(fast.port, "/ws/items/7?token=wrong") == 403
    assert refused_status(fast.port, "/ws/items/not-an-int?token=secret") == 403  # validation
    with ws_connect(fast.port, "/ws/items/8?token=secret") as ws:  # the server is still fine
        assert json.loads(ws.recv(timeout=WAIT)) == {"item_id": 8, "q": "none", "x_test": None}


# -- Django Channels ----------------------------------------------------------------------

def test_channels_echo_and_subprotocol(chan):
    with ws_connect(chan.port, "/ws/echo/lobby/", subprotocols=["other", "echo.v1"]) as ws:
        assert ws.subprotocol == "echo.v1"
        assert negotiated_extensions(ws).startswith("permessage-deflate")
        echo_round_trips(ws)
    wait_disconnect(chan.probe, 1000)


def test_channels_url_route_query_and_headers(chan):
    with ws_connect(chan.port, "/ws/echo/r%C3%A9d/?a=1&a=2", additional_headers={"X-Test": "chan"}) as ws:
        assert ws.subprotocol is None
        ws.send("info")
        assert json.loads(ws.recv(timeout=WAIT)) == {
            "room": "réd", "query": {"a": ["1", "2"]}, "x_test": "chan", "path": "/ws/echo/réd/",
        }


def test_channels_close_with_code_and_reason(chan):
    with ws_connect(chan.port, "/ws/echo/x/") as ws:
        ws.send("close")
        assert closed_by_server(ws) == (4001, "channels says bye")


def test_channels_consumer_denies_in_connect(chan):
    assert refused_status(chan.port, "/ws/echo/x/?deny=1") == 403
    with ws_connect(chan.port, "/ws/echo/x/") as ws:
        ws.send(b"\x00\xff")
        assert ws.recv(timeout=WAIT) == b"\x00\xff"


def test_channels_router_still_serves_django_http(chan):
    with client_for(chan) as client:
        assert client.get("/hello", params={"name": "channels"}).text == "hello channels"
