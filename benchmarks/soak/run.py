"""`make soak`: swordfish under a long mixed load with faults mixed in, its memory, file
descriptors and threads sampled every 10 s.

Three servers, as users run them: an ASGI app with two workers (static files from
--static-path-dir, WebSockets with and without permessage-deflate), the same app over TLS
with one worker, and a WSGI app with two workers (apps/soak_app.py). The load:

- oha (rate-limited, `-q`): kept-alive GETs on the ASGI and WSGI servers, each at 25% of
  what that server serves alone (measured first, 5 s, with the whole machine); with the
  other streams, the WebSocket and fault clients and the load generators themselves on
  the same CPUs, that holds the machine at about 80% of its capacity; a connection per
  request on both; HTTPS kept alive, and a connection per request at 300/s (the TLS
  server's memory settles after about 100k handshakes: at a lower rate the warm-up would
  outlast the run); a 64 KiB static file; 256 KiB uploads on both; /error, whose 500s are
  the injected ones;
- WebSocket clients (the `websockets` library) echoing messages of 1 B to 64 KiB, half of
  them compressed, reconnecting every few hundred messages;
- faults: slowloris connections (a header byte a second, until the server's header
  timeout closes them), clients that vanish mid-request (a reset after part of an upload's
  body) and mid-message (a reset in a WebSocket frame), and malformed requests, which must
  get a 4xx or a close, never a 5xx.

Targets (the issue's): after the warm-up, growth under 5% in RSS, descriptors and threads
(the mean of the last three samples against the first three after it); no 5xx but the
injected ones; every well-formed request answered. Results in results/soak-*.json.

    run.py [--minutes 30] [--warmup-minutes 10]
"""

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path[:0] = [BENCH, os.path.join(BENCH, "http")]

import page  # noqa: E402
from loadgen import oha_path  # noqa: E402
from rounds import free_port  # noqa: E402
from servers import child_env  # noqa: E402

import websockets  # noqa: E402
from websockets.asyncio.client import connect as ws_connect  # noqa: E402

APPS = os.path.join(HERE, "apps")
RESULTS = os.path.join(HERE, "results")
SAMPLE_EVERY = 10.0  # seconds
SHARE = 0.25  # of a server's capacity alone, for each kept-alive load
READY_TIMEOUT = 30.0


