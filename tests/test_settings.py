"""The settings table (swordfish/server/settings.py) against what it feeds: the command line
and its SWORDFISH_* variables, Config, a supervisor's worker command line and environment,
`swordfish.serve()` and the options table of docs/server.md."""

import dataclasses
import os
import pathlib

import pytest

import swordfish
from swordfish.server import Config, settings
from swordfish.server.cli import build_parser, config_from, worker_argv, worker_env
from swordfish.server.settings import SETTINGS

SERVER_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "server.md"
BY_NAME = {s.name: s for s in SETTINGS}

# Every setting: command line arguments that give it a value other than its default, and
# that value (Config's). A setting added to the table without an example here fails
# test_every_setting_has_an_example.
EXAMPLES = {
    "host": (["--host", "0.0.0.0"], "0.0.0.0"),
    "port": (["--port", "9001"], 9001),
    "uds": (["--uds", "/run/app.sock"], "/run/app.sock"),
    "fd": (["--fd", "7"], 7),
    "factory": (["--factory"], True),
    "interface": (["--interface", "wsgi"], "wsgi"),
    "threads": (["--threads", "3"], 3),
    "wsgi_engine": (["--wsgi-engine", "threads"], "threads"),
    "env_file": (["--env-file", "app.env"], "app.env"),
    "pid_file": (["--pid-file", "/run/app.pid"], "/run/app.pid"),
    "app_dir": (["--app-dir", "src"], "src"),
    "root_path": (["--root-path", "/api v1"], "/api v1"),
    "lifespan": (["--lifespan", "on"], "on"),
    "loop": (["--loop", "asyncio"], "asyncio"),
    "http": (["--http", "2"], "2"),
    "http2_max_concurrent_streams": (["--http2-max-concurrent-streams", "50"], 50),
    "http2_initial_stream_window_size": (["--http2-initial-stream-window-size", "65535"], 65535),
    "http2_initial_connection_window_size": (["--http2-initial-connection-window-size", "4194304"], 4194304),
    "http2_max_frame_size": (["--http2-max-frame-size", "65536"], 65536),
    "http2_max_headers_size": (["--http2-max-headers-size", "16384"], 16384),
    "http2_max_send_buffer_size": (["--http2-max-send-buffer-size", "65536"], 65536),
    "http2_keep_alive_interval": (["--http2-keep-alive-interval", "30"], 30.0),
    "http2_keep_alive_timeout": (["--http2-keep-alive-timeout", "5"], 5.0),
    "http2_stall_timeout": (["--http2-stall-timeout", "off"], None),
    "access_log": (["--no-access-log"], False),
    "access_log_format": (["--access-log-format", '%(h)s "%(r)s" %(s)s'], '%(h)s "%(r)s" %(s)s'),
    "log_level": (["--log-level", "debug"], "debug"),
    "log_config": (["--log-config", "logging.yaml"], "logging.yaml"),
    "backlog": (["--backlog", "0"], 0),
    "limit_concurrency": (["--limit-concurrency", "10"], 10),
    "limit_request_line": (["--limit-request-line", "100"], 100),
    "limit_header_size": (["--limit-header-size", "2000"], 2000),
    "limit_request_field_size": (["--limit-request-field-size", "100"], 100),
    "limit_header_count": (["--limit-header-count", "5"], 5),
    "limit_body_size": (["--limit-body-size", "0"], 0),
    "timeout_header_read": (["--timeout-header-read", "0.5"], 0.5),
    "timeout_keep_alive": (["--timeout-keep-alive", "0"], 0.0),
    "timeout_graceful_shutdown": (["--timeout-graceful-shutdown", "inf"], None),
    "server_header": (["--no-server-header"], False),
    "date_header": (["--no-date-header"], False),
    "headers": (["--header", "x-a: 1;2", "--header", "x-b: c:d"], ["x-a: 1;2", "x-b: c:d"]),
    "static_path_dir": (["--static-path-dir", "."], "."),
    "static_path_route": (["--static-path-route", "/assets/"], "/assets"),
    "static_path_expires": (["--static-path-expires", "none"], None),
    "proxy_headers": (["--proxy-headers"], True),
    "forwarded_allow_ips": (["--forwarded-allow-ips", "10.0.0.0/8,unix:"], "10.0.0.0/8,unix:"),
    "proxy_protocol": (["--proxy-protocol"], True),
    "max_requests": (["--max-requests", "1000"], 1000),
    "max_requests_jitter": (["--max-requests-jitter", "50"], 50),
    "timeout_worker_healthcheck": (["--timeout-worker-healthcheck", "none"], None),
    "workers_max_rss": (["--workers-max-rss", "512"], 512),
    "workers": (["--workers", "3"], 3),
    "worker_cpu_affinity": (["--worker-cpu-affinity", "off"], "off"),
    "metrics": (["--metrics"], True),
    "metrics_address": (["--metrics-address", "0.0.0.0"], "0.0.0.0"),
    "metrics_port": (["--metrics-port", "9100"], 9100),
    "ssl_certfile": (["--ssl-certfile", "cert.pem"], "cert.pem"),
    "ssl_keyfile": (["--ssl-keyfile", "key.pem"], "key.pem"),
    "ssl_keyfile_password": (["--ssl-keyfile-password", "s3cret"], "s3cret"),
    "ssl_ca_certs": (["--ssl-ca-certs", "ca.pem"], "ca.pem"),
    "ssl_cert_reqs": (["--ssl-cert-reqs", "required"], "required"),
    "ssl_ciphers": (["--ssl-ciphers", "ECDHE+AESGCM"], "ECDHE+AESGCM"),
    "ssl_engine": (["--ssl-engine", "openssl"], "openssl"),
    "reload": (["--reload"], True),
    "reload_dirs": (["--reload-dir", "a", "--reload-dir", "b"], ["a", "b"]),
    "reload_includes": (["--reload-include", "*.html"], ["*.html"]),
    "reload_excludes": (["--reload-exclude", "gen_*"], ["gen_*"]),
    "reload_delay": (["--reload-delay", "1.5"], 1.5),
    "ws": (["--ws", "none"], "none"),
    "ws_max_size": (["--ws-max-size", "1"], 1),
    "ws_max_queue": (["--ws-max-queue", "4"], 4),
    "ws_ping_interval": (["--ws-ping-interval", "none"], None),
    "ws_ping_timeout": (["--ws-ping-timeout", "2.5"], 2.5),
    "ws_per_message_deflate": (["--no-ws-per-message-deflate"], False),
}


