"""`--reload`: the files watched (FileWatch), and the supervisor replacing its workers when
one changes: no request fails across a reload (of an ASGI and of a WSGI app), a change that
breaks the app leaves the old code serving until the next change, and the options reach the
supervisor only.

Waits are on log lines and responses (see test_http_workers.Served), with deadlines."""

import os
import threading
import time

import pytest

from swordfish.server import Config
from swordfish.server.reload import FileWatch
from test_http_workers import Served, get

pytestmark = pytest.mark.timeout(120)

APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    await send({{"type": "http.response.body", "body": {body!r}}})
"""

WSGI_APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Length", str(len({body!r})))])
    return [{body!r}]
"""


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def serve_reloading(tmp_path, module, text):
    """`swordfish serve MODULE:app --reload` in tmp_path, whose MODULE.py holds text: (the
    server, MODULE.py)."""
    path = tmp_path / f"{module}.py"
    write(path, text)
    srv = Served(f"{module}:app", "--app-dir", str(tmp_path), "--port", "0", "--reload", "--no-access-log",
                 "--reload-delay", "0.05", app=None)
    return srv, path


def bump(path, ns):
    """Give path a modification time of its own (a rewrite within the clock's tick keeps it)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + ns))


def test_file_watch_sees_the_files_it_should(tmp_path):
    for name in ["a.py", "notes.txt", "sub/b.py", "sub/skip_me.py", ".hidden/c.py", "__pycache__/d.py",
                 "node_modules/e.py", "venv/lib/f.py", ".git/g.py", "h.pyc", "i.py~"]:
        write(tmp_path / name, "x = 1\n")
    write(tmp_path / "venv" / "pyvenv.cfg", "home = /usr\n")
    watch = FileWatch([tmp_path], excludes=["skip_*"])
    assert sorted(os.path.relpath(p, tmp_path) for p in watch.files) == ["a.py", os.path.join("sub", "b.py")]
    assert watch.changes() == []

    bump(tmp_path / "a.py", 10**9)
    write(tmp_path / "sub" / "new.py", "")
    (tmp_path / "sub" / "b.py").unlink()
    bump(tmp_path / "notes.txt", 10**9)  # not watched
    bump(tmp_path / "venv" / "lib" / "f.py", 10**9)  # in a virtual environment
    assert watch.changes() == sorted(str(tmp_path / p) for p in ["a.py", "sub/b.py", "sub/new.py"])
    assert watch.changes() == []

    # A rewrite that leaves the modification time as it was (two edits within one tick of a
    # coarse clock) is still seen when the size changed.
    path = tmp_path / "a.py"
    st = os.stat(path)
    path.write_text("x = 22\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert watch.changes() == [str(path)]

    texts = FileWatch([tmp_path / "sub"], includes=["*.txt", "*.py"])
    write(tmp_path / "sub" / "readme.txt", "")
    assert texts.changes() == [str(tmp_path / "sub" / "readme.txt")]


def test_reload_options_stay_with_the_supervisor():
    from swordfish.server.cli import build_parser, worker_argv

    config = Config("m:app", reload=True, reload_dirs=["src", "lib"], reload_includes=["*.html"],
                    reload_excludes=["gen_*"], reload_delay=0.5)
    argv = worker_argv(config)
    assert not any("reload" in a for a in argv)
    args = vars(build_parser().parse_args(argv))
    assert args["reload"] is False and args["reload_dirs"] == []
    args = vars(build_parser().parse_args(
        ["serve", "m:app", "--reload", "--reload-dir", "src", "--reload-dir", "lib", "--reload-delay", "0.5"]))
    assert args["reload"] and args["reload_dirs"] == ["src", "lib"] and args["reload_delay"] == 0.5
    with pytest.raises(ValueError, match="reload_delay must be more than 0"):
        Config("m:app", reload=True, reload_delay=0)
    with pytest.raises(ValueError, match="need the app as 'module:attribute'"):
        worker_argv(Config(lambda: None, reload=True))


@pytest.mark.parametrize("template", [APP, WSGI_APP], ids=["asgi", "wsgi"])
def test_reload_replaces_the_worker_without_failing_a_request(tmp_path, template):
    srv, path = serve_reloading(tmp_path, "reloaded", template.format(body=b"v1"))
    with srv:
        addr = srv.port()
        srv.wait_line(r"serving on ")
        assert get(addr, "/") == (200, b"v1")

        # Requests keep going while the worker is replaced: every one is answered.
        bodies, errors, stop = [], [], threading.Event()

        def client():
            while not stop.is_set():
                try:
                    bodies.append(get(addr, "/"))
                except OSError as exc:
                    errors.append(exc)

        thread = threading.Thread(target=client)
        thread.start()
        try:
            write(path, template.format(body=b"v2"))
            bump(path, 10**9)
            _, at = srv.wait_line(r"changed: .*reloaded\.py: reloading")
            srv.wait_line(r"worker \d+ listens: retiring worker \d+", start=at)
            while (200, b"v2") not in bodies[-1:]:
                assert thread.is_alive() and not errors, errors
                bodies.append(get(addr, "/"))
        finally:
            stop.set()
            thread.join(30)
        assert not errors, errors
        assert set(bodies) <= {(200, b"v1"), (200, b"v2")}
        assert srv.stop() == 0, srv.log()


def test_a_change_that_breaks_the_app_leaves_the_old_code_serving(tmp_path):
    srv, path = serve_reloading(tmp_path, "fragile", APP.format(body=b"good"))
    with srv:
        addr = srv.port()
        srv.wait_line(r"serving on ")
        write(path, "async def app(scope, receive, send):\n    return (\n")
        bump(path, 10**9)
        _, at = srv.wait_line(r"exited with 2 before it started: waiting for a change")
        assert get(addr, "/") == (200, b"good")
        write(path, APP.format(body=b"fixed"))
        bump(path, 2 * 10**9)
        srv.wait_line(r"worker \d+ listens: retiring worker \d+", start=at)
        # The old worker answers until it has closed its socket: then only the new one.
        deadline = time.monotonic() + 30
        answer = get(addr, "/")
        while answer != (200, b"fixed"):
            assert answer == (200, b"good") and time.monotonic() < deadline, answer
            answer = get(addr, "/")
        assert srv.stop() == 0, srv.log()


def test_reload_with_an_app_that_never_started(tmp_path):
    # Broken from the start: the supervisor waits for a fix instead of exiting.
    srv, path = serve_reloading(tmp_path, "broken", "raise RuntimeError('not yet')\n")
    with srv:
        addr = srv.port()
        _, at = srv.wait_line(r"exited with 2 before it started: waiting for a change")
        write(path, APP.format(body=b"now"))
        bump(path, 10**9)
        srv.wait_line(r"serving on ", start=at)
        assert get(addr, "/") == (200, b"now")
        assert srv.stop() == 0, srv.log()
