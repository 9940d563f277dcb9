"""Tables, plots and the HTTP section of docs/benchmarks.md from the run's medians."""
import os
import platform
import statistics
import subprocess
import sys

from servers import REPO, SUITES, entry, label

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import page  # noqa: E402  (the scheduling report's machine and commit helpers)

DOCS = os.path.join(REPO, "docs", "benchmarks.md")
PLOTS = os.path.join(REPO, "docs", "benchmarks")
BEGIN, END = "<!-- http:begin -->", "<!-- http:end -->"
GRANIAN = ("granian-uvloop", "granian-rloop")
COLORS = {"swordfish": "#2ca02c", "granian-uvloop": "#1f77b4", "granian-rloop": "#17becf",
          "uvicorn-httptools": "#ff7f0e", "uvicorn-h11": "#bcbd22", "hypercorn": "#9467bd",
          "native": "#d62728"}
THROUGHPUT_COLUMNS = [("hello", 400), ("get10k", 64), ("get10k", 128), ("get10k", 256),
                      ("echo10k", 64), ("echo10k", 128), ("echo10k", 256)]


def _version(module):
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return None


def run_meta(args, elapsed):
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    return {
        "python": platform.python_version(),
        "cpu": page.cpu_model(), "ncpu": page.nproc(), "commit": page.git_commit(REPO),
        "date": __import__("time").strftime("%Y-%m-%d"),
        "versions": {p: _version(p) for p in ("granian", "uvicorn", "httptools", "h11", "hypercorn",
                                              "uvloop", "rloop", "jinja2", "gunicorn", "gevent",
                                              "greenlet", "waitress")},
        "wrk": wrk.split(" Copyright")[0].strip(), "loadgen": args.loadgen, "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "suite": args.suite, "servers": args.servers, "elapsed_s": round(elapsed),
    }


def summarize(records):
    """Medians over rounds: {(server, workload, conc, db_ms, workers): {field: median}}."""
    groups = {}
    for r in records:
        if "failed" in r:
            continue
        key = (r["server"], r["workload"], r["conc"], r.get("db_ms"), r.get("workers"))
        groups.setdefault(key, []).append(r)
    out = {}
    for key, rs in groups.items():
        fields = [f for f in rs[0] if isinstance(rs[0][f], (int, float)) and f not in ("round", "conc")]
        out[key] = {f: statistics.median(r[f] for r in rs if r.get(f) is not None)
                    for f in fields if any(r.get(f) is not None for r in rs)}
        out[key]["rounds"] = len(rs)
    return out


def _get(stats, server, workload, conc, db_ms=None, workers=None):
    return stats.get((server, workload, conc, db_ms, workers))


def _servers(stats, meta):
    return [s for s in meta["servers"] if any(k[0] == s for k in stats)]


def _k(v):
    return "–" if v is None else f"{v / 1000:.1f}k"