class Server:
    """`swordfish serve TARGET ARGS` on a free port, in a process group of its own."""

    def __init__(self, name, target, *args, tls=None):
        self.name, self.port, self.tls = name, free_port(), tls
        self.log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "swordfish", "serve", target, "--host", "127.0.0.1", "--port", str(self.port),
               "--no-access-log", "--log-level", "warning", *args]
        if tls:
            cmd += ["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]]
        self.proc = subprocess.Popen(cmd, cwd=APPS, env=child_env(None, APPS), stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not listen: {self.output()}") from None
                time.sleep(0.1)

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def tree(self):
        pids, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return pids

    def sample(self):
        """RSS (MiB), open descriptors and threads of the supervisor and its workers."""
        rss = fds = threads = 0
        page_size = os.sysconf("SC_PAGE_SIZE")
        for pid in self.tree():
            try:
                with open(f"/proc/{pid}/statm") as f:
                    rss += int(f.read().split()[1]) * page_size
                fds += len(os.listdir(f"/proc/{pid}/fd"))
                with open(f"/proc/{pid}/status") as f:
                    threads += next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
            except (OSError, StopIteration):
                pass
        return {"rss_mib": round(rss / 2**20, 2), "fds": fds, "threads": threads, "processes": len(self.tree())}

    def stop(self):
        """SIGTERM, as a process manager stops it: its exit code."""
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            return self.proc.wait()


def make_cert(directory):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def oha(url, seconds, rate, connections, *extra):
    """oha for `seconds` at `rate` requests/s (None: as fast as it can), in the background."""
    limit = ["-q", f"{rate:g}"] if rate is not None else []
    cmd = [oha_path(), "-z", f"{seconds:g}s", *limit, "-c", str(connections), "--no-tui",
           "--output-format", "json", *extra, url]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def oha_result(proc, name):
    out, err = proc.communicate()
    if proc.returncode != 0:
        return {"name": name, "failed": err.strip()[-300:]}
    r = json.loads(out)
    codes = {int(k): v for k, v in (r.get("statusCodeDistribution") or {}).items()}
    # -z ends by aborting the requests in flight: those are not failures.
    errors = {k: v for k, v in (r.get("errorDistribution") or {}).items() if "deadline" not in k}
    return {"name": name, "codes": codes, "errors": errors, "rps": round(r["summary"].get("requestsPerSec", 0), 1)}


def capacity(url):
    return oha_result(oha(url, 5, None, 32), "capacity").get("rps", 0)


class Faults:
    """The WebSocket clients and the fault injectors, on an asyncio loop in a thread."""

    def __init__(self, asgi, wsgi):
        self.asgi, self.wsgi = asgi, wsgi
        self.counts = {"ws_echoed": 0, "ws_deflate_echoed": 0, "ws_connections": 0, "slowloris_closed": 0,
                       "vanished_mid_request": 0, "vanished_mid_message": 0, "malformed_refused": 0}
        self.failures = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()))

    async def _main(self):
        tasks = [self._ws(deflate) for deflate in (False, True) for _ in range(4)]
        tasks += [self._slowloris() for _ in range(20)]
        tasks += [self._vanish_request(self.asgi), self._vanish_request(self.wsgi), self._vanish_message(),
                  self._malformed(self.asgi), self._malformed(self.wsgi)]
        await asyncio.gather(*tasks)

    def fail(self, what):
        if len(self.failures) < 100:
            self.failures.append(what)

    async def _ws(self, deflate):
        key = "ws_deflate_echoed" if deflate else "ws_echoed"
        while not self.stop.is_set():
            try:
                async with ws_connect(f"ws://127.0.0.1:{self.asgi.port}/ws", max_size=2**20,
                                      compression="deflate" if deflate else None) as ws:
                    self.counts["ws_connections"] += 1
                    for _ in range(random.randint(100, 400)):
                        if self.stop.is_set():
                            break
                        size = random.choice((1, 100, 4096, 65536))
                        message = random.randbytes(size) if random.random() < 0.5 else "x" * size
                        await ws.send(message)
                        if await asyncio.wait_for(ws.recv(), 30) != message:
                            self.fail("websocket: a wrong echo")
                        self.counts[key] += 1
                        await asyncio.sleep(0.02)
            except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as exc:
                if not self.stop.is_set():
                    self.fail(f"websocket: {exc!r}")
                    await asyncio.sleep(1)

    async def _slowloris(self):
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", random.choice((self.asgi, self.wsgi)).port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not self.stop.is_set():
                    writer.write(b"X")
                    await writer.drain()
                    try:
                        # A 408 or the close: the header timeout ended it.
                        await asyncio.wait_for(reader.read(1024), 1.0)
                    except asyncio.TimeoutError:
                        continue
                    self.counts["slowloris_closed"] += 1
                    break
                writer.close()
            except OSError:
                await asyncio.sleep(0.5)

    @staticmethod
    def _reset(writer):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _vanish_request(self, server):
        while not self.stop.is_set():
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 5000)
                await writer.drain()
                await asyncio.sleep(0.01)
                self._reset(writer)
                self.counts["vanished_mid_request"] += 1
            except OSError:
                pass
            await asyncio.sleep(0.05)

    async def _vanish_message(self):
        while not self.stop.is_set():
            try:
                ws = await ws_connect(f"ws://127.0.0.1:{self.asgi.port}/ws", compression=None)
                # A masked binary frame announcing 60000 bytes, 1000 of them sent.
                frame = bytes([0x82, 0xFE]) + struct.pack("!H", 60000) + os.urandom(4) + os.urandom(1000)
                ws.transport.write(frame)
                await asyncio.sleep(0.01)
                sock = ws.transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                ws.transport.abort()
                self.counts["vanished_mid_message"] += 1
            except (OSError, websockets.exceptions.WebSocketException):
                pass
            await asyncio.sleep(0.1)

    MALFORMED = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
    ]

    async def _malformed(self, server):
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(random.choice(self.MALFORMED))
                await writer.drain()
                answer = await asyncio.wait_for(reader.read(64), 15)
                writer.close()
                if answer.startswith(b"HTTP/1.1 4") or answer == b"":
                    self.counts["malformed_refused"] += 1
                else:
                    self.fail(f"malformed request answered {answer[:40]!r}")
            except (OSError, asyncio.TimeoutError) as exc:
                self.fail(f"malformed: {exc!r}")
            await asyncio.sleep(0.05)


