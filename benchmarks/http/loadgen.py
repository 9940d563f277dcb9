"""The load generators: wrk (one JSON line from wrk.lua) or oha for the throughput
workloads, and http-vu (native/) for the virtual-user workload."""
import json
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WRK_SCRIPT = os.path.join(HERE, "wrk.lua")
TOOLS_BIN = os.path.join(HERE, ".tools", "bin")
VU_BIN = os.path.join(HERE, "native", "target", "release", "http-vu")


def oha_path():
    local = os.path.join(TOOLS_BIN, "oha")
    return local if os.path.exists(local) else shutil.which("oha")


class LoadFailed(Exception):
    pass


def _run(cmd, timeout):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise LoadFailed(f"{os.path.basename(cmd[0])} did not finish in {timeout} s") from exc
    if out.returncode != 0:
        raise LoadFailed(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    return out.stdout


def wrk(url, connections, seconds, pin=(), post=None, threads=1):
    """{requests, rps, p50_ms, p99_ms, errors, ...} of one wrk run with `threads` threads."""
    cmd = list(pin) + ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "5s",
                       "-s", WRK_SCRIPT, url]
    if post is not None:
        cmd += ["--", "post", str(post)]
    out = _run(cmd, seconds + 30)
    line = next((l for l in out.splitlines() if l.startswith("WRK-JSON ")), None)
    if line is None:
        raise LoadFailed(f"no summary from wrk: {out[-300:]}")
    r = json.loads(line[len("WRK-JSON "):])
    secs = r["duration_us"] / 1e6
    return {
        "requests": r["requests"],
        "rps": r["requests"] / secs,
        "p50_ms": r["p50_us"] / 1000,
        "p90_ms": r["p90_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "errors": r["socket_errors"] + r["non_2xx"],
        "mib_s": r["bytes"] / secs / 2**20,
    }


def _body_file(size):
    path = os.path.join(tempfile.gettempdir(), f"swordfish-bench-body-{size}")
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            f.write(b"x" * size)
    return path


def oha(url, connections, seconds, pin=(), post=None):
    """The same figures from oha (its JSON output); `-z` runs end by aborting the requests
    in flight, which are not errors."""
    cmd = list(pin) + [oha_path(), "-z", f"{seconds:g}s", "-c", str(connections), "--no-tui",
                       "--output-format", "json", url]
    if post is not None:
        cmd += ["-m", "POST", "-D", _body_file(post)]
    r = json.loads(_run(cmd, seconds + 30))
    summary, pct = r["summary"], r.get("latencyPercentiles") or {}
    codes = r.get("statusCodeDistribution") or {}
    ok = sum(n for code, n in codes.items() if code.startswith("2"))
    aborted = {k: n for k, n in (r.get("errorDistribution") or {}).items() if "deadline" not in k}
    return {
        "requests": ok,
        "rps": ok / summary["total"],
        "p50_ms": (pct.get("p50") or 0) * 1000,
        "p90_ms": (pct.get("p90") or 0) * 1000,
        "p99_ms": (pct.get("p99") or 0) * 1000,
        "errors": sum(aborted.values()) + sum(codes.values()) - ok,
        "mib_s": summary.get("sizePerSec", 0) / 2**20,
    }


def virtual_users(url, users, seconds, warmup, pin=()):
    """The k6-style scenario (GET /, think 0.1 s, GET /api, GET /) from http-vu."""
    cmd = list(pin) + [VU_BIN, "--url", url, "--users", str(users), "--duration", str(seconds),
                       "--warmup", str(warmup)]
    r = json.loads(_run(cmd, seconds + warmup + 60))
    lat = r["latency_ms"]
    return {
        "requests": r["requests"],
        "rps": r["rps"],
        "p50_ms": lat["all"]["p50"],
        "p95_ms": lat["all"]["p95"],
        "p99_ms": lat["all"]["p99"],
        "page_p95_ms": lat.get("/", {}).get("p95", 0),
        "api_p95_ms": lat.get("/api", {}).get("p95", 0),
        "errors": r["errors"] + r["non_2xx"],
        "cycle_ms": r["cycle_ms"]["mean"],
    }
