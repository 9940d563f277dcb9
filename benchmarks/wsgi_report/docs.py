"""The WSGI section of docs/benchmarks.md: the raw WSGI throughput run (http/run.py
--suite wsgi) and the reproduced WSGI/ASGI report (run.py), from their results files,
with plots and the issue's targets checked point by point.

    docs.py                        the newest full runs (2 rounds or more): one raw run,
                                   and one report run per virtual-user count
    docs.py --http F --report A B  those runs instead
"""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path[:0] = [BENCH, os.path.join(BENCH, "http")]
import page  # noqa: E402  (benchmarks/page.py: the docs page's sections)
import table  # noqa: E402
from peers import LATENCIES, ROWS, WORKERS, label as row_label  # noqa: E402
from rounds import REPO, load_results  # noqa: E402
from servers import label  # noqa: E402


def _http_report():
    """http/report.py (its tables and medians), loaded under a name of its own: benchmarks/
    has a report.py too, which http/report.py's own imports need as `report`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("http_report", os.path.join(BENCH, "http", "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


http_report = _http_report()

DOCS = os.path.join(REPO, "docs", "benchmarks.md")
PLOTS = os.path.join(REPO, "docs", "benchmarks")
BEGIN, END = "<!-- wsgi:begin -->", "<!-- wsgi:end -->"
# The raw run's plot: the defaults, each peer's best setting, the references.
PLOTTED = ["swordfish-wsgi", "granian-wsgi-bt1", "granian-wsgi", "gunicorn-gthread-t8",
           "gunicorn-gevent", "waitress", "swordfish", "native"]
WSGI_ROWS = [r for r in ROWS if r.startswith(("gunicorn-sync", "gunicorn-gthread", "gunicorn-gevent"))
             or r.endswith("-wsgi")]
ASGI_ROWS = [r for r in ROWS if r not in WSGI_ROWS]
TARGET_GRANIAN, TARGET_GTHREAD, DEFAULT_SLACK, ASGI_SLACK = 1.2, 8.0, 0.10, 0.05


def newest(pattern, keep=lambda meta: True):
    for path in sorted(glob.glob(pattern), reverse=True):
        meta, _ = load_results(path)
        if keep(meta):
            return path
    return None


def complete(meta):
    """Whether a run is the whole report: two rounds or more, every row, every cell. Runs of a
    few servers or cells (more rounds of the contended ones) stay out of the report's table."""
    return (meta["rounds"] >= 2 and set(ROWS) <= set(meta["servers"])
            and set(WORKERS) <= set(meta["workers"]) and set(LATENCIES) <= set(meta["latencies"]))


def default_reports():
    """The newest full report run for each virtual-user count, fewest users first."""
    found = {}
    for path in sorted(glob.glob(os.path.join(HERE, "results", "report-*.json")), reverse=True):
        meta, _ = load_results(path)
        if complete(meta) and meta["vus"] not in found:
            found[meta["vus"]] = path
    return [found[v] for v in sorted(found)]


