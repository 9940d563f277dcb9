"""The multi-core suite: servers that are not confined to one CPU, as most users run them,
beside the pinned figure the other suites give.

    run.py --quick            1 round, 3 s runs, hello and echo10k only
    run.py --full             3 rounds, 6 s runs, every workload and the 400-user scenario
    run.py --from-results F   the tables of a stored run

Forms (--forms; the default depends on the machine):
  spread   (8 CPUs or more) the server unpinned on the first half of the CPUs, the load
           generator on the other half; 1, 2, 4 and 8 workers.
  shared   the server and the load generator unpinned on every CPU, as on a small VM
           where a proxy or a database shares the cores; 1 and 2 workers.
  pinned   one worker pinned to CPU 0 and the load generator to CPU 1 (the other suites'
           regime), for the ratio next to the unpinned ones.

Workloads (wrk with one thread per client CPU): hello at 256 connections, GET 10 KiB and
POST echo 10 KiB at 256; with --full also the WSGI report's scenario (400 virtual users,
the template page and the 25 ms database) at 1 and 2 workers in the unpinned form. Asked
for by name: static10k and static1m, a static file answered by the server itself (see
STATIC_WORKLOADS).
Each record has the server's CPU seconds over the measured run (all its processes) and,
with more than one worker, the connections each worker held halfway through the run
(from /proc: the established sockets on the server's port in each process's descriptors).
Servers take turns in a rotated order each round; results go to results/cores-*.json.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path[:0] = [BENCH, os.path.join(BENCH, "http"), os.path.join(BENCH, "wsgi_report")]
import loadgen  # noqa: E402  (the HTTP suite's wrk and http-vu runners)
import page  # noqa: E402
from charts import grouped_bars  # noqa: E402
import peers  # noqa: E402  (the WSGI report's apps and rows)
from proctree import thread_sum, tree  # noqa: E402
from rounds import certificate, free_port, results_of, rotated, save_results  # noqa: E402
from servers import APPS, REPO, ServerProcess, entry, label  # noqa: E402

RESULTS = os.path.join(HERE, "results")
REPORT_APPS = os.path.join(BENCH, "wsgi_report", "apps")

# The servers (names of the HTTP suite, tuned variants included) and their report rows.
SERVERS = ["swordfish-wsgi", "granian-wsgi", "granian-wsgi-bt1", "gunicorn-gthread-t8", "swordfish",
           "granian-uvloop", "uvicorn-httptools"]
REPORT_ROW = {"swordfish-wsgi": "swordfish-wsgi", "granian-wsgi": "granian-wsgi", "swordfish": "swordfish-asgi",
              "granian-uvloop": "granian-asgi", "uvicorn-httptools": "uvicorn",
              "gunicorn-gthread-t8": "gunicorn-gthread"}
OWN_LABELS = {"swordfish": "swordfish ASGI", "swordfish-wsgi": "swordfish WSGI", "swordfish-rsgi": "swordfish RSGI"}
WORKLOADS = {"hello": ("/", None), "get10k": ("/10k", None), "echo10k": ("/echo", 10240),
             "static10k": ("/static/10k.bin", None), "static1m": ("/static/1m.bin", None)}
# Static files answered by the server itself, before the app; with either workload, every
# server that serves them runs with the directory for all its workloads (swordfish with
# --static-path-dir, granian with --static-path-mount), and the others skip these two.
STATIC_WORKLOADS = {"static10k": 10 * 1024, "static1m": 1024 * 1024}
STATIC_FLAGS = {"swordfish": "--static-path-dir", "granian": "--static-path-mount"}
# --tls: each server's options for its certificate and key, by the name's first word.
TLS_FLAGS = {"swordfish": ("--ssl-certfile", "--ssl-keyfile"), "granian": ("--ssl-certificate", "--ssl-keyfile"),
             "gunicorn": ("--certfile", "--keyfile"), "uvicorn": ("--ssl-certfile", "--ssl-keyfile")}
CONNECTIONS = 256
REPORT_USERS, REPORT_DB_MS = 400, 25


def split_name(name):
    """(the HTTP suite's server name, extra command-line arguments, extra environment) of
    `NAME` or `NAME+ARG+...`: an ARG `--flag=value` goes on the command line, `VAR=value`
    in the environment (e.g. swordfish-wsgi+--worker-cpu-affinity=off)."""
    base, *extra = name.split("+")
    env = dict(a.split("=", 1) for a in extra if not a.startswith("-") and "=" in a)
    return base, [a for a in extra if a.startswith("-")], env


def server_label(name):
    base = split_name(name)[0]
    return " ".join([OWN_LABELS.get(base) or label(base)] + name.split("+")[1:])


def context_switches(root):
    """Voluntary and involuntary context switches of every thread of the server so far."""
    return thread_sum(root, "status", lambda text: sum(
        int(line.split()[1]) for line in text.splitlines() if "ctxt_switches:" in line))


def cpus():
    return sorted(os.sched_getaffinity(0))


def default_forms():
    return ["spread", "pinned"] if len(cpus()) >= 8 else ["shared", "pinned"]


def placement(form):
    """(the server's CPUs, the client's CPUs, worker counts) of a form."""
    allowed = cpus()
    if form == "spread":
        half = len(allowed) // 2
        return allowed[:half], allowed[half:], [w for w in (1, 2, 4, 8) if w <= half]
    if form == "shared":
        return allowed, allowed, [1, 2]
    return allowed[:1], allowed[1:2], [1]


def taskset(cpu_list):
    """taskset's prefix confining a process to cpu_list (nothing if that is every CPU)."""
    if sorted(cpu_list) == cpus():
        return []
    return ["taskset", "-c", ",".join(map(str, cpu_list))]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 round, 3 s runs, hello and echo10k")
    mode.add_argument("--full", action="store_true", help="3 rounds, 6 s runs, every workload")
    p.add_argument("--forms", help="comma-separated subset of spread,shared,pinned (default: "
                   "spread,pinned with 8 CPUs or more, else shared,pinned)")
    p.add_argument("--servers", default=",".join(SERVERS), help="comma-separated server names of the "
                   "HTTP suite (tuned variants too: swordfish-wsgi-tN, granian-wsgi-btN, gunicorn-gthread-tN); "
                   "NAME+ARG+ARG adds arguments to NAME's command line, e.g. "
                   "swordfish-wsgi+--worker-cpu-affinity=off")
    p.add_argument("--workloads", help="comma-separated subset of hello,get10k,echo10k,static10k,static1m,report")
    p.add_argument("--workers", help="comma-separated worker counts (default: the form's)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--tls", action="store_true", help="every server over TLS (a self-signed certificate), "
                   "wrk over https")
    p.add_argument("--from-results", metavar="FILE", help="the tables of an earlier run")
    p.add_argument("--plot", metavar="DIR", help="also draw one chart per form, DIR/cores-FORM.png "
                   "(docs/benchmarks is where the docs take them from)")
    args = p.parse_args(argv)
    args.forms = args.forms.split(",") if args.forms else default_forms()
    bad = [f for f in args.forms if f not in ("spread", "shared", "pinned")]
    if bad or ("spread" in args.forms and len(cpus()) < 4):
        p.error(f"forms: {bad or 'spread needs 4 CPUs or more'}")
    args.servers = [s for s in args.servers.split(",") if s]
    unknown = [s for s in args.servers if entry(split_name(s)[0]) is None]
    if unknown:
        p.error(f"unknown servers: {', '.join(unknown)}")
    workloads = args.workloads or ("hello,echo10k" if not args.full else "hello,get10k,echo10k,report")
    args.workloads = [w for w in workloads.split(",") if w]
    if any(w not in WORKLOADS and w != "report" for w in args.workloads):
        p.error(f"workloads: {args.workloads}")
    if args.tls and "report" in args.workloads:
        p.error("--tls: the report's workload is served over plain HTTP only")
    args.workers = [int(w) for w in args.workers.split(",")] if args.workers else None
    args.rounds = args.rounds or (3 if args.full else 1)
    args.seconds = args.seconds or (6 if args.full else 3)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.full else 1)
    return args


