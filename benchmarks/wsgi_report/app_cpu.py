"""Where a virtual user's cycle goes, in one cell of the report: the CPU the app itself
spends (timed inside the server, apps/timed_apps.py) against the server process's whole
CPU, for swordfish WSGI (the Werkzeug app) and swordfish ASGI (its Starlette twin).

    app_cpu.py [--vus 400] [--latency 25] [--rounds 3] [--seconds 8] [--warmup 2]

One worker pinned to CPU 0, http-vu on CPU 1, the kinds alternating each round: the WSGI
and ASGI servers with the timed apps, and the ASGI server with the plain app, whose
cycles are the reference the report's "within 5% of the best ASGI server" is a share of.
For each: cycles a second (a cycle is GET /, think, GET /api, GET /), the server's CPU
share (/proc, over the middle of the measured seconds), its CPU a cycle, the app's own
CPU a cycle (two pages and a call, means), and the rest (the server's own work). Last,
the budget: the CPU a cycle that would give 0.95 of the plain ASGI server's cycles with
one CPU fully busy, against the WSGI app's own CPU a cycle; and the Werkzeug page called
directly, with no server (apps/direct_page.py, on CPU 0 each round), against its cost
inside the server. Results go to results/app-cpu-*.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The report's runner: importing it puts benchmarks/ and http/ on the path; its apps,
# results and CPUs are this tool's too.
from run import APPS, CLIENT_CPU, HERE, RESULTS, SERVER_CPU

import loadgen  # the HTTP suite's: the http-vu binary
import page  # benchmarks/page.py: the commit measured
from rounds import free_port, pin, results_of, rotated, save_results
from servers import REPO, SERVERS, ServerProcess  # the HTTP suite's
# kind -> (label, server entry, app target, app timed)
KINDS = {
    "wsgi-timed": ("swordfish WSGI, timed app", "swordfish-wsgi", "timed_apps:wsgi", True),
    "asgi-timed": ("swordfish ASGI, timed app", "swordfish", "timed_apps:asgi", True),
    "asgi": ("swordfish ASGI", "swordfish", "starlette_app:app", False),
}
SHARE = 0.95


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vus", type=int, default=400, help="virtual users (default 400)")
    p.add_argument("--latency", type=int, default=25, help="database latency in ms (default 25)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=8, help="measured seconds per run (at least 4)")
    p.add_argument("--warmup", type=float, default=2, help="seconds of load before the measured ones")
    p.add_argument("--from-results", metavar="FILE", help="print the table of an earlier run")
    args = p.parse_args(argv)
    if args.seconds < 4:
        p.error("--seconds must be at least 4: the CPU is read over its middle")
    return args


def run_one(args, rnd, kind):
    label, entry, target, timed = KINDS[kind]
    port = free_port()
    point = {"round": rnd, "kind": kind}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "app-cpu.json")
        env = {"REPORT_DB_LATENCY_MS": str(args.latency), "APP_CPU_OUT": out}
        command = pin(SERVER_CPU) + SERVERS[entry].builder(target, port, 1)
        with ServerProcess(kind, command, port, APPS, env) as server:
            client = subprocess.Popen(
                pin(CLIENT_CPU) + [loadgen.VU_BIN, "--url", f"http://127.0.0.1:{port}", "--users", str(args.vus),
                                   "--duration", str(args.seconds), "--warmup", str(args.warmup)],
                stdout=subprocess.PIPE, text=True)
            # The CPU over the measured seconds but their first and last: the users' steady state.
            time.sleep(args.warmup + 1)
            cpu0, t0 = server.cpu_seconds(), time.monotonic()
            time.sleep(args.seconds - 2)
            cpu1, t1 = server.cpu_seconds(), time.monotonic()
            stdout, _ = client.communicate(timeout=args.seconds + 60)
            if client.returncode != 0:
                raise loadgen.LoadFailed(f"http-vu failed ({client.returncode})")
        # Stopped: the timed app wrote its figures at exit.
        app = None
        if timed:
            with open(out) as f:
                app = json.load(f)
    vu = json.loads(stdout)
    cycles = vu["iterations"] / args.seconds
    cpu = (cpu1 - cpu0) / (t1 - t0)
    point.update(requests=vu["requests"], cycles_s=cycles, cpu=cpu, cpu_us_cycle=cpu / cycles * 1e6)
    if app:
        point["app"] = app
        point["app_us_cycle"] = 2 * app["/"]["mean_us"] + app["/api"]["mean_us"]
    extra = f"  app {point['app_us_cycle']:6.1f} us a cycle" if app else ""
    print(f"  round {rnd + 1} {label:26} {vu['requests']:>7,} requests {cycles:6.0f} cycles/s "
          f"CPU {cpu * 100:5.1f}% {point['cpu_us_cycle']:6.1f} us a cycle{extra}", flush=True)
    return point


def direct(rnd):
    """The Werkzeug page called directly (apps/direct_page.py), pinned to the server's CPU."""
    out = subprocess.run(pin(SERVER_CPU) + [sys.executable, os.path.join(APPS, "direct_page.py")], cwd=APPS,
                         capture_output=True, text=True, timeout=300, check=True)
    page = json.loads(out.stdout)
    print(f"  round {rnd + 1} {'the page, called directly':26} one thread {page['one_thread']['median_us']:.1f} us, "
          f"threads in turn {page['threads_in_turn']['median_us']:.1f} us (medians)", flush=True)
    return {"round": rnd, "kind": "direct", **page}


