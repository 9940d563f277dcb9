"""Start, drive and stop the echo benchmark's processes.

A server (server.py on one loop, or the native binary) runs pinned to one CPU
and a client (client.py) to another; every measurement gets a fresh server.
"""
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SWORDFISH_PATH = os.path.join(REPO, "python")
NATIVE_BIN = os.path.join(HERE, "native", "target", "release", "echo-native")
# The native load client: client.py's pingpong test without the Python cost per round trip.
NATIVE_CLIENT = os.path.join(HERE, "native", "target", "release", "echo-client")
CERT_DIR = os.path.join(HERE, "certs")
CERT_FILE = os.path.join(CERT_DIR, "cert.pem")
READY_TIMEOUT = 30.0


class Unsupported(Exception):
    """The implementation cannot run this mode (reported as n/a)."""


class ServerFailed(Exception):
    """The server did not come up."""


def child_env():
    env = dict(os.environ)
    parts = [SWORDFISH_PATH] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONHASHSEED"] = "0"
    return env


def pin_prefixes(server_cpu, client_cpu, enabled=True):
    """taskset prefixes for (server, client); empty when pinning is impossible."""
    if not enabled or not shutil.which("taskset"):
        return [], []
    cpus = os.sched_getaffinity(0)
    if server_cpu not in cpus or client_cpu not in cpus:
        print(f"echo: CPUs {server_cpu},{client_cpu} not both available, not pinning",
              file=sys.stderr)
        return [], []
    return (["taskset", "-c", str(server_cpu)], ["taskset", "-c", str(client_cpu)])


def tail(fileobj, lines=1):
    """Last non-empty lines of a (temporary) log file, joined by ' | '."""
    fileobj.seek(0)
    text = fileobj.read().decode(errors="replace")
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def cpu_seconds(pid):
    """User + system CPU time of a live process, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the ")" of comm: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, proc, port, version, errlog):
        self.proc, self.port, self.version, self.errlog = proc, port, version, errlog

    @property
    def pid(self):
        return self.proc.pid

    def failure(self):
        """Why the server is unhealthy, or None while it runs."""
        if self.proc.poll() is None:
            return None
        why = tail(self.errlog, 2)
        return f"server exited ({self.proc.returncode})" + (f": {why}" if why else "")


def server_command(impl, mode, tls, debug=False):
    if impl in ("native", "native-poll"):
        if not os.access(NATIVE_BIN, os.X_OK):
            raise Unsupported("native server not built (run benchmarks/echo/setup.sh)")
        if tls:
            raise Unsupported("the native reference has no TLS")
        return [NATIVE_BIN] + (["--poll-us", "50"] if impl == "native-poll" else [])
    cmd = [sys.executable, os.path.join(HERE, "server.py"), "--loop", impl,
           "--mode", mode]
    if tls:
        if not os.path.exists(CERT_FILE):
            raise Unsupported("no TLS certificate (run benchmarks/echo/setup.sh)")
        cmd += ["--tls", CERT_DIR]
    return cmd + (["--debug"] if debug else [])


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_server(impl, mode, tls, prefix, debug=False):
    """Yield a Server once it printed READY; raise Unsupported/ServerFailed."""
    cmd = prefix + server_command(impl, mode, tls, debug)
    errlog = tempfile.TemporaryFile()
    # taskset execs the server, so proc.pid is the server's own pid.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errlog,
                            stdin=subprocess.DEVNULL, env=child_env(), cwd=HERE)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line.startswith("UNSUPPORTED"):
            proc.wait(5)
            raise Unsupported(line.split(" ", 1)[1] if " " in line else "unsupported")
        if not line.startswith("READY"):
            stop(proc)
            why = tail(errlog) or (f"exit status {proc.returncode}" if ready
                                   else f"not ready after {READY_TIMEOUT:g} s")
            raise ServerFailed(why)
        _, port, version = line.split(" ", 2)
        yield Server(proc, int(port), version, errlog)
    finally:
        stop(proc)
        proc.stdout.close()
        errlog.close()


def native_client_usable(argv):
    """Whether the native client can run this client.py command line (pingpong, no TLS)."""
    return argv[0] == "pingpong" and "--tls" not in argv and os.access(NATIVE_CLIENT, os.X_OK)


def run_client(argv, prefix, timeout, server=None, native=False):
    """Run client.py, or the native client when asked and it can; return (parsed JSON,
    None) or (None, reason)."""
    if native and native_client_usable(argv):
        cmd = prefix + [NATIVE_CLIENT] + argv
    else:
        cmd = prefix + [sys.executable, os.path.join(HERE, "client.py")] + argv
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=child_env(), cwd=HERE, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        error = f"client timed out after {timeout:g} s"
    else:
        if proc.returncode == 0:
            try:
                return json.loads(proc.stdout.strip().splitlines()[-1]), None
            except (ValueError, IndexError):
                error = "no JSON from the client"
        else:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            error = lines[-1].strip() if lines else f"client exit {proc.returncode}"
    if server is not None:
        why = server.failure() or tail(server.errlog)
        if why:
            error += f" [server: {why}]"
    return None, error
