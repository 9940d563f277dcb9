"""Medians over the rounds and the markdown tables of the WebSocket benchmark (stdout and
the docs section): echo throughput and latency, ratios to the best peer and to the
native reference, broadcast, compressed echo and idle memory."""
import statistics

from servers import LABELS, NATIVE
from suite import SIZES, key

SUBJECT = "swordfish"


def summarize(records):
    """({point key: {field: median}}, {point key: failure reason}) over the rounds; a
    point that failed in some rounds and not others keeps its successful ones."""
    groups, failures = {}, {}
    for r in records:
        if "failed" in r:
            failures.setdefault(key(r), r["failed"])
        else:
            groups.setdefault(key(r), []).append(r)
    stats = {}
    for k, rs in groups.items():
        fields = {f for r in rs for f, v in r.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and f != "round"}
        stats[k] = {f: statistics.median(r[f] for r in rs if r.get(f) is not None)
                    for f in fields if any(r.get(f) is not None for r in rs)}
        stats[k]["rounds"] = len(rs)
        # Whether deflate was agreed is the same in every round; keep the last word.
        stats[k]["deflate"] = rs[-1].get("deflate", rs[-1].get("deflate_agreed", 0) > 0)
        stats[k]["extensions"] = rs[-1].get("extensions", "")
    return stats, {k: v for k, v in failures.items() if k not in stats}


def size_label(size):
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def _k(v):
    if v is None:
        return "–"
    return f"{v / 1000:.1f}k" if v >= 10_000 else f"{v:,.0f}"


def _us(v):
    return "–" if v is None else f"{v:,.0f}"


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "–"


class View:
    """The medians of one run, with its server order and failures."""

    def __init__(self, records, servers):
        self.stats, self.failures = summarize(records)
        self.idle_count = max((r.get("count", 0) for r in records if r["test"] == "idle"), default=0)
        self.servers = [s for s in servers if any(k[0] == s for k in list(self.stats) + list(self.failures))]

    def get(self, server, test, kind=None, size=None, conns=None, offered=None):
        return self.stats.get((server, test, kind, size, conns, offered))

    def points(self, test):
        """(kind, size, conns, offered) of `test` that have a number or a failure."""
        found = {k[2:] for k in list(self.stats) + list(self.failures) if k[1] == test}
        return sorted(found, key=lambda p: tuple("" if v is None else v for v in p))

    def peers(self):
        return [s for s in self.servers if s not in (SUBJECT, NATIVE)]

    def unmeasured(self, tests):
        """{server: reason} for servers without a single number in `tests`."""
        out = {}
        for s in self.servers:
            if any(k[0] == s and k[1] in tests for k in self.stats):
                continue
            reasons = [v for k, v in self.failures.items() if k[0] == s and k[1] in tests]
            if reasons:
                out[s] = reasons[0]
        return out


def status(reason):
    """A failure reason in a few words, for a table row."""
    for words in ("did not start", "did not listen", "refused the upgrade", "failed the echo probe", "died"):
        if words in reason:
            return words
    return "failed"


def _label(view, server, test):
    """The server's row label; with its status when `test` has no number from it."""
    label = LABELS.get(server, server)
    reason = view.unmeasured((test,)).get(server)
    return f"{label} ({status(reason)})" if reason else label


def _table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def reasons(view):
    """Why servers have no numbers, once per server and reason."""
    seen = {}
    for k, reason in view.failures.items():
        seen.setdefault((k[0], reason), []).append(k[1])
    lines = [f"- {LABELS.get(s, s)} ({', '.join(sorted(set(tests)))}): {reason}"
             for (s, reason), tests in seen.items()]
    return "Not measured (n/a):\n\n" + "\n".join(lines) if lines else ""


def echo_table(view, conns):
    cols = [(kind, size) for kind in ("text", "binary") for size in SIZES
            if any(p[:3] == (kind, size, conns) for p in view.points("echo"))]
    if not cols:
        return ""
    rows = []
    for s in view.servers:
        cells = []
        for kind, size in cols:
            r = view.get(s, "echo", kind, size, conns, False)
            cells.append("n/a" if r is None else f"{_k(r['msgs_per_s'])} ({_us(r['p50_us'])} / {_us(r['p99_us'])})")
        rows.append([_label(view, s, "echo")] + cells)
    head = ["server"] + [f"{kind} {size_label(size)}" for kind, size in cols]
    return (f"Echo, {conns} connection{'s' if conns > 1 else ''}: messages/s (p50 / p99 round trip, µs)\n\n"
            + _table(head, rows))


def cpu_table(view):
    cols = [p for p in view.points("echo")]
    if not cols:
        return ""
    rows = []
    for s in view.servers:
        cells = []
        for kind, size, conns, offered in cols:
            r = view.get(s, "echo", kind, size, conns, offered)
            cells.append("n/a" if r is None or r.get("cpu_us_per_msg") is None else f"{r['cpu_us_per_msg']:.1f}")
        rows.append([_label(view, s, "echo")] + cells)
    head = ["server CPU µs/message"] + [f"{k} {size_label(z)} c{c}" for k, z, c, _ in cols]
    return _table(head, rows)


