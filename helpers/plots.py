"""Every plot the lessons draw, kept out of the notebooks' way; each returns its figure.

matplotlib is imported when a plot is drawn, not when ``helpers`` is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "plot_assignments",
    "plot_bars",
    "plot_history",
    "plot_samples",
    "plot_step_shares",
    "plot_worker_run",
]


def plot_history(history, metrics: Sequence[str] = ("loss", "accuracy"), title: str = ""):
    """Training curves from a Keras ``History`` (or its ``.history`` dict), one panel per metric,
    with the validation curve (``val_<metric>``) when logged."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

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
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 1.25
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_samples(x, y, class_names: Sequence[str], count: int = 10):
    """The first image of each of the first ``count`` classes found in ``x``, titled with its
    class name: greyscale images ``[N, H, W]`` or ``[N, H, W, 1]``, integer labels ``y``."""
    import matplotlib.pyplot as plt

    labels = np.asarray(y).reshape(-1)
    shown = [int(np.flatnonzero(labels == c)[0]) for c in range(len(class_names)) if c in labels]
    shown = shown[:count]
    if not shown:
        raise ValueError("no image has a label within class_names")
    fig, axes = plt.subplots(1, len(shown), figsize=(1.3 * len(shown), 1.7), squeeze=False)
    for ax, index in zip(axes[0], shown, strict=True):
        ax.imshow(np.squeeze(x[index]), cmap="gray_r")
        ax.set_title(f"{labels[index]}: {class_names[labels[index]]}", fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    return fig


def _format_measurement(value: float) -> str:
    """A measurement as the lessons' printed tables write it: ``3,289``, ``12.5``, ``0.304``."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def plot_bars(
    values: Mapping[str, float],
    ylabel: str,
    title: str = "",
    baseline: str | None = None,
    *,
    reference: tuple[float, str] | None = None,
):
    """A bar chart of named measurements, each bar labelled with its value.

    With ``baseline`` set, each label also shows the ratio to that bar, e.g. ``"3.2x"``.
    ``reference`` (value, name) draws a dashed line, e.g. what a device consumes; a label the
    line would cross moves inside its bar, or above the line when the bar is too short.
    """
    import matplotlib.pyplot as plt

    if not values:
        raise ValueError("nothing to plot")
    names, heights = list(values), [float(v) for v in values.values()]
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(names)), 3.4))
    bars = ax.bar(names, heights, color="#4285f4")
    top = max(heights + ([reference[0]] if reference else []))
    ax.set_ylim(0, top * 1.3)
    if reference is not None:
        ax.axhline(reference[0], color="#ea4335", linestyle="--", label=reference[1])
        ax.legend(loc="upper left")
    base = values[baseline] if baseline is not None else None
    labels = []
    for bar, height in zip(bars, heights, strict=True):
        text = _format_measurement(height) + (f"\n{height / base:.2f}x" if base else "")
        x = bar.get_x() + bar.get_width() / 2
        labels.append(ax.annotate(text, (x, height), ha="center", va="bottom"))
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    if reference is not None:
        _keep_labels_off_the_line(fig, ax, labels, heights, reference[0])
    return fig


def _keep_labels_off_the_line(fig, ax, labels, heights, line: float) -> None:
    fig.canvas.draw()
    to_data = ax.transData.inverted()
    for label, height in zip(labels, heights, strict=True):
        box = label.get_window_extent()
        (_, low), (_, high) = to_data.transform([(box.x0, box.y0), (box.x1, box.y1)])
        if not low <= line <= high:
            continue
        size = high - low
        if height - 1.15 * size > 0:  # room inside the bar, below the line
            label.xy = (label.xy[0], min(height, line) - 0.05 * size)
            label.set(va="top", color="white")
        else:
            label.xy = (label.xy[0], line + 0.1 * size)
        if label.xy[1] + size > ax.get_ylim()[1]:
            ax.set_ylim(0, label.xy[1] + 1.2 * size)


def plot_step_shares(shares: Mapping[str, Mapping[str, float]], title: str = ""):
    """One horizontal bar per run, split into the shares of its step time.

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


def plot_assignments(assignments: Mapping[str, object], columns: int = 2, *, grid):
    """Draw device assignments: one panel per entry, chips as boxes, cores labelled ``r·l``.

    Each core shows the replica (colour and ``r``) and the logical device (``l``) it serves;
    dashed outlines group the chips of one host, and z planes are drawn side by side.
    ``grid(assignment)`` gives the replica and logical device of every core:
    ``topology.plot_assignments`` (notebook 07_model_parallelism) passes its ``assignment_grid``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not assignments:
        raise ValueError("nothing to plot")
    items = list(assignments.items())
    columns = max(1, min(columns, len(items)))
    rows = math.ceil(len(items) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.9 * rows), squeeze=False)
    cmap = plt.get_cmap("tab20")
    centred = {"ha": "center", "va": "center"}
    for ax, (title, assignment) in zip(axes.flat, items, strict=False):
        replica, logical = grid(assignment)
        topology = assignment.topology
        nx, ny, nz, ncore = (int(m) for m in topology.mesh_shape)
        several_hosts = topology.num_tasks > 1
        height, width = (0.62 if several_hosts else 0.8), 0.84 / ncore
        for z in range(nz):
            x0 = z * (nx + 0.6)
            for x in range(nx):
                for y in range(ny):
                    ax.add_patch(
                        Rectangle((x0 + x + 0.04, y + 0.04), 0.92, 0.92, fill=False, lw=1.2)
                    )
                    for core in range(ncore):
                        r, d = replica[x, y, z, core], logical[x, y, z, core]
                        left = x0 + x + 0.08 + core * width
                        # tab20's dark shades for replicas 0-9, then its light ones
                        color = cmap((2 * r) % 20 + (r // 10) % 2) if r >= 0 else "white"
                        ax.add_patch(
                            Rectangle((left, y + 0.1), width, height, fc=color, ec="white", lw=1.5)
                        )
                        label = f"r{r}\nl{d}" if r >= 0 else "idle"
                        ax.text(
                            left + width / 2, y + 0.1 + height / 2, label, **centred, fontsize=8
                        )
                    if several_hosts:
                        host = f"host {topology.task_ordinal_at_coordinates((x, y, z, 0))}"
                        ax.text(x0 + x + 0.5, y + 0.83, host, **centred, fontsize=6.5, color="0.3")
            if several_hosts:
                _outline_hosts(ax, topology, x0, z)
        ax.set_xlim(-0.2, nz * (nx + 0.6) - 0.4)
        ax.set_ylim(ny + 0.15, -0.15)  # y grows downwards, like a grid diagram
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(
            f"{title}\n{assignment.num_replicas} replica(s) x "
            f"{assignment.num_cores_per_replica} logical device(s)",
            fontsize=10,
        )
    for ax in list(axes.flat)[len(items) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def _outline_hosts(ax, topology, x0: float, z: int) -> None:
    """Dashed box around the chips of each host in plane ``z``."""
    from matplotlib.patches import Rectangle

    for devices in np.asarray(topology.device_coordinates):
        plane = devices[devices[:, 2] == z]
        if not len(plane):
            continue
        (xmin, ymin), (xmax, ymax) = plane[:, :2].min(0), plane[:, :2].max(0)
        ax.add_patch(
            Rectangle(
                (x0 + xmin - 0.02, ymin - 0.02),
                xmax - xmin + 1.04,
                ymax - ymin + 1.04,
                fill=False,
                ls="--",
                lw=1.6,
                color="0.25",
            )
        )


def plot_worker_run(run, examples: int = 96, columns: int = 96):
    """A ``multiworker.LoopbackRun``. Left: one row per worker marking the examples 0 to
    ``examples - 1`` it read (at most ``columns`` columns of neighbours), and a row marking those
    read twice. Right: each worker's loss, step by step."""
    import matplotlib.pyplot as plt

    workers = sorted(run.workers, key=lambda w: w.task_id)
    group = max(1, -(-examples // columns))  # examples per column
    read = np.zeros((len(workers) + 1, -(-examples // group)))
    counts = np.zeros(examples, int)
    for row, worker in enumerate(workers):
        ids = np.unique(np.asarray(worker.example_ids, int))
        ids = ids[ids < examples]
        counts[ids] += 1
        read[row, ids // group] = 1
    read[-1, np.flatnonzero(counts > 1) // group] = 1
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), width_ratios=(3, 2))
    extent = (0, read.shape[1] * group, len(read) - 0.5, -0.5)  # x: example numbers
    left.imshow(
        read, aspect="auto", cmap="Blues", vmin=0, vmax=1.4, interpolation="nearest", extent=extent
    )
    left.set_yticks(
        range(len(workers) + 1),
        [f"worker {w.task_id}" for w in workers] + ["read by two"],
    )
    left.set_xlabel("example number" if group == 1 else f"example number ({group} a column)")
    left.set_title(f"which worker read examples 0-{examples - 1}")
    steps = len(workers[0].losses)
    for n, worker in enumerate(workers):
        right.plot(
            range(1, steps + 1),
            worker.losses,
            marker="o",
            lw=4 - 2 * n / max(1, len(workers) - 1),
            label=f"worker {worker.task_id}",
        )
    right.set_xlabel("step")
    right.set_ylabel("global batch loss")
    right.set_title("loss seen by each worker")
    right.grid(alpha=0.3)
    right.legend()
    fig.tight_layout()
    return fig