def throughput_table(stats, meta):
    cols = [c for c in THROUGHPUT_COLUMNS if any(k[1:3] == c for k in stats)]
    if not cols:
        return ""
    head = "| server | " + " | ".join(f"{w} c{c}" for w, c in cols) + " |"
    lines = [head, "|---|" + "---:|" * len(cols)]
    for s in _servers(stats, meta):
        cells = []
        for w, c in cols:
            r = _get(stats, s, w, c)
            cells.append("–" if r is None else f"{_k(r['rps'])} ({r['p99_ms']:.1f})")
        lines.append(f"| {label(s)} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("req/s (p99 latency, ms), medians of the rounds.")
    lines.append("")
    head = "| server CPU µs/request | " + " | ".join(f"{w} c{c}" for w, c in cols) + " |"
    lines += [head, "|---|" + "---:|" * len(cols)]
    for s in _servers(stats, meta):
        cells = []
        for w, c in cols:
            r = _get(stats, s, w, c)
            cells.append("–" if r is None or r.get("cpu_us_per_req") is None else f"{r['cpu_us_per_req']:.1f}")
        lines.append(f"| {label(s)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(stats):
    """swordfish against granian's best and the native server, point by point."""
    rows = ["| point | swordfish | granian best | ratio | target | native | of native | p99 sf / best peer |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    peers = [s for s in SUITES["asgi"] if s not in ("swordfish", "native")]
    for w, c in THROUGHPUT_COLUMNS:
        sf = _get(stats, "swordfish", w, c)
        gr = [r for r in (_get(stats, g, w, c) for g in GRANIAN) if r]
        if not sf or not gr:
            continue
        best = max(r["rps"] for r in gr)
        nat = _get(stats, "native", w, c)
        target = {"hello": 1.3, "get10k": 1.3, "echo10k": 2.0}[w]
        peer_p99 = [r["p99_ms"] for r in (_get(stats, p, w, c) for p in peers) if r]
        p99 = f"{sf['p99_ms']:.1f} / {min(peer_p99):.1f}" if peer_p99 else "–"
        of_native = f"{sf['rps'] / nat['rps']:.2f}" if nat else "–"
        rows.append(f"| {w} c{c} | {_k(sf['rps'])} | {_k(best)} | {sf['rps'] / best:.2f}x | {target}x "
                    f"| {_k(nat['rps']) if nat else '–'} | {of_native} | {p99} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def vu_table(stats, meta):
    keys = sorted({(k[3], k[4]) for k in stats if k[1] == "vu"})
    if not keys:
        return ""
    lines = ["| server | workers | db latency | req/s | p50 ms | p95 ms | p99 ms | page p95 | api p95 | CPU µs/req |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for db_ms, workers in keys:
        for s in _servers(stats, meta):
            r = _get(stats, s, "vu", 10, db_ms, workers)
            if r is None:
                continue
            cpu = r.get("cpu_us_per_req")
            lines.append(f"| {label(s)} | {workers} | {db_ms} ms | {r['rps']:,.0f} | {r['p50_ms']:.1f} | "
                         f"{r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['page_p95_ms']:.1f} | {r['api_p95_ms']:.1f} | "
                         f"{'–' if cpu is None else f'{cpu:.0f}'} |")
    return "\n".join(lines)


def _best(stats, names, w, c):
    """(name, rps) of the fastest of names at a point, or None."""
    rs = [(s, r["rps"]) for s, r in ((s, _get(stats, s, w, c)) for s in names) if r]
    return max(rs, key=lambda x: x[1]) if rs else None


def _ratio(r, best):
    return "–" if r is None or best is None else f"{r['rps'] / best[1]:.2f}"


def _ref(best):
    return "–" if best is None else f"{label(best[0])} ({_k(best[1])} req/s)"


def wsgi_table(stats, meta):
    """Every server's req/s as a ratio to granian WSGI's best variant and to gunicorn
    gthread's best thread count, point by point."""
    servers = _servers(stats, meta)
    granian = [s for s in servers if s.startswith("granian-wsgi")]
    gthread = [s for s in servers if s.startswith("gunicorn-gthread")]
    cols = [c for c in THROUGHPUT_COLUMNS if any(k[1:3] == c for k in stats)]
    if not cols or not any(e and e.wsgi for e in map(entry, servers)):
        return ""
    lines = ["| req/s ÷ granian WSGI best, ÷ gunicorn gthread best | " + " | ".join(f"{w} c{c}" for w, c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    bests = [(_best(stats, granian, w, c), _best(stats, gthread, w, c)) for w, c in cols]
    for s in servers:
        cells = []
        for (w, c), (gr, gt) in zip(cols, bests):
            r = _get(stats, s, w, c)
            cells.append(f"{_ratio(r, gr)} / {_ratio(r, gt)}")
        lines.append(f"| {label(s)} | " + " | ".join(cells) + " |")
    lines += ["", "The references at each point:", ""]
    for (w, c), (gr, gt) in zip(cols, bests):
        lines.append(f"- {w} c{c}: granian WSGI best {_ref(gr)}, gunicorn gthread best {_ref(gt)}")
    lines += ["", "The WSGI servers serve `apps/bench_wsgi.py` (echo: the body read whole and returned as "
              "one chunk); swordfish (ASGI) and native serve the ASGI routes (echo streamed back chunked)."]
    return "\n".join(lines)


def failures(records):
    failed = {}
    for r in records:
        if "failed" in r:
            failed.setdefault((r["server"], r["failed"]), []).append(f"{r['workload']} c{r['conc']}")
    return "\n".join(f"- {label(s)}: {', '.join(dict.fromkeys(points))}: {why}"
                     for (s, why), points in failed.items())


def tables(stats, meta, records=()):
    parts = [t for t in (throughput_table(stats, meta), targets_table(stats), wsgi_table(stats, meta),
                         vu_table(stats, meta)) if t]
    failed = failures(records)
    if failed:
        parts.append("Failed:\n\n" + failed)
    return "\n\n".join(parts)


def _plot(stats, meta, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = [c for c in THROUGHPUT_COLUMNS if any(k[1:3] == c for k in stats)]
    servers = _servers(stats, meta)
    if not cols or not servers:
        return False
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(servers)
    for i, s in enumerate(servers):
        xs, ys = [], []
        for g, (w, c) in enumerate(cols):
            r = _get(stats, s, w, c)
            if r:
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(r["rps"])
        ax.bar(xs, ys, width, color=COLORS.get(s), label=label(s))
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"{w}\nc{c}" for w, c in cols])
    ax.set_ylabel("requests/s")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(ncol=4, fontsize=8, loc="upper right")
    ax.set_title(f"HTTP throughput, 1 worker, Python {meta['python']} (median of {meta['rounds']} rounds)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


METHOD = """\
`benchmarks/http/run.py --full` (`make -C benchmarks http-full`). Every server runs one
worker pinned to CPU 0 (`taskset`) and serves the same ASGI app (`benchmarks/http/apps/`)
on 127.0.0.1; `wrk` (one thread) runs pinned to CPU 1 after {warmup:g} s of warm-up, for
{seconds:g} s. The servers take turns in a rotated order each round and the tables give the
median of {rounds} rounds. `hello` is a 13-byte plain-text GET at 400 connections; `get10k`
a 10 KiB GET; `echo10k` a POST of 10 KiB that the app reads with `receive()` and sends
back chunk by chunk (a chunked response). The native reference is a single-threaded
hyper server (`benchmarks/http/native/`). Server CPU µs/request is the user+system time of
the server's process tree over the measured run divided by the requests served: the load
generator shares the machine, so this is the figure that does not depend on it.

The virtual-user workload is the k6 method: 10 users, each looping GET `/` (a Jinja2 page
of 26 KB), a 0.1 s pause, GET `/api` (which fetches a number over HTTP from a fake
database server with 0 or 25 ms latency), GET `/`, measured by `http-vu` (native/). The
database waits out its latency with `nanosleep`, so a 25 ms query takes 25.3–25.6 ms. With
one worker the server is pinned to CPU 0 and the client and database to CPU 1; with two
workers nothing is pinned."""


def write_docs(stats, meta, records):
    plot = os.path.join(PLOTS, "http-throughput.png")
    drawn = _plot(stats, meta, plot)
    v = meta["versions"]
    out = [BEGIN, "", "## HTTP servers", "",
           f"Measured {meta['date']} at commit `{meta['commit']}` on {meta['cpu']} ({meta['ncpu']} CPUs), "
           f"Python {meta['python']}; granian {v['granian']}, uvicorn {v['uvicorn']} (httptools {v['httptools']}, "
           f"h11 {v['h11']}), hypercorn {v['hypercorn']}, uvloop {v['uvloop']}, rloop {v['rloop']}; "
           f"{meta['wrk'].split(' Copyright')[0]}.",
           "", METHOD.format(**meta), ""]
    if drawn:
        out += [f"![HTTP throughput]({os.path.relpath(plot, os.path.dirname(DOCS))})", ""]
    for title, table in (("Throughput", throughput_table(stats, meta)),
                         ("Against the targets", targets_table(stats)),
                         ("Virtual users (template page and database API)", vu_table(stats, meta))):
        if table:
            out += [f"### {title}", "", table, ""]
    failed = [r for r in records if "failed" in r]
    if failed:
        out += ["### Failed runs", ""]
        out += [f"- round {r['round'] + 1} {r['server']} {r['workload']} c{r['conc']}: {r['failed']}" for r in failed]
        out.append("")
    out.append(END)
    page.replace_section(DOCS, BEGIN, END, "\n".join(out) + "\n")
