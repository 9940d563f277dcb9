"""What the WebSocket benchmark measures and in which order: the points of each test,
one round over the servers (each started fresh per app, probed, then measured), and the
record of each measurement or of why there is none.

Tests: `echo` (closed-loop echo, text and binary, 16 B / 1 KiB / 64 KiB, 1 and 64
connections), `broadcast` (N clients each send K messages relayed to all), `deflate`
(echo of a 4 KiB JSON document with permessage-deflate offered) and `idle` (server
memory of many idle connections, with and without deflate offered).
"""
import sys
import time

import load
import payload
from servers import Server, ServerFailed  # (it puts benchmarks/ on sys.path, for rounds)
from rounds import free_port, pin, rotated

SERVER_CPU, CLIENT_CPU = 0, 1
TESTS = ("echo", "broadcast", "deflate", "idle")
SIZES = (16, 1024, 65536)
ECHO_FULL = [(kind, size, conns) for conns in (1, 64) for kind in ("text", "binary") for size in SIZES]
ECHO_QUICK = [("binary", 16, 64), ("text", 1024, 64), ("binary", 65536, 64), ("text", 16, 1)]
# Messages received in one broadcast run (N * N * K): 640,000 is granian's N = 16,
# K = 2500; K shrinks with N so that every run moves about as many messages.
BROADCAST_TOTAL = {"full": 640_000, "quick": 160_000}
BROADCAST_SIZE = 16
# Connections per source address: a loopback address has ~28,000 ephemeral ports.
PER_SOURCE = 20_000


def plan(args):
    """The points of each selected test, for args.mode in quick/full."""
    quick = args.mode == "quick"
    points = {}
    if "echo" in args.tests:
        points["echo"] = ECHO_QUICK if quick else ECHO_FULL
    if "broadcast" in args.tests:
        total = args.broadcast_total
        points["broadcast"] = [(n, max(1, round(total / n / n))) for n in ((16,) if quick else (16, 64))]
    if "deflate" in args.tests:
        points["deflate"] = [("text", payload.SIZE, conns) for conns in ((64,) if quick else (1, 64))]
    if "idle" in args.tests:
        points["idle"] = [False, True]
    return points


def _note(point, text):
    print(f"  round {point['round'] + 1} {point['server']:16} {text}", flush=True)


def key(record):
    """What identifies a point across rounds."""
    return (record["server"], record["test"], record.get("kind"), record.get("size"),
            record.get("conns"), record.get("offered"))


