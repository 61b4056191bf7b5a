"""The report: rows in the order a reader wants them, values with units, ratios in words."""

from __future__ import annotations

from bench.common import SIMULATED_REPLICAS, row

R = SIMULATED_REPLICAS
# The report's order: the simulated TPU against one device, the two recipes, then each technique.
ORDER = (
    "overhead_loop",
    "overhead_fit",
    "overhead_tiny",
    f"recipe_{R}",
    "recipe_1",
    "pipeline",
    "steps_per_call",
    "fit_spe_1",
    f"fit_spe_{R}",
    "bf16",
    "notebooks",
    "tests",
)


def rank(key: str) -> int:
    """Where a row goes: by the longest entry of ORDER its key starts with; unknown keys last."""
    matches = [i for i, prefix in enumerate(ORDER) if key.startswith(prefix)]
    return max(matches, key=lambda i: len(ORDER[i])) if matches else len(ORDER)


def format_value(value: float, unit: str) -> str:
    if unit == "s/step":
        return f"{value * 1e3:.3g} ms/step"
    if unit == "examples/s":
        return f"{value:,.0f} examples/s"
    if unit == "bytes":
        for size, name in ((2**20, "MiB"), (2**10, "KiB")):
            if value >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "s":
        return f"{value:.0f} s"
    return f"{value:.4g} {unit}"


def _worse(better: str) -> str:
    return {"faster": "slower", "smaller": "larger"}[better]


def format_ratio(ratio: float, better: str, bold: bool = True) -> str:
    """'3.20x faster' or '2.50x slower' (the inverse), so a reader never divides in their head."""
    if round(ratio, 2) == 1.0:
        return "1.00x (same)"
    if ratio > 1:
        return f"**{ratio:.2f}x {better}**" if bold else f"{ratio:.2f}x {better}"
    return f"{1 / ratio:.2f}x {_worse(better)}"


def format_spread(entry: dict) -> str:
    """The lowest to the highest ratio, in the same words as the median."""
    if entry.get("exact"):
        return "exact (counted)"
    low, high = entry["ratio_low"], entry["ratio_high"]
    if low < 1 < high:  # some pairs one way, some the other: say so rather than pick a word
        return f"{low:.2f}x to {high:.2f}x (crosses 1)"
    if entry["ratio"] < 1:  # shown as "slower": the inverse, so the lower bound comes first
        low, high = 1 / high, 1 / low
        word = _worse(entry["better"])
    else:
        word = entry["better"]
    return f"{low:.2f}x to {high:.2f}x {word}"


def markdown(report: dict) -> str:
    hw, v = report["hardware"], report["versions"]
    mode = "quick mode, `--quick`" if report["quick"] else "full mode"
    load = report.get("load_average") or {}
    lines = [
        f"# Benchmark: the guide's techniques measured against their baselines ({mode})",
        "",
        f"**Hardware:** {hw['cpu']}, {hw['cores']} cores ({hw['usable_cores']} usable), "
        f"{hw['memory_gib']} GiB memory, {hw['accelerator']}; {hw['system']}.  ",
        f"**Versions:** Python {v.get('Python', '?')}, TensorFlow {v.get('TensorFlow', '?')}, "
        f"Keras {v.get('Keras', '?')}, numpy {v.get('numpy', '?')}.  ",
        f"**Run:** {report['started']}, {report['seconds']:.0f} s in all; load average "
        f"{load.get('start')} at the start, {load.get('end')} at the end (other programs "
        "share this machine).",
        "",
        "Each ratio compares a candidate with its baseline measured in the same run on the same "
        "machine, after a warm-up: the median baseline time over the median candidate time of "
        "paired repetitions (alternating where both sides run in one call, epoch by epoch for "
        "`fit`). The spread runs from the lowest to the highest ratio of one pair. Times are "
        "synchronised (results fetched to the host).",
        "",
        "| measurement | setting | baseline | candidate | baseline | candidate "
        "| ratio of medians | spread | runs |",
        "|---|---|---|---|---:|---:|---|---|---:|",
    ]
    notes = []
    for entry in report["rows"]:
        head = (
            f"| {entry['title']} | {entry['setting']} | {entry['baseline']} "
            f"| {entry['candidate']} |"
        )
        if entry["status"] == "measured" and "ratio" in entry:
            lines.append(
                f"{head} {format_value(entry['baseline_value'], entry['unit'])} "
                f"| {format_value(entry['candidate_value'], entry['unit'])} "
                f"| {format_ratio(entry['ratio'], entry['better'])} | {format_spread(entry)} "
                f"| {entry['runs']} |"
            )
        elif "value" in entry:  # a whole-suite time: no baseline, no ratio
            failed = "" if entry["status"] == "measured" else "**failed**: "
            lines.append(
                f"| {entry['title']} | {entry['setting']} | | | | "
                f"{format_value(entry['value'], entry['unit'])} | {failed}"
                f"{entry.get('detail', '')} | | 1 |"
            )
        else:
            lines.append(f"{head} | | **{entry['status']}** | {entry.get('reason', '')} | |")
        if entry.get("note"):
            notes.append(f"- *{entry['title'].strip()}* ({entry['key']}): {entry['note']}")
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines) + "\n"