def connections_per_worker(root, port):
    """The established connections on `port` held by each worker process of the server
    whose root process is `root` (the root left out when it has workers under it)."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        established.add(fields[9])
        except OSError:
            pass
    held = {}
    for pid in tree(root):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        held[pid] = sum(1 for link in links if link.startswith("socket:[") and link[8:-1] in established)
    workers = {pid: n for pid, n in held.items() if pid != root}
    return sorted((workers or held).values())


def measured(server, port, run_load, seconds, workers):
    """One measured run: the load generator's figures, the server's CPU seconds, and (with
    more than one worker) the connections per worker sampled halfway."""
    out, cpu0, switches0 = {}, server.cpu_seconds(), context_switches(server.proc.pid)
    worker = threading.Thread(target=lambda: out.update(result=run_load()))
    started = time.monotonic()
    worker.start()
    spread = None
    if workers > 1:
        time.sleep(max(0.0, started + seconds / 2 - time.monotonic()))
        spread = connections_per_worker(server.proc.pid, port)
    worker.join()
    if "result" not in out:
        raise loadgen.LoadFailed("the load generator failed (see above)")
    r = out["result"]
    r["cpu_s"] = server.cpu_seconds() - cpu0
    # Threads that end during the run take their switches with them: a lower bound then.
    r["switches_per_req"] = (context_switches(server.proc.pid) - switches0) / r["requests"] if r["requests"] else None
    r["cpu_us_per_req"] = r["cpu_s"] / r["requests"] * 1e6 if r["requests"] else None
    if spread:
        r["conns"] = spread
    if not server.alive():
        raise loadgen.LoadFailed(f"{server.name} died: {server.output()}")
    return r


def show(point, r):
    conns = r.get("conns")
    balance = f"  conns {min(conns)}-{max(conns)}" if conns else ""
    errors = f"  errors {r['errors']}" if r["errors"] else ""
    # No latency percentile when too few requests completed (a server that serves the
    # report's users one at a time).
    p99 = "      –" if r["p99_ms"] is None else f"{r['p99_ms']:7.2f}"
    print(f"  round {point['round'] + 1} {point['form']:6} w{point['workers']} {point['server']:20} "
          f"{point['workload']:8} {r['rps']:>10,.0f} req/s  p99 {p99} ms  "
          f"cpu {r['cpu_s']:5.1f} s  switches/req {r['switches_per_req'] or 0:5.2f}{balance}{errors}", flush=True)


def app_of(base):
    """The benchmark app a server of the HTTP suite serves."""
    return "bench_wsgi:app" if entry(base).wsgi else "bench_rsgi:app" if entry(base).rsgi else "bench:app"


def static_files():
    """A directory of the static workloads' files (the same bytes each run)."""
    directory = os.path.join(tempfile.gettempdir(), "swordfish-cores-static")
    os.makedirs(directory, exist_ok=True)
    for workload, size in STATIC_WORKLOADS.items():
        path = os.path.join(directory, WORKLOADS[workload][0].rsplit("/", 1)[1])
        if not os.path.exists(path) or os.path.getsize(path) != size:
            with open(path, "wb") as f:
                f.write(random.Random(size).randbytes(size))
    return directory