class Round:
    """One round: every server once, in a rotated order."""

    def __init__(self, args, rnd, records):
        self.args, self.rnd, self.records = args, rnd, records
        self.plan = plan(args)
        self.server_pin = pin(SERVER_CPU, args.pin)
        self.client_pin = pin(CLIENT_CPU, args.pin)

    def run(self):
        for name in rotated(self.args.servers, self.rnd):
            # One server start for the echo app's throughput tests, one for broadcast,
            # and a fresh one for each memory reading.
            echo_points = self._points(name, "echo") + self._points(name, "deflate")
            if echo_points:
                self._with_server(name, "echo", echo_points)
            if "broadcast" in self.plan:
                self._with_server(name, "broadcast", self._points(name, "broadcast"))
            for point in self._points(name, "idle"):
                self._with_server(name, "echo", [point])

    def _points(self, name, test):
        base = {"round": self.rnd, "server": name, "test": test}
        if test == "idle":
            return [{**base, "offered": offered, "count": self.args.idle_count}
                    for offered in self.plan.get(test, ())]
        if test == "broadcast":
            return [{**base, "kind": "binary", "size": BROADCAST_SIZE, "conns": n, "messages": k}
                    for n, k in self.plan.get(test, ())]
        return [{**base, "kind": kind, "size": size, "conns": conns, "offered": test == "deflate"}
                for kind, size, conns in self.plan.get(test, ())]

    def _with_server(self, name, app, points):
        """Start `name` with `app`, probe it, measure `points`. When the server does not
        start, fails the probe or dies, the points still unmeasured get its reason."""
        first = len(self.records)
        try:
            with Server(name, app, free_port(), self.server_pin) as server:
                try:
                    load.check(server.port, self.client_pin)
                except load.LoadFailed as exc:
                    server.check_alive()
                    raise ServerFailed(f"failed the echo probe: {exc}") from None
                for point in points:
                    self._measure(server, point)
        except ServerFailed as exc:
            reason = f"{name} {exc}"
            _note(points[0], f"{'/'.join(sorted({p['test'] for p in points}))}: {reason}")
            done = {key(r) for r in self.records[first:]}
            self.records.extend({**p, "failed": reason} for p in points if key(p) not in done)

    def _measure(self, server, point):
        a, test = self.args, point["test"]
        if test == "idle":
            return self._idle(server, point)
        if test == "broadcast":
            run = lambda: load.broadcast(server.port, point["conns"], point["messages"],  # noqa: E731
                                         point["size"], self.client_pin)
            return self._measured(server, point, run, lambda r: r["messages"])
        doc = payload.path() if point["offered"] else None
        run = lambda: load.echo(server.port, point["conns"], point["kind"], point["size"],  # noqa: E731
                                a.seconds, a.warmup, self.client_pin, doc, point["offered"])
        return self._measured(server, point, run, lambda r: r.get("all_messages", r["messages"]))

    def _measured(self, server, point, run, messages_of):
        """Run one load and keep its record (or its failure). CPU per message is the
        server's over the whole client run, warm-up included, over all messages."""
        cpu0 = server.cpu_seconds()
        try:
            r = run()
        except load.LoadFailed as exc:
            server.check_alive()
            self.records.append({**point, "failed": str(exc)})
            _note(point, f"{_label(point)}: FAILED {exc}")
            return
        cpu = server.cpu_seconds() - cpu0
        server.check_alive()
        n = messages_of(r)
        rec = {**point, "msgs_per_s": r["msgs_per_s"], "p50_us": r["p50_us"], "p99_us": r["p99_us"],
               "cpu_us_per_msg": cpu / n * 1e6 if n else None, "errors": r.get("errors", 0),
               "deflate": r.get("deflate", False)}
        for extra in ("wire_in_per_msg", "wire_out_per_msg", "duration_s", "extensions"):
            if extra in r:
                rec[extra] = r[extra]
        self.records.append(rec)
        flag = "" if not point.get("offered") else ("  deflate" if rec["deflate"] else "  deflate declined")
        _note(point, f"{_label(point)} {rec['msgs_per_s']:>10,.0f} msg/s  p50 {rec['p50_us'] or 0:8.0f} us"
                     f"  p99 {rec['p99_us'] or 0:8.0f} us  cpu {rec['cpu_us_per_msg'] or 0:5.1f} us/msg"
                     + (f"  errors {rec['errors']}" if rec["errors"] else "") + flag)

    def _idle(self, server, point):
        count = point["count"]
        time.sleep(0.5)
        before = server.rss_bytes()
        sources = -(-count // PER_SOURCE)
        try:
            with load.Idle(server.port, count, point["offered"], self.client_pin, sources) as held:
                # Let the server finish the last handshakes' work before reading its memory.
                time.sleep(self.args.idle_settle)
                server.check_alive()
                after = server.rss_bytes()
                r = held.result
        except load.LoadFailed as exc:
            server.check_alive()
            self.records.append({**point, "failed": str(exc)})
            _note(point, f"{_label(point)}: FAILED {exc}")
            return
        opened = r["opened"]
        rec = {**point, "opened": opened, "deflate_agreed": r["deflate_agreed"], "rss_before": before,
               "rss_after": after, "bytes_per_conn": (after - before) / opened if opened else None,
               "open_s": r["open_s"], "errors": r["errors"], "extensions": r.get("extensions", "")}
        self.records.append(rec)
        _note(point, f"{_label(point)}: {opened} open in {r['open_s']:.1f} s"
                     + (f" (deflate on {r['deflate_agreed']})" if point["offered"] else "")
                     + f", RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB, "
                     f"{(rec['bytes_per_conn'] or 0) / 1024:.1f} KiB/conn"
                     + (f"  errors {r['errors']}" if r["errors"] else ""))


def _label(point):
    if point["test"] == "broadcast":
        return f"broadcast N={point['conns']:<3} K={point['messages']:<5}"
    if point["test"] == "idle":
        return f"idle {point['count']} {'deflate' if point['offered'] else 'plain'}"
    return f"{point['test']:9} {point['kind']:6} {point['size']:>6} B c{point['conns']:<3}"


def raise_fd_limit(needed):
    """Raise RLIMIT_NOFILE's soft limit (inherited by servers and client) to the hard
    limit; say so when even that is short of `needed`."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < needed:
        print(f"note: open-file limit {hard} < {needed}: the idle test may fall short", file=sys.stderr)
