"""The RSGI suite: swordfish RSGI against granian RSGI on each of its loops (one runtime
thread, as the seed's granian tables run it), with swordfish ASGI and native hyper for
reference, on granian's RSGI benchmark routes; and granian's "AsyncIO-specific" tables
(ASGI and RSGI on each loop; swordfish's native Task against the stdlib's).

    run.py --quick            1 round, 2 s runs, c128 (a few minutes)
    run.py --full             3 rounds, 5 s runs; get10k and echo10k-iter at c64/128/256
    run.py --suite loops      the seed's "Event loops" table: ASGI and RSGI servers on
                              asyncio, uvloop, rloop (granian) and swordfish's loop, get
                              10 KiB and echo 10 KiB iterated, best of c64/c128/c256
    run.py --suite tasks      the seed's "Task implementation" table: swordfish ASGI on its
                              loop with its native Task and with the stdlib Task
    run.py --from-results F   the tables of a stored run

One worker pinned to CPU 0, wrk (one thread) pinned to CPU 1, servers in a rotated order
each round; medians; results in results/rsgi-*.json.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path[:0] = [BENCH, os.path.join(BENCH, "http")]
import loadgen  # noqa: E402
import page  # noqa: E402
from charts import grouped_bars  # noqa: E402
from rounds import free_port, pin, results_of, rotated, save_results  # noqa: E402
from servers import NATIVE_DIR, REPO, ServerProcess  # noqa: E402

APPS = os.path.join(HERE, "apps")
RESULTS = os.path.join(HERE, "results")
SERVER_CPU, CLIENT_CPU = 0, 1

# name: (path, POST body size or None)
ROUTES = {
    "hello": ("/", None),
    "b10": ("/b10", None), "b1k": ("/b1k", None), "b10k": ("/b10k", None), "b100k": ("/b100k", None),
    "s10": ("/s10", None), "s1k": ("/s1k", None), "s10k": ("/s10k", None), "s100k": ("/s100k", None),
    "echo1k": ("/echo", 1024), "echo10k-iter": ("/echoi", 10240), "echo100k-iter": ("/echoi", 100 * 1024),
    "file": ("/fp", None), "io10": ("/io10", None), "io100": ("/io100", None),
}
# What native hyper serves of them.
NATIVE_ROUTES = {"hello": "/", "b10k": "/10k", "b100k": "/100k"}
WIDE = ("b10k", "echo10k-iter")  # measured at every concurrency in --full


def _swordfish(target, loop="swordfish", extra=()):
    def command(port):
        return [sys.executable, "-m", "swordfish", "serve", target, "--host", "127.0.0.1", "--port", str(port),
                "--no-access-log", "--log-level", "warning", "--loop", loop, *extra]
    return command


def _granian(interface, loop, task_impl=None):
    def command(port):
        return [sys.executable, "-m", "granian", "--interface", interface, "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--runtime-threads", "1", "--loop", loop, "--no-ws", "--log-level", "warning",
                *(["--task-impl", task_impl] if task_impl else []), f"bench_{interface}:app"]
    return command


def _native(port):
    return [os.path.join(NATIVE_DIR, "http-native"), "--port", str(port)]


SERVERS = {
    "swordfish-rsgi": (_swordfish("bench_rsgi:app", extra=("--interface", "rsgi")), "swordfish RSGI"),
    "granian-rsgi-asyncio": (_granian("rsgi", "asyncio"), "granian RSGI + asyncio"),
    "granian-rsgi-uvloop": (_granian("rsgi", "uvloop"), "granian RSGI + uvloop"),
    "granian-rsgi-rloop": (_granian("rsgi", "rloop"), "granian RSGI + rloop"),
    "swordfish-asgi": (_swordfish("bench_asgi:app"), "swordfish ASGI"),
    "native": (_native, "native hyper (Rust, 1 thread)"),
    # The seed's "Event loops" table: each server on each loop.
    "swordfish-rsgi-asyncio": (_swordfish("bench_rsgi:app", "asyncio", ("--interface", "rsgi")),
                               "swordfish RSGI + asyncio"),
    "swordfish-rsgi-uvloop": (_swordfish("bench_rsgi:app", "uvloop", ("--interface", "rsgi")), "swordfish RSGI + uvloop"),
    "swordfish-asgi-asyncio": (_swordfish("bench_asgi:app", "asyncio"), "swordfish ASGI + asyncio"),
    "swordfish-asgi-uvloop": (_swordfish("bench_asgi:app", "uvloop"), "swordfish ASGI + uvloop"),
    "granian-asgi-asyncio": (_granian("asgi", "asyncio"), "granian ASGI + asyncio"),
    "granian-asgi-uvloop": (_granian("asgi", "uvloop"), "granian ASGI + uvloop"),
    "granian-asgi-rloop": (_granian("asgi", "rloop"), "granian ASGI + rloop"),
    # The seed's "Task implementation" table: swordfish's loop, its native Task or the stdlib's.
    "swordfish-asgi-stdlib-task": (_swordfish("bench_asgi:app"), "swordfish ASGI, stdlib Task"),
}
# The environment a server runs with: the loop's futures and tasks made by the stdlib's
# classes instead of its native ones.
ENV = {"swordfish-asgi-stdlib-task": {"SWORDFISH_NATIVE_TASKS": "0"}}
SUITES = {
    "rsgi": ["swordfish-rsgi", "granian-rsgi-asyncio", "granian-rsgi-uvloop", "granian-rsgi-rloop", "swordfish-asgi",
             "native"],
    "loops": ["swordfish-rsgi", "swordfish-rsgi-asyncio", "swordfish-rsgi-uvloop", "granian-rsgi-asyncio",
              "granian-rsgi-uvloop", "granian-rsgi-rloop", "swordfish-asgi", "swordfish-asgi-asyncio",
              "swordfish-asgi-uvloop", "granian-asgi-asyncio", "granian-asgi-uvloop", "granian-asgi-rloop"],
    "tasks": ["swordfish-asgi", "swordfish-asgi-stdlib-task"],
}
SUITE_ROUTES = {"rsgi": list(ROUTES), "loops": ["b10k", "echo10k-iter"], "tasks": ["b10k", "echo10k-iter"]}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 round, 2 s runs, c128")
    mode.add_argument("--full", action="store_true", help="3 rounds, 5 s runs, wide routes at c64/c128/c256")
    p.add_argument("--suite", choices=SUITES, default="rsgi")
    p.add_argument("--servers", help="comma-separated server names (default: the suite's)")
    p.add_argument("--routes", help="comma-separated route names (default: the suite's)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--from-results", metavar="FILE")
    p.add_argument("--plot", metavar="DIR", help="also draw DIR/rsgi-SUITE.png (docs/benchmarks is where the "
                   "docs take it from)")
    args = p.parse_args(argv)
    args.servers = args.servers.split(",") if args.servers else SUITES[args.suite]
    args.routes = args.routes.split(",") if args.routes else SUITE_ROUTES[args.suite]
    bad = [s for s in args.servers if s not in SERVERS] + [r for r in args.routes if r not in ROUTES]
    if bad:
        p.error(f"unknown: {', '.join(bad)}")
    args.rounds = args.rounds or (3 if args.full else 1)
    args.seconds = args.seconds or (5 if args.full else 2)
    args.warmup = args.warmup if args.warmup is not None else 1
    wide = args.full or args.suite != "rsgi"
    args.conc = {r: ((64, 128, 256) if wide and (r in WIDE or args.suite != "rsgi") else (128,)) for r in args.routes}
    return args


def measure(args):
    started, records = time.monotonic(), []
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        for name in rotated(args.servers, rnd):
            routes = [r for r in args.routes if name != "native" or r in NATIVE_ROUTES]
            port = free_port()
            try:
                server = ServerProcess(name, pin(SERVER_CPU) + SERVERS[name][0](port), port, APPS, ENV.get(name))
            except RuntimeError as exc:
                print(f"  {name}: {exc}", file=sys.stderr)
                records.extend({"round": rnd, "server": name, "route": r, "failed": str(exc)} for r in routes)
                continue
            with server:
                for route in routes:
                    path, post = ROUTES[route]
                    path = NATIVE_ROUTES.get(route, path) if name == "native" else path
                    url = f"http://127.0.0.1:{port}{path}"
                    for conc in args.conc[route]:
                        point = {"round": rnd, "server": name, "route": route, "conc": conc}
                        try:
                            if args.warmup:
                                loadgen.wrk(url, conc, args.warmup, pin(CLIENT_CPU), post)
                            cpu0 = server.cpu_seconds()
                            r = loadgen.wrk(url, conc, args.seconds, pin(CLIENT_CPU), post)
                            r["cpu_us_per_req"] = (server.cpu_seconds() - cpu0) / max(r["requests"], 1) * 1e6
                            if not server.alive():
                                raise loadgen.LoadFailed(f"{name} died: {server.output()}")
                        except loadgen.LoadFailed as exc:
                            print(f"  {name} {route} c{conc}: {exc}", file=sys.stderr)
                            records.append({**point, "failed": str(exc)})
                            continue
                        records.append({**point, **r})
                        print(f"  round {rnd + 1} {name:26} {route:14} c{conc:<4} {r['rps']:>10,.0f} req/s "
                              f"p99 {r['p99_ms']:7.2f} ms cpu {r['cpu_us_per_req']:6.1f} us/req"
                              + (f" errors {r['errors']}" if r["errors"] else ""), flush=True)
    meta = {"python": sys.version.split()[0], "cpu": page.cpu_model(), "commit": page.git_commit(REPO),
            "date": time.strftime("%Y-%m-%d %H:%M"), "suite": args.suite, "servers": args.servers,
            "routes": args.routes, "rounds": args.rounds, "seconds": args.seconds,
            "elapsed_s": round(time.monotonic() - started), "granian": _version("granian")}
    save_results(RESULTS, f"rsgi-{args.suite}", meta, records)
    return meta, records


def _version(module):
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return None


def medians(records):
    """{(server, route, conc): {rps, p99_ms, cpu_us_per_req, rounds}} over the rounds that ran."""
    groups = {}
    for r in records:
        if "failed" not in r:
            groups.setdefault((r["server"], r["route"], r["conc"]), []).append(r)
    return {k: {f: statistics.median(x[f] for x in rs) for f in ("rps", "p99_ms", "cpu_us_per_req")} | {"rounds": len(rs)}
            for k, rs in groups.items()}


def best(med, server, route):
    """The best concurrency's figures of a server on a route (the seed's "best of")."""
    cells = [m | {"conc": c} for (s, r, c), m in med.items() if s == server and r == route]
    return max(cells, key=lambda m: m["rps"]) if cells else None


def tables(meta, records):
    med = medians(records)
    label = {name: SERVERS[name][1] for name in SERVERS}
    parts = [f"Python {meta['python']}, {meta['cpu']}, commit {meta['commit']}, {meta['date']}, granian "
             f"{meta.get('granian')}; one worker pinned to one CPU, wrk on another; medians of {meta['rounds']} "
             f"round(s) of {meta['seconds']:g} s"]
    peers = [s for s in meta["servers"] if s.startswith("granian-rsgi")]
    concs = sorted({k[2] for k in med})
    for conc in concs:
        rows = [r for r in meta["routes"] if any(k[1] == r and k[2] == conc for k in med)]
        if not rows:
            continue
        servers = [s for s in meta["servers"] if any(k[0] == s and k[2] == conc for k in med)]
        head = "| route | " + " | ".join(label[s] for s in servers) + (" | swordfish RSGI / best granian RSGI |"
                                                                          if peers else " |")
        lines = [f"**c{conc}** — req/s (p99 ms)", "", head, "|---|" + "---:|" * (len(servers) + bool(peers))]
        for route in rows:
            cells = []
            for s in servers:
                m = med.get((s, route, conc))
                cells.append(f"{m['rps'] / 1000:.1f}k ({m['p99_ms']:.1f})" if m else "–")
            ratio = ""
            if peers:
                ours = med.get(("swordfish-rsgi", route, conc))
                theirs = [med[(s, route, conc)]["rps"] for s in peers if (s, route, conc) in med]
                ratio = f" | {ours['rps'] / max(theirs):.2f}x" if ours and theirs else " | –"
            lines.append(f"| {route} | " + " | ".join(cells) + ratio + " |")
        parts.append("\n".join(lines))
    if meta["suite"] in ("loops", "tasks"):
        lines = ["**best of c64/c128/c256** — req/s (p99 ms, concurrency)", "",
                 "| server | " + " | ".join(meta["routes"]) + " |", "|---|" + "---:|" * len(meta["routes"])]
        for s in meta["servers"]:
            cells = []
            for route in meta["routes"]:
                b = best(med, s, route)
                cells.append(f"{b['rps'] / 1000:.1f}k ({b['p99_ms']:.1f}, c{b['conc']})" if b else "–")
            lines.append(f"| {label[s]} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def plot(meta, records, directory):
    """req/s by route (each server's best concurrency), a bar per server; the path."""
    med = medians(records)
    routes = [r for r in meta["routes"] if any(k[1] == r for k in med)]
    servers = [s for s in meta["servers"] if any(k[0] == s for k in med)]
    series = [(SERVERS[s][1], [(best(med, s, r) or {}).get("rps", 0) / 1000 for r in routes]) for s in servers]
    return grouped_bars(os.path.join(directory, f"rsgi-{meta['suite']}.png"), routes, series,
                        f"RSGI suite ({meta['suite']}): one worker on one CPU, Python {meta['python']}, "
                        f"medians of {meta['rounds']}", rotate=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    meta, records = results_of(args, measure)
    print()
    print(tables(meta, records))
    if args.plot:
        print(f"plot: {os.path.relpath(plot(meta, records, args.plot), REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
