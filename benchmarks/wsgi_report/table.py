"""The report's run description, medians over rounds and its tables: requests handled
and p95 latency per server and cell (workers x database latency), and the users' cycle."""
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
    return {key: {f: _median(rs, f) for f in ("requests", "rps", "p95_ms", "errors", "cycle_ms")}
            for key, rs in groups.items()}


def _median(rounds, field):
    """The field's median over the rounds that have it; None if none has (runs stored before
    http-vu measured the users' cycle)."""
    values = [r[field] for r in rounds if r.get(field) is not None]
    return statistics.median(values) if values else None


def cell_name(workers, db_ms):
    """A cell as the tables name it: "2 workers, db 25 ms"."""
    return f"{workers} worker{'s' if workers > 1 else ''}, db {db_ms} ms"


def _grid(meta):
    """The run's cells (workers, db_ms) and the head lines of a table with one column each."""
    cells = [(w, ms) for w in meta["workers"] for ms in meta["latencies"]]
    head = " | ".join(cell_name(w, ms) for w, ms in cells)
    return cells, [f"| server | {head} |", "|---|" + "---:|" * len(cells)]


def table(records, meta):
    stats = medians(records)
    cells, lines = _grid(meta)
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


def cycle_table(records, meta):
    """The users' mean cycle per server and cell ("" for runs without it). Once a server keeps
    up, a user's requests come in whole cycles, so the counts move in steps of a request a
    user, and where the steps fall depends on the users' phase when the window opens; the
    cycle is the continuous measure behind them."""
    stats = medians(records)
    if not any(r["cycle_ms"] for r in stats.values()):
        return ""
    cells, lines = _grid(meta)
    for s in meta["servers"]:
        cycles = [(stats.get((s, w, ms)) or {}).get("cycle_ms") for w, ms in cells]
        lines.append(f"| {label(s)} | " + " | ".join(f"{c:.2f}" if c else "–" for c in cycles) + " |")
    lines += ["", f"A user's mean cycle in ms (GET /, 0.1 s of think time, GET /api, GET /), "
              f"median of {meta['rounds']} round(s)."]
    return "\n".join(lines)


def round_table(records, meta):
    """Each round's requests per server and cell ("" for runs of fewer than three rounds):
    with the servers at the users' ceiling, which one has the most changes from round to
    round, and this shows by how much."""
    if meta["rounds"] < 3:
        return ""
    cells, _ = _grid(meta)
    counts = {(r["server"], r["workers"], r["db_ms"], r["round"]): r["requests"] for r in records if "failed" not in r}
    lines = []
    for w, ms in cells:
        head = " | ".join(str(n + 1) for n in range(meta["rounds"]))
        lines += [f"| {cell_name(w, ms)} | {head} |", "|---|" + "---:|" * meta["rounds"]]
        for s in meta["servers"]:
            row = [counts.get((s, w, ms, n)) for n in range(meta["rounds"])]
            lines.append(f"| {label(s)} | " + " | ".join("–" if c is None else f"{c:,}" for c in row) + " |")
        lines.append("")
    lines.append("Requests handled in each round (the servers take turns in a rotated order each round).")
    return "\n".join(lines)
