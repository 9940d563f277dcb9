"""The report's run description, medians over rounds and its table: requests handled
and p95 latency per server and cell (workers x database latency)."""
import platform
import statistics
import time
from importlib.metadata import PackageNotFoundError, version

import page  # the scheduling report's machine and commit helpers (benchmarks/page.py)
from peers import label

PACKAGES = ("gunicorn", "gevent", "greenlet", "uvicorn", "uvicorn-worker", "uvloop", "httptools",
            "granian", "werkzeug", "starlette", "jinja2", "anyio")


def _version(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_meta(args, repo, elapsed):
    return {
        "python": platform.python_version(), "cpu": page.cpu_model(), "ncpu": page.nproc(),
        "commit": page.git_commit(repo), "date": time.strftime("%Y-%m-%d"),
        "versions": {p: _version(p) for p in PACKAGES},
        "servers": args.servers, "vus": args.vus, "rounds": args.rounds, "seconds": args.seconds,
        "warmup": args.warmup, "workers": args.workers, "latencies": args.latencies,
        "elapsed_s": round(elapsed),
    }


def medians(records):
    """{(server, workers, db_ms): {field: median over the rounds}}, failed runs left out."""
    groups = {}
    for r in records:
        if "failed" not in r:
            groups.setdefault((r["server"], r["workers"], r["db_ms"]), []).append(r)
    return {key: {f: statistics.median(r[f] for r in rs) for f in ("requests", "rps", "p95_ms", "errors")}
            for key, rs in groups.items()}


def table(records, meta):
    stats = medians(records)
    cells = [(w, ms) for w in meta["workers"] for ms in meta["latencies"]]
    head = " | ".join(f"{w} worker{'s' if w > 1 else ''}, db {ms} ms" for w, ms in cells)
    lines = [f"| server | {head} |", "|---|" + "---:|" * len(cells)]
    for s in meta["servers"]:
        row = []
        for w, ms in cells:
            r = stats.get((s, w, ms))
            if r is None:
                row.append("–")
                continue
            errors = f", {r['errors']:.0f} errors" if r["errors"] else ""
            row.append(f"{r['requests']:,.0f} ({r['p95_ms']:.1f} ms{errors})")
        lines.append(f"| {label(s)} | " + " | ".join(row) + " |")
    lines += ["", f"Requests handled in {meta['seconds']:g} s by {meta['vus']} virtual users "
              f"(p95 latency over all requests), median of {meta['rounds']} round(s)."]
    failed = {}
    for r in records:
        if "failed" in r:
            failed.setdefault((r["server"], r["failed"]), []).append(f"{r['workers']}w/{r['db_ms']}ms")
    if failed:
        lines += ["", "Failed:", ""]
        lines += [f"- {label(s)} ({', '.join(dict.fromkeys(points))}): {why}" for (s, why), points in failed.items()]
    return "\n".join(lines)
