"""The HTTP/2 suite: swordfish's HTTP/2 against the peers' (granian `--http 2` with ASGI and
RSGI on uvloop, hypercorn, uvicorn `--http zttp --http2`, gunicorn's asgi worker with
`--http-protocols h1,h2`), native hyper's HTTP/2 on one thread, and swordfish's own
HTTP/1.1 on the same workloads; h2load (Debian's nghttp2-client) as the client.

    run.py --quick            1 round, 3 s runs, c64 x m10, h2c
    run.py --full             2 rounds, 6 s runs, c64 x m10 and c1 x m100, h2c and TLS,
                              and the idle memory of 10,000 HTTP/2 connections
    run.py --from-results F   the tables of a stored run
    run.py --idle-only        the idle memory measure alone
    --unpinned                server and h2load on every CPU (h2load with a thread per
                              CPU), as on a machine whose cores a worker shares

Workloads: hello (GET /, 13 bytes), get 10 KiB (GET /10k), echo 10 KiB (POST /echo, the
body sent back). One worker pinned to CPU 0, h2load (one thread) pinned to CPU 1; servers
in a rotated order each round; medians; results in results/http2-*.json. swordfish's
HTTP/1.1 row is h2load `--h1` at the same connection count, one request at a time on each.
The idle memory is measured on a fresh server process that has answered 100 requests, not
on the one the throughput runs used: the connections would take memory those runs left
free, which the process's RSS already counts.
"""
import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path[:0] = [BENCH, os.path.join(BENCH, "http")]
from charts import grouped_bars  # noqa: E402
from proctree import tree_rss_bytes  # noqa: E402
from rounds import certificate, free_port, pin, results_of, rotated, save_results  # noqa: E402
from servers import NATIVE_DIR, child_env  # noqa: E402

APPS = os.path.join(BENCH, "rsgi", "apps")
RESULTS = os.path.join(HERE, "results")
SERVER_CPU, CLIENT_CPU = 0, 1
# --unpinned: nothing confined to a CPU.
PINNED = True
WORKLOADS = {"hello": ("/", None), "get10k": ("/10k", None), "echo10k": ("/echo", 10240)}
SHAPES = {"c64m10": (64, 10), "c1m100": (1, 100)}


def _swordfish(tls, extra=(), app="bench_asgi:app"):
    def command(port, cert):
        return [sys.executable, "-m", "swordfish", "serve", app, "--host", "127.0.0.1", "--port",
                str(port), "--no-access-log", "--log-level", "warning", *extra, *_tls("--ssl", tls, cert)]
    return command


def _granian(interface, tls):
    def command(port, cert):
        return [sys.executable, "-m", "granian", "--interface", interface, "--host", "127.0.0.1", "--port", str(port),
                # granian holds 1,024 connections per worker by default (--backpressure): the
                # idle-memory measure opens 10,000.
                "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop", "--http", "2", "--no-ws",
                "--backpressure", "20000",
                "--log-level", "warning", *(["--ssl-certificate", cert[0], "--ssl-keyfile", cert[1]] if tls else []),
                f"bench_{interface}:app"]
    return command


def _hypercorn(tls):
    def command(port, cert):
        tls_args = ["--certfile", cert[0], "--keyfile", cert[1]] if tls else []
        return [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                "--log-level", "warning", *tls_args, "bench_asgi:app"]
    return command


def _uvicorn(tls):
    def command(port, cert):
        tls_args = ["--ssl-certfile", cert[0], "--ssl-keyfile", cert[1]] if tls else []
        return [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--http", "zttp",
                "--http2", "--loop", "uvloop", "--no-access-log", "--log-level", "warning", *tls_args,
                "bench_asgi:app"]
    return command


