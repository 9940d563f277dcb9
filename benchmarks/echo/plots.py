"""Bar charts of the echo results (matplotlib, Agg backend).

Each function returns False and writes nothing when there is no data.
Missing bars are labelled "n/a" at the foot of their slot.
"""
import os

from suite import NATIVE, NATIVE_POLL
from tables import size_label

COLORS = {"asyncio": "#7f7f7f", "uvloop": "#1f77b4", "rloop": "#ff7f0e",
          "swordfish": "#2ca02c", NATIVE: "#d62728", NATIVE_POLL: "#9467bd"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _thousands():
    import matplotlib.ticker
    return matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 10
                                           else f"{v:g}")


def _bars(ax, groups, impls, value_of):
    """Grouped bars: one group per entry of groups, one bar per impl.
    Returns True when at least one bar was drawn."""
    width = 0.8 / len(impls)
    drawn = False
    for i, impl in enumerate(impls):
        for g, group in enumerate(groups):
            x = g - 0.4 + width * (i + 0.5)
            v = value_of(impl, group)
            if v is None:
                ax.text(x, 0, "n/a", rotation=90, ha="center", va="bottom",
                        fontsize=7, color=COLORS.get(impl, "black"))
                continue
            ax.bar(x, v, width, color=COLORS.get(impl), label=impl)
            drawn = True
    ax.set_xticks(range(len(groups)))
    ax.grid(True, axis="y", alpha=0.3)
    ax.yaxis.set_major_formatter(_thousands())
    return drawn


def _legend(fig, axes):
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="upper center",
                   ncol=len(handles), frameon=False)


def _save(fig, plt, path, drawn):
    if drawn:
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fig.savefig(path)
    plt.close(fig)
    return drawn


def echo_plot(view, modes, sizes, conc, path):
    """Requests/s per mode, one panel per message size; the natives as lines."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(sizes), figsize=(4 * len(sizes), 4), dpi=110,
                             squeeze=False)
    axes = axes[0]
    drawn = False
    for ax, size in zip(axes, sizes):
        drawn |= _bars(ax, modes, view.loops,
                       lambda impl, mode: view.value("echo", impl, mode, "rps", size, conc))
        for native in (NATIVE, NATIVE_POLL):
            rps = view.value("echo", native, None, "rps", size, conc)
            if rps:
                ax.axhline(rps, color=COLORS[native], linestyle="--", label=native)
                drawn = True
        ax.set_xticklabels(modes)
        ax.set_title(f"{size_label(size)} messages, concurrency {conc}", fontsize=10)
    axes[0].set_ylabel("requests/s (median)")
    _legend(fig, axes)
    return _save(fig, plt, path, drawn)


def tls_plot(view, sizes, concurrency, path):
    """TLS (proto mode) requests/s per size, one panel per concurrency."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(concurrency), figsize=(5 * len(concurrency), 4),
                             dpi=110, squeeze=False)
    axes = axes[0]
    drawn = False
    for ax, conc in zip(axes, concurrency):
        drawn |= _bars(ax, sizes, view.loops,
                       lambda impl, size: view.value("tls", impl, "proto", "rps",
                                                     size, conc))
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_title(f"TLS echo, concurrency {conc}")
    axes[0].set_ylabel("requests/s (median)")
    _legend(fig, axes)
    return _save(fig, plt, path, drawn)


def extras_plot(view, tests, path):
    """Bulk echo throughput and idle memory per connection."""
    panels = [t for t in ("bulk", "idle") if t in tests]
    if not panels:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), dpi=110,
                             squeeze=False)
    axes = axes[0]
    impls = view.loops + [NATIVE]
    drawn = False
    for ax, test in zip(axes, panels):
        metric, scale = (("mibps", 1.0) if test == "bulk"
                         else ("bytes_per_conn", 1 / 1024))

        def value_of(impl, _group, metric=metric, scale=scale, test=test):
            v = view.value(test, impl, "proto", metric)
            return None if v is None else v * scale
        drawn |= _bars(ax, [test], impls, value_of)
        ax.set_xticklabels([""])
        if test == "bulk":
            ax.set_title("bulk echo through one connection")
            ax.set_ylabel("MiB/s (higher is better)")
        else:
            ax.set_title("idle connections")
            ax.set_ylabel("KiB of server RSS per connection (lower is better)")
    _legend(fig, axes)
    return _save(fig, plt, path, drawn)