@pytest.fixture(autouse=True)
def no_swordfish_variables(monkeypatch):
    for name in list(os.environ):
        if name.startswith("SWORDFISH_"):
            monkeypatch.delenv(name)


def config_of(argv):
    """Config from a `serve ...` command line, as cli.main makes it."""
    return config_from(build_parser(), argv)[0]


def test_every_setting_has_an_example():
    assert list(EXAMPLES) == [s.name for s in SETTINGS]
    for name, (_, value) in EXAMPLES.items():
        assert value != BY_NAME[name].default, name


def test_config_fields_are_the_settings_with_their_defaults():
    fields = [f for f in dataclasses.fields(Config) if f.init]
    assert [f.name for f in fields] == ["app"] + [s.name for s in SETTINGS]
    config = Config("m:app")
    for s in SETTINGS:
        assert getattr(config, s.name) == s.default, s.name
    assert Config("m:app").headers is not config.headers  # a list each
    assert dataclasses.replace(config, ws_max_queue=8) == Config("m:app", ws_max_queue=8)


def test_command_line_defaults_are_the_table_s():
    args = vars(build_parser().parse_args(["serve", "m:app"]))
    for s in SETTINGS:
        assert args[s.name] == s.cli_default, s.name
    # The one setting whose command line default differs: the CLI looks in the current directory.
    assert config_of(["serve", "m:app"]) == Config("m:app", app_dir=".")


# Settings whose example does not go with the others' (--proxy-protocol refuses TLS): the
# test of them all leaves them out, and they go alone.
ALONE = {"proxy_protocol"}


@pytest.mark.parametrize("name", sorted(ALONE))
def test_settings_that_go_alone_reach_the_workers(name):
    config = config_of(["serve", "m:app"] + EXAMPLES[name][0])
    assert getattr(config, name) == EXAMPLES[name][1]
    assert getattr(config_of(worker_argv(config)), name) == EXAMPLES[name][1]


