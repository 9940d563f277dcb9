"""Bar charts of the WebSocket benchmark (matplotlib, Agg backend): echo throughput per
message kind and size, and broadcast, compressed echo and idle memory side by side.
Each function returns False and writes nothing when it has no data; a server without a
number in a slot gets an "n/a" (or "declined") mark there."""
import os

from servers import LABELS
from tables import SIZES, size_label

COLORS = {"swordfish": "#2ca02c", "uvicorn-sansio": "#ff7f0e", "uvicorn-wsproto": "#bcbd22",
          "granian": "#1f77b4", "hypercorn": "#9467bd", "native": "#d62728"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _thousands(v, _pos):
    return f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"


def _bars(ax, groups, servers, value_of):
    """Grouped bars, one group per entry of `groups`, one bar per server; `value_of`
    gives a number, or None / a word to print in the bar's place."""
    width = 0.8 / max(1, len(servers))
    drawn = False
    for i, s in enumerate(servers):
        for g, group in enumerate(groups):
            x = g - 0.4 + width * (i + 0.5)
            v = value_of(s, group)
            if v is None or isinstance(v, str):
                ax.text(x, 0.02, v or "n/a", rotation=90, ha="center", va="bottom", fontsize=6,
                        color=COLORS.get(s, "black"), transform=ax.get_xaxis_transform())
                continue
            ax.bar(x, v, width, color=COLORS.get(s), label=LABELS.get(s, s))
            drawn = True
    ax.set_xticks(range(len(groups)))
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.grid(True, axis="y", alpha=0.3)
    import matplotlib.ticker
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_thousands))
    return drawn


def _finish(fig, plt, axes, path, drawn, title):
    if drawn:
        handles = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        fig.suptitle(title, y=0.99, fontsize=10, va="top")
        fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.94),
                   ncol=min(6, len(handles)), frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0, 1, 0.86))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fig.savefig(path)
    plt.close(fig)
    return drawn


def echo_plot(view, path, title):
    """Messages/s of the echo points, one panel per connection count."""
    conns_list = sorted({p[2] for p in view.points("echo")}, reverse=True)
    if not conns_list:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(conns_list), figsize=(6 * len(conns_list), 4.2), dpi=110, squeeze=False)
    axes = axes[0]
    drawn = False
    for ax, conns in zip(axes, conns_list):
        groups = [(k, s) for k in ("text", "binary") for s in SIZES
                  if any(p[:3] == (k, s, conns) for p in view.points("echo"))]

        def value_of(server, group, conns=conns):
            r = view.get(server, "echo", group[0], group[1], conns, False)
            return r["msgs_per_s"] if r else None
        drawn |= _bars(ax, groups, view.servers, value_of)
        ax.set_xticklabels([f"{k}\n{size_label(s)}" for k, s in groups], fontsize=8)
        ax.set_title(f"echo, {conns} connection{'s' if conns > 1 else ''}", fontsize=9)
        ax.set_ylabel("messages/s (median)")
    return _finish(fig, plt, axes, path, drawn, title)


def extras_plot(view, path, title):
    """Broadcast and compressed-echo messages/s, and idle memory per connection."""
    panels = [t for t in ("broadcast", "deflate", "idle") if view.points(t)]
    if not panels:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2), dpi=110, squeeze=False)
    axes = axes[0]
    drawn = False
    for ax, test in zip(axes, panels):
        points = view.points(test)

        def value_of(server, point, test=test):
            r = view.get(server, test, *point)
            if r is None:
                return None
            if point[3] and not r["deflate"]:
                return "declined"
            return r["bytes_per_conn"] / 1024 if test == "idle" else r["msgs_per_s"]
        drawn |= _bars(ax, points, view.servers, value_of)
        if test == "broadcast":
            # The native server relays tens of times faster than the Python ones.
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(__import__("matplotlib.ticker").ticker.FuncFormatter(_thousands))
            ax.set_xticklabels([f"N={p[2]}" for p in points], fontsize=8)
            ax.set_title("broadcast (received by all clients)", fontsize=9)
            ax.set_ylabel("messages/s (median, log scale)")
        elif test == "deflate":
            ax.set_xticklabels([f"c{p[2]}" for p in points], fontsize=8)
            ax.set_title("compressed echo, 4 KiB JSON", fontsize=9)
            ax.set_ylabel("messages/s (median)")
        else:
            ax.set_xticklabels(["deflate" if p[3] else "plain" for p in points], fontsize=8)
            ax.set_title("idle connections", fontsize=9)
            ax.set_ylabel("server RSS KiB / connection (lower is better)")
    return _finish(fig, plt, axes, path, drawn, title)