NOTES = {
    "overhead_loop": (
        "the lessons' own workload (notebooks 03 and 04: 128 per replica, global batch 1,024). "
        "Both sides run in the same process, alternating: the one device is the first CPU device "
        "(`helpers.loops.reference_strategy`, notebook 04), which uses all the CPU's threads. "
        "The target (at most 1.5x) is for this simulation; on a TPU each replica has its own "
        "core."
    ),
    "overhead_fit": (
        "`fit` as notebook 03 times it (`helpers.fitting.time_fit`; one device: the model built "
        "outside any strategy scope), on both sides the steps_per_execution `helpers.fitting` "
        "chooses for the simulated TPU; target at most 2.5x."
    ),
    "overhead_tiny": (
        "the figure older reports gave (about 5x): an 8x8-pixel model at global batch 256, 32 "
        "examples per replica. Each step does so little arithmetic that the fixed cost of "
        "running 8 replicas (8 per-device dispatches, splitting the batch, all-reducing the "
        "gradients of every variable) is most of the step: it measures the simulation's fixed "
        "cost per step, not what the lessons' workload pays."
    ),
    "pipeline": (
        "both pipelines come from `helpers/pipelines.py` (notebook 06): the naive one reads "
        "files in turn and decodes and augments one example at a time, as most tutorials do; "
        "the optimised one reads in parallel, caches decoded images, augments whole batches "
        "and prefetches."
    ),
    "steps_per_call": (
        "`helpers.loops.make_train_steps` (notebook 04); the same traced function runs either "
        "1 step per call (called N times) or N steps per call. On a TPU each call is a round "
        "trip from the host, which is what the many-steps loop saves."
    ),
    "fit_spe_1": (
        "`helpers.fitting.steps_per_execution_for` (notebook 03) picks the value; "
        "`helpers.fitting.time_fit` runs one `fit` per model: an untimed epoch, then timed "
        "epochs; the pairs are epoch 1 with epoch 1 and so on (not alternated: on 8 replicas "
        "every new `fit` call sets up its distributed input again, slowly and erratically)."
    ),
    f"fit_spe_{R}": (
        "the simulated TPU's MirroredStrategy sums gradients with collective all-reduce ops, "
        "which Keras 3 cannot run inside its multi-step loop (field notes, section 3), so "
        "`helpers.fitting` chooses 1; the benchmark still tries 2 on every run and would "
        "measure it once a Keras release fixes this. Under TPUStrategy this path is compiled "
        "differently (unverified on hardware)."
    ),
    f"fit_spe_{R}_reduce_to_one": (
        "the same devices and fit with `MirroredStrategy(cross_device_ops="
        "tf.distribute.ReductionToOneDevice())`: no collective ops in the loop, so several "
        "steps per execution run on 8 replicas too."
    ),
    "bf16_step": (
        "a CPU without bfloat16 units emulates it, so mixed precision can be slower here; on a "
        "TPU the matrix units multiply in bfloat16 anyway, and the saving is mostly memory and "
        "bandwidth (not measured on TPU hardware)."
    ),
    "bf16_weights": (
        "under `mixed_bfloat16` the variables stay float32 (only computations are bfloat16), "
        "so weight memory does not shrink; the activations do, except the float32 logits. "
        "Both are counted by `helpers.precision` (notebook 05) from the model's tensors."
    ),
    "notebooks": "an absolute time, not a ratio: how long CI's notebook run takes here.",
    "tests": (
        "an absolute time, not a ratio; the suite includes this benchmark's own quick-mode test."
    ),
}
RECIPE_NOTE = (
    "the classic Keras TPU recipe (Dense 128, 128 per replica, float32 pixels shuffled in a "
    "60,000-element buffer, batches without drop_remainder, one step per call, no cache) "
    "against this collection's (notebooks 03 and 06); the rows below it give each change's "
    "share. The stages and the timing are the TPU self-test's (`helpers.selftest.speed`), "
    "where the at-least-2x target applies: on a CPU the host overhead the recipe removes is "
    "small, so the ratio here is for information."
)


def note_for(key: str) -> str:
    if key == f"recipe_{R}":
        return RECIPE_NOTE
    if key == "recipe_1":
        return "the same stages on one device (global batch 128), where fit runs 32 steps per call."
    return NOTES.get(key, "")


def collect_rows(processes: list[dict]) -> list[dict]:
    """The rows of every process's tasks, a failed task as a failed row, in the report's order."""
    rows = []
    for proc in processes:
        for name, status in proc["tasks"].items():
            if status["ok"]:
                rows.extend(status["result"])
            else:
                failed = row(name, name.replace("_", " "), "", "", "", status="failed")
                failed["reason"] = status["error"]
                rows.append(failed)
    rows.sort(key=lambda r: rank(r["key"]))  # stable: a process's own order within a group
    return rows
