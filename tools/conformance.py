#!/usr/bin/env python3
"""Run CPython's asyncio test suite (test.test_asyncio) on swordfish and on
the stdlib loop, and list what fails on swordfish but passes on asyncio.

    tools/conformance.py [--loop swordfish|asyncio|both] [--modules m1,m2]
                         [--json out] [--markdown docs/conformance.md]
                         [--strict] [-v]

Each module runs in its own child process per loop (see
tools/conformance/); logs go to tools/.conformance-logs/.  How it works and
what is left out: docs/conformance.md.
"""

import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conformance import compare, intro, loops, modules, report, runner  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loop", default="both",
                   help="swordfish, asyncio, both (= swordfish,asyncio), or a "
                        "comma-separated list of: " + ", ".join(loops.KINDS))
    p.add_argument("--modules", default="",
                   help="comma-separated test modules (default: the default "
                        "set in tools/conformance/modules.py; 'all' adds the "
                        "deferred transport modules)")
    p.add_argument("--json", metavar="PATH", help="write every outcome here")
    p.add_argument("--markdown", metavar="PATH",
                   help="write the tables into this file (docs/conformance.md)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if a test fails on swordfish but not on asyncio")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each module as it finishes")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the test processes (default: this one)")
    p.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--test-timeout", type=float, default=40.0, metavar="SECONDS")
    p.add_argument("--module-timeout", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--no-shims", action="store_true",
                   help="run without the harness shims of conformance/shims.py")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not re-run swordfish-only failures to spot flaky ones")
    args = p.parse_args(argv)
    names = ["swordfish", "asyncio"] if args.loop == "both" else \
        [k.strip() for k in args.loop.split(",") if k.strip()]
    unknown = [k for k in names if k not in loops.KINDS]
    if unknown:
        p.error(f"unknown loop(s): {', '.join(unknown)}")
    args.kinds = list(dict.fromkeys(names))
    args.module_specs = modules.select(
        [m.strip() for m in args.modules.split(",") if m.strip()])
    return args


def main(argv=None):
    args = parse_args(argv)
    opts = runner.Options(python=args.python, test_timeout=args.test_timeout,
                          module_timeout=args.module_timeout, jobs=args.jobs,
                          shims=not args.no_shims)
    kinds = []
    for kind in args.kinds:
        why = runner.check_kind(opts, kind)
        if why:
            print(f"conformance: skipping the {kind} loop, it does not import "
                  f"in {opts.python}: {why}", file=sys.stderr)
        else:
            kinds.append(kind)
    if not kinds:
        return 2

    def progress(run):
        if args.verbose:
            what = run.module + (" (re-run)" if run.rerun else "")
            print(f"  {run.kind:<10} {what:<24} {report.cell(run):<16} "
                  f"{run.seconds:6.1f}s  {run.note}", file=sys.stderr)

    names = [m.name for m in args.module_specs]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"conformance: {len(names)} modules on {', '.join(kinds)} "
          f"({opts.python}); logs in {os.path.relpath(opts.log_dir)}/",
          file=sys.stderr)
    results = runner.run_all(opts, args.module_specs, kinds, progress)

    found = {}
    if compare.REFERENCE in kinds:
        for candidate in kinds:
            if candidate != compare.REFERENCE:
                found[candidate] = compare.diffs(results, candidate)
    if not args.no_rerun:
        _rerun(opts, found, progress)

    print(report.console(results, names, kinds, found, opts.log_dir))
    if args.json:
        report.write_json(args.json, results, found, kinds)
    if args.markdown:
        versions = {r.kind: r.loop_version for r in results.values()}
        section = report.markdown_section(results, names, kinds, found, when,
                                          versions)
        py = report.python_version(results)
        report.update_markdown(args.markdown, intro.render(), section,
                               ".".join(py.split(".")[:2]))
    if args.strict and any(not d.flaky for ds in found.values() for d in ds):
        return 1
    return 0


def _rerun(opts, found, progress):
    """Run each candidate-only failure once more; a pass marks it flaky."""
    wanted = {}
    for candidate, diffs in found.items():
        for d in diffs:
            # a hang would only hang again, a missing feature stays missing
            if d.candidate["outcome"] != "timeout" and \
                    not compare.cause(d.candidate).startswith("NotImplemented") \
                    and not d.test_id.endswith("(whole module)"):
                wanted.setdefault((d.module, candidate), set()).add(d.test_id)
    if not wanted:
        return
    again = runner.rerun(opts, wanted, progress)
    for candidate, diffs in found.items():
        for d in diffs:
            run = again.get((d.module, candidate))
            if run is not None and d.test_id in run.tests:
                d.rerun = run.tests[d.test_id]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
