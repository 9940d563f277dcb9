"""`swordfish serve module:app` (also `python -m swordfish serve`). Every option can also
come from a `SWORDFISH_<OPTION>` environment variable (e.g. `SWORDFISH_PORT=9000`)."""

import argparse
import contextlib
import os
import platform
import sys

from .. import __version__
from .affinity import pin_this_process, worker_cpus
from .config import Config
from .logs import configure_logging
from .process import PidFile, activated_socket, load_env_file
from .server import run
from .settings import SETTINGS


# The hidden options a supervisor gives its workers (not settings: see supervisor.py).
WORKER_OPTIONS = ("worker_notify_fd", "worker_metrics", "worker_board")


def _env(var):
    return os.environ.get(var) or None


def _from_env(setting, text):
    """A setting's value from its variable's text (a repeatable option's: a ';'-separated
    list); ValueError if invalid."""
    if setting.kind is list:
        return [v for v in text.split(";") if v]
    return setting.parse(text)


def _argument_type(setting):
    """An argparse type: the text's value, or ArgumentTypeError with the reason."""
    def convert(text):
        try:
            return setting.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def build_parser():
    parser = argparse.ArgumentParser(prog="swordfish", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve an ASGI, WSGI or RSGI app over HTTP/1.1",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                           epilog="Every option can also be set as SWORDFISH_<OPTION> (e.g. SWORDFISH_PORT=9000).")
    app = _env("SWORDFISH_APP")
    serve.add_argument("app", nargs="?" if app else None, default=app, help="the app (ASGI, WSGI or RSGI) as module:attribute")
    bad = []  # invalid SWORDFISH_* variables
    for s in SETTINGS:
        default = list(s.cli_default) if s.kind is list else s.cli_default
        text = _env(s.env)
        if text is not None:
            try:
                default = _from_env(s, text)
            except ValueError as exc:
                bad.append(f"{s.env}: {exc}")
        # argparse formats help with %: the access log format's atoms must stay as they are.
        options = {"dest": s.name, "default": default, "help": s.help_text.replace("%", "%%")}
        if s.kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif s.kind is list:
            options.update(action="append", metavar=s.metavar)
        elif s.choices:
            options["choices"] = s.choices
        else:
            options.update(type=_argument_type(s), metavar=s.metavar)
        serve.add_argument(s.flag, **options)
    serve.add_argument("--worker-notify-fd", dest="worker_notify_fd", type=int, default=None,
                       help=argparse.SUPPRESS)  # set by the supervisor for its workers
    serve.add_argument("--worker-metrics", dest="worker_metrics", type=_fd_slot, default=None,
                       help=argparse.SUPPRESS)  # FD:SLOT, the supervisor's shared counters (metrics.py)
    serve.add_argument("--worker-board", dest="worker_board", type=_fd_slot, default=None,
                       help=argparse.SUPPRESS)  # FD:SLOT, the supervisor's connection board (balance.py)
    if bad:
        serve.error("; ".join(bad))
    parser.serve = serve  # for errors about the options of serve
    return parser


def _fd_slot(text):
    fd, sep, slot = text.partition(":")
    if not (sep and fd.isdigit() and slot.isdigit()):
        raise argparse.ArgumentTypeError(f"expected FD:SLOT, not {text!r}")
    return int(fd), int(slot)


def version_text():
    return (f"swordfish {__version__} ({platform.python_implementation()} {platform.python_version()} "
            f"on {platform.system()} {platform.machine()})")


def worker_argv(config):
    """The `serve APP --option=value ...` command line of config, every option explicit: what
    the supervisor's workers run (with SWORDFISH_* variables removed from their environment).
    Secret settings go in worker_env instead; supervisor-only ones (--reload...) nowhere."""
    if not isinstance(config.app, str):
        raise ValueError("workers > 1, reload, workers_max_rss and metrics run a supervisor, whose workers "
                         "need the app as 'module:attribute' (each worker imports it)")
    argv = ["serve", config.app]
    for s in SETTINGS:
        if not (s.secret or s.supervisor_only):
            argv += s.argv(getattr(config, s.name))
    return argv


def worker_env(config):
    """The SWORDFISH_* variables of the secret settings of config, for the environment of the
    supervisor's workers."""
    env = {}
    for s in SETTINGS:
        value = getattr(config, s.name)
        if s.secret and value is not None:
            env[s.env] = str(value)
    return env


def config_from(parser, argv):
    """(Config, {worker option: value}) of a `serve ...` command line; ValueError for
    options that do not go together."""
    options = vars(parser.parse_args(argv))
    options.pop("command")
    worker = {name: options.pop(name) for name in WORKER_OPTIONS}
    return Config(options.pop("app"), **options), worker


def main(argv=None):
    parser = build_parser()
    try:
        config, worker = config_from(parser, sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        parser.serve.error(str(exc))
    return start(config, worker["worker_notify_fd"], worker["worker_metrics"], worker["worker_board"])


def start(config, notify_fd=None, metrics=None, board=None):
    """Run config as `swordfish serve` does: a supervisor and its workers for workers > 1,
    reload, --workers-max-rss or --metrics, this process otherwise; the exit code.
    notify_fd, metrics, board: a worker's pipe to its supervisor, its slot of the shared
    counters and its slot of the connection board (FD, SLOT each)."""
    try:
        configure_logging(config)
    except Exception as exc:  # whatever the user's file holds: a clear line, not a traceback
        print(f"swordfish: cannot configure logging from {config.log_config!r}: {exc}", file=sys.stderr)
        return 2
    supervised = config.workers > 1 or config.reload or config.workers_max_rss is not None or config.metrics
    try:
        fd = activated_socket()
        if fd is not None and config.fd is None:
            config.fd = fd
    except ValueError as exc:
        print(f"swordfish: {exc}", file=sys.stderr)
        return 2
    try:
        if config.env_file:
            load_env_file(config.env_file)
    except (OSError, ValueError) as exc:
        print(f"swordfish: cannot load --env-file: {exc}", file=sys.stderr)
        return 2
    try:
        cpus = worker_cpus(config.worker_cpu_affinity, config.workers, config.wsgi_engine)
    except ValueError as exc:
        print(f"swordfish: {exc}", file=sys.stderr)
        return 2
    if cpus is not None and not supervised and notify_fd is None:
        try:
            pin_this_process(cpus[0])
        except OSError as exc:
            print(f"swordfish: cannot confine the server to CPU {cpus[0]}: {exc}", file=sys.stderr)
            return 2
    try:
        if supervised:
            # The supervisor does not import the app: each worker does (a worker that
            # cannot exits with 2 and the supervisor with it, unless it reloads).
            from .supervisor import Supervisor

            supervisor = Supervisor(config, cpus)
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
    with contextlib.ExitStack() as stack:
        if config.pid_file:
            try:
                stack.enter_context(PidFile(config.pid_file))
            except OSError as exc:
                print(f"swordfish: cannot write --pid-file: {exc}", file=sys.stderr)
                return 2
        return supervisor.run() if supervised else run(config, notify_fd, metrics, board)
