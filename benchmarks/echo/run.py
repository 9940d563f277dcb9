#!/usr/bin/env python3
"""swordfish socket echo benchmark runner.

    python run.py --quick   2 s runs, 1 KiB and 100 KiB, 1 round, 256 MiB bulk;
                            tables on stdout, plots in results/plots/
    python run.py --full    10 s runs after 1 s warm-up, 1/10/100 KiB,
                            3 rounds, 1 GiB bulk; writes the echo section of
                            docs/benchmarks.md and docs/benchmarks/echo-*.png

Servers (server.py on asyncio, uvloop, rloop or swordfish, in raw, stream,
proto and buffered mode, and the native Rust reference) run pinned to CPU 0,
clients to CPU 1: the native client (native/src/client.rs) for plain ping-pong
unless --client python, client.py for TLS, bulk and idle memory. Run it with the benchmark venv's python
(benchmarks/setup.sh makes it); swordfish comes from ../../python.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import docs_section  # noqa: E402
import plots  # noqa: E402
import procs  # noqa: E402
import snapshot  # noqa: E402
import tables  # noqa: E402
from suite import NATIVES, Plan, Suite  # noqa: E402

ALL_LOOPS = ["asyncio", "uvloop", "rloop", "swordfish"]
ALL_MODES = ["raw", "stream", "proto", "buffered"]
ALL_TESTS = ["echo", "tls", "bulk", "idle"]
DEFAULTS = {
    "quick": dict(sizes=[1024, 102400], concurrency=[1, 4], duration=2.0, warmup=0.5,
                  repeat=1, bulk_bytes=256 << 20, idle_count=10_000),
    "full": dict(sizes=[1024, 10240, 102400], concurrency=[1, 4], duration=10.0,
                 warmup=1.0, repeat=3, bulk_bytes=1 << 30, idle_count=10_000),
}


def comma_list(allowed=None, cast=str):
    def parse(text):
        items = [cast(item) for item in text.split(",") if item]
        bad = [item for item in items if allowed and item not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(map(str, bad))}; choose from {', '.join(allowed)}")
        return items
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick")
    mode.add_argument("--full", dest="mode", action="store_const", const="full")
    p.add_argument("--loops", type=comma_list(ALL_LOOPS), default=ALL_LOOPS)
    p.add_argument("--modes", type=comma_list(ALL_MODES), default=ALL_MODES)
    p.add_argument("--tests", type=comma_list(ALL_TESTS), default=ALL_TESTS)
    p.add_argument("--sizes", type=comma_list(cast=int), help="message sizes in bytes")
    p.add_argument("--concurrency", type=comma_list(cast=int))
    p.add_argument("--duration", type=float, help="recorded seconds per run")
    p.add_argument("--warmup", type=float, help="unrecorded seconds per run")
    p.add_argument("--repeat", type=int, help="rounds")
    p.add_argument("--bulk-bytes", type=int)
    p.add_argument("--idle-count", type=int)
    p.add_argument("--no-pin", action="store_true", help="do not use taskset")
    p.add_argument("--client", choices=("native", "python"), default="native",
                   help="load client of the plain ping-pong runs: the native one "
                        "(echo/native, built by setup.sh) or client.py; TLS runs "
                        "always use client.py (default: native)")
    p.add_argument("--swordfish", metavar="DIR", default=procs.SWORDFISH_PATH,
                   help="directory holding the swordfish package (default: %(default)s, "
                        "where `make build` leaves it); e.g. an unpacked wheel, so a "
                        "long run is not hit by a rebuild in the shared tree")
    p.add_argument("--snapshot", metavar="COMMIT", nargs="?", const="HEAD",
                   help="build swordfish from COMMIT (default HEAD) into results/ "
                        "and measure that build (needs maturin)")
    p.add_argument("--from-results", metavar="JSON",
                   help="measure nothing: redo the tables, plots and (for a full "
                        "run) the docs section from a results/*.json file")
    p.add_argument("--docs", default=os.path.join(procs.REPO, "docs", "benchmarks.md"),
                   help="page whose echo section --full rewrites; plots go to "
                        "benchmarks/echo-*.png beside it")
    args = p.parse_args(argv)
    args.mode = args.mode or "quick"
    for name, value in DEFAULTS[args.mode].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if any(size < 2 for size in args.sizes):
        p.error("message sizes must be at least 2 bytes")
    return args


def setup():
    """Build the native server and the TLS certificate (idempotent)."""
    proc = subprocess.run([os.path.join(HERE, "setup.sh")], capture_output=True,
                          text=True)
    if proc.returncode:
        print(proc.stderr.strip(), file=sys.stderr)


def raise_fd_limit():
    # The servers and clients raise their own limits too; this covers the
    # native server, which inherits it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def render_plots(plan, view, plot_dir, prefix):
    """Write the plots; return name -> path for those that were drawn."""
    made = {}
    wanted = [(f"c{conc}", lambda path, conc=conc: plots.echo_plot(
                  view, plan.modes, plan.sizes, conc, path))
              for conc in plan.concurrency if "echo" in plan.tests]
    if "tls" in plan.tests:
        wanted.append(("tls", lambda path: plots.tls_plot(
            view, plan.sizes, plan.concurrency, path)))
    wanted.append(("extras", lambda path: plots.extras_plot(view, plan.tests, path)))
    for name, draw in wanted:
        path = os.path.join(plot_dir, f"{prefix}{name}.png")
        try:
            if draw(path):
                made[name] = path
        except Exception as exc:  # a plotting problem must not lose the data
            print(f"echo: plot {name} failed: {exc}", file=sys.stderr)
    return made


def stdout_report(plan, view, versions, support, records):
    print(f"Python {sys.version.split()[0]}; "
          + ", ".join(f"{impl} {versions[impl]}" for impl in plan.loops if impl in versions)
          + (f"; server `{' '.join(plan.server_pin)}`, client "
             f"`{' '.join(plan.client_pin)}`" if plan.server_pin else "; not pinned"))
    print(f"{plan.duration:g} s runs after {plan.warmup:g} s warm-up, "
          f"{plan.repeat} round(s)\n")
    if "echo" in plan.tests:
        for conc in plan.concurrency:
            print(f"Echo requests/s, concurrency {conc}\n")
            print(tables.echo_table(view, plan.modes, plan.sizes, conc) + "\n")
        print("Echo details\n")
        print(tables.detail_table(view, "echo", plan.modes, plan.sizes,
                                  plan.concurrency, plan.loops + list(NATIVES)) + "\n")
    if "tls" in plan.tests:
        print("TLS echo (proto) requests/s\n")
        print(tables.tls_table(view, plan.sizes, plan.concurrency) + "\n")
        print(tables.detail_table(view, "tls", ["proto"], plan.sizes,
                                  plan.concurrency, plan.loops) + "\n")
    if "bulk" in plan.tests or "idle" in plan.tests:
        print(f"Bulk ({plan.bulk_bytes >> 20} MiB) and idle memory "
              f"({plan.idle_count:,} connections)\n")
        print(tables.extras_table(view, plan.tests) + "\n")
    print("Targets\n\n" + tables.target_table(view, plan.modes, plan.sizes,
                                              plan.concurrency, plan.tests) + "\n")
    print(tables.spread_line(view) + "\n")
    not_run = tables.na_list(support)
    if not_run:
        print("Not measured (n/a)\n\n" + not_run + "\n")
    failed = tables.failure_list(records)
    if failed:
        print("Failed runs\n\n" + failed + "\n")


def measure(args):
    """Run the suite; return the results dict that is also saved as JSON."""
    setup()
    if args.snapshot:
        try:
            args.swordfish, sha = snapshot.build(args.snapshot)
        except (RuntimeError, OSError, subprocess.CalledProcessError, ValueError) as exc:
            sys.exit(f"echo: cannot build swordfish {args.snapshot}: {exc}")
        origin = f"built from commit {sha}"
    else:
        origin = f"from the working tree at commit {docs_section.git_commit()}"
    procs.SWORDFISH_PATH = os.path.abspath(args.swordfish)
    if not args.snapshot and procs.SWORDFISH_PATH != os.path.join(procs.REPO, "python"):
        origin += f", loaded from {procs.SWORDFISH_PATH}"
    plan = make_plan(args)
    suite = Suite(plan)
    elapsed = suite.run()
    data = {"args": {k: v for k, v in vars(args).items() if k != "from_results"},
            "swordfish": origin, "elapsed": elapsed, "versions": suite.versions,
            "support": [[*key, reason] for key, reason in suite.support.items()],
            "pinned": [plan.server_pin, plan.client_pin], "records": suite.records}
    results = os.path.join(HERE, "results")
    os.makedirs(results, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(results, f"{args.mode}-{stamp}.json"), "w") as f:
        json.dump(data, f, indent=1)
    return data


def make_plan(args, pin=None):
    return Plan(args.loops, args.modes, args.sizes, args.concurrency, args.tests,
                args.duration, args.warmup, args.repeat, args.bulk_bytes,
                args.idle_count, pin=not args.no_pin if pin is None else pin,
                client=getattr(args, "client", "native"))


def publish(args, data):
    """Tables on stdout; plots, and in full mode the docs section."""
    plan = make_plan(args, pin=bool(data["pinned"][0]))
    records = data["records"]
    support = {tuple(item[:3]): item[3] for item in data["support"]}
    view = tables.View(tables.summarize(records), support, plan.loops)
    if args.mode == "full":
        docs_dir = os.path.dirname(os.path.abspath(args.docs))
        made = render_plots(plan, view, os.path.join(docs_dir, "benchmarks"), "echo-")
        links = {name: os.path.relpath(path, docs_dir) for name, path in made.items()}
        section = docs_section.render(plan, view, data["versions"], support, records,
                                      data["elapsed"], links, data["swordfish"])
        docs_section.write(args.docs, section)
        print(f"echo: wrote the echo section of {args.docs}", file=sys.stderr)
    else:
        made = render_plots(plan, view, os.path.join(HERE, "results", "plots"), "echo-")
    stdout_report(plan, view, data["versions"], support, records)
    failed = sum(not rec["ok"] for rec in records)
    print(f"echo: {len(records)} measurements, {failed} failed, wall time "
          f"{data['elapsed']:.0f} s; plots: {', '.join(made.values()) or 'none'}",
          file=sys.stderr)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.from_results:
        with open(args.from_results) as f:
            data = json.load(f)
        # Re-render exactly what was measured; only --docs comes from this call.
        for name, value in data["args"].items():
            if name != "docs":
                setattr(args, name, value)
        publish(args, data)
        return 0
    hard = raise_fd_limit()
    if "idle" in args.tests and hard < args.idle_count + 100:
        print(f"echo: RLIMIT_NOFILE hard limit {hard} is below {args.idle_count} "
              f"connections; use --idle-count", file=sys.stderr)
        return 2
    publish(args, measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
