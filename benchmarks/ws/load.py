"""Driving the native load client `ws-load` (native/): the probe, the echo and broadcast
runs, and the hold of idle connections. Every run prints one JSON line; a run that
measured nothing says why in its `failed` field."""
import json
import os
import subprocess
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_BIN = os.path.join(HERE, "native", "target", "release", "ws-load")


class LoadFailed(Exception):
    pass


def _url(port, path="/"):
    return f"ws://127.0.0.1:{port}{path}"


def _run(args, pin, timeout):
    cmd = list(pin) + [LOAD_BIN] + [str(a) for a in args]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise LoadFailed(f"ws-load did not finish in {timeout:.0f} s") from exc
    line = out.stdout.strip().splitlines()[-1:] or [""]
    try:
        result = json.loads(line[0])
    except ValueError:
        raise LoadFailed(f"ws-load exit {out.returncode}: {out.stderr.strip()[-300:]}") from None
    if "failed" in result:
        raise LoadFailed(result["failed"])
    if out.returncode != 0:
        raise LoadFailed(f"ws-load exit {out.returncode}: {out.stderr.strip()[-300:]}")
    return result


def check(port, pin=(), payload=None, deflate=False):
    """One connection echoes both kinds at 0 B to 64 KiB (and the payload file)."""
    args = ["--url", _url(port), "--mode", "check", "--timeout", 30]
    if payload:
        args += ["--payload", payload, "--kind", "text"]
    if deflate:
        args.append("--deflate")
    return _run(args, pin, 120)


def echo(port, conns, kind, size, seconds, warmup, pin=(), payload=None, deflate=False):
    args = ["--url", _url(port), "--mode", "echo", "--connections", conns, "--kind", kind,
            "--duration", seconds, "--warmup", warmup]
    args += ["--payload", payload] if payload else ["--size", size]
    if deflate:
        args.append("--deflate")
    return _run(args, pin, seconds + warmup + 60)


def broadcast(port, conns, messages, size, pin=(), timeout=120):
    args = ["--url", _url(port, "/broadcast"), "--mode", "broadcast", "--connections", conns,
            "--messages", messages, "--size", size, "--kind", "binary", "--timeout", 20]
    return _run(args, pin, timeout)


class Idle:
    """`ws-load --mode idle` holding `count` connections until `close()`; `result` is
    its report of what it opened."""

    def __init__(self, port, count, deflate, pin=(), sources=1, timeout=300):
        args = ["--url", _url(port), "--mode", "idle", "--connections", count,
                "--sources", sources, "--timeout", 30]
        if deflate:
            args.append("--deflate")
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(list(pin) + [LOAD_BIN] + [str(a) for a in args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        # The report comes once every connection is open or has failed; a server that
        # stalls the handshakes gets `timeout` seconds in all.
        guard = threading.Timer(timeout, self.proc.kill)
        guard.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            guard.cancel()
        try:
            self.result = json.loads(line)
        except ValueError:
            self.close()
            raise LoadFailed(f"ws-load idle: no report (exit {self.proc.returncode})") from None
        if "failed" in self.result:
            self.close()
            raise LoadFailed(self.result["failed"])

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
