"""`swordfish serve module:app` (also `python -m swordfish serve`). Every option can also
come from a `SWORDFISH_<OPTION>` environment variable (e.g. `SWORDFISH_PORT=9000`)."""

import argparse
import logging
import os
import sys

from .config import Config
from .server import run

# (option, type, default, help); a bool option gets --x/--no-x.
OPTIONS = [
    ("host", str, "127.0.0.1", "bind to this address"),
    ("port", int, 8000, "bind to this TCP port"),
    ("uds", str, None, "bind to this Unix socket path"),
    ("fd", int, None, "serve on this inherited, already-listening socket descriptor"),
    ("workers", int, 1, "worker processes sharing the listening socket, under a supervisor"),
    ("factory", bool, False, "APP is a factory: call it to get the ASGI app"),
    ("app-dir", str, ".", "look for APP's module in this directory"),
    ("root-path", str, "", "the ASGI root_path (mount point behind a proxy)"),
    ("lifespan", ["auto", "on", "off"], "auto", "ASGI lifespan protocol"),
    ("loop", ["swordfish", "asyncio", "uvloop"], "swordfish", "event loop"),
    ("proxy-headers", bool, False,
     "take client address and scheme from X-Forwarded-For/X-Forwarded-Proto (trusted peers only)"),
    ("forwarded-allow-ips", str, "127.0.0.1",
     "peers trusted for --proxy-headers: IPs, networks, 'unix:' or '*', comma-separated"),
    ("access-log", bool, True, "one log line per request"),
    ("log-level", ["critical", "error", "warning", "info", "debug"], "info", "log level"),
    ("backlog", int, 2048, "listen backlog"),
    ("limit-concurrency", int, None, "most requests served at once (then 503)"),
    ("limit-request-line", int, 8190, "longest request line in bytes (then 414)"),
    ("limit-header-size", int, 32768, "largest header section in bytes (then 431)"),
    ("limit-header-count", int, 100, "most header fields (then 431)"),
    ("limit-body-size", int, None, "largest request body in bytes (then 413)"),
    ("timeout-header-read", float, 10.0, "seconds from accept to a complete request head"),
    ("timeout-keep-alive", float, 5.0, "seconds an idle kept-alive connection stays open"),
    ("timeout-graceful-shutdown", float, 30.0, "seconds in-flight requests get on shutdown"),
    ("max-requests", int, None,
     "recycle a worker after about this many requests (one process: exit after them)"),
    ("max-requests-jitter", int, 0, "add a random 0..N to --max-requests, per worker"),
    ("server-header", bool, True, "send 'server: swordfish'"),
    ("date-header", bool, True, "send 'date'"),
]


def _env(name):
    return os.environ.get("SWORDFISH_" + name.upper().replace("-", "_"))


def _bool(text):
    return text.strip().lower() in ("1", "true", "yes", "on")


def build_parser():
    parser = argparse.ArgumentParser(prog="swordfish", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve an ASGI app over HTTP/1.1",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                           epilog="Every option can also be set as SWORDFISH_<OPTION> (e.g. SWORDFISH_PORT=9000).")
    serve.add_argument("app", nargs="?" if _env("app") else None, default=_env("app"),
                       help="the ASGI app as module:attribute")
    for name, kind, default, text in OPTIONS:
        env = _env(name)
        dest = name.replace("-", "_")
        if kind is bool:
            value = _bool(env) if env is not None else default
            serve.add_argument(f"--{name}", dest=dest, action=argparse.BooleanOptionalAction, default=value, help=text)
        elif isinstance(kind, list):
            serve.add_argument(f"--{name}", dest=dest, choices=kind, default=env or default, help=text)
        else:
            value = kind(env) if env is not None else default
            serve.add_argument(f"--{name}", dest=dest, type=kind, default=value, help=text)
    serve.add_argument("--header", dest="headers", action="append",
                       default=[h for h in (_env("header") or "").split(";") if h],
                       help="a default response header 'name: value' (repeatable)")
    serve.add_argument("--worker-notify-fd", dest="worker_notify_fd", type=int, default=None,
                       help=argparse.SUPPRESS)  # set by the supervisor for its workers
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    options = vars(args)
    options.pop("command")
    notify_fd = options.pop("worker_notify_fd")
    logging.basicConfig(level=options["log_level"].upper(), format="%(levelname)s %(message)s")
    app = options.pop("app")
    try:
        config = Config(app, **options)
        if config.workers > 1:
            # The supervisor does not import the app: each worker does (a worker that
            # cannot exits with 2 and the supervisor with it).
            from .supervisor import Supervisor

            supervisor = Supervisor(config, argv)
        else:
            config.load_app()
    except Exception as exc:  # a clear line, not a traceback, for a wrong APP
        print(f"swordfish: cannot load {app!r}: {exc}", file=sys.stderr)
        return 2
    if config.workers > 1:
        return supervisor.run()
    return run(config, notify_fd)