def _gunicorn(tls):
    """gunicorn's asgi worker (its own asyncio protocol, HTTP/2 by the h2 library); h2c by
    prior knowledge where there is no TLS. It holds 1,000 connections by default
    (--worker-connections): the idle-memory measure opens 10,000."""
    def command(port, cert):
        tls_args = ["--certfile", cert[0], "--keyfile", cert[1]] if tls else ["--http2-cleartext", "prior-knowledge"]
        return [sys.executable, "-m", "gunicorn", "--worker-class", "asgi", "--asgi-loop", "uvloop", "--bind",
                f"127.0.0.1:{port}", "--workers", "1", "--worker-connections", "20000", "--http-protocols", "h1,h2",
                "--log-level", "warning", *tls_args, "bench_asgi:app"]
    return command


def _native(port, cert):
    return [os.path.join(NATIVE_DIR, "http-native"), "--port", str(port), "--http2"]


def _tls(prefix, tls, cert):
    """swordfish's TLS options (granian names its certificate option differently)."""
    return [f"{prefix}-certfile", cert[0], f"{prefix}-keyfile", cert[1]] if tls else []


# name: (command(port, (cert, key)), label, TLS, HTTP/1.1 client)
SERVERS = {
    "swordfish": (_swordfish(False), "swordfish ASGI (h2c)", False, False),
    "swordfish-h1": (_swordfish(False, ("--http", "1")), "swordfish ASGI, HTTP/1.1", False, True),
    "swordfish-rsgi": (_swordfish(False, ("--interface", "rsgi"), "bench_rsgi:app"), "swordfish RSGI (h2c)", False,
                       False),
    "granian-asgi": (_granian("asgi", False), "granian ASGI + uvloop (h2c)", False, False),
    "granian-rsgi": (_granian("rsgi", False), "granian RSGI + uvloop (h2c)", False, False),
    "hypercorn": (_hypercorn(False), "hypercorn (h2c)", False, False),
    "uvicorn": (_uvicorn(False), "uvicorn --http zttp --http2 + uvloop (h2c)", False, False),
    "gunicorn": (_gunicorn(False), "gunicorn asgi worker + uvloop (h2c)", False, False),
    "native": (_native, "native hyper (Rust, 1 thread, h2c)", False, False),
    "swordfish-tls": (_swordfish(True), "swordfish ASGI (h2, TLS)", True, False),
    "swordfish-tls-openssl": (_swordfish(True, ("--ssl-engine", "openssl")), "swordfish ASGI (h2, TLS by OpenSSL)",
                              True, False),
    "granian-asgi-tls": (_granian("asgi", True), "granian ASGI + uvloop (h2, TLS)", True, False),
    "granian-rsgi-tls": (_granian("rsgi", True), "granian RSGI + uvloop (h2, TLS)", True, False),
    "uvicorn-tls": (_uvicorn(True), "uvicorn --http zttp --http2 + uvloop (h2, TLS)", True, False),
    "gunicorn-tls": (_gunicorn(True), "gunicorn asgi worker + uvloop (h2, TLS)", True, False),
}
# The peers whose ASGI over HTTP/2 the `x` ratios are taken against.
ASGI_PEERS = ("granian-asgi", "hypercorn", "uvicorn", "gunicorn")
QUICK = ["swordfish", "swordfish-h1", "swordfish-rsgi", "granian-asgi", "granian-rsgi", "native"]
FULL = list(SERVERS)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--full", action="store_true")
    p.add_argument("--servers", help="comma-separated server names (default: the mode's)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--idle-connections", type=int, help="connections of the idle memory measure (0: none)")
    p.add_argument("--idle-only", action="store_true", help="only the idle memory measure (10,000 connections "
                   "unless --idle-connections says otherwise)")
    p.add_argument("--from-results", metavar="FILE")
    p.add_argument("--unpinned", action="store_true", help="server and h2load on every CPU")
    p.add_argument("--plot", metavar="DIR", help="also draw the charts: DIR/http2-h2c.png and DIR/http2-tls.png "
                   "(req/s), DIR/http2-idle.png (idle memory)")
    args = p.parse_args(argv)
    args.servers = args.servers.split(",") if args.servers else (FULL if args.full else QUICK)
    bad = [s for s in args.servers if s not in SERVERS]
    if bad:
        p.error(f"unknown: {', '.join(bad)}")
    args.rounds = args.rounds or (2 if args.full else 1)
    args.seconds = args.seconds or (6 if args.full else 3)
    args.shapes = list(SHAPES) if args.full else ["c64m10"]
    if args.idle_connections is None:
        args.idle_connections = 10000 if args.full or args.idle_only else 0
    return args


