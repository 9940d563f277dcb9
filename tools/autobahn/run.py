#!/usr/bin/env python3
"""Run Autobahn|Testsuite's fuzzingclient against swordfish's WebSocket server (or uvicorn,
to compare) serving tools/autobahn/echo_app.py (ASGI; `--server swordfish-rsgi`: the RSGI
echo app, tools/autobahn/rsgi_echo_app.py), and summarise the report in markdown.

    tools/autobahn/run.py [--server swordfish|swordfish-rsgi|uvicorn] [--server-python PY]
                          [--markdown docs/autobahn.md] [--cases '1.*,9.1.1'] [-v]

Installs wstest on Python 2.7 first (install-py27.sh; nothing to do once it has run), starts
the server on a free loopback port, runs `wstest -m fuzzingclient`, stops the server and
writes the summary (report.py). Logs, the spec and the full HTML/JSON report go to
tools/autobahn/.reports/SERVER/. Exit status: 1 if a case FAILED or is UNIMPLEMENTED, 2 if
the run itself went wrong.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import report  # noqa: E402

SERVERS = ("swordfish", "swordfish-rsgi", "uvicorn")
# Each server's echo app, and where its summary goes by default.
APPS = {"swordfish": "echo_app", "swordfish-rsgi": "rsgi_echo_app", "uvicorn": "echo_app"}
MARKDOWN = {"swordfish-rsgi": "autobahn-rsgi.md"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", choices=SERVERS, default="swordfish")
    p.add_argument("--server-python", default=sys.executable,
                   help="interpreter that runs the server (default: this one)")
    p.add_argument("--py27", default=os.environ.get("PY27"),
                   help="Python 2.7 for wstest (default: $PY27, else found by tools/find-python)")
    p.add_argument("--markdown", default=None,
                   help="where the summary goes (default: docs/autobahn.md; docs/autobahn-rsgi.md for swordfish-rsgi)")
    p.add_argument("--reports", default=None,
                   help="directory for logs and the report (default: tools/autobahn/.reports/SERVER)")
    p.add_argument("--cases", default="*",
                   help="comma-separated case patterns for a partial run (default: all)")
    p.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    p.add_argument("--startup-timeout", type=float, default=30.0, metavar="SECONDS")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="longest the wstest run may take")
    p.add_argument("--no-install", action="store_true",
                   help="do not run install-py27.sh (wstest must already be installed)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every case as it starts")
    args = p.parse_args(argv)
    args.reports = os.path.abspath(args.reports or os.path.join(HERE, ".reports", args.server))
    args.markdown = args.markdown or os.path.join(REPO, "docs", MARKDOWN.get(args.server, "autobahn.md"))
    args.case_list = [c.strip() for c in args.cases.split(",") if c.strip()]
    return args


def find_py27():
    out = subprocess.run([os.path.join(REPO, "tools", "find-python"), "python2.7"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit("autobahn: no python2.7 found; give one with --py27")
    return out.stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(args, port):
    # Relative: the server runs in the repo root, and the command goes into the summary.
    common = ["--app-dir", os.path.relpath(HERE, REPO), "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    if args.server.startswith("swordfish"):
        return [args.server_python, "-m", "swordfish", "serve", f"{APPS[args.server]}:app", *common]
    return [args.server_python, "-m", "uvicorn", "echo_app:app", *common,
            "--ws", "websockets-sansio"]


def server_version(args):
    """'name version' of the server's packages, as its interpreter sees them."""
    names = ["swordfish"] if args.server.startswith("swordfish") else ["uvicorn", "websockets"]
    code = ("import importlib.metadata as m, sys\n"
            "for n in sys.argv[1:]:\n"
            "    try: print(n, m.version(n))\n"
            "    except Exception: print(n, '(version unknown)')\n")
    out = subprocess.run([args.server_python, "-c", code, *names], capture_output=True, text=True)
    return ", ".join(out.stdout.split("\n")[:-1]) or args.server


def start_server(args, port, log):
    # A session of its own, so stopping it also ends anything it started (workers).
    proc = subprocess.Popen(server_command(args, port), cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + args.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before it "
                               f"accepted a connection")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError(f"the server did not accept on port {port} "
                       f"within {args.startup_timeout:g} s")


def stop_server(proc):
    """SIGTERM, then SIGKILL after 15 s; returns the exit status, None if it had to be killed."""
    if proc.poll() is not None:
        return proc.returncode
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def write_spec(args, port):
    spec = {
        "outdir": os.path.join(args.reports, "report"),
        "servers": [{"agent": args.server, "url": f"ws://127.0.0.1:{port}"}],
        "cases": args.case_list,
        "exclude-cases": [],
        "exclude-agent-cases": {},
    }
    path = os.path.join(args.reports, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=2)
    return path


