"""The report: rows in the order a reader wants them, values with units, ratios in words.

Every word of judgement ("faster", "meets the target") is written from all the pairs a row
measured, not from its median alone: a median ratio whose pairs fall on both sides of 1 is said
to be unsettled, and a target is said to be met in every pair, by the medians only, or not.
This is the benchmark's report (README, "Measured: the techniques side by side"); no notebook
teaches it.
"""

from __future__ import annotations

from bench.common import LESSON_PER_REPLICA, row
from helpers.strategy import SIMULATED_REPLICAS

__all__ = [
    "NOTES",
    "ORDER",
    "RECIPE_NOTE",
    "collect_rows",
    "format_ratio",
    "format_spread",
    "format_value",
    "markdown",
    "note_for",
    "rank",
    "settled",
    "target_verdict",
]

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
    """``value`` in ``unit`` as a reader wants it: ms/step, examples/s, KiB, seconds."""
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


def settled(entry: dict) -> bool:
    """True when every pair of a row says the same thing: counted, or all ratios on one side
    of 1. A median ratio whose pairs disagree is no verdict."""
    return bool(entry.get("exact")) or not (entry["ratio_low"] < 1 < entry["ratio_high"])


def format_ratio(ratio: float, better: str, bold: bool = True, settled: bool = True) -> str:
    """'3.20x faster' or '2.50x slower' (the inverse), so a reader never divides in their head.

    Only a settled ratio (see :func:`settled`) is bold, and an unsettled one says so.
    """
    word = better if ratio > 1 else _worse(better)
    if round(ratio, 2) == 1.0:
        return "1.00x (same)" if settled else "1.00x (unsettled)"
    shown = f"{max(ratio, 1 / ratio):.2f}x {word}"
    if not settled:
        return f"{shown} (unsettled)"
    return f"**{shown}**" if bold and ratio > 1 else shown


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


def target_verdict(entry: dict) -> str:
    """The overhead row's target, judged from every pair: met in every pair, by the medians
    only, or missed (``overhead`` = candidate time / baseline time, at most ``target``)."""
    target, overhead = entry["target"], 1 / entry["ratio"]
    best, worst = 1 / entry["ratio_high"], 1 / entry["ratio_low"]
    said = f"overhead {overhead:.2f}x ({best:.2f}x to {worst:.2f}x over the pairs): "
    goal = f"the target of at most {target:g}x"
    if worst <= target:
        return said + f"meets {goal} in every pair"
    if overhead <= target:
        return said + f"meets {goal} by the medians, not in every pair"
    if best <= target:
        return said + f"misses {goal} by the medians, though some pairs meet it"
    return said + f"misses {goal} in every pair"


def markdown(report: dict) -> str:
    """The whole report as Markdown: hardware, versions, one table row per measurement, notes."""
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
        f"{load.get('start')} at the start, {load.get('end')} at the end (the benchmark's own "
        "work and any other program's).",
        "",
        "Each ratio compares a candidate with its baseline measured in the same run on the same "
        "machine, after a warm-up: the median baseline time over the median candidate time of "
        "paired repetitions (alternating where both sides run in one call, epoch by epoch for "
        "`fit`). The spread runs from the lowest to the highest ratio of one pair. Times are "
        "synchronised (results fetched to the host). A ratio whose pairs fall on both sides of 1 "
        "is marked unsettled, and only settled ones are in bold.",
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
                f"| {format_ratio(entry['ratio'], entry['better'], settled=settled(entry))} "
                f"| {format_spread(entry)} "
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
        said = [entry.get("note", "")]
        if entry["status"] == "measured" and "target" in entry and "ratio" in entry:
            said.insert(0, target_verdict(entry))
        if any(said):
            notes.append(
                f"- *{entry['title'].strip()}* ({entry['key']}): {'; '.join(filter(None, said))}"
            )
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines) + "\n"


NOTES = {
    "overhead_loop": (
        f"the lessons' own workload (notebook 03_keras_compile_and_fit: {LESSON_PER_REPLICA} per replica, global batch "
        f"{LESSON_PER_REPLICA * R:,}). "
        "Both sides run in the same process, alternating: the one device is the first CPU device "
        "(`helpers.loops.reference_strategy`, notebook 04_custom_training_loops), which uses all the CPU's threads. "
        "The target (at most 1.5x) is for this simulation; on a TPU each replica has its own "
        "core."
    ),
    "overhead_fit": (
        "`fit` as notebook 03_keras_compile_and_fit times it (`helpers.fitting.time_fit`; one device: the model built "
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
        "both pipelines come from `helpers/pipelines.py` (notebook 06_input_pipelines): the naive one reads "
        "files in turn and decodes and augments one example at a time, as most tutorials do; "
        "the optimised one reads in parallel, caches decoded images, augments whole batches "
        "and prefetches."
    ),
    "steps_per_call": (
        "`helpers.loops.make_train_steps` (notebook 04_custom_training_loops); the same traced function runs either "
        "1 step per call (called N times) or N steps per call. On a TPU each call is a round "
        "trip from the host, which is what the many-steps loop saves."
    ),
    "fit_spe_1": (
        "`helpers.fitting.steps_per_execution_for` (notebook 03_keras_compile_and_fit) picks the value; "
        "`helpers.fitting.time_fit` runs one `fit` per model: an untimed epoch, then timed "
        "epochs; the pairs are epoch 1 with epoch 1 and so on (not alternated: on 8 replicas "
        "every new `fit` call sets up its distributed input again, slowly and erratically)."
    ),
    f"fit_spe_{R}": (
        "the simulated TPU's MirroredStrategy sums gradients with collective all-reduce ops, "
        "which Keras 3 releases up to 3.15 could not run inside their multi-step loop (field "
        "notes, section 3), so `helpers.fitting` chooses 1; the benchmark tries 2 on every run: "
        "the row's status says whether this Keras still fails (not supported, with its error) "
        "or runs it (measured). Under TPUStrategy this path is compiled differently (unverified "
        "on hardware)."
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
        "Both are counted by `helpers.precision` (notebook 05_bfloat16_mixed_precision) from the model's tensors."
    ),
    "notebooks": "an absolute time, not a ratio: how long CI's notebook run takes here.",
    "tests": (
        "an absolute time, not a ratio; the suite includes this benchmark's own quick-mode test."
    ),
}
RECIPE_NOTE = (
    "the classic Keras TPU recipe (Dense 128, 128 per replica, float32 pixels shuffled in a "
    "60,000-element buffer, batches without drop_remainder, one step per call, no cache) "
    "against this collection's (notebooks 03_keras_compile_and_fit and 06_input_pipelines); the rows below it give each change's "
    "share. The stages and the timing are the TPU self-test's (`helpers.selftest.speed`), "
    "where the at-least-2x target applies: on a CPU the host overhead the recipe removes is "
    "small, so the ratio here is for information."
)


def note_for(key: str) -> str:
    """What a row's measurement is, for the notes under the table."""
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
