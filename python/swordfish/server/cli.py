"""`swordfish serve module:app` (also `python -m swordfish serve`). Every option can also
come from a `SWORDFISH_<OPTION>` environment variable (e.g. `SWORDFISH_PORT=9000`)."""

import argparse
import logging
import os
import sys

from .config import BOUNDS, CERT_REQS, LOG_LEVELS, Config, out_of_bounds
from .server import run


def _number(kind, name):
    """An argparse type: an int or float within the bounds of the setting `name`."""
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        why = out_of_bounds(name, value)
        if why:
            raise argparse.ArgumentTypeError(why)
        return value

    return convert


# (option, type, default, help); a bool option gets --x/--no-x.
OPTIONS = [
    ("host", str, "127.0.0.1", "bind to this address"),
    ("port", int, 8000, "bind to this TCP port"),
    ("uds", str, None, "bind to this Unix socket path"),
    ("fd", int, None,
     "serve on this inherited, already-listening socket descriptor"),
    ("workers", int, 1,
     "worker processes sharing the listening socket, under a supervisor"),
    ("factory", bool, False, "APP is a factory: call it to get the ASGI app"),
    ("app-dir", str, ".", "look for APP's module in this directory"),
    ("root-path", str, "", "the ASGI root_path: the mount point behind a proxy that strips it; "
     "also prefixed to each request's path and raw_path"),
    ("lifespan", ["auto", "on", "off"], "auto", "ASGI lifespan protocol"),
    ("loop", ["swordfish", "asyncio", "uvloop"], "swordfish", "event loop"),
    ("proxy-headers", bool, False,
     "take client address and scheme from X-Forwarded-For/X-Forwarded-Proto (trusted peers only)"),
    ("forwarded-allow-ips", str, "127.0.0.1",
     "peers trusted for --proxy-headers: IPs, networks, 'unix:' or '*', comma-separated"),
    ("access-log", bool, True, "one log line per request"),
    ("log-level", LOG_LEVELS, "info", "log level"),
    ("backlog", int, 2048, "listen backlog"),
    ("limit-concurrency", int, None,
     "most requests served at once (then 503)"),
    ("limit-request-line", int, 8190,
     "longest request line in bytes (then 414)"),
    ("limit-header-size", int, 32768,
     "largest header section in bytes (then 431)"),
    ("limit-header-count", int, 100,
     "most header fields (then 431)"),
    ("limit-body-size", int, None,
     "largest request body in bytes (then 413)"),
    ("timeout-header-read", float, 10.0,
     "seconds from accept to a complete request head"),
    ("timeout-keep-alive", float, 5.0,
     "seconds an idle kept-alive connection stays open"),
    ("timeout-graceful-shutdown", float, 30.0,
     "seconds in-flight requests get on shutdown (inf: no limit)"),
    ("max-requests", int, None,
     "recycle a worker after about this many requests (one process: exit after them)"),
    ("max-requests-jitter", int, 0,
     "add a random 0..N to --max-requests, per worker"),
    ("server-header", bool, True, "send 'server: swordfish'"),
    ("date-header", bool, True, "send 'date'"),
    ("ssl-certfile", str, None, "serve HTTPS with this certificate chain (PEM; may hold the key too)"),
    ("ssl-keyfile", str, None, "the certificate's private key (PEM)"),
    ("ssl-keyfile-password", str, None,
     "the private key's password (better given as SWORDFISH_SSL_KEYFILE_PASSWORD: "
     "an option is visible in the process list)"),
    ("ssl-ca-certs", str, None, "CA certificates (PEM) that client certificates are verified with"),
    ("ssl-cert-reqs", list(CERT_REQS), "none",
     "client certificates: not asked for, verified if sent (optional), or required"),
    ("ssl-ciphers", str, None, "OpenSSL cipher list (None: the ssl module's)"),
    ("reload", bool, False,
     "restart the workers when a watched file changes (development); a worker that fails to "
     "start leaves the running ones serving until the next change"),
    ("reload-delay", float, 0.25, "seconds between two looks at the watched files"),
]
# Repeatable options: (option, destination, help); from the environment as a ';'-separated list.
LISTS = [
    ("header", "headers", "a default response header 'name: value'"),
    ("reload-dir", "reload_dirs", "a directory to watch for --reload (none given: the --app-dir)"),
    ("reload-include", "reload_includes", "a file name pattern to watch for --reload (none given: *.py)"),
    ("reload-exclude", "reload_excludes", "a file or directory name pattern --reload ignores, besides hidden ones"),
]
# Options of the supervisor alone: its workers never get them.
SUPERVISOR_ONLY = {"reload", "reload-delay"}
# Options a supervisor hands its workers in their environment rather than on their
# command line, where every user of the machine could read them.
SECRET = {"ssl-keyfile-password"}


def _var(name):
    return "SWORDFISH_" + name.upper().replace("-", "_")


def _env(name):
    return os.environ.get(_var(name)) or None


