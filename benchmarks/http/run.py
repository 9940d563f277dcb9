"""The HTTP server benchmark: swordfish against granian, uvicorn, hypercorn and a native
hyper server, in one run, alternating servers between rounds.

    run.py --quick            short runs, one round, the main points (a few minutes)
    run.py --full             10 s runs, 3 rounds, every point; writes docs/benchmarks.md
    run.py --from-results F   redo the tables (and with --docs the page) from a results file
    run.py --suite wsgi ...   the WSGI servers instead (swordfish --interface wsgi, granian
                              WSGI, gunicorn gthread and gevent, waitress; swordfish ASGI and
                              native for reference), throughput workloads only, no docs
    run.py --suite metrics ...  swordfish with and without --metrics (what counting costs),
                              throughput workloads only, no docs

Throughput workloads (wrk, servers pinned to CPU 0 and wrk to CPU 1): hello world at
400 connections, GET of a 10 KiB body and POST echo of a 10 KiB body at 64/128/256.
Virtual users (http-vu): 10 users looping GET /, 0.1 s, GET /api, GET / against the
catalogue app, whose /api asks a fake database server (0 or 25 ms latency).
"""
import argparse
import os
import sys
import time

import loadgen
import report
from servers import SUITES, Server, entry  # (it puts benchmarks/ on sys.path, for rounds)
from rounds import exit_on_sigterm, free_port, load_results, pin, rotated, save_results

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
DB_BIN = os.path.join(HERE, "native", "target", "release", "fake-db")
SERVER_CPU, CLIENT_CPU = 0, 1