def wrk_runs(args, rnd, form, workers, name, records):
    server_cpus, client_cpus, _ = placement(form)
    names = [w for w in args.workloads if w in WORKLOADS]
    port = free_port()
    point = {"round": rnd, "form": form, "workers": workers, "server": name}
    base, extra, env = split_name(name)
    if args.tls:
        cert_flag, key_flag = TLS_FLAGS[base.split("-")[0]]
        extra = extra + [f"{cert_flag}={args.tls[0]}", f"{key_flag}={args.tls[1]}"]
    if any(w in STATIC_WORKLOADS for w in names):
        flag = STATIC_FLAGS.get(base.split("-")[0])
        if flag is None:
            names = [w for w in names if w not in STATIC_WORKLOADS]
        else:
            extra = extra + [f"{flag}={static_files()}"]
    try:
        server = ServerProcess(name, taskset(server_cpus) + entry(base).builder(app_of(base), port, workers) + extra,
                               port, APPS, env, tls=bool(args.tls))
    except RuntimeError as exc:
        print(f"  {name} {form} w{workers}: {exc}", file=sys.stderr)
        records.extend({**point, "workload": w, "failed": str(exc)} for w in names)
        return
    with server:
        for workload in names:
            path, post = WORKLOADS[workload]
            url = f"{'https' if args.tls else 'http'}://127.0.0.1:{port}{path}"
            wpin = taskset(client_cpus)

            def load(seconds):
                return loadgen.wrk(url, CONNECTIONS, seconds, wpin, post, threads=len(client_cpus))
            try:
                if args.warmup:
                    load(args.warmup)
                r = measured(server, port, lambda: load(args.seconds), args.seconds, workers)
            except loadgen.LoadFailed as exc:
                print(f"  {name} {form} w{workers} {workload}: {exc}", file=sys.stderr)
                records.append({**point, "workload": workload, "failed": str(exc)})
                continue
            records.append({**point, "workload": workload, **r})
            show(records[-1], r)


