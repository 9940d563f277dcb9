#!/usr/bin/env python3
"""swordfish scheduling benchmark runner.

    python run.py --quick     small sizes, 1 repeat, tables on stdout,
                              plots under benchmarks/results/plots/
    python run.py --full      M = 1024..131072, 3 repeats, writes
                              docs/benchmarks.md and docs/benchmarks/*.png

Every measurement is a fresh child process (child.py) pinned to one CPU with
taskset when available. Loops are alternated within each round so that
background noise on this shared machine hits all of them alike. A child that
times out or crashes is recorded as a failure and the run goes on.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import page  # noqa: E402
import report  # noqa: E402
from micro import MICRO  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

ALL_LOOPS = ["asyncio", "uvloop", "rloop", "swordfish"]
# Where `make build` (maturin develop) leaves the swordfish package.
SWORDFISH_PATH = os.path.join(REPO, "python")

MODES = {
    # Tuned so the whole quick run takes well under 2 minutes on 2 cores.
    "quick": {"sizes": [1024, 8192], "repeat": 1, "micro_size": 200_000,
              "timeout": 60},
    "full": {"sizes": [1024 * 2**k for k in range(8)], "repeat": 3,
             "micro_size": 1_000_000, "timeout": 900},
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick")
    mode.add_argument("--full", dest="mode", action="store_const", const="full")
    p.add_argument("--loops", help="comma list (default: %s)" % ",".join(ALL_LOOPS))
    p.add_argument("--workloads",
                   help="comma list of workload and micro names, or 'none' "
                        "(default: all). Names: "
                        + ", ".join(list(WORKLOADS.values()) + list(MICRO.values())))
    p.add_argument("--sizes", help="comma list of M, e.g. 1024,8192 "
                                   "(largest sensible: 1048576)")
    p.add_argument("--repeat", type=int, help="measurements per (workload, M, loop)")
    p.add_argument("--micro-size", type=int, help="N for the micro-benchmarks")
    p.add_argument("--timeout", type=float, help="seconds allowed per child")
    p.add_argument("--cpu", type=int, default=1, help="CPU to pin children to")
    p.add_argument("--no-pin", action="store_true", help="do not use taskset")
    p.add_argument("--docs", default=os.path.join(REPO, "docs", "benchmarks.md"),
                   help="markdown page written in full mode; plots go to "
                        "benchmarks/ beside it")
    args = p.parse_args(argv)
    args.mode = args.mode or "quick"
    defaults = MODES[args.mode]
    args.sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
                  else defaults["sizes"])
    args.repeat = args.repeat or defaults["repeat"]
    args.micro_size = args.micro_size or defaults["micro_size"]
    args.timeout = args.timeout or defaults["timeout"]
    args.loops = args.loops.split(",") if args.loops else list(ALL_LOOPS)
    for loop in args.loops:
        if loop not in ALL_LOOPS:
            p.error(f"unknown loop {loop!r}; choose from {', '.join(ALL_LOOPS)}")
    args.workload_names, args.micro_names = select(p, args.workloads)
    return args


def select(parser, spec):
    """Map --workloads to (workload modules, micro modules)."""
    if spec is None:
        return list(WORKLOADS), list(MICRO)
    if spec == "none":
        return [], []
    by_name = {}
    for table, kind in ((WORKLOADS, "workload"), (MICRO, "micro")):
        for module, shown in table.items():
            by_name[module] = by_name[shown] = (kind, module)
    chosen = {"workload": [], "micro": []}
    for name in spec.split(","):
        if name not in by_name:
            parser.error(f"unknown workload {name!r}")
        kind, module = by_name[name]
        chosen[kind].append(module)
    return chosen["workload"], chosen["micro"]


def child_env():
    env = dict(os.environ)
    parts = [SWORDFISH_PATH] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONHASHSEED"] = "0"
    return env


def pin_prefix(args):
    if args.no_pin or not shutil.which("taskset"):
        return []
    if args.cpu not in os.sched_getaffinity(0):
        print(f"run.py: CPU {args.cpu} not available, not pinning", file=sys.stderr)
        return []
    return ["taskset", "-c", str(args.cpu)]


def run_child(argv, prefix, timeout):
    """Run child.py with argv; return (parsed JSON or None, error or None)."""
    cmd = prefix + [sys.executable, os.path.join(HERE, "child.py")] + argv
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=timeout, env=child_env(), cwd=HERE)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:g} s"
    if proc.returncode != 0:
        if proc.returncode < 0:
            return None, f"crashed (signal {-proc.returncode})"
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        return None, tail[-1].strip() if tail else f"exit status {proc.returncode}"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "no JSON output from child"


def probe_loops(args, prefix):
    """Keep the loops that import and run a trivial coroutine; say why not."""
    usable, versions, skipped = [], {}, {}
    for loop in args.loops:
        info, error = run_child(["--probe", loop], prefix, 60)
        if error:
            skipped[loop] = error
            hint = ""
            if loop == "swordfish":
                hint = (f" (looked in {SWORDFISH_PATH}; build it with `make build "
                        f"PYTHON=python{sys.version_info[0]}.{sys.version_info[1]}`)")
            print(f"run.py: SKIPPING {loop}: {error}{hint}", file=sys.stderr)
            continue
        usable.append(loop)
        versions[loop] = info["version"]
    return usable, versions, skipped


def measure_all(args, loops, prefix):
    """Run every (kind, name, size, repeat) round, alternating the loops."""
    rounds = [("workload", name, size) for name in args.workload_names
              for size in args.sizes]
    rounds += [("micro", name, args.micro_size) for name in args.micro_names]
    total = len(rounds) * args.repeat * len(loops)
    records, done = [], 0
    for kind, name, size in rounds:
        for rep in range(args.repeat):
            # Rotate the starting loop each repeat so none always goes first.
            shift = rep % len(loops)
            for loop in loops[shift:] + loops[:shift]:
                out, error = run_child([loop, kind, name, str(size)], prefix,
                                       args.timeout)
                done += 1
                rec = {"kind": kind, "name": name, "size": size, "loop": loop,
                       "repeat": rep, "ok": error is None}
                if error:
                    rec["error"] = error
                    shown = "FAILED: " + error
                else:
                    rec["time"] = out["time"]
                    rec["result"] = out["result"]
                    shown = f"{out['time']:.4f} s"
                records.append(rec)
                print(f"[{done}/{total}] {report.display_name(kind, name)} "
                      f"{'N' if kind == 'micro' else 'M'}={size} {loop}: {shown}",
                      file=sys.stderr, flush=True)
    return records


def render_tables(args, stats, loops, plot_dir, link_prefix=None):
    """Markdown for all tables; writes plots to plot_dir as a side effect."""
    parts = []
    for name in args.workload_names:
        shown = report.display_name("workload", name)
        parts.append(f"### {shown}\n\n"
                     + report.workload_table(stats, name, loops, args.sizes)
                     + "\n\nMedians:\n\n"
                     + report.median_table(stats, name, loops, args.sizes))
        png = os.path.join(plot_dir, f"{shown}.png")
        try:
            if report.plot_workload(stats, name, loops, args.sizes, png):
                link = f"{link_prefix}/{shown}.png" if link_prefix else png
                parts[-1] += f"\n\n![{shown}]({link})"
        except Exception as exc:  # a missing matplotlib must not lose the data
            print(f"run.py: plot for {shown} failed: {exc}", file=sys.stderr)
    if args.workload_names and len(loops) > 1:
        parts.append("### Summary: geometric mean of relative speed over workloads\n\n"
                     + report.summary_table(stats, args.workload_names, loops,
                                            args.sizes))
    if args.micro_names:
        parts.append("### Micro-benchmarks\n\n"
                     + report.micro_table(stats, args.micro_names, loops,
                                          args.micro_size))
    return "\n\n".join(parts)


def kept_sections(previous):
    """Sections other runners own in the same page (the echo and HTTP suites' blocks): kept
    as they were when this runner rewrites its part."""
    kept = ""
    for name in ("echo", "http"):
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        start = previous.find(begin)
        stop = previous.find(end, start)
        if start >= 0 and stop >= 0:
            kept += "\n" + previous[start:stop + len(end)] + "\n"
    return kept


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    started = time.monotonic()
    prefix = pin_prefix(args)
    loops, versions, skipped = probe_loops(args, prefix)
    if not loops:
        print("run.py: no usable event loop", file=sys.stderr)
        return 1
    records = measure_all(args, loops, prefix)
    stats = report.summarize(records)

    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(results_dir, f"{args.mode}-{stamp}.json"), "w") as f:
        json.dump({"args": vars(args), "versions": versions, "skipped": skipped,
                   "pinned": prefix, "records": records}, f, indent=1)

    if args.mode == "full":
        args.docs_before = ""
        with contextlib.suppress(FileNotFoundError), open(args.docs) as f:
            args.docs_before = f.read()
        docs_dir = os.path.dirname(os.path.abspath(args.docs))
        plot_dir = os.path.join(docs_dir, "benchmarks")
        tables = render_tables(args, stats, loops, plot_dir, link_prefix="benchmarks")
        text = page.render(args, loops, versions, skipped, prefix, tables,
                           records, time.monotonic() - started)
        with open(args.docs, "w") as f:
            f.write(text + kept_sections(args.docs_before))
        print(f"run.py: wrote {args.docs} and plots in {plot_dir}", file=sys.stderr)
    else:
        tables = render_tables(args, stats, loops,
                               os.path.join(results_dir, "plots"))
        print(f"Python {sys.version.split()[0]}; "
              + ", ".join(f"{loop} {versions[loop]}" for loop in loops)
              + (f"; children pinned with `{' '.join(prefix)}`" if prefix else ""))
        for loop, reason in skipped.items():
            print(f"SKIPPED {loop}: {reason}")
        print()
        print(tables)
        if report.failures(records):
            print("\nFailures:\n" + report.failure_list(records))
    print(f"run.py: {len(records)} measurements, {len(report.failures(records))} "
          f"failed, wall time {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