def measure(args):
    if subprocess.run([os.path.join(HERE, "setup.sh")]).returncode != 0:
        sys.exit("wsgi_report/setup.sh failed: http-vu is needed")
    records = []
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        for kind in rotated(list(KINDS), rnd):
            records.append(run_one(args, rnd, kind))
        records.append(direct(rnd))
    meta = {"vus": args.vus, "latency_ms": args.latency, "rounds": args.rounds, "seconds": args.seconds,
            "warmup": args.warmup, "python": sys.version.split()[0], "commit": page.git_commit(REPO)}
    save_results(RESULTS, "app-cpu", meta, records)
    return meta, records


def table(meta, records):
    def med(kind, key):
        return statistics.median(r[key] for r in records if r["kind"] == kind and key in r)

    lines = [f"{meta['vus']} users, database {meta['latency_ms']} ms, one worker pinned, medians of "
             f"{meta['rounds']} rounds (commit {meta['commit']}, Python {meta['python']})", "",
             "| server | requests | cycles/s | CPU | CPU a cycle | app a cycle | the rest |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, (label, *_rest) in KINDS.items():
        total = med(kind, "cpu_us_cycle")
        app = med(kind, "app_us_cycle") if KINDS[kind][3] else None
        cells = [f"{med(kind, 'requests'):,.0f}", f"{med(kind, 'cycles_s'):,.0f}", f"{med(kind, 'cpu') * 100:.0f}%",
                 f"{total:.0f} µs", f"{app:.0f} µs" if app else "–", f"{total - app:.0f} µs" if app else "–"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    budget = 1e6 / (SHARE * med("asgi", "cycles_s"))
    lines += ["", f"{SHARE} of the ASGI server's cycles on one CPU fully busy leaves {budget:.0f} µs a cycle; "
              f"the Werkzeug app alone takes {med('wsgi-timed', 'app_us_cycle'):.0f} µs of it."]
    pages = [r for r in records if r["kind"] == "direct"]
    if pages:
        def page(where, stat):
            return statistics.median(r[where][stat] for r in pages)

        inside = [r["app"]["/"] for r in records if r["kind"] == "wsgi-timed"]
        lines += ["", "The Werkzeug page's CPU, median / mean of its calls (medians of the rounds): "
                  f"called directly on one thread {page('one_thread', 'median_us'):.0f} / "
                  f"{page('one_thread', 'mean_us'):.0f} µs, on threads in turn "
                  f"{page('threads_in_turn', 'median_us'):.0f} / {page('threads_in_turn', 'mean_us'):.0f} µs, "
                  f"inside the server {statistics.median(p['median_us'] for p in inside):.0f} / "
                  f"{statistics.median(p['mean_us'] for p in inside):.0f} µs."]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    meta, records = results_of(args, measure)
    print()
    print(table(meta, records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