def raw_targets(stats):
    """swordfish WSGI's default against granian WSGI's and gunicorn gthread's best settings
    and against its own best --threads, point by point."""
    servers = {k[0] for k in stats}
    granian = [s for s in servers if s.startswith("granian-wsgi")]
    gthread = [s for s in servers if s.startswith("gunicorn-gthread")]
    ours = [s for s in servers if s.startswith("swordfish-wsgi")]
    rows = ["| point | swordfish WSGI (default) | ÷ granian WSGI best | ÷ gunicorn gthread best "
            "| ÷ its best --threads | swordfish ASGI | native |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for w, c in http_report.THROUGHPUT_COLUMNS:
        sf = stats.get(("swordfish-wsgi", w, c, None, None))
        gr, gt, best = (http_report._best(stats, names, w, c) for names in (granian, gthread, ours))
        if not sf or not gr or not gt or not best:
            continue
        asgi, native = (stats.get((s, w, c, None, None)) for s in ("swordfish", "native"))
        g, t, d = sf["rps"] / gr[1], sf["rps"] / gt[1], sf["rps"] / best[1]
        verdicts.append((g >= TARGET_GRANIAN, t >= TARGET_GTHREAD, d >= 1 - DEFAULT_SLACK))
        rows.append(f"| {w} c{c} | {http_report._k(sf['rps'])} | {g:.2f}x ({label(gr[0])}) | "
                    f"{t:.1f}x ({label(gt[0])}) | {d:.2f} ({label(best[0])}) | "
                    f"{http_report._k(asgi['rps']) if asgi else '–'} | {http_report._k(native['rps']) if native else '–'} |")
    if not verdicts:
        return ""
    met = [all(v[i] for v in verdicts) for i in range(3)]
    rows += ["", f"- ≥ {TARGET_GRANIAN}x granian WSGI's best at every point: {'met' if met[0] else 'not met'}",
             f"- ≥ {TARGET_GTHREAD:g}x gunicorn gthread's best at every point: {'met' if met[1] else 'not met'}",
             f"- the default --threads within {DEFAULT_SLACK:.0%} of the best setting at every point: "
             f"{'met' if met[2] else 'not met'}"]
    return "\n".join(rows)


def report_targets(records, meta):
    """Per cell: does swordfish WSGI handle the most requests of the WSGI servers, with the
    lowest p95, and (25 ms cells) come within 5% of the best ASGI server?"""
    stats = table.medians(records)
    rows = ["| cell | swordfish WSGI | best other WSGI | most requests | lowest WSGI p95 | best ASGI | ÷ best ASGI |",
            "|---|---:|---:|:---:|:---:|---:|---:|"]
    for w in meta["workers"]:
        for ms in meta["latencies"]:
            sf = stats.get(("swordfish-wsgi", w, ms))
            others = [(s, r) for s in WSGI_ROWS if s != "swordfish-wsgi" and (r := stats.get((s, w, ms)))]
            asgi = [(s, r) for s in ASGI_ROWS if (r := stats.get((s, w, ms)))]
            if not sf or not others or not asgi:
                continue
            top = max(others, key=lambda x: x[1]["requests"])
            low_p95 = min(r["p95_ms"] for _, r in others)
            best_asgi = max(asgi, key=lambda x: x[1]["requests"])
            share = sf["requests"] / best_asgi[1]["requests"]
            near = f" ({'within' if share >= 1 - ASGI_SLACK else 'not within'} 5%)" if ms else ""
            rows.append(f"| {table.cell_name(w, ms)} | {sf['requests']:,.0f} ({sf['p95_ms']:.1f} ms) | "
                        f"{top[1]['requests']:,.0f} ({row_label(top[0])}) | "
                        f"{'yes' if sf['requests'] >= top[1]['requests'] else 'no'} | "
                        f"{'yes' if sf['p95_ms'] <= low_p95 else 'no'} ({low_p95:.1f} ms) | "
                        f"{best_asgi[1]['requests']:,.0f} ({row_label(best_asgi[0])}) | {share:.3f}{near} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def _bars(path, groups, series, title, ylabel):
    """Grouped bars: groups = x labels, series = [(name, [value or None per group])]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series):
        xs = [g - 0.4 + width * (i + 0.5) for g, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(ncol=3, fontsize=8, loc="upper right")
    ax.set_title(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def raw_plot(stats, meta):
    cols = [c for c in http_report.THROUGHPUT_COLUMNS if any(k[1:3] == c for k in stats)]
    names = [s for s in PLOTTED if any(k[0] == s for k in stats)]
    path = os.path.join(PLOTS, "wsgi-throughput.png")
    series = [(label(s), [(r["rps"] if (r := stats.get((s, w, c, None, None))) else None) for w, c in cols])
              for s in names]
    _bars(path, [f"{w}\nc{c}" for w, c in cols], series,
          f"WSGI throughput, 1 worker, Python {meta['python']} (median of {meta['rounds']} rounds)", "requests/s")
    return path


def report_plot(records, meta):
    stats = table.medians(records)
    cells = [(w, ms) for w in meta["workers"] for ms in meta["latencies"]]
    path = os.path.join(PLOTS, f"wsgi-report-{meta['vus']}vu.png")
    series = [(row_label(s), [(r["requests"] if (r := stats.get((s, w, ms))) else None) for w, ms in cells])
              for s in meta["servers"]]
    _bars(path, [f"{w} worker{'s' if w > 1 else ''}\ndb {ms} ms" for w, ms in cells], series,
          f"WSGI/ASGI report, {meta['vus']} virtual users, {meta['seconds']:g} s per cell "
          f"(median of {meta['rounds']} rounds)", "requests handled")
    return path


RAW_METHOD = """\
`make -C benchmarks http-wsgi-full` (`benchmarks/http/run.py --suite wsgi --full`). As in the
HTTP section: one worker pinned to CPU 0, `wrk` (one thread) pinned to CPU 1, {warmup:g} s of
warm-up then {seconds:g} s, servers in a rotated order each round, medians of {rounds} rounds.
The WSGI servers serve `benchmarks/http/apps/bench_wsgi.py`: `hello` returns 13 bytes,
`get10k` a 10 KiB body, `echo10k` reads the 10 KiB POST body whole and returns it. swordfish
WSGI runs with its default `--threads` and with 1, 2, 4 and 8; granian WSGI with its default
blocking threads and with `--blocking-threads 1` (its best here); gunicorn gthread with 1, 4,
8 and 32 threads."""

REPORT_METHOD = """\
`make -C benchmarks report-full` (`benchmarks/wsgi_report/run.py`). A Werkzeug app (`/`: a
Jinja2 page; `/api`: a fake database query, `time.sleep` of 0 or 25 ms, then JSON) under
gunicorn sync, gthread (8 threads), gevent, granian WSGI and swordfish WSGI, and its
Starlette twin (`await asyncio.sleep`) under uvicorn, gunicorn + uvicorn-worker, granian
ASGI and swordfish ASGI, each server with its default settings. Each virtual user loops GET
`/`, 0.1 s of think time, GET `/api`, GET `/` (`http-vu`). With one worker the server is
pinned to CPU 0 and the client to CPU 1; with two nothing is pinned. The report's own
scenario has 50 users: most servers then keep up with them (all but gunicorn sync, and
gthread and gevent with the 25 ms database), and their request counts sit at the scenario's
ceiling (each user's 0.1 s pause bounds them), so the table is run again with 400 users,
which no server keeps up with."""

CYCLE_NOTE = """\
At the ceiling the counts move in steps. Every user starts at once and pauses a fixed 0.1 s,
so a user's requests in the window come in whole cycles, and whether a cycle's last request
fits depends on where the users' phase falls when the window opens. Two servers a few
hundred microseconds apart in their users' cycle can land on either side of a step, either
way round. The users' mean cycle (from `http-vu`), below, is the measure without steps."""


def _image(alt, path):
    return [f"![{alt}]({os.path.relpath(path, os.path.dirname(DOCS))})", ""]


def section(http_path, report_paths, plots=True):
    """The section's markdown; with plots, the plots are drawn into docs/benchmarks/."""
    out = [BEGIN, "", "## WSGI servers", ""]
    if http_path:
        meta, records = load_results(http_path)
        stats = http_report.summarize(records)
        v = meta["versions"]
        out += [f"Raw throughput measured {meta['date']} at commit `{meta['commit']}` on {meta['cpu']} "
                f"({meta['ncpu']} CPUs), Python {meta['python']}; granian {v.get('granian')}, gunicorn "
                f"{v.get('gunicorn')} (gevent {v.get('gevent')}), waitress {v.get('waitress')}; {meta['wrk']}.",
                "", RAW_METHOD.format(**meta), ""]
        out += _image("WSGI throughput", raw_plot(stats, meta)) if plots else []
        failed = {}
        for r in records:
            if "failed" in r:
                failed.setdefault((r["server"], r["round"] + 1), r["failed"].split(":")[-1].strip()[:100])
        notes = [f"- {label(s)}, round {n}: did not run ({why}); its row is the other rounds' median"
                 for (s, n), why in failed.items()]
        out += ["### Throughput", "", http_report.throughput_table(stats, meta), ""] + notes + ([""] if notes else []) + [
                "### Against the peers' best settings", "", http_report.wsgi_table(stats, meta), "",
                "### Against the targets", "", raw_targets(stats), ""]
    for path in report_paths:
        meta, records = load_results(path)
        v = meta["versions"]
        if path == report_paths[0]:
            out += ["### The WSGI/ASGI comparison report, reproduced", "", REPORT_METHOD, ""]
        out += [f"#### {meta['vus']} virtual users", "",
                f"Measured {meta['date']} at commit `{meta['commit']}`, Python {meta['python']}; "
                + ", ".join(f"{p} {v[p]}" for p in table.PACKAGES if v.get(p)) + ".", ""]
        out += _image(f"report, {meta['vus']} users", report_plot(records, meta)) if plots else []
        out += [table.table(records, meta), "", report_targets(records, meta), ""]
        cycles = table.cycle_table(records, meta)
        if cycles:
            out += [CYCLE_NOTE, "", cycles, ""]
    out.append(END)
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--http", help="an http-wsgi results file (default: the newest of 2+ rounds)")
    p.add_argument("--report", nargs="*", help="report results files (default: the newest full one per user count)")
    p.add_argument("--print", action="store_true", help="print the section instead of writing the docs")
    args = p.parse_args(argv)
    http_path = args.http or newest(os.path.join(BENCH, "http", "results", "http-wsgi-*.json"),
                                    lambda m: m["rounds"] >= 2)
    reports = args.report if args.report is not None else default_reports()
    if not http_path and not reports:
        sys.exit("no full WSGI runs in the results directories: run make http-wsgi-full and report-full")
    text = section(http_path, reports, plots=not args.print)
    if args.print:
        print(text)
    else:
        page.replace_section(DOCS, BEGIN, END, text)
        print("wrote docs/benchmarks.md (WSGI section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
