"""WebSockets with a real browser: headless Chromium (Debian's `chromium`) loads a page that
swordfish serves, opens a WebSocket back to it and exchanges text and binary messages of several
sizes; the page checks the echoes and sends its findings over the WebSocket (see
tests/apps/ws_browser_app.py). The test waits for the app to hear the outcome, with a deadline.

Chromium always offers permessage-deflate, so the test also shows the server negotiating it with a
client that is not Python. Over https the page comes over HTTP/2 and Chromium opens the WebSocket
as an HTTP/2 stream (RFC 8441); over http both are HTTP/1.1. Without chromium the test is skipped, unless CI is set: then it fails
(tools/install-test-deps.sh installs it)."""

import os
import shutil
import signal
import subprocess

import pytest

from apps import ws_browser_app
from apps.serving import ThreadServer
from netutil import tls_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)

BROWSER_WAIT = 60.0  # seconds for Chromium to start, load the page and run every case (2 busy cores)


def chromium_binary():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if "CI" in os.environ:
            pytest.fail("chromium is not installed, and CI is set: tools/install-test-deps.sh installs it",
                        pytrace=False)
        pytest.skip("chromium is not installed (tools/install-test-deps.sh installs it, as root); "
                    "with CI set, this test fails instead")
    return path


class Chromium:
    """Headless Chromium showing url, in a process group of its own (its zygote and renderer
    processes go with it), its output kept in a file for failure messages."""

    def __init__(self, binary, url, workdir, insecure=False):
        self.log_path = workdir / "chromium.log"
        profile = workdir / "profile"
        profile.mkdir()
        cmd = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}",
            # A debugging port keeps the browser running after the page has loaded (it is never
            # used; 0 picks a free one); no proxy, whatever the environment says.
            "--remote-debugging-port=0", "--no-proxy-server",
        ]
        if insecure:
            cmd.append("--ignore-certificate-errors")  # the test's self-signed certificate
        cmd.append(url)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self, tail=3000):
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def close(self):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)  # the group this test started, by its id
            except ProcessLookupError:
                break
            try:
                self.proc.wait(10)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.proc.poll() is None:
            self.proc.wait(10)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_chromium_exchanges_messages_over_a_websocket(scheme, tmp_path, request):
    binary = chromium_binary()
    probe = ws_browser_app.BrowserProbe()
    options = {}
    if scheme == "https":
        cert, key = request.getfixturevalue("tls_files")
        options = {"ssl_certfile": cert, "ssl_keyfile": key}
    with ThreadServer(ws_browser_app.create_app(probe), **options) as server:
        browser = Chromium(binary, f"{scheme}://127.0.0.1:{server.port}/", tmp_path, insecure=scheme == "https")
        try:
            finished = probe.wait_finished(BROWSER_WAIT)
            exited = browser.proc.poll()
        finally:
            browser.close()
    context = f"\nthe page: closed={probe.closed} js_errors={probe.js_errors}\nchromium:\n{browser.output()}"
    assert finished, f"the page did not finish within {BROWSER_WAIT}s (chromium exit: {exited}){context}"
    assert not probe.js_errors, context
    assert probe.report is not None, "the page closed before it reported" + context

    report = probe.report
    assert report["errors"] == [], context
    # permessage-deflate: Chromium offers it; the server must accept it.
    assert report["extensions"].split(";")[0].strip() == "permessage-deflate", report["extensions"]
    assert report["protocol"] == ws_browser_app.CHOSEN

    # Server to browser: every echo came back whole and of the right type (checked by the page).
    cases = ws_browser_app.CASES
    assert len(report["results"]) == len(cases)
    for case, result in zip(cases, report["results"]):
        kind, size, _ = case
        want_type = "text" if kind == "text" else "binary"
        assert (result["kind"], result["size"]) == (kind, size)
        assert (result["type"], result["length"], result["same"]) == (want_type, size, True), result

    # Browser to server: the app got each case exactly as the page made it.
    assert probe.received == [ws_browser_app.digest(ws_browser_app.expected(*c)) for c in cases]

    # The app's close reached the page through a clean closing handshake.
    assert probe.closed == {"code": 1000, "reason": "done", "wasClean": True, "reported": True}, context

    scope = probe.scope
    # Over TLS, ALPN gives the page HTTP/2, and Chromium opens the WebSocket on the same
    # connection as an extended CONNECT (RFC 8441), since the server's SETTINGS allow it.
    want = "2" if scheme == "https" else "1.1"
    assert (probe.page_http_version, scope["http_version"]) == (want, want)
    assert scope["type"] == "websocket" and scope["path"] == "/ws" and scope["query_string"] == b"from=browser"
    assert scope["scheme"] == ("wss" if scheme == "https" else "ws")
    assert scope["subprotocols"] == ws_browser_app.SUBPROTOCOLS
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    assert headers["origin"] == f"{scheme}://127.0.0.1:{server.port}"
    assert "permessage-deflate" in headers["sec-websocket-extensions"]
