"""`--access-log-format` (gunicorn's atoms, for ASGI and WSGI requests and for input
refused before it made one) and `--log-config` (a dictConfig in JSON or YAML, a fileConfig
INI), in real `swordfish serve` processes over real sockets."""

import json
import logging
import textwrap

import pytest

from apps.serving import ServeProcess, exchange, get
from swordfish.server.logs import _Atoms, access_logger_for, check_format

FORMAT = ('%(h)s %(l)s %(u)s "%(r)s" %(s)s %(B)s %(b)s "%(f)s" "%(a)s" %({X-Request-Id}i)s '
          '%(m)s %(U)s %(q)s %(H)s %(p)s %(M)s %(nonsense)s')
HEADERS = (b"Referer: http://example.com/from\r\nUser-Agent: probe/1.0\r\nX-Request-ID: abc-123\r\n"
           b"Authorization: Basic dXNlcjpwYXNz\r\n")  # user:pass


@pytest.mark.parametrize("app,path", [("apps.env_app:app", "/PATH"), ("apps.wsgi_app:app", "/pid")])
def test_access_log_format_for_each_interface(app, path):
    srv = ServeProcess("--port", "0", "--access-log-format", FORMAT, app=app)
    try:
        port = srv.port()
        status, body = exchange(port, b"GET " + path.encode() + b"?a=1 HTTP/1.1\r\nHost: t\r\n" + HEADERS
                                + b"Connection: close\r\n\r\n")
        assert status == 200
        pid = srv.proc.pid
        m, _ = srv.wait_line(r"INFO 127\.0\.0\.1 .*")
        line = m.group(0)
        want = (f'INFO 127.0.0.1 - user "GET {path}?a=1 HTTP/1.1" 200 {len(body)} {len(body)} '
                f'"http://example.com/from" "probe/1.0" abc-123 GET {path} a=1 HTTP/1.1 <{pid}> ')
        assert line.startswith(want), line
        ms, nonsense = line[len(want):].split(" ")
        assert int(ms) >= 0 and nonsense == "-"  # an unknown atom is '-', as gunicorn has it
    finally:
        assert srv.stop() == 0, srv.log()


def test_access_log_format_for_refused_input():
    srv = ServeProcess("--port", "0", "--access-log-format", '%(h)s "%(r)s" %(s)s %(a)s', app="apps.env_app:app")
    try:
        port = srv.port()
        status, _ = exchange(port, b"GET / HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n")
        assert status == 400
        srv.wait_line(r'^INFO 127\.0\.0\.1 "-" 400 -$')
    finally:
        srv.stop()


@pytest.mark.parametrize("fmt", ["%(h)", "%(h)d", "%(h)s %"])
def test_invalid_access_log_format_is_refused_at_start(fmt):
    srv = ServeProcess("--port", "0", "--access-log-format", fmt, app="apps.env_app:app")
    assert srv.wait() == 2
    assert "invalid access log format" in srv.log()


def test_atoms_without_a_request():
    assert _Atoms(None, 503, 0, 0.25, ("10.0.0.1", 5)).__getitem__("h") == "10.0.0.1"
    assert check_format("%(D)s") == "%(D)s"
    assert "%(D)s" % _Atoms(None, 200, 0, 0.25, None) == "250000"


def test_default_format_unchanged(caplog):
    log = access_logger_for(None)
    with caplog.at_level(logging.INFO, logger="swordfish.access"):
        log({"client": ("1.2.3.4", 9), "method": "POST", "raw_path": b"/p", "query_string": b"",
             "http_version": "1.1"}, 201, 5, 0.0015)
    assert caplog.messages == ['1.2.3.4:9 - "POST /p HTTP/1.1" 201 5 1.5ms']


def _dict_config(log_file):
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "ACCESS %(message)s"}, "console": {"format": "%(levelname)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "plain"},
                     "console": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "console"}},
        "loggers": {"swordfish.access": {"handlers": ["file"], "level": "INFO", "propagate": False},
                    "swordfish.error": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    }


def _json(tmp_path, log_file):
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(_dict_config(log_file)))
    return path


def _yaml(tmp_path, log_file):
    import yaml
    path = tmp_path / "logging.yaml"
    path.write_text(yaml.safe_dump(_dict_config(log_file)))
    return path


def _ini(tmp_path, log_file):
    path = tmp_path / "logging.ini"
    path.write_text(textwrap.dedent(f"""\
        [loggers]
        keys=root,access,error

        [handlers]
        keys=file,console

        [formatters]
        keys=plain,console

        [logger_root]
        level=WARNING
        handlers=

        [logger_access]
        level=INFO
        handlers=file
        propagate=0
        qualname=swordfish.access

        [logger_error]
        level=INFO
        handlers=console
        propagate=0
        qualname=swordfish.error

        [handler_file]
        class=FileHandler
        args=({str(log_file)!r},)
        formatter=plain

        [handler_console]
        class=StreamHandler
        args=(sys.stderr,)
        formatter=console

        [formatter_plain]
        format=ACCESS %(message)s

        [formatter_console]
        format=%(levelname)s %(message)s
        """))
    return path


@pytest.mark.parametrize("make", [_json, _yaml, _ini], ids=["json", "yaml", "ini"])
def test_log_config_file(tmp_path, make):
    log_file = tmp_path / "access.log"
    srv = ServeProcess("--port", "0", "--log-config", str(make(tmp_path, log_file)), app="apps.env_app:app")
    try:
        port = srv.port()
        assert get(port, "/PATH")[0] == 200
    finally:
        assert srv.stop() == 0, srv.log()
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith('ACCESS 127.0.0.1:') and '"GET /PATH HTTP/1.1" 200' in lines[0]
    assert "ACCESS" not in srv.log()  # the file's handler, not swordfish's own setup


@pytest.mark.parametrize("content,name,why", [
    (None, "missing.json", "no such file"),
    ("{not json", "bad.json", "Expecting property name"),
    ("[loggers]\nkeys=nothere\n", "bad.ini", ""),
])
def test_bad_log_config_is_a_clear_error(tmp_path, content, name, why):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    srv = ServeProcess("--port", "0", "--log-config", str(path), app="apps.env_app:app")
    assert srv.wait() == 2
    assert f"cannot configure logging from {str(path)!r}: {why}" in srv.log()