def test_every_setting_goes_from_the_command_line_to_the_workers_and_back(monkeypatch):
    argv = ["serve", "m:app"] + [arg for name, (args, _) in EXAMPLES.items() if name not in ALONE for arg in args]
    config = config_of(argv)
    for name, (_, value) in EXAMPLES.items():
        assert getattr(config, name) == (BY_NAME[name].default if name in ALONE else value), name

    to_workers = worker_argv(config)
    assert "--ws-ping-interval=none" in to_workers and "--timeout-graceful-shutdown=inf" in to_workers
    assert "--no-ws-per-message-deflate" in to_workers and "--ws=none" in to_workers
    assert not any("s3cret" in arg or "reload" in arg for arg in to_workers)
    env = worker_env(config)
    assert env == {"SWORDFISH_SSL_KEYFILE_PASSWORD": "s3cret"}
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    worker = config_of(to_workers)
    for s in SETTINGS:
        expected = s.default if s.supervisor_only or s.name in ALONE else EXAMPLES[s.name][1]
        assert getattr(worker, s.name) == expected, s.name


def test_defaults_go_to_the_workers_unchanged():
    config = Config("m:app", app_dir=".")
    assert config_of(worker_argv(config)) == config
    assert worker_env(config) == {}


# Each setting's SWORDFISH_* variable: its text and the value it gives.
ENV_TEXTS = {
    **{name: (args[1], value) for name, (args, value) in EXAMPLES.items() if len(args) == 2},
    "factory": ("yes", True), "access_log": ("0", False), "server_header": ("off", False),
    "date_header": ("false", False), "proxy_headers": (" TRUE ", True), "reload": ("1", True),
    "ws_per_message_deflate": ("no", False), "metrics": ("on", True),
    "proxy_protocol": ("off", False),  # on would refuse the TLS examples
    "headers": ("x-a: 1;;x-b: 2;", ["x-a: 1", "x-b: 2"]), "reload_dirs": ("a;b", ["a", "b"]),
}


def test_every_setting_can_come_from_its_variable(monkeypatch):
    assert set(ENV_TEXTS) == set(BY_NAME)
    assert BY_NAME["headers"].env == "SWORDFISH_HEADER" and BY_NAME["ws_max_size"].env == "SWORDFISH_WS_MAX_SIZE"
    monkeypatch.setenv("SWORDFISH_APP", "m:app")
    for name, (text, _) in ENV_TEXTS.items():
        monkeypatch.setenv(BY_NAME[name].env, text)
    config = config_of(["serve"])
    assert config.app == "m:app"
    for name, (_, value) in ENV_TEXTS.items():
        assert getattr(config, name) == value, name
    # The command line wins over a variable, and adds to a variable's list.
    config = config_of(["serve", "--ws-max-queue", "9", "--ws-per-message-deflate", "--header", "x-c: 3"])
    assert config.ws_max_queue == 9 and config.ws_per_message_deflate is True
    assert config.headers == ["x-a: 1", "x-b: 2", "x-c: 3"]


def test_invalid_variables_are_reported_together(monkeypatch, capsys):
    monkeypatch.setenv("SWORDFISH_WS_MAX_SIZE", "0")
    monkeypatch.setenv("SWORDFISH_WS", "yes")
    monkeypatch.setenv("SWORDFISH_WS_PING_TIMEOUT", "soon")
    with pytest.raises(SystemExit) as exit_:
        build_parser()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    for message in ["SWORDFISH_WS_MAX_SIZE: must be at least 1, not 0",
                    "SWORDFISH_WS: invalid choice: 'yes' (choose from auto, none)",
                    "SWORDFISH_WS_PING_TIMEOUT: invalid float value: 'soon'"]:
        assert message in err, err


