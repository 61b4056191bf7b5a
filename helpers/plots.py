"""The plots the lessons draw, kept out of the notebooks' way (notebooks 03, 04, 06, 11).

matplotlib is imported when a plot is drawn, not when ``helpers`` is imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_history(history, metrics: Sequence[str] = ("loss", "accuracy"), title: str = ""):
    """Training curves from a Keras ``History`` (or its ``.history`` dict), one panel per metric.

    Validation curves (``val_<metric>``) are drawn beside the training ones when present.
    Returns the matplotlib figure. Taught in notebook 03.
    """
    import matplotlib.pyplot as plt

    logs = getattr(history, "history", history)
    metrics = [m for m in metrics if m in logs]
    if not metrics:
        raise ValueError(f"none of the metrics were logged; logged: {sorted(logs)}")
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        epochs = range(1, len(logs[metric]) + 1)
        ax.plot(epochs, logs[metric], marker="o", label="training")
        if f"val_{metric}" in logs:
            ax.plot(epochs, logs[f"val_{metric}"], marker="s", label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_bars(
    values: Mapping[str, float], ylabel: str, title: str = "", baseline: str | None = None
):
    """A bar chart of named measurements, each bar labelled with its value (notebooks 04, 06).

    With ``baseline`` set, each label also shows the ratio to that bar, e.g. ``"3.2x"``.
    """
    import matplotlib.pyplot as plt

    if not values:
        raise ValueError("nothing to plot")
    names, heights = list(values), [float(v) for v in values.values()]
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(names)), 3.4))
    bars = ax.bar(names, heights, color="#4285f4")
    base = values[baseline] if baseline is not None else None
    for bar, height in zip(bars, heights, strict=True):
        label = f"{height:.3g}" + (f"\n{height / base:.2f}x" if base else "")
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, height), ha="center", va="bottom")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(heights) * 1.25)
    if title:
        ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig


def plot_step_shares(shares: Mapping[str, Mapping[str, float]], title: str = ""):
    """One horizontal bar per run, split into the shares of its step time (notebook 11).

    ``shares`` maps a run's name to ``{part: share}``, e.g. ``{"input": 0.4, "compute": 0.5,
    "other": 0.1}``; parts are stacked in the order of the first run and labelled when wide.
    """
    import matplotlib.pyplot as plt

    if not shares:
        raise ValueError("nothing to plot")
    runs = list(shares)
    parts = list(next(iter(shares.values())))
    colors = ["#ea4335", "#4285f4", "#fbbc04", "#34a853", "#9aa0a6"]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(runs) + 1.4))
    left = [0.0] * len(runs)
    for i, part in enumerate(parts):
        widths = [float(shares[run].get(part, 0.0)) for run in runs]
        ax.barh(runs, widths, left=left, color=colors[i % len(colors)], label=part)
        for y, (x, w) in enumerate(zip(left, widths, strict=True)):
            if w >= 0.08:
                ax.text(x + w / 2, y, f"{w:.0%}", ha="center", va="center", color="white")
        left = [x + w for x, w in zip(left, widths, strict=True)]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step time")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(parts), frameon=False)
    if title:
        ax.set_title(title, pad=28)
    fig.tight_layout()
    return fig