class Server:
    """A server process pinned to SERVER_CPU, ready once h2load gets one answer."""

    def __init__(self, name, port, cert):
        command, _, self.tls, self.h1 = SERVERS[name]
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(pin(SERVER_CPU, PINNED) + command(port, cert), cwd=APPS, env=child_env(None, APPS),
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {self.output()}")
            if h2load(self, "/", None, 1, 1, None, requests=1).get("ok"):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{name} did not answer: {self.output()}")

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def output(self):
        self.log.seek(0)
        return " | ".join(self.log.read().decode(errors="replace").strip().splitlines()[-5:])

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def h2load(server, path, body_file, conns, streams, seconds, requests=None):
    """One h2load run: req/s, the failures, and the p50/p99 and max of the request times
    (ms), from h2load's per-request log (its summary has no percentiles)."""
    threads = 1 if PINNED else min(conns, len(os.sched_getaffinity(0)))
    cmd = pin(CLIENT_CPU, PINNED) + ["h2load", "-t", str(threads), "-c", str(conns), "-m", str(streams)]
    if server.h1:
        cmd += ["--h1", "-m", "1"]
    cmd += ["-n", str(requests)] if requests else ["-D", f"{seconds:g}", "--warm-up-time", "1"]
    if body_file:
        cmd += ["-d", body_file]
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        try:
            out = subprocess.run(cmd + ["--log-file", log.name, server.url + path], capture_output=True, text=True,
                                 timeout=120).stdout
        except subprocess.TimeoutExpired:
            return {}
        times = request_times(log.name)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    ok = bool(done) and int(done.group(2)) > 0 and int(done.group(1)) == int(done.group(2))
    return {"ok": ok, "rps": float(rate.group(1)) if rate else 0.0, **times,
            "failed": int(done.group(1)) - int(done.group(2)) if done else None}


def request_times(path):
    """p50, p99 and max (ms) of the requests h2load logged: a line per request, its start
    (µs since the epoch), its status and its time (µs), tab-separated."""
    times = []
    with open(path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1].strip().isdigit() and int(parts[1]) > 0:
                times.append(int(parts[2]) / 1000)
    if not times:
        return {}
    times.sort()
    at = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": times[-1]}


async def _idle(port, n, tls):
    """Open `n` HTTP/2 connections (preface and SETTINGS sent, the server's read), idle."""
    import ssl
    ctx = None
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    writers = []
    sem = asyncio.Semaphore(200)

    async def one():
        async with sem:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writers.append(w)
            w.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings)
            if not await asyncio.wait_for(r.read(9), 10):
                raise ConnectionError("closed by the server")

    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    errors = [e for e in results if isinstance(e, BaseException)]
    if errors:
        await _close(writers)
        raise RuntimeError(f"{len(errors)} of {n} idle connections failed: {errors[0]!r}")
    return writers


async def _close(writers):
    """Close the connections for good before their loop goes: else each server's sockets
    stay open in this process until it runs out of descriptors."""
    for w in writers:
        w.close()
    await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)


