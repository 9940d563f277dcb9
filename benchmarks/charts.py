"""Grouped bar charts for the suites' --plot: one group of bars per point measured (a
workload, a route), one bar per server in each group, the legend beside the axes."""
import os


def grouped_bars(path, groups, series, title, ylabel="thousand requests/s", rotate=False):
    """Draw `series` ([(label, [value per group]), ...]) over `groups` (their labels) into
    the PNG `path`; `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6, (0.9 if rotate else 1.3) * len(groups)) + 3, 4))
    for i, (label, values) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=label)
    if rotate:
        ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    else:
        ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