def growth(samples, warmup_s):
    """Per measure: the median of the last third of the samples after the warm-up against
    the median of the first third, in percent. Medians of thirds, not single samples: the
    descriptors count the connections open at that instant (±10 from one sample to the
    next under this load), and the last samples catch the load generators' end."""
    after = [s for s in samples if s["t"] >= warmup_s]
    if len(after) < 6:
        return {}
    third = len(after) // 3
    out = {}
    for key in ("rss_mib", "fds", "threads"):
        first = statistics.median(s[key] for s in after[:third])
        last = statistics.median(s[key] for s in after[-third:])
        out[key] = {"first": round(first, 2), "last": round(last, 2), "max": max(s[key] for s in after),
                    "growth_pct": round((last - first) / first * 100, 2) if first else 0.0}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--warmup-minutes", type=float, default=None, help="default: a third of the run")
    p.add_argument("--from-results", metavar="FILE", help="report a saved run again (the growth recomputed)")
    p.add_argument("--timeout-keep-alive", type=float, default=None,
                   help="the servers' --timeout-keep-alive (default theirs, 5 s); longer than the run, no idle "
                        "kept-alive connection is closed under a client")
    args = p.parse_args(argv)
    if args.from_results:
        with open(args.from_results) as f:
            record = json.load(f)
        warmup = record["meta"]["warmup_minutes"] * 60
        record["growth"] = {name: growth([s for s in record["samples"] if s["server"] == name], warmup)
                            for name in record["growth"]}
        print(report(record))
        return 0
    seconds = args.minutes * 60
    warmup = (args.warmup_minutes if args.warmup_minutes is not None else args.minutes / 3) * 60
    if oha_path() is None:
        sys.exit("soak: no oha (make -C benchmarks http-setup installs it)")
    tmp = tempfile.mkdtemp(prefix="soak-")
    static = os.path.join(tmp, "static")
    os.mkdir(static)
    with open(os.path.join(static, "file.bin"), "wb") as f:
        f.write(os.urandom(64 * 1024))
    upload = os.path.join(tmp, "upload.bin")
    with open(upload, "wb") as f:
        f.write(os.urandom(256 * 1024))
    tls = make_cert(tmp)

    common = () if args.timeout_keep_alive is None else ("--timeout-keep-alive", f"{args.timeout_keep_alive:g}")
    servers = {
        "asgi": Server("asgi", "soak_app:app", "--workers", "2", "--static-path-dir", static, *common),
        "wsgi": Server("wsgi", "soak_app:wsgi_app", "--interface", "wsgi", "--workers", "2", *common),
        "tls": Server("tls", "soak_app:app", *common, tls=tls),
    }
    started = time.monotonic()
    try:
        cap = {name: capacity(servers[name].url + "/") for name in ("asgi", "wsgi")}
        print(f"soak: capacity alone: asgi {cap['asgi']:,.0f} req/s, wsgi {cap['wsgi']:,.0f} req/s; "
              f"{args.minutes:g} min at {SHARE:.0%} of each", flush=True)
        a, w, t = servers["asgi"].url, servers["wsgi"].url, servers["tls"].url
        loads = {
            "asgi keep-alive": oha(a + "/", seconds, SHARE * cap["asgi"], 16),
            "wsgi keep-alive": oha(w + "/", seconds, SHARE * cap["wsgi"], 16),
            "asgi per request": oha(a + "/", seconds, 200, 4, "--disable-keepalive"),
            "wsgi per request": oha(w + "/", seconds, 200, 4, "--disable-keepalive"),
            "https keep-alive": oha(t + "/", seconds, 500, 8, "--insecure"),
            "https per request": oha(t + "/", seconds, 300, 4, "--insecure", "--disable-keepalive"),
            "static 64 KiB": oha(a + "/static/file.bin", seconds, 300, 4),
            "asgi upload 256 KiB": oha(a + "/upload", seconds, 100, 4, "-m", "POST", "-D", upload),
            "wsgi upload 256 KiB": oha(w + "/upload", seconds, 100, 4, "-m", "POST", "-D", upload),
            "injected 500s": oha(a + "/error", seconds, 5, 1),
        }
        faults = Faults(servers["asgi"], servers["wsgi"])
        faults.thread.start()
        samples = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            now = time.monotonic() - t0
            for name, srv in servers.items():
                samples.append({"t": round(now, 1), "server": name, **srv.sample()})
            line = ", ".join(f"{s['server']} {s['rss_mib']:.0f} MiB {s['fds']} fds {s['threads']} thr"
                             for s in samples[-len(servers):])
            print(f"  {now / 60:5.1f} min: {line}", flush=True)
            time.sleep(max(0.0, SAMPLE_EVERY - ((time.monotonic() - t0) % SAMPLE_EVERY)))
        faults.stop.set()
        results = {name: oha_result(proc, name) for name, proc in loads.items()}
        faults.thread.join(60)
        codes = [srv.stop() for srv in servers.values()]
    finally:
        for srv in servers.values():
            if srv.proc.poll() is None:
                os.killpg(srv.proc.pid, 9)
    by_server = {name: growth([s for s in samples if s["server"] == name], warmup) for name in servers}
    unexpected_5xx = sum(n for r in results.values() if r["name"] != "injected 500s"
                         for code, n in r.get("codes", {}).items() if code >= 500)
    unanswered = {r["name"]: r.get("errors") or r.get("failed") for r in results.values()
                  if r.get("errors") or r.get("failed")}
    meta = {"python": sys.version.split()[0], "cpu": page.cpu_model(), "commit": page.git_commit(REPO),
            "date": time.strftime("%Y-%m-%d %H:%M"), "minutes": args.minutes, "warmup_minutes": warmup / 60,
            "timeout_keep_alive": args.timeout_keep_alive,
            "capacity": cap, "elapsed_s": round(time.monotonic() - started)}
    record = {"meta": meta, "samples": samples, "growth": by_server, "loads": results, "faults": faults.counts,
              "fault_failures": faults.failures, "unexpected_5xx": unexpected_5xx, "unanswered": unanswered,
              "exit_codes": codes}
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(f"results: {os.path.relpath(path, REPO)}")
    print(report(record))
    ok = (unexpected_5xx == 0 and not unanswered and not faults.failures and codes == [0, 0, 0]
          and all(g["growth_pct"] < 5 for v in by_server.values() for g in v.values()))
    return 0 if ok else 1