def idle_memory(name, cert, n):
    """A fresh server's RSS growth, in KiB per connection, with `n` idle HTTP/2 connections.
    Fresh, so that memory that the throughput runs left free is not counted as what the
    connections took; it answers a few requests first, so that what its first request
    sets up once is not counted either."""
    server = Server(name, free_port(), cert)
    try:
        if not h2load(server, "/", None, 1, 1, None, requests=100).get("ok"):
            raise RuntimeError("the warm-up requests failed")
        time.sleep(0.5)
        before = tree_rss_bytes(server.proc.pid)
        loop = asyncio.new_event_loop()
        try:
            writers = loop.run_until_complete(_idle(server.port, n, server.tls))
            time.sleep(1)
            after = tree_rss_bytes(server.proc.pid)
            loop.run_until_complete(_close(writers))
        finally:
            loop.close()
    finally:
        server.stop()
    return (after - before) / 1024 / n


def throughput(args, rnd, name, cert, body, records):
    """Every workload and shape on one server process."""
    try:
        server = Server(name, free_port(), cert)
    except RuntimeError as exc:
        print(f"  {name}: {exc}", file=sys.stderr)
        return
    try:
        for workload, (path, size) in WORKLOADS.items():
            for shape in args.shapes:
                conns, streams = SHAPES[shape]
                if server.h1 and shape != "c64m10":
                    continue
                r = h2load(server, path, body if size else None, conns, streams, args.seconds)
                records.append({"round": rnd, "server": name, "workload": workload, "shape": shape, **r})
                print(f"  {name:18} {workload:8} {shape:7} {r.get('rps', 0):>10.0f} req/s", flush=True)
    finally:
        server.stop()


def measure(args):
    global PINNED
    PINNED = not args.unpinned
    records = []
    body = tempfile.NamedTemporaryFile(delete=False)
    body.write(b"x" * 10240)
    body.close()
    with tempfile.TemporaryDirectory() as tmp:
        cert = certificate(tmp)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", flush=True)
            for name in rotated(args.servers, rnd):
                if not args.idle_only:
                    throughput(args, rnd, name, cert, body.name, records)
                if args.idle_connections and rnd == 0 and not SERVERS[name][3]:
                    try:
                        kib = idle_memory(name, cert, args.idle_connections)
                    except RuntimeError as exc:
                        print(f"  {name:18} idle: {exc}", flush=True)
                    else:
                        records.append({"round": rnd, "server": name, "idle_kib": kib,
                                        "idle_n": args.idle_connections})
                        print(f"  {name:18} idle     {kib:.1f} KiB per connection", flush=True)
    os.unlink(body.name)
    meta = {"rounds": args.rounds, "seconds": args.seconds, "servers": args.servers, "shapes": args.shapes,
            "cpus": (f"server on CPU {SERVER_CPU}, h2load on CPU {CLIENT_CPU}" if PINNED else
                     f"unpinned: server and h2load on CPUs {sorted(os.sched_getaffinity(0))}")}
    save_results(RESULTS, "http2", meta, records)
    return meta, records


def median_rps(records, server, workload, shape):
    """The median req/s of `server`'s successful runs of one point, or None."""
    vals = [r["rps"] for r in records if r.get("server") == server and r.get("workload") == workload
            and r.get("shape") == shape and r.get("ok")]
    return statistics.median(vals) if vals else None


