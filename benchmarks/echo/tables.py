"""Statistics over echo measurements and the markdown tables made of them.

Every cell is the median over the repeats of one (test, impl, mode, size,
conc); latency percentiles are the medians of each run's own percentile.
"""
import statistics

from suite import NATIVE, NATIVES

METRICS = ("rps", "mibps", "p50_us", "p99_us", "server_cpu", "bytes_per_conn",
           "seconds")
PEERS = ("asyncio", "uvloop", "rloop")
CANDIDATE = "swordfish"
# The targets, checked in target_table.
TARGET_PEER = 1.15
TARGET_NATIVE = 0.85
TARGET_TLS_UVLOOP = 1.2


def key_of(rec):
    return (rec["test"], rec["impl"], rec["mode"], rec.get("size"), rec.get("conc"))


def summarize(records):
    groups = {}
    for rec in records:
        groups.setdefault(key_of(rec), []).append(rec)
    stats = {}
    for key, recs in groups.items():
        ok = [r for r in recs if r["ok"]]
        entry = {"n": len(ok), "errors": [r["error"] for r in recs if not r["ok"]]}
        for metric in METRICS:
            values = [r[metric] for r in ok if r.get(metric) is not None]
            if values:
                entry[metric] = statistics.median(values)
                entry[metric + "_range"] = (min(values), max(values))
        stats[key] = entry
    return stats


def size_label(size):
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


class View:
    """Lookups shared by the tables and plots of one run."""

    def __init__(self, stats, support, loops):
        self.stats, self.support, self.loops = stats, support, loops

    def na_reason(self, impl, mode, tls=False):
        return self.support.get((impl, NATIVE if impl in NATIVES else mode, tls))

    def entry(self, test, impl, mode, size=None, conc=None):
        if impl in NATIVES:
            mode = None if test == "echo" else mode
        return self.stats.get((test, impl, mode, size, conc))

    def value(self, test, impl, mode, metric, size=None, conc=None):
        entry = self.entry(test, impl, mode, size, conc)
        return entry.get(metric) if entry else None

    def cell(self, test, impl, mode, metric, size=None, conc=None, fmt="{:,.0f}",
             scale=1.0):
        if self.na_reason(impl, mode, test == "tls"):
            return "n/a"
        entry = self.entry(test, impl, mode, size, conc)
        if entry is None:
            return ""
        if metric not in entry:
            return "failed" if entry["errors"] else ""
        return fmt.format(entry[metric] * scale)

    def best_peer(self, test, mode, metric, size=None, conc=None):
        """(name, value) of the best measured peer loop, or (None, None)."""
        best = (None, None)
        for peer in PEERS:
            if peer not in self.loops:
                continue
            v = self.value(test, peer, mode, metric, size, conc)
            if v is not None and (best[1] is None or v > best[1]):
                best = (peer, v)
        return best

    def best_native(self, size, conc):
        """Requests/s of the faster native reference (plain or polling), or None."""
        got = [v for v in (self.value("echo", n, None, "rps", size, conc) for n in NATIVES)
               if v is not None]
        return max(got) if got else None

    def ratio(self, mine, other):
        return mine / other if mine and other else None


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}x"


