"""The WSGI/ASGI comparison report, reproduced: a Werkzeug app under gunicorn (sync,
gthread, gevent), granian WSGI and swordfish WSGI against its Starlette twin under uvicorn,
gunicorn + uvicorn-worker, granian ASGI and swordfish ASGI, driven by virtual users.

    run.py --quick            1 round, 3 s per cell (~5 min)
    run.py --full             2 rounds, 10 s per cell (~20 min)
    run.py --from-results F   the table of a stored run

Each of --vus virtual users (default 50) loops GET / (a Jinja2 page), 0.1 s of think
time, GET /api (the fake database: a sleep of 0 or 25 ms, blocking in the WSGI app,
awaited in the ASGI one), GET /; the client is http-vu (../http/native, built by
setup.sh). Cells: 1 and 2 workers x 0 and 25 ms. One worker: the server pinned to CPU 0,
the client to CPU 1; two workers: nothing pinned. Servers take turns in a rotated order
each round. Results go to results/report-*.json.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
# benchmarks/ first: its page.py (machine, commit) imports benchmarks/report.py, not http's.
sys.path[:0] = [BENCH, os.path.join(BENCH, "http")]
import loadgen  # noqa: E402  (the HTTP suite's: http-vu and its JSON)
import peers  # noqa: E402
import table  # noqa: E402
from rounds import free_port, pin, results_of, rotated, save_results  # noqa: E402
from servers import REPO, ServerProcess  # noqa: E402  (the HTTP suite's)

APPS = os.path.join(HERE, "apps")
RESULTS = os.path.join(HERE, "results")
SERVER_CPU, CLIENT_CPU = 0, 1


def _ints(text):
    return [int(x) for x in text.split(",") if x]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 round, 3 s per cell (default)")
    mode.add_argument("--full", action="store_true", help="2 rounds, 10 s per cell")
    p.add_argument("--servers", default=",".join(peers.ROWS),
                   help="comma-separated subset of " + ",".join(peers.ROWS) + "; NAME@2 runs NAME's server "
                   "again as a row of its own")
    p.add_argument("--vus", type=int, default=50, help="virtual users (default 50)")
    p.add_argument("--workers", type=_ints, default=peers.WORKERS,
                   help="worker counts (default " + ",".join(map(str, peers.WORKERS)) + ")")
    p.add_argument("--latencies", type=_ints, default=peers.LATENCIES,
                   help="database latencies in ms (default " + ",".join(map(str, peers.LATENCIES)) + ")")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float, help="measured seconds per cell")
    p.add_argument("--warmup", type=float, help="seconds of load before the measured ones")
    p.add_argument("--from-results", metavar="FILE", help="print the table of an earlier run")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    unknown = [s for s in args.servers if not peers.known(s)]
    if unknown:
        p.error(f"unknown servers: {', '.join(unknown)}")
    args.rounds = args.rounds or (2 if args.full else 1)
    args.seconds = args.seconds or (10 if args.full else 3)
    args.warmup = args.warmup if args.warmup is not None else (3 if args.full else 1)
    return args


def cell(args, rnd, name, workers, latency):
    """One server in one cell: start it, run the virtual users, keep their figures."""
    point = {"round": rnd, "server": name, "workers": workers, "db_ms": latency}
    spin, cpin = (pin(SERVER_CPU), pin(CLIENT_CPU)) if workers == 1 else ([], [])
    port = free_port()
    try:
        with ServerProcess(name, spin + peers.command(name, port, workers), port, APPS,
                           {"REPORT_DB_LATENCY_MS": str(latency)}) as server:
            r = loadgen.virtual_users(f"http://127.0.0.1:{port}", args.vus, args.seconds, args.warmup, cpin)
            if not server.alive():
                raise loadgen.LoadFailed(f"died: {server.output()}")
            if r["p95_ms"] is None:  # e.g. gunicorn sync behind 400 users: nothing came back
                raise loadgen.LoadFailed(f"no request completed in {args.seconds:g} s")
    except (RuntimeError, loadgen.LoadFailed) as exc:
        print(f"  {name} w{workers} db{latency}ms: {exc}", file=sys.stderr, flush=True)
        return {**point, "failed": str(exc)}
    print(f"  round {rnd + 1} {name:17} w{workers} db {latency:>2} ms {r['requests']:>8,} requests "
          f"p95 {r['p95_ms']:7.1f} ms" + (f"  errors {r['errors']}" if r["errors"] else ""), flush=True)
    return {**point, **r}


def measure(args):
    build = subprocess.run([os.path.join(HERE, "setup.sh")])
    if build.returncode != 0:
        sys.exit("wsgi_report/setup.sh failed: http-vu is needed")
    started, records = time.monotonic(), []
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        for latency in args.latencies:
            for workers in args.workers:
                for name in rotated(args.servers, rnd):
                    records.append(cell(args, rnd, name, workers, latency))
    meta = table.run_meta(args, REPO, time.monotonic() - started)
    save_results(RESULTS, "report", meta, records)
    return meta, records


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    meta, records = results_of(args, measure)
    print()
    print(table.table(records, meta))
    for extra in (table.cycle_table(records, meta), table.round_table(records, meta)):
        if extra:
            print()
            print(extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