def _bool(text):
    return text.strip().lower() in ("1", "true", "yes", "on")


def _from_env(kind, text):
    """An option's value from its variable's text (ArgumentTypeError if invalid)."""
    if kind is bool:
        return _bool(text)
    if isinstance(kind, list) and text not in kind:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(kind)})")
    return text if isinstance(kind, list) else kind(text)


def build_parser():
    parser = argparse.ArgumentParser(prog="swordfish", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve an ASGI app over HTTP/1.1",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                           epilog="Every option can also be set as SWORDFISH_<OPTION> (e.g. SWORDFISH_PORT=9000).")
    serve.add_argument("app", nargs="?" if _env("app") else None, default=_env("app"),
                       help="the ASGI app as module:attribute")
    bad = []  # invalid SWORDFISH_* variables
    for name, kind, default, text in OPTIONS:
        dest = name.replace("-", "_")
        if dest in BOUNDS:
            kind = _number(kind, dest)
        env = _env(name)
        if env is not None:
            try:
                default = _from_env(kind, env)
            except argparse.ArgumentTypeError as exc:
                bad.append(f"{_var(name)}: {exc}")
        if kind is bool:
            serve.add_argument(f"--{name}", dest=dest, action=argparse.BooleanOptionalAction, default=default,
                               help=text)
        elif isinstance(kind, list):
            serve.add_argument(f"--{name}", dest=dest, choices=kind, default=default, help=text)
        else:
            serve.add_argument(f"--{name}", dest=dest, type=kind, default=default, help=text)
    for name, dest, text in LISTS:
        serve.add_argument(f"--{name}", dest=dest, action="append",
                           default=[v for v in (_env(name) or "").split(";") if v], help=f"{text}; repeatable")
    serve.add_argument("--worker-notify-fd", dest="worker_notify_fd", type=int, default=None,
                       help=argparse.SUPPRESS)  # set by the supervisor for its workers
    if bad:
        serve.error("; ".join(bad))
    parser.serve = serve  # for errors about the options of serve
    return parser


def worker_argv(config):
    """The `serve APP --option=value ...` command line of config, every option explicit: what
    the supervisor's workers run (with SWORDFISH_* variables removed from their environment)."""
    if not isinstance(config.app, str):
        raise ValueError("workers > 1 and reload need the app as 'module:attribute' (each worker imports it)")
    argv = ["serve", config.app]
    for name, kind, _, _ in OPTIONS:
        value = getattr(config, name.replace("-", "_"))
        if name in SECRET or name in SUPERVISOR_ONLY:
            continue  # SECRET: see worker_env
        if kind is bool:
            argv.append(f"--{name}" if value else f"--no-{name}")
        elif isinstance(value, (list, tuple)):  # forwarded_allow_ips as a list
            argv.append(f"--{name}={','.join(value)}")
        elif value is not None:
            argv.append(f"--{name}={value}")
        elif name == "timeout-graceful-shutdown":
            argv.append(f"--{name}=inf")  # None: no limit
    for name, value in config.default_headers():
        argv.append(f"--header={name.decode('latin-1')}: {value.decode('latin-1')}")
    return argv  # the --reload-* lists are the supervisor's too


def worker_env(config):
    """The SWORDFISH_* variables of the secret options of config (see SECRET), for the
    environment of the supervisor's workers."""
    env = {}
    for name in SECRET:
        value = getattr(config, name.replace("-", "_"))
        if value is not None:
            env[_var(name)] = str(value)
    return env


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    options = vars(args)
    options.pop("command")
    notify_fd = options.pop("worker_notify_fd")
    try:
        config = Config(options.pop("app"), **options)
    except ValueError as exc:  # options that do not go together
        parser.serve.error(str(exc))
    return start(config, notify_fd)


def start(config, notify_fd=None):
    """Run config as `swordfish serve` does: a supervisor and its workers for workers > 1 or
    reload, this process otherwise; the exit code."""
    level = config.log_level.upper()
    logging.basicConfig(level=level, format="%(levelname)s %(message)s")
    logging.getLogger("swordfish").setLevel(level)  # also when logging was configured before
    supervised = config.workers > 1 or config.reload
    try:
        if supervised:
            # The supervisor does not import the app: each worker does (a worker that
            # cannot exits with 2 and the supervisor with it, unless it reloads).
            from .supervisor import Supervisor

            supervisor = Supervisor(config)
        else:
            config.load_app()
    except Exception as exc:  # a clear line, not a traceback, for a wrong APP
        print(f"swordfish: cannot load {config.app!r}: {exc}", file=sys.stderr)
        return 2
    try:
        config.ssl_context()  # before any worker starts: a wrong certificate stops here
    except OSError as exc:
        print(f"swordfish: cannot load the TLS certificate {config.ssl_certfile!r}: {exc}", file=sys.stderr)
        return 2
    if supervised:
        return supervisor.run()
    return run(config, notify_fd)