def run_wstest(args, spec, log):
    """Run the fuzzingclient, copying its output to `log`; say which case group it is on.
    Returns its exit status, or None if it ran past --timeout and was killed."""
    # Unbuffered, so the progress lines come as the cases start rather than in bursts.
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".py27", "lib"), PYTHONUNBUFFERED="1")
    cmd = [args.py27, os.path.join(HERE, "wstest27.py"), "-m", "fuzzingclient", "-s", spec]
    proc = subprocess.Popen(cmd, cwd=args.reports, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            errors="replace")
    # A timer rather than a check per line: a stuck wstest prints nothing.
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        proc.kill()

    timer = threading.Timer(args.timeout, kill)
    timer.start()
    group = None
    try:
        for line in proc.stdout:
            log.write(line)
            words = line.split()
            if line.startswith("Running test case ID") and len(words) > 4:
                case = words[4]
                if args.verbose:
                    print(f"autobahn: case {case}", flush=True)
                elif case.split(".")[0] != group:
                    group = case.split(".")[0]
                    print(f"autobahn: cases {group}.*", flush=True)
        status = proc.wait()
        return None if timed_out.is_set() else status
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv=None):
    args = parse_args(argv)
    args.py27 = args.py27 or find_py27()
    if not args.no_install:
        install = [os.path.join(HERE, "install-py27.sh"), sys.executable]
        if subprocess.run(["bash", *install], env=dict(os.environ, PY27=args.py27)).returncode:
            print("autobahn: installing wstest failed (output above)", file=sys.stderr)
            return 2

    # Old per-case files of a previous run would otherwise linger beside the new index.
    shutil.rmtree(args.reports, ignore_errors=True)
    os.makedirs(args.reports)
    port = args.port or free_port()
    spec = write_spec(args, port)
    server_log = os.path.join(args.reports, "server.log")
    wstest_log = os.path.join(args.reports, "wstest.log")

    started = time.monotonic()
    with open(server_log, "w") as slog:
        try:
            server = start_server(args, port, slog)
        except RuntimeError as e:
            slog.flush()
            print(f"autobahn: {e}; its log ({server_log}) ends:\n{tail(server_log)}",
                  file=sys.stderr)
            return 2
        print(f"autobahn: {args.server} is serving on 127.0.0.1:{port}; "
              f"wstest output goes to {wstest_log}", flush=True)
        try:
            with open(wstest_log, "w") as wlog:
                status = run_wstest(args, spec, wlog)
        finally:
            server_died = server.poll() is not None
            stop_server(server)
    duration = time.monotonic() - started

    index = os.path.join(args.reports, "report", "index.json")
    if status != 0 or not os.path.exists(index):
        how = (f"ran past --timeout {args.timeout:g} s" if status is None
               else f"exited with status {status}")
        print(f"autobahn: wstest {how}; its log ({wstest_log}) ends:\n"
              f"{tail(wstest_log)}", file=sys.stderr)
        return 2
    summary = report.load(index, args.server)
    meta = {
        "server": args.server,
        "app": f"tools/autobahn/{APPS[args.server]}.py",
        "server_version": server_version(args),
        "command": " ".join(["python"] + server_command(args, port)[1:]),
        "wstest": wstest_version(args),
        "cases": ", ".join(args.case_list),
        "duration": duration,
        "server_died": server_died,
        "reports": os.path.relpath(args.reports, REPO),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
    with open(args.markdown, "w") as f:
        f.write(report.markdown(summary, meta))
    print(f"autobahn: {report.one_line(summary)} in {duration:.0f} s; "
          f"summary in {args.markdown}")
    if server_died:
        print(f"autobahn: the server exited during the run; see {server_log}", file=sys.stderr)
    return 1 if report.bad(summary) or server_died else 0


def wstest_version(args):
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".py27", "lib"))
    out = subprocess.run([args.py27, os.path.join(HERE, "wstest27.py"), "--autobahnversion"],
                         env=env, capture_output=True, text=True)
    py = subprocess.run([args.py27, "-c", "import platform; print(platform.python_version())"],
                        capture_output=True, text=True).stdout.strip()
    return ", ".join(out.stdout.split("\n")[:-1]) + f" on Python {py}"


def tail(path, lines=20):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


if __name__ == "__main__":
    sys.exit(main())