THROUGHPUT = {
    # name: (path, POST body size or None, concurrencies)
    "hello": ("/", None, (400,)),
    "get10k": ("/10k", None, (64, 128, 256)),
    "echo10k": ("/echo", 10240, (64, 128, 256)),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 s runs, 1 round, main points only")
    mode.add_argument("--full", action="store_true", help="10 s runs, 3 rounds, writes the docs")
    p.add_argument("--suite", choices=SUITES, default="asgi",
                   help="the default server list: asgi (default) or wsgi")
    p.add_argument("--servers", help="comma-separated server names (default: the suite's); "
                   "tuned variants: swordfish-wsgi-tN, gunicorn-gthread-tN, granian-wsgi-btN")
    p.add_argument("--workloads", help="comma-separated subset of hello,get10k,echo10k,vu "
                   "(default: all; the wsgi suite: no vu)")
    p.add_argument("--loadgen", choices=("wrk", "oha"), default="wrk",
                   help="the throughput workloads' load generator (default wrk)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--docs", action="store_true", help="write docs/benchmarks.md (default with --full)")
    p.add_argument("--from-results", metavar="FILE", help="report an earlier run's results")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s] if args.servers else SUITES[args.suite]
    unknown = [s for s in args.servers if entry(s) is None]
    if unknown:
        p.error(f"unknown servers: {', '.join(unknown)}")
    workloads = args.workloads or ("hello,get10k,echo10k,vu" if args.suite == "asgi" else "hello,get10k,echo10k")
    args.workloads = [w for w in workloads.split(",") if w]
    quick = not args.full
    args.rounds = args.rounds or (1 if quick else 3)
    args.seconds = args.seconds or (3 if quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.concurrency = {name: (conc[:1] if name == "hello" else (128,)) if quick else conc
                        for name, (_, _, conc) in THROUGHPUT.items()}
    args.db_latencies = (0,) if quick else (0, 25)
    args.worker_counts = (1,) if quick else (1, 2)
    if args.suite != "asgi" and args.docs:
        p.error(f"the {args.suite} suite writes no docs section")
    args.docs = args.docs or (args.full and args.suite == "asgi")
    return args


def measure(server, run_load):
    """One measured run: the load generator's figures plus the server's CPU per request."""
    cpu0 = server.cpu_seconds()
    result = run_load()
    cpu = server.cpu_seconds() - cpu0
    result["cpu_us_per_req"] = cpu / result["requests"] * 1e6 if result["requests"] else None
    if not server.alive():
        raise loadgen.LoadFailed(f"{server.name} died: {server.output()}")
    return result


def record(records, point, r, what, percentile):
    """Keep one measurement and show it."""
    records.append({**point, **r})
    print(f"  round {point['round'] + 1} {point['server']:20} {what} {r['rps']:>10,.0f} req/s "
          f"{percentile} {r[percentile + '_ms']:7.2f} ms  cpu {r['cpu_us_per_req'] or 0:6.1f} us/req"
          + (f"  errors {r['errors']}" if r["errors"] else ""), flush=True)


def throughput_round(args, rnd, records):
    names = [w for w in THROUGHPUT if w in args.workloads]
    if not names:
        return
    for name in rotated(args.servers, rnd):
        port = free_port()
        try:
            server = Server(name, "bench", port, pin=pin(SERVER_CPU))
        except RuntimeError as exc:
            print(f"  {name}: {exc}", file=sys.stderr)
            records.extend({"round": rnd, "server": name, "workload": w, "conc": c, "failed": str(exc)}
                           for w in names for c in args.concurrency[w])
            continue
        with server:
            for workload in names:
                path, post, _ = THROUGHPUT[workload]
                url = f"http://127.0.0.1:{port}{path}"
                for conc in args.concurrency[workload]:
                    point = {"round": rnd, "server": name, "workload": workload, "conc": conc}
                    generate = getattr(loadgen, args.loadgen)
                    try:
                        if args.warmup:
                            generate(url, conc, args.warmup, pin(CLIENT_CPU), post)
                        r = measure(server, lambda: generate(url, conc, args.seconds, pin(CLIENT_CPU), post))
                    except loadgen.LoadFailed as exc:
                        print(f"  {name} {workload} c{conc}: {exc}", file=sys.stderr)
                        records.append({**point, "failed": str(exc)})
                        continue
                    record(records, point, r, f"{workload:8} c{conc:<4}", "p99")


def vu_round(args, rnd, records):
    if "vu" not in args.workloads:
        return
    import subprocess
    names = [s for s in args.servers if entry(s).catalogue]
    if not names:
        return
    for latency in args.db_latencies:
        db_port = free_port()
        db = subprocess.Popen(pin(CLIENT_CPU) + [DB_BIN, "--port", str(db_port), "--latency-ms", str(latency)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            if not db.stdout.readline().startswith("READY"):
                raise RuntimeError("fake-db did not start")
            for workers in args.worker_counts:
                # One worker: pinned like the throughput runs. Two: the servers get both CPUs
                # (a second worker on the same CPU would only add switching).
                spin, cpin = (pin(SERVER_CPU), pin(CLIENT_CPU)) if workers == 1 else ([], [])
                for name in rotated(names, rnd):
                    port = free_port()
                    point = {"round": rnd, "server": name, "workload": "vu", "db_ms": latency,
                             "workers": workers, "conc": 10}
                    try:
                        with Server(name, "catalogue", port, workers, spin, {"BENCH_DB_PORT": str(db_port)}) as server:
                            url = f"http://127.0.0.1:{port}"
                            r = measure(server, lambda: loadgen.virtual_users(url, 10, args.seconds, args.warmup, cpin))
                    except (RuntimeError, loadgen.LoadFailed) as exc:
                        print(f"  {name} vu db{latency}ms w{workers}: {exc}", file=sys.stderr)
                        records.append({**point, "failed": str(exc)})
                        continue
                    record(records, point, r, f"vu db {latency:>2} ms w{workers}", "p95")
        finally:
            db.terminate()
            db.wait()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()
    if args.from_results:
        meta, records = load_results(args.from_results)
        if args.docs and meta.get("suite", "asgi") != "asgi":
            sys.exit(f"a {meta['suite']} suite run has no docs section")
    else:
        started = time.monotonic()
        records = []
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", flush=True)
            throughput_round(args, rnd, records)
            vu_round(args, rnd, records)
        meta = report.run_meta(args, time.monotonic() - started)
        save_results(RESULTS, "http" if args.suite == "asgi" else f"http-{args.suite}", meta, records)
    stats = report.summarize(records)
    print()
    print(report.tables(stats, meta, records))
    if args.docs:
        report.write_docs(stats, meta, records)
        print("wrote docs/benchmarks.md (HTTP section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