def echo_table(view, modes, sizes, conc):
    """Requests/s per mode x size, one column per implementation."""
    impls = view.loops + list(NATIVES)
    has_candidate = CANDIDATE in view.loops
    head = ["mode", "size"] + impls
    if has_candidate:
        head += [f"{CANDIDATE} / best peer", f"{CANDIDATE} / best native"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | ---: |" + " ---: |" * (len(head) - 2)]
    for mode in modes:
        for size in sizes:
            cells = [view.cell("echo", impl, mode, "rps", size, conc) for impl in impls]
            if has_candidate:
                mine = view.value("echo", CANDIDATE, mode, "rps", size, conc)
                peer, best = view.best_peer("echo", mode, "rps", size, conc)
                native = view.best_native(size, conc)
                r = view.ratio(mine, best)
                cells.append(f"{fmt_ratio(r)}" + (f" ({peer})" if r else ""))
                cells.append(fmt_ratio(view.ratio(mine, native)))
            lines.append(f"| {mode} | {size_label(size)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(view, test, modes, sizes, concurrency, impls):
    """Every metric of every (size, conc, mode, impl): the long table."""
    lines = ["| conc | size | mode | impl | req/s | MiB/s | p50 (µs) | p99 (µs) "
             "| server CPU |",
             "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for conc in concurrency:
        for size in sizes:
            rows = [(mode, impl) for mode in modes for impl in impls if impl not in NATIVES]
            rows += [(None, impl) for impl in NATIVES if impl in impls]
            for mode, impl in rows:
                entry = view.entry(test, impl, mode, size, conc)
                reason = view.na_reason(impl, mode, test == "tls")
                prefix = f"| {conc} | {size_label(size)} | {mode or '-'} | {impl} |"
                if reason or entry is None or "rps" not in entry:
                    shown = "n/a" if reason else ("failed" if entry else "")
                    lines.append(prefix + f" {shown} | | | | |")
                    continue
                cpu = entry.get("server_cpu")
                lines.append(
                    prefix + f" {entry['rps']:,.0f} | {entry['mibps']:,.1f} "
                    f"| {entry['p50_us']:,.0f} | {entry['p99_us']:,.0f} "
                    f"| {'' if cpu is None else f'{cpu:.0%}'} |")
    return "\n".join(lines)


def tls_table(view, sizes, concurrency):
    impls = view.loops
    has_candidate = CANDIDATE in impls and "uvloop" in impls
    head = ["conc", "size"] + impls + ([f"{CANDIDATE} / uvloop"] if has_candidate else [])
    lines = ["| " + " | ".join(head) + " |",
             "| ---: | ---: |" + " ---: |" * (len(head) - 2)]
    for conc in concurrency:
        for size in sizes:
            cells = [view.cell("tls", impl, "proto", "rps", size, conc) for impl in impls]
            if has_candidate:
                cells.append(fmt_ratio(view.ratio(
                    view.value("tls", CANDIDATE, "proto", "rps", size, conc),
                    view.value("tls", "uvloop", "proto", "rps", size, conc))))
            lines.append(f"| {conc} | {size_label(size)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def extras_table(view, tests):
    """Bulk throughput and idle memory per implementation."""
    head = ["impl"]
    if "bulk" in tests:
        head.append("bulk echo (MiB/s)")
    if "idle" in tests:
        head.append("idle connection (KiB of server RSS)")
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for impl in view.loops + [NATIVE]:
        cells = []
        if "bulk" in tests:
            cells.append(view.cell("bulk", impl, "proto", "mibps"))
        if "idle" in tests:
            cells.append(view.cell("idle", impl, "proto", "bytes_per_conn",
                                   fmt="{:.2f}", scale=1 / 1024))
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target_table(view, modes, sizes, concurrency, tests):
    """The issue's targets for swordfish: met, missed or not measured."""
    rows = []

    def verdict(ratios, goal, higher=True):
        got = [r for r in ratios if r is not None]
        if not got:
            return "not measured", "n/a"
        worst = min(got) if higher else max(got)
        ok = sum(1 for r in got if (r >= goal if higher else r <= goal))
        missing = len(ratios) - len(got)
        note = f"{ok}/{len(got)} met" + (f", {missing} not measured" if missing else "")
        return note, f"{worst:.2f}x"

    if "echo" in tests:
        for conc in concurrency:
            peer, native = [], []
            for mode in modes:
                for size in sizes:
                    mine = view.value("echo", CANDIDATE, mode, "rps", size, conc)
                    peer.append(view.ratio(mine, view.best_peer("echo", mode, "rps",
                                                                size, conc)[1]))
                    native.append(view.ratio(mine, view.best_native(size, conc)))
            rows.append((f"echo req/s ≥ {TARGET_PEER}x best peer, concurrency {conc}",
                         *verdict(peer, TARGET_PEER)))
            rows.append((f"echo req/s ≥ {TARGET_NATIVE} of the best native, concurrency {conc}",
                         *verdict(native, TARGET_NATIVE)))
    if "tls" in tests:
        ratios = [view.ratio(view.value("tls", CANDIDATE, "proto", "rps", size, conc),
                             view.value("tls", "uvloop", "proto", "rps", size, conc))
                  for conc in concurrency for size in sizes]
        rows.append((f"TLS echo req/s ≥ {TARGET_TLS_UVLOOP}x uvloop",
                     *verdict(ratios, TARGET_TLS_UVLOOP)))
    if "idle" in tests:
        r = view.ratio(view.value("idle", CANDIDATE, "proto", "bytes_per_conn"),
                       view.value("idle", "uvloop", "proto", "bytes_per_conn"))
        rows.append(("idle memory per connection ≤ uvloop's", *verdict([r], 1.0, False)))
    lines = ["| target | result | worst ratio |", "| --- | --- | ---: |"]
    lines += [f"| {name} | {result} | {worst} |" for name, result, worst in rows]
    return "\n".join(lines)


def spread_line(view):
    """How much the rounds disagreed: (max - min) / median of requests/s per
    echo and TLS cell, summarized over the cells measured more than once."""
    spreads = sorted((e["rps_range"][1] - e["rps_range"][0]) / e["rps"]
                     for key, e in view.stats.items()
                     if key[0] in ("echo", "tls") and e.get("n", 0) > 1 and e.get("rps"))
    if not spreads:
        return "Spread between rounds: one round per cell, not known."
    return (f"Spread between rounds ((max - min) / median of a cell's requests/s, "
            f"{len(spreads)} echo and TLS cells): median {statistics.median(spreads):.0%}, "
            f"worst {spreads[-1]:.0%}. Ratios within that spread are not differences.")


def na_list(support):
    lines = []
    for (impl, mode, tls), reason in sorted(support.items(),
                                            key=lambda kv: tuple(map(str, kv[0]))):
        if reason:
            what = impl if impl in NATIVES else f"{impl} {mode}"
            lines.append(f"- {what}{' (TLS)' if tls else ''}: {reason}")
    return "\n".join(lines)


def failure_list(records):
    return "\n".join(
        f"- {r['test']} {r['impl']} {r.get('mode') or '-'}"
        + (f" {size_label(r['size'])} c{r['conc']}" if r.get("size") else "")
        + f" (repeat {r['repeat']}): {r['error']}"
        for r in records if not r["ok"])
