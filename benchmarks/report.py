"""Turn raw measurements into statistics, markdown tables and plots.

A measurement record (one child process) is a dict with keys
  kind ("workload" | "micro"), name (module name), size, loop, repeat,
  ok (bool), time (seconds, when ok), error (str, when not ok).
"""
import math
import os
import statistics

from micro import MICRO
from workloads import WORKLOADS

BASELINE = "asyncio"


def display_name(kind, name):
    return (WORKLOADS if kind == "workload" else MICRO).get(name, name)


def summarize(records):
    """Group records by (kind, name, size, loop) -> stats dict."""
    groups = {}
    for rec in records:
        key = (rec["kind"], rec["name"], rec["size"], rec["loop"])
        groups.setdefault(key, []).append(rec)
    stats = {}
    for key, recs in groups.items():
        times = [r["time"] for r in recs if r["ok"]]
        errors = [r["error"] for r in recs if not r["ok"]]
        entry = {"n": len(times), "errors": errors}
        if times:
            entry.update(
                avg=statistics.fmean(times),
                std=statistics.stdev(times) if len(times) > 1 else 0.0,
                min=min(times), max=max(times),
                median=statistics.median(times))
        stats[key] = entry
    return stats


def relative(stats, kind, name, size, loop):
    """asyncio median / loop median, or None when either is missing."""
    base = stats.get((kind, name, size, BASELINE), {}).get("median")
    mine = stats.get((kind, name, size, loop), {}).get("median")
    if not base or not mine:
        return None
    return base / mine


def fmt_ratio(ratio):
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def fmt_failed(entry):
    # The first error is representative; repeats usually fail the same way.
    return f"failed ({len(entry['errors'])}x): {entry['errors'][0]}"


def workload_table(stats, name, loops, sizes):
    """The published per-workload table, rows grouped by loop then M."""
    lines = ["| loop | M | avg (s) | std | min | max | relative speed vs asyncio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for loop in loops:
        for size in sizes:
            entry = stats.get(("workload", name, size, loop))
            if entry is None:
                continue
            if not entry["n"]:
                lines.append(f"| {loop} | {size} | {fmt_failed(entry)} | | | | |")
                continue
            flag = f" ({len(entry['errors'])} failed)" if entry["errors"] else ""
            lines.append(
                f"| {loop}{flag} | {size} | {entry['avg']:.4f} | {entry['std']:.4f} "
                f"| {entry['min']:.4f} | {entry['max']:.4f} "
                f"| {fmt_ratio(relative(stats, 'workload', name, size, loop))} |")
    return "\n".join(lines)


def median_table(stats, name, loops, sizes):
    """Median seconds, one row per M and one column per loop."""
    lines = ["| M | " + " | ".join(f"{loop} median (s)" for loop in loops) + " |",
             "| ---: |" + " ---: |" * len(loops)]
    for size in sizes:
        cells = []
        for loop in loops:
            entry = stats.get(("workload", name, size, loop))
            if entry is None:
                cells.append("")
            elif not entry["n"]:
                cells.append("failed")
            else:
                cells.append(f"{entry['median']:.4f}")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def micro_table(stats, names, loops, size):
    lines = ["| benchmark | N | loop | median (s) | ops/s | ratio vs asyncio |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for name in names:
        for loop in loops:
            entry = stats.get(("micro", name, size, loop))
            if entry is None:
                continue
            label = display_name("micro", name)
            if not entry["n"]:
                lines.append(f"| {label} | {size} | {loop} | {fmt_failed(entry)} | | |")
                continue
            ops = size / entry["median"]
            lines.append(
                f"| {label} | {size} | {loop} | {entry['median']:.4f} | {ops:,.0f} "
                f"| {fmt_ratio(relative(stats, 'micro', name, size, loop))} |")
    return "\n".join(lines)


def summary_table(stats, names, loops, sizes):
    """Geometric mean over workloads of the relative speed at each M."""
    others = [loop for loop in loops if loop != BASELINE]
    if not others:
        return ""
    lines = ["| M | " + " | ".join(others) + " |",
             "| ---: |" + " ---: |" * len(others)]
    for size in sizes:
        cells = []
        for loop in others:
            ratios = [relative(stats, "workload", name, size, loop) for name in names]
            ratios = [r for r in ratios if r]
            # A loop that failed a workload gets no mean, not a flattering one.
            if ratios and len(ratios) == len(names):
                cells.append(fmt_ratio(math.exp(statistics.fmean(map(math.log, ratios)))))
            else:
                cells.append("n/a")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(records):
    return [r for r in records if not r["ok"]]


def failure_list(records):
    lines = []
    for r in failures(records):
        lines.append(f"- {display_name(r['kind'], r['name'])} M={r['size']} "
                     f"{r['loop']} (repeat {r['repeat']}): {r['error']}")
    return "\n".join(lines)


def plot_workload(stats, name, loops, sizes, path):
    """Log-log plot of median time vs M, one line per loop, min-max band.

    Returns False (and writes nothing) when no loop has any data."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    drawn = False
    for loop in loops:
        points = [(size, stats[("workload", name, size, loop)]) for size in sizes
                  if stats.get(("workload", name, size, loop), {}).get("n")]
        if not points:
            continue
        drawn = True
        xs = [size for size, _ in points]
        line, = ax.plot(xs, [e["median"] for _, e in points], marker="o",
                        label=loop)
        ax.fill_between(xs, [e["min"] for _, e in points],
                        [e["max"] for _, e in points],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(size) for size in sizes], rotation=30)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    # Plain decimal seconds instead of 6x10^-1 style labels.
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("M (number of tasks / events)")
    ax.set_ylabel("time (s), median; band = min..max")
    ax.set_title(display_name("workload", name))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True