def tables(meta, records):
    servers = [s for s in meta["servers"] if any(r.get("server") == s for r in records)]
    out = []
    for shape in meta["shapes"]:
        rows = []
        for s in servers:
            cells = [median_rps(records, s, w, shape) for w in WORKLOADS]
            if any(c is not None for c in cells):
                rows.append((s, cells))
        if not rows:
            continue
        def best_peer(i, tls):
            return max((c[i] for s, c in rows if s.startswith(ASGI_PEERS) and c[i] and SERVERS[s][2] == tls),
                       default=None)

        out.append(f"\n{shape} (req/s, medians of {meta['rounds']} rounds of {meta['seconds']:g} s; "
                   f"x: against the best peer's ASGI, over TLS against TLS)\n")
        out.append("| server | " + " | ".join(WORKLOADS) + " |")
        out.append("|---|" + "---:|" * len(WORKLOADS))
        for s, cells in rows:
            texts = []
            for i, w in enumerate(WORKLOADS):
                c = cells[i]
                peer = best_peer(i, SERVERS[s][2])
                own = s.startswith("swordfish") and not SERVERS[s][3]
                ratio = f" ({c / peer:.2f}x)" if c and peer and own else ""
                texts.append("–" if c is None else f"{c / 1000:.1f}k{ratio}")
            out.append(f"| {SERVERS[s][1]} | " + " | ".join(texts) + " |")
        out.append(f"\n{shape}: p99 of the request times (ms; p50 in brackets), medians of the rounds\n")
        out.append("| server | " + " | ".join(WORKLOADS) + " |")
        out.append("|---|" + "---:|" * len(WORKLOADS))
        for s, _ in rows:
            texts = []
            for w in WORKLOADS:
                runs = [r for r in records if r.get("server") == s and r.get("workload") == w
                        and r.get("shape") == shape and r.get("ok") and "p99_ms" in r]
                if not runs:
                    texts.append("–")
                    continue
                p99 = statistics.median(r["p99_ms"] for r in runs)
                p50 = statistics.median(r["p50_ms"] for r in runs)
                texts.append(f"{p99:.2f} ({p50:.2f})")
            out.append(f"| {SERVERS[s][1]} | " + " | ".join(texts) + " |")
    idle = [(r["server"], r["idle_kib"], r["idle_n"]) for r in records if "idle_kib" in r]
    if idle:
        out.append(f"\nidle memory of {idle[0][2]} HTTP/2 connections (RSS growth per connection)\n")
        out.append("| server | KiB per connection |")
        out.append("|---|---:|")
        for s, kib, _ in idle:
            out.append(f"| {SERVERS[s][1]} | {kib:.1f} |")
    return "\n".join(out)


def plot(meta, records, directory):
    """req/s by workload and shape, a bar per server, over h2c and over TLS; the idle memory
    a bar per server. The paths."""
    where = "one worker on one CPU, h2load on the other" if meta["cpus"].startswith("server on") else "unpinned"
    points = [(w, shape) for shape in meta["shapes"] for w in WORKLOADS]
    paths = []
    for tls, name in ((False, "h2c"), (True, "tls")):
        series = []
        for s in meta["servers"]:
            if SERVERS[s][2] != tls:
                continue
            values = [(median_rps(records, s, w, shape) or 0) / 1000 for w, shape in points]
            if any(values):
                series.append((SERVERS[s][1], values))
        if series:
            paths.append(grouped_bars(os.path.join(directory, f"http2-{name}.png"),
                                      [f"{w}\n{shape}" for w, shape in points], series,
                                      f"HTTP/2 ({name}): {where}, medians of {meta['rounds']}"))
    idle = [r for r in records if "idle_kib" in r]
    if idle:
        # A bar per server over h2c and over TLS: "x-tls" is x's TLS form, "x-tls-y" its
        # form "x-y" has no h2c twin.
        kib = {}
        for r in idle:
            family = r["server"].replace("-tls", "", 1)
            label = re.sub(r" \((h2c|h2, TLS)\)$", "", SERVERS[r["server"]][1]).replace("(h2, TLS by", "(TLS by")
            kib.setdefault(family, [label, 0, 0])[2 if SERVERS[r["server"]][2] else 1] = r["idle_kib"]
        paths.append(grouped_bars(os.path.join(directory, "http2-idle.png"), ["h2c", "TLS"],
                                  [(label, [h2c, tls]) for label, h2c, tls in kib.values()],
                                  f"HTTP/2: memory of an idle connection, {idle[0]['idle_n']:,} open",
                                  ylabel="KiB (RSS growth per connection)"))
    return paths


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    meta, records = results_of(args, measure)
    print(tables(meta, records))
    if args.plot:
        for path in plot(meta, records, args.plot):
            print(f"plot: {os.path.relpath(path, os.path.dirname(BENCH))}")


if __name__ == "__main__":
    main()