def report_run(args, rnd, form, workers, name, records):
    """The WSGI report's scenario (its apps and rows) at 400 users and 25 ms."""
    base, extra, env = split_name(name)
    row = REPORT_ROW.get(base)
    if row is None:
        return
    server_cpus, client_cpus, _ = placement(form)
    port = free_port()
    point = {"round": rnd, "form": form, "workers": workers, "server": name, "workload": "report"}
    env = {"REPORT_DB_LATENCY_MS": str(REPORT_DB_MS), **env}
    try:
        with ServerProcess(name, taskset(server_cpus) + peers.command(row, port, workers) + extra, port,
                           REPORT_APPS, env) as server:
            url = f"http://127.0.0.1:{port}"
            r = measured(server, port, lambda: loadgen.virtual_users(
                url, REPORT_USERS, args.seconds, args.warmup, taskset(client_cpus)), args.seconds, workers)
    except (RuntimeError, loadgen.LoadFailed) as exc:
        print(f"  {name} {form} w{workers} report: {exc}", file=sys.stderr)
        records.append({**point, "failed": str(exc)})
        return
    records.append({**point, **r})
    show(records[-1], r)


def measure(args):
    if "report" in args.workloads and subprocess.run([os.path.join(BENCH, "wsgi_report", "setup.sh")]).returncode:
        sys.exit("wsgi_report/setup.sh failed: http-vu is needed for the report workload")
    started, records = time.monotonic(), []
    if args.tls:
        args.tls = certificate(tempfile.mkdtemp(prefix="swordfish-cores-tls-"))
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}", flush=True)
        for form in args.forms:
            for workers in args.workers or placement(form)[2]:
                for name in rotated(args.servers, rnd):
                    wrk_runs(args, rnd, form, workers, name, records)
                    if "report" in args.workloads and form != "pinned" and workers <= 2:
                        report_run(args, rnd, form, workers, name, records)
    meta = {"python": sys.version.split()[0], "cpu": page.cpu_model(), "ncpu": len(cpus()),
            "commit": page.git_commit(REPO), "date": time.strftime("%Y-%m-%d %H:%M"),
            "servers": args.servers, "forms": args.forms, "rounds": args.rounds, "seconds": args.seconds,
            "warmup": args.warmup, "tls": bool(args.tls), "elapsed_s": round(time.monotonic() - started)}
    save_results(RESULTS, "cores", meta, records)
    return meta, records


