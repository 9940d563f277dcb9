"""What the server suites' runners share (http/, ws/, wsgi_report/): a free port, pinning
to a CPU with taskset, the servers' order in each round, a SIGTERM that unwinds like
Ctrl-C, and the results files (results/<prefix>-<date>-<time>.json: "meta" and
"records"), written after a run and read back instead of measuring (--from-results)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pin(cpu, enabled=True):
    """taskset's prefix for one CPU (nothing where the CPU is not ours, or not enabled)."""
    return ["taskset", "-c", str(cpu)] if enabled and cpu in os.sched_getaffinity(0) else []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rotated(items, k):
    """The servers' order in round k: each round starts one server later."""
    k %= len(items)
    return items[k:] + items[:k]


def exit_on_sigterm():
    """Servers run in sessions of their own: a SIGTERM must unwind the `with` blocks that
    stop them, as Ctrl-C does."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def save_results(results, prefix, meta, records):
    """Writes results/<prefix>-<date>-<time>.json in the directory `results`; its path."""
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, time.strftime(f"{prefix}-%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
    print(f"results: {os.path.relpath(path, REPO)}")
    return path


def load_results(path):
    """(meta, records) of a stored run."""
    with open(path) as f:
        saved = json.load(f)
    return saved["meta"], saved["records"]


def results_of(args, measure):
    """A runner's (meta, records): SIGTERM made to unwind (exit_on_sigterm), then the stored
    run args.from_results, or else measure(args)."""
    exit_on_sigterm()
    if args.from_results:
        return load_results(args.from_results)
    return measure(args)


def certificate(directory):
    """A self-signed certificate for localhost and 127.0.0.1 in `directory`: (cert, key)."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key