@pytest.mark.parametrize("options,message", [
    ({"ws": "websockets"}, "ws must be one of auto, none, not 'websockets'"),
    ({"ws_max_size": 0}, "ws_max_size must be at least 1, not 0"),
    ({"ws_max_queue": -3}, "ws_max_queue must be at least 1, not -3"),
    ({"ws_ping_interval": 0}, "ws_ping_interval must be more than 0, not 0"),
    ({"ws_ping_timeout": float("nan")}, "ws_ping_timeout must be more than 0, not nan"),
    ({"lifespan": "maybe"}, "lifespan must be one of auto, on, off, not 'maybe'"),
    ({"loop": "trio"}, "loop must be one of swordfish, asyncio, uvloop, not 'trio'"),
    ({"log_level": "loud"}, "log_level must be one of critical, error, warning, info, debug, not 'loud'"),
    ({"port": 65536}, "port must be at least 0 and at most 65535, not 65536"),
    ({"timeout_keep_alive": -0.5}, "timeout_keep_alive must be at least 0, not -0.5"),
])
def test_config_refuses_values_out_of_bounds_or_choices(options, message):
    with pytest.raises(ValueError) as exc:
        Config("m:app", **options)
    assert str(exc.value) == message


@pytest.mark.parametrize("args,message", [
    (["--ws", "off"], "argument --ws: invalid choice: 'off'"),
    (["--ws-max-size", "0"], "argument --ws-max-size: must be at least 1, not 0"),
    (["--ws-max-queue", "1.5"], "argument --ws-max-queue: invalid int value: '1.5'"),
    (["--ws-ping-interval", "0"], "argument --ws-ping-interval: must be more than 0, not 0.0"),
    (["--ws-ping-timeout", "-1"], "argument --ws-ping-timeout: must be more than 0, not -1.0"),
    (["--timeout-graceful-shutdown", "none"], "argument --timeout-graceful-shutdown: invalid float value: 'none'"),
])
def test_command_line_refuses_values_out_of_bounds_or_choices(args, message, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "m:app", *args])
    err = capsys.readouterr().err
    assert f"error: {message}" in err, err


def test_inf_means_none_where_a_number_may_be_none():
    config = Config("m:app", ws_ping_interval=float("inf"), ws_ping_timeout=None,
                    timeout_graceful_shutdown=float("inf"))
    assert config.ws_ping_interval is None and config.ws_ping_timeout is None
    assert config.timeout_graceful_shutdown is None
    assert config_of(["serve", "m:app", "--ws-ping-timeout", "Infinity"]).ws_ping_timeout is None
    with pytest.raises(ValueError, match="limit_body_size must be at least 0, not -inf"):
        Config("m:app", limit_body_size=float("-inf"))


def test_serve_takes_the_settings():
    with pytest.raises(ValueError, match="ws_max_queue must be at least 1, not 0"):
        swordfish.serve("m:app", ws_max_queue=0)
    with pytest.raises(TypeError, match="ws_queue"):
        swordfish.serve("m:app", ws_queue=1)
    with pytest.raises(ValueError, match="port must be at least 0 and at most 65535, not 70000"):
        swordfish.serve("m:app", "127.0.0.1", 70000)  # host and port by position, as before


def test_help_shows_every_option():
    helptext = " ".join(build_parser().serve.format_help().split())
    for s in SETTINGS:
        assert s.flag in helptext, s.name
        if s.kind is bool:
            assert f"--no-{s.flag[2:]}" in helptext, s.name
    assert "--ws-max-size N largest WebSocket message in bytes (then close 1009) (default: 16777216)" in helptext


def test_the_options_table_is_the_rendered_one():
    readme = SERVER_DOC.read_text(encoding="utf-8")
    assert settings.with_table(readme) == readme, (
        "the settings table of docs/server.md is out of date: python -m swordfish.server.settings --update docs/server.md")


def test_the_table_has_a_row_per_setting():
    rows = settings.markdown_table().splitlines()[2:]
    assert len(rows) == len(SETTINGS)
    cells = {row.split(" | ")[1]: row.split(" | ") for row in rows}
    assert cells["`ws_ping_interval`"][:4] == [
        "| `--ws-ping-interval SECONDS`", "`ws_ping_interval`", "`SWORDFISH_WS_PING_INTERVAL`", "`20.0`"]
    assert cells["`ws_per_message_deflate`"][0] == "| `--ws-per-message-deflate`, `--no-ws-per-message-deflate`"
    assert cells["`ws`"][0] == "| `--ws auto\\|none`" and cells["`app_dir`"][3] == "`.`"
    assert "repeatable" in cells["`headers`"][4] and "\\*.py" in cells["`reload_includes`"][4]
    with pytest.raises(ValueError, match="markers"):
        settings.with_table("no table here")
