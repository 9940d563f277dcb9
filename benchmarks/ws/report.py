"""The run's description (machine, versions, settings) and the WebSocket section of
docs/benchmarks.md with its plots, all from a results file's records and meta, so a
stored run can be reported again (`run.py --from-results F --docs`)."""
import os
import platform
import sys
import time

import plots
import tables
from servers import LABELS, REPO

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import page  # noqa: E402  (the scheduling report's machine and commit helpers)

DOCS = os.path.join(REPO, "docs", "benchmarks.md")
DOC_PLOTS = os.path.join(REPO, "docs", "benchmarks")
BEGIN, END = "<!-- ws:begin -->", "<!-- ws:end -->"
PEERS = ("granian", "uvicorn", "hypercorn", "websockets", "wsproto", "httptools", "uvloop")


def _version(module):
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError):
        return None


def run_meta(args, elapsed=None, started=None):
    meta = {
        "python": platform.python_version(), "cpu": page.cpu_model(), "ncpu": page.nproc(),
        "commit": page.git_commit(REPO), "date": time.strftime("%Y-%m-%d"),
        "versions": {p: _version(p) for p in PEERS},
        "mode": args.mode, "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "idle_count": args.idle_count, "broadcast_total": args.broadcast_total,
        "servers": args.servers, "tests": args.tests, "pinned": args.pin,
        # The machine may be shared: a high load average explains a slow run.
        "loadavg_start": started, "loadavg_end": loadavg(),
    }
    if elapsed is not None:
        meta["elapsed_s"] = round(elapsed)
    return meta


METHOD = """\
`benchmarks/ws/run.py --full` (`make -C benchmarks ws-full`). Every server runs one worker
pinned to CPU 0 (`taskset`) on 127.0.0.1 and serves the same ASGI apps
(`benchmarks/ws/apps/`: echo, and broadcast which relays every message to every client);
uvicorn and granian on uvloop, uvicorn with httptools. The load client `ws-load`
(`benchmarks/ws/native/`, Rust, one thread) runs pinned to CPU 1. Servers take turns in a
rotated order each round; each is started afresh for the echo tests, for broadcast and for
each memory reading, and must first pass an echo probe (both kinds, 0 B to 64 KiB). The
tables give the median of {rounds} round(s).

- **Echo**: every connection is a closed loop (send one message, wait for its echo, check
  it byte for byte, repeat), {warmup:g} s of warm-up then {seconds:g} s measured; messages/s
  and the round-trip latency percentiles. The client does not offer permessage-deflate.
- **Broadcast** (granian's published scenario): N clients each send K binary messages of
  16 B (K = {broadcast_total:,} / N², so each run delivers about {broadcast_total:,}
  messages); the app relays every message to all N clients. The figure is all messages received by all clients per
  second, from the first send until every client has N·K; latency is from send to
  delivery.
- **Compressed echo**: the echo loop with a 4 KiB JSON document (text), the client
  offering `permessage-deflate; client_max_window_bits` like a browser and compressing
  with zlib level 6; whether the server agreed, and on what, is read from its 101
  response ("declined": it answered without the extension, and the echo ran
  uncompressed). The same document is sent every time. With a 15-bit window and context
  takeover (wsproto: uvicorn `--ws wsproto`, hypercorn) each message refers back to the
  previous one and shrinks to a few dozen bytes; websockets (uvicorn `--ws
  websockets-sansio`) asks for 12-bit windows, too short to reach the previous copy, so
  each message is compressed on its own. The bytes per message on the wire are in the
  table.
- **Idle memory**: the server's resident memory (process tree) after an echo probe, then
  with {idle_count:,} connections open and idle, per connection; once without and once
  with permessage-deflate offered (a fresh server each time). wsproto makes its zlib
  streams at a connection's first message, websockets at the handshake.
- **native** is a single-threaded tokio-tungstenite server, the limit reference; it has
  no permessage-deflate. Server CPU µs/message is the CPU time of the server's threads
  (all its processes) over the client run, warm-up included, divided by the messages it
  echoed; the client shares the machine, so this is the figure that does not depend on it."""


def _title(meta, what):
    return f"WebSocket {what}, 1 worker, Python {meta['python']} (median of {meta['rounds']} round(s))"


def draw(view, meta, directory):
    """The two plots into `directory`; returns the paths drawn."""
    drawn = []
    for name, fn, what in (("ws-echo.png", plots.echo_plot, "echo"),
                           ("ws-extras.png", plots.extras_plot, "broadcast, compression, memory")):
        path = os.path.join(directory, name)
        if fn(view, path, _title(meta, what)):
            drawn.append(path)
    return drawn


def section(view, meta, records, plot_paths=()):
    """The docs section's markdown, linking the plots at `plot_paths`."""
    v = meta["versions"]
    load = ""
    if meta.get("loadavg_start") is not None:
        load = f" Load average {meta['loadavg_start']:.1f} at the start, {meta.get('loadavg_end') or 0:.1f} at the end."
    out = [BEGIN, "", "## WebSocket servers", "",
           f"Measured {meta['date']} at commit `{meta['commit']}` on {meta['cpu']} ({meta['ncpu']} CPUs), "
           f"Python {meta['python']}; granian {v['granian']}, uvicorn {v['uvicorn']} (websockets "
           f"{v['websockets']}, wsproto {v['wsproto']}, httptools {v['httptools']}), hypercorn "
           f"{v['hypercorn']}, uvloop {v['uvloop']}.{load}",
           "", METHOD.format(**{"broadcast_total": 640_000, **meta}), ""]
    for path in plot_paths:
        out += [f"![{os.path.basename(path)}]({os.path.relpath(path, os.path.dirname(DOCS))})", ""]
    for title, table in (("Echo", tables.echo_table(view, 64)), ("", tables.echo_table(view, 1)),
                         ("Against the best peer and the native reference", tables.ratio_table(view)),
                         ("Broadcast", tables.broadcast_table(view)),
                         ("Compressed echo", tables.deflate_table(view)),
                         ("Idle connections", tables.memory_table(view)),
                         ("Server CPU per message", tables.cpu_table(view))):
        if table:
            out += ([f"### {title}", ""] if title else []) + [table, ""]
    failed = {}
    for r in records:
        if "failed" in r:
            failed.setdefault((r["server"], r["failed"]), set()).add(r["test"])
    if failed:
        out += ["### Failed runs", ""]
        out += [f"- {LABELS.get(server, server)} ({', '.join(sorted(tests))}): {reason}"
                for (server, reason), tests in failed.items()]
        out.append("")
    out.append(END)
    return "\n".join(out) + "\n"


def write_docs(view, meta, records):
    text = section(view, meta, records, draw(view, meta, DOC_PLOTS))
    page.replace_section(DOCS, BEGIN, END, text)