def report(record):
    m = record["meta"]
    lines = [f"Python {m['python']}, {m['cpu']}, commit {m['commit']}, {m['date']}: {m['minutes']:g} min, "
             f"warm-up {m['warmup_minutes']:g} min", "",
             "| server | RSS MiB (first → last third's median, max) | growth | descriptors | growth | threads | growth |",
             "|---|---|---:|---|---:|---|---:|"]
    for name, g in record["growth"].items():
        if not g:
            continue
        cells = [f"{g[k]['first']:g} → {g[k]['last']:g} (max {g[k]['max']:g}) | {g[k]['growth_pct']:+.1f}%"
                 for k in ("rss_mib", "fds", "threads")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| load | answered (by status) | not answered | req/s |", "|---|---|---|---:|"]
    for r in record["loads"].values():
        codes = ", ".join(f"{c}: {n:,}" for c, n in sorted(r.get("codes", {}).items()))
        lines.append(f"| {r['name']} | {codes} | {r.get('errors') or r.get('failed') or 0} | {r.get('rps', 0):,} |")
    lines += ["", "faults and WebSockets: " + ", ".join(f"{k} {v:,}" for k, v in record["faults"].items()),
              f"fault-client failures: {record['fault_failures'] or 'none'}",
              f"5xx other than the injected: {record['unexpected_5xx']}; exit codes {record['exit_codes']}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