def medians(records):
    """{(form, workers, workload, server): {field: median}} over the rounds that did not fail."""
    groups = {}
    for r in records:
        if "failed" not in r:
            groups.setdefault((r["form"], r["workers"], r["workload"], r["server"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        m = {f: statistics.median(r[f] for r in rs) for f in ("rps", "cpu_s")}
        p99s = [r["p99_ms"] for r in rs if r["p99_ms"] is not None]
        m["p99_ms"] = statistics.median(p99s) if p99s else None
        m["cpu_us_per_req"] = statistics.median(r["cpu_us_per_req"] or 0 for r in rs)
        m["switches_per_req"] = statistics.median(r.get("switches_per_req") or 0 for r in rs)
        balances = [max(r["conns"]) / max(min(r["conns"]), 1) for r in rs if r.get("conns")]
        m["balance"] = statistics.median(balances) if balances else None
        m["rounds"] = len(rs)
        out[key] = m
    return out


def tables(meta, records):
    """One markdown table per form and workload: servers down, worker counts across, each
    cell req/s (p99 ms, CPU s, max/min connections per worker)."""
    med = medians(records)
    parts = [f"Python {meta['python']}, {meta['ncpu']} CPUs ({meta['cpu']}), commit {meta['commit']}, "
             f"{meta['date']}; medians of {meta['rounds']} round(s) of {meta['seconds']:g} s"
             # Runs stored before NAME+VAR=value took over from --env name their variables here.
             + (f"; swordfish with {meta['env']}" if meta.get("env") else "")]
    for form in meta["forms"]:
        for workload in list(WORKLOADS) + ["report"]:
            keys = [k for k in med if k[0] == form and k[2] == workload]
            if not keys:
                continue
            workers = sorted({k[1] for k in keys})
            servers = [s for s in meta["servers"] if any(k[3] == s for k in keys)]
            what = (f"{REPORT_USERS} users, db {REPORT_DB_MS} ms" if workload == "report"
                    else f"{workload} c{CONNECTIONS}")
            head = "| server | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in workers) + " |"
            lines = [f"**{form}, {what}** — req/s (p99 ms; server CPU µs a request; context switches a "
                     "request; max/min connections a worker)", "", head, "|---|" + "---:|" * len(workers)]
            for s in servers:
                cells = []
                for w in workers:
                    m = med.get((form, w, workload, s))
                    if m is None:
                        cells.append("failed")
                        continue
                    extra = f"; {m['balance']:.2f}" if m["balance"] else ""
                    p99 = "–" if m["p99_ms"] is None else f"{m['p99_ms']:.1f}"
                    cells.append(f"{m['rps'] / 1000:.1f}k ({p99}; {m['cpu_us_per_req']:.0f} µs; "
                                 f"{m['switches_per_req']:.2f}{extra})")
                lines.append(f"| {server_label(s)} | " + " | ".join(cells) + " |")
            parts.append("\n".join(lines))
    return "\n\n".join(parts)


def plot(meta, records, directory):
    """One chart per form: req/s by workload and worker count, a bar per server."""
    med = medians(records)
    paths = []
    for form in meta["forms"]:
        groups = [(w, n) for w in list(WORKLOADS) + ["report"]
                  for n in sorted({k[1] for k in med if k[0] == form and k[2] == w})]
        if not groups:
            continue
        servers = [s for s in meta["servers"] if any(k[0] == form and k[3] == s for k in med)]
        series = [(server_label(s), [med.get((form, n, w, s), {}).get("rps", 0) / 1000 for w, n in groups])
                  for s in servers]
        paths.append(grouped_bars(
            os.path.join(directory, f"cores-{form}.png"),
            [f"{w}\n{n} worker{'s' if n > 1 else ''}" for w, n in groups], series,
            f"{form}: {meta['ncpu']} CPUs, Python {meta['python']}, medians of {meta['rounds']}"))
    return paths


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    meta, records = results_of(args, measure)
    print()
    print(tables(meta, records))
    if args.plot:
        for path in plot(meta, records, args.plot):
            print(f"plot: {os.path.relpath(path, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