def _ratio_rows(view, test, label_of):
    rows = []
    for point in sorted(view.points(test), key=lambda p: (p[2], p[0], p[1])):
        peers = [(view.get(p, test, *point), p) for p in view.peers()]
        peers = [(r["msgs_per_s"], p) for r, p in peers if r and (test != "deflate" or r["deflate"])]
        best, best_name = max(peers) if peers else (None, None)
        sf_rec = view.get(SUBJECT, test, *point)
        sf = sf_rec["msgs_per_s"] if sf_rec and (test != "deflate" or sf_rec["deflate"]) else None
        reason = view.failures.get((SUBJECT, test) + tuple(point))
        sf_cell = _k(sf) if sf else ("declined" if sf_rec else status(reason) if reason else "n/a")
        nat = view.get(NATIVE, test, *point)
        nat = nat["msgs_per_s"] if nat and (test != "deflate" or nat["deflate"]) else None
        rows.append([label_of(point), sf_cell,
                     f"{_k(best)} ({LABELS.get(best_name, best_name)})" if best else "–",
                     _ratio(sf, best), _k(nat) if nat else "–", _ratio(sf, nat), _ratio(best, nat)])
    return rows


def ratio_table(view):
    rows = []
    rows += _ratio_rows(view, "echo", lambda p: f"echo {p[0]} {size_label(p[1])} c{p[2]}")
    rows += _ratio_rows(view, "broadcast", lambda p: f"broadcast N={p[2]}")
    rows += _ratio_rows(view, "deflate", lambda p: f"deflate 4 KiB JSON c{p[2]}")
    if not rows:
        return ""
    head = ["point", "swordfish", "best peer", "swordfish / best peer", "native", "swordfish / native",
            "best peer / native"]
    return "messages/s, medians of the rounds\n\n" + _table(head, rows)


def broadcast_table(view):
    points = view.points("broadcast")
    if not points:
        return ""
    rows = []
    for s in view.servers:
        cells = []
        for point in points:
            r = view.get(s, "broadcast", *point)
            cells.append("n/a" if r is None else
                         f"{_k(r['msgs_per_s'])} ({r['p50_us'] / 1000:.1f} / {r['p99_us'] / 1000:.1f})")
        rows.append([_label(view, s, "broadcast")] + cells)
    head = ["server"] + [f"N={p[2]}" for p in points]
    return ("Broadcast: messages received per second by all clients together (p50 / p99 delivery, ms)\n\n"
            + _table(head, rows))


def deflate_table(view):
    points = view.points("deflate")
    if not points:
        return ""
    rows = []
    for s in view.servers:
        cells, agreed = [], None
        for point in points:
            r = view.get(s, "deflate", *point)
            if r is None:
                cells += ["n/a", "n/a"]
                continue
            agreed = r["extensions"] if r["deflate"] else "declined"
            if not r["deflate"]:
                cells += ["declined", "–"]
                continue
            cells.append(f"{_k(r['msgs_per_s'])} ({_us(r['p50_us'])} / {_us(r['p99_us'])})")
            cells.append(f"{r.get('wire_out_per_msg', 0):,.0f} / {r.get('wire_in_per_msg', 0):,.0f}")
        rows.append([_label(view, s, "deflate")] + cells
                    + [f"`{agreed}`" if agreed not in (None, "declined") else agreed or "n/a"])
    head = ["server"]
    for p in points:
        head += [f"c{p[2]} msg/s (p50 / p99 µs)", f"c{p[2]} bytes out / in"]
    head.append("agreed")
    return ("Compressed echo of a 4 KiB JSON document, permessage-deflate offered: messages/s "
            "(p50 / p99 round trip, µs) and payload bytes per message on the wire\n\n" + _table(head, rows))


def memory_table(view):
    points = view.points("idle")
    if not points:
        return ""
    rows = []
    for s in view.servers:
        plain, deflated = view.get(s, "idle", offered=False), view.get(s, "idle", offered=True)
        base = plain or deflated

        def per(r):
            if r is None:
                return "n/a"
            cell = f"{r['bytes_per_conn'] / 1024:.1f}"
            return cell if r is plain or r["deflate"] else cell + " (declined)"
        rows.append([_label(view, s, "idle"), f"{base['rss_before'] / 2**20:.1f}" if base else "n/a",
                     per(plain), per(deflated),
                     f"{base['open_s']:.1f}" if base else "n/a"])
    head = ["server", "RSS before, MiB", "KiB/connection", "KiB/connection, deflate", "open time, s"]
    return (f"Server memory of {view.idle_count:,} idle connections (RSS growth / connections)\n\n"
            + _table(head, rows))


def all_tables(view):
    parts = [echo_table(view, 64), echo_table(view, 1), ratio_table(view), broadcast_table(view),
             deflate_table(view), memory_table(view), cpu_table(view), reasons(view)]
    return "\n\n".join(p for p in parts if p)
