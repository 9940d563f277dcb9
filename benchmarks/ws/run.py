"""The WebSocket server benchmark: swordfish against uvicorn (websockets-sansio and
wsproto), granian, hypercorn and a native tokio-tungstenite server, in one run,
alternating servers between rounds.

    run.py --quick            1 round, 2 s runs, a subset of the points (~3 min)
    run.py --full             3 rounds, 5 s runs, every point; writes docs/benchmarks.md
    run.py --from-results F   redo tables and plots (with --docs the docs section) of a
                              stored run without measuring
    run.py --full --no-docs   a full run that leaves docs/ alone

Tests (--tests): echo (text/binary at 16 B, 1 KiB, 64 KiB; 1 and 64 connections),
broadcast (N = 16, 64), deflate (4 KiB JSON echo, permessage-deflate offered) and idle
(server memory of --idle-count connections, with and without deflate). Servers run pinned
to CPU 0, the ws-load client to CPU 1. Results go to results/ws-*.json.
"""
import argparse
import os
import subprocess
import sys
import time

import report
import suite
import tables
from servers import REPO, SERVERS  # (it puts benchmarks/ on sys.path, for rounds)
from rounds import results_of, save_results

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 round, 2 s runs, a subset (default)")
    mode.add_argument("--full", action="store_true", help="3 rounds, 5 s runs, every point, writes the docs")
    p.add_argument("--servers", default=",".join(s for s in SERVERS if not s.endswith("-rsgi")),
                   help="comma-separated subset (default: the ASGI servers and native; swordfish-rsgi and "
                   "granian-rsgi serve the apps' RSGI twins)")
    p.add_argument("--tests", default=",".join(suite.TESTS), help="comma-separated subset of " + ",".join(suite.TESTS))
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float, help="measured seconds of an echo run")
    p.add_argument("--warmup", type=float, help="warm-up seconds before each echo run")
    p.add_argument("--idle-count", type=int, default=10_000, help="idle connections (default 10000)")
    p.add_argument("--idle-settle", type=float, default=1.0, help="seconds between opening and reading RSS")
    p.add_argument("--broadcast-total", type=int,
                   help="messages delivered per broadcast run, N*N*K (quick 160000, full 640000)")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin with taskset")
    p.add_argument("--docs", action=argparse.BooleanOptionalAction,
                   help="write docs/benchmarks.md and its plots (default: with --full)")
    p.add_argument("--from-results", metavar="FILE", help="report an earlier run's results")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    args.tests = [t for t in args.tests.split(",") if t]
    for what, given, known in (("servers", args.servers, SERVERS), ("tests", args.tests, suite.TESTS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            p.error(f"unknown {what}: {', '.join(unknown)}")
    args.mode = "full" if args.full else "quick"
    quick = not args.full
    args.rounds = args.rounds or (1 if quick else 3)
    args.seconds = args.seconds or (2 if quick else 5)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if quick else 1)
    args.broadcast_total = args.broadcast_total or suite.BROADCAST_TOTAL[args.mode]
    args.docs = args.full if args.docs is None else args.docs
    return args


def build():
    try:
        subprocess.run([os.path.join(HERE, "setup.sh")], check=True)
    except subprocess.CalledProcessError:
        sys.exit("ws/setup.sh failed: ws-load and ws-native are needed")


def measure(args):
    build()
    suite.raise_fd_limit(args.idle_count + 1024)
    started, load0 = time.monotonic(), report.loadavg()
    if load0 is not None and load0 > 1.0:
        print(f"note: load average {load0:.1f}: other processes share the CPUs, expect noisy numbers",
              file=sys.stderr)
    records = []
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        suite.Round(args, rnd, records).run()
    meta = report.run_meta(args, time.monotonic() - started, load0)
    save_results(RESULTS, "ws", meta, records)
    return meta, records


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    meta, records = results_of(args, measure)
    view = tables.View(records, meta["servers"])
    print()
    print(tables.all_tables(view))
    if args.docs:
        report.write_docs(view, meta, records)
        print("wrote docs/benchmarks.md (WebSocket section) and docs/benchmarks/ws-*.png")
    else:
        for path in report.draw(view, meta, os.path.join(RESULTS, "plots")):
            print(f"plot: {os.path.relpath(path, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
