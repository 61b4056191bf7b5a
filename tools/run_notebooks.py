"""The main job: execute every notebook headless with papermill and print a summary table.

    python tools/run_notebooks.py            # full lessons, into build/full
    python tools/run_notebooks.py --smoke    # SMOKE_TEST=True: the small run CI uses, build/smoke
    python tools/run_notebooks.py --only 01 --only 03
    python tools/run_notebooks.py --replicas 1   # SIMULATED_REPLICAS=1: one TPU core, as on Colab
    python tools/run_notebooks.py --cache    # skip what is unchanged (make run, smoke and test)

With ``--cache`` a notebook is skipped when it passed before with the same notebook file, the same
helpers, the same parameters and the same Python, TensorFlow and JAX (``cache.json``), and the
summary says so; ``--force`` re-executes anyway. Without it (tools/benchmark.py times this run) every
notebook executes.

Writes, under ``build/full`` or ``build/smoke`` (or ``--out``):
- ``executed/NN_name.ipynb``: each executed notebook, saved by papermill after every cell, so an
  interrupted or failed run keeps everything up to the cell that stopped it;
- ``results/NN_name.json``: the numbers the notebook recorded with ``helpers.results.record``;
- ``summary.json`` and ``summary.md``: status, seconds and key numbers per notebook, rewritten
  after each notebook, so an interrupted run still leaves a summary of what finished;
- ``files/NN_name/...``: files a notebook keeps for the reader (notebook 11's profiles, for
  TensorBoard), replaced on each run (see ``KEPT_FILES``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import platform
import re
import sys
import time
from pathlib import Path

from notebook_files import ROOT, notebook_paths, source

RESULTS_ENV = "FIELD_GUIDE_RESULTS"  # the name helpers.results reads
# Cells that teach an error or a warning carry this tag; only they may write to stderr.
EXPECTED_STDERR_TAG = "expected-stderr"
CACHE_FILE = "cache.json"


def cache_key(path: Path, parameters: dict) -> str:
    """What a notebook's result depends on: its file, the helpers, its parameters, the stack."""
    digest = hashlib.sha256(path.read_bytes())
    for helper in sorted((ROOT / "helpers").rglob("*.py")):
        digest.update(str(helper.relative_to(ROOT)).encode() + helper.read_bytes())
    tensorflow = tensorflow_version()
    stack = {"python": platform.python_version(), "tensorflow": tensorflow, "jax": _version("jax")}
    digest.update(json.dumps([parameters, stack], sort_keys=True).encode())
    return digest.hexdigest()


def tensorflow_version() -> str:
    """The installed TensorFlow's version, whichever distribution brought it ("" if none)."""
    names = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu")
    return next((_version(n) for n in names if _version(n)), "")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


# TensorFlow 2.19 and 2.20 (the kaggle and colab stacks) write a few absl-format INFO/WARNING
# lines before absl::InitializeLog() runs, which no log level reaches (README, "Measured"). They
# are counted on their own, not as unexpected stderr; errors and every other line still are.
UNSILENCEABLE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called|[IW]\d{4} )"
)


def unsilenceable_logs_here() -> bool:
    """True with the TensorFlow versions whose early absl lines cannot be silenced."""
    return tensorflow_version().startswith(("2.19.", "2.20."))


def unexpected_stderr(
    notebook: dict, every_line: bool = False, *, tolerate: bool | None = None
) -> list[tuple[int, str]]:
    """(cell index, first line) of each stderr or error output in a cell not tagged for it.

    With ``every_line``, one entry per non-empty line instead of per output. ``tolerate`` (by
    default: with TensorFlow 2.19 or 2.20) leaves out the absl lines no setting silences.
    """
    tolerate = unsilenceable_logs_here() if tolerate is None else tolerate
    found = []
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if EXPECTED_STDERR_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                text = f"{output.get('ename')}: {output.get('evalue')}"
            elif output.get("name") == "stderr":
                text = source({"source": output.get("text", "")})
            else:
                continue
            lines = [line[:200] for line in text.splitlines() if line.strip()] or [""]
            if tolerate:
                lines = [line for line in lines if not UNSILENCEABLE.match(line)]
            found += [(index, line) for line in (lines if every_line else lines[:1])]
    return found


def unsilenceable_lines(notebook: dict) -> int:
    """How many of those absl lines the notebook's cells show (counted apart in the summary)."""
    return sum(
        bool(UNSILENCEABLE.match(line))
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", [])
        if output.get("name") == "stderr"
        for line in source({"source": output.get("text", "")}).splitlines()
    )


def count_images(notebook: dict) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", [])
    )


# Parameters that name a folder for files a notebook keeps for its reader, and the folder a
# headless run gives them under ``out/files/NN_name/``. Left empty, a notebook makes a new
# temporary folder, right for someone who opens TensorBoard afterwards; a headless run instead
# replaces its own folder each time, so repeated runs leave nothing behind (notebook 11's profiles
# are 12 to 23 MB a run).
KEPT_FILES = {"PROFILE_DIR": "profiles"}


def kept_files_parameters(path: Path, out: Path) -> dict:
    """``{parameter: folder}`` for the KEPT_FILES parameters that ``path`` declares, each folder
    emptied for this run."""
    import shutil

    import papermill

    declared = papermill.inspect_notebook(str(path))
    folders = {}
    for name, sub in KEPT_FILES.items():
        if name in declared:
            folder = out / "files" / path.stem / sub
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            folders[name] = str(folder)
    return folders


def run_one(path: Path, out: Path, parameters: dict, cell_timeout: int) -> dict:
    import papermill

    results = out / "results" / f"{path.stem}.json"
    for folder in (results.parent, out / "executed"):
        folder.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    os.environ[RESULTS_ENV] = str(results)  # the kernel inherits this environment
    row = {"notebook": path.name, "status": "passed", "error": ""}
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(path),
            str(out / "executed" / path.name),
            parameters={**parameters, **kept_files_parameters(path, out)},
            cwd=str(path.parent),
            kernel_name="python3",
            execution_timeout=cell_timeout,
            progress_bar=sys.stderr.isatty(),
            log_output=False,
            # The kernel's own log is not for the reader: its start-up warning (TCP on loopback),
            # and "KeyboardInterrupt caught in kernel", which jupyter_client's shutdown (an
            # interrupt first) sometimes causes after the last cell. A kernel that really fails
            # shows as a failed cell or a dead kernel in the row of its notebook.
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
        )
    except Exception as err:  # papermill raises on a failing cell; report it and go on
        row["status"] = "FAILED"
        row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["results"] = json.loads(results.read_text()) if results.exists() else {}
    executed = out / "executed" / path.name
    row["executed"] = str(executed)
    if executed.exists():
        notebook = json.loads(executed.read_text(encoding="utf-8"))
        row["stderr"] = [f"cell {i}: {line}" for i, line in unexpected_stderr(notebook)]
        if unsilenceable_logs_here():
            row["tf_log_lines"] = unsilenceable_lines(notebook)
        row["plots"] = count_images(notebook)
    return row


# The headline of each notebook in words, from the numbers it recorded (helpers.results.record).
HEADLINES = {
    "00": "self-test: {checks_passed} checks passed, {checks_info} for information; the collection's recipe {recipe_speedup:.2f}x the classic's examples/s (the 2x target is a TPU's)",
    "01": "{replicas} replicas ({strategy}), {train_examples} training images of {dataset}",
    "02": "loss on all training images {loss_before:.3f} -> {loss_after:.3f} on {replicas} replicas; copies differ by {copies_spread:g}",
    "03": "held-out accuracy {val_accuracy:.1%}; relative loss difference from one device {loss_gap_evaluate:.1e}",
    "04": "test accuracy {test_accuracy:.1%}; many steps per call {steps_per_call_speedup:.2f}x faster than one",
    "05": "accuracy {accuracy_float32:.1%} float32, {accuracy_mixed_bf16:.1%} bfloat16; activations {activation_memory_ratio:.2f}x smaller",
    "06": "optimised pipeline {pipeline_speedup:.1f}x faster, {pipeline_cpu_saving:.1f}x less CPU per example",
    "07": "{assignments_checked} device assignments checked",
    "08": "killed run resumed with identical weights: {custom_identical_weights}; restored outputs differ by {restore_output_max_diff:.1e}",
    "09": "{workers} workers on disjoint shards end within {replay_difference:.1e} of one device; final loss {final_loss:.3f}",
    "10": "{problems_as_written} problems found as written, {problems_left_after_fixes} after the fixes",
    "11": "input waits {input_share_naive:.0%} -> {input_share_fast:.0%} of a step; a call that retraces takes {step_ms_retracing_over_fixed:.0f}x as long as one with a tensor argument",
    "12": (
        "{devices} devices vs 1: weights differ by {max_weight_diff:.1e}, sharded {sharded_max_weight_diff:.1e}",
        "{devices} devices, validation accuracy {val_accuracy:.1%}, weights file restored within {restore_max_diff:.1e}",
    ),
}
# A notebook with alternatives records the first one's numbers where it can (12: on 1 device
# there is nothing to compare with); "1 replicas" and the like are said in the singular.
SINGULAR = re.compile(r"\b1 (replica|device|worker)s\b")


def headline(name: str, results: dict) -> str:
    templates = HEADLINES.get(name[:2], ())
    for template in (templates,) if isinstance(templates, str) else templates:
        try:
            return SINGULAR.sub(r"1 \1", template.format(**results))
        except (KeyError, ValueError, TypeError):
            pass  # not recorded in this run (or renamed): try the next, then the raw numbers
    return format_results(results)


def format_results(results: dict, limit: int = 3) -> str:
    shown = {k: v for k, v in results.items() if not k.startswith("_")}  # helpers.results.count
    parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()]
    more = f" (+{len(parts) - limit} more in results/)" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def markdown_table(rows: list[dict], header: str, wall: float | None = None) -> str:
    lines = [
        header,
        "",
        "| notebook | status | seconds | result | executed copy (plots inside) |",
        "|---|---|---:|---|---|",
    ]
    for row in rows:
        text = headline(row["notebook"], row["results"]) if row["status"] != "FAILED" else ""
        if row.get("error"):
            text = row["error"]
        if row.get("stderr"):
            text += f" ({len(row['stderr'])} unexpected stderr outputs)"
        if row.get("tf_log_lines"):
            text += (
                f" ({row['tf_log_lines']} TensorFlow {tensorflow_version()} log lines, harmless)"
            )
        where = ""
        if row.get("executed"):
            executed = Path(row["executed"])
            try:
                executed = executed.relative_to(ROOT)
            except ValueError:
                pass
            plots = row.get("plots", 0)
            where = f"{executed} ({plots} plot{'' if plots == 1 else 's'})"
        lines.append(
            f"| {row['notebook'][:2]} {Path(row['notebook']).stem[3:]} | {row['status']} "
            f"| {row['seconds']} | {text} | {where} |"
        )
    total = sum(row["seconds"] for row in rows)
    passed = sum(row["status"] in ("passed", "cached") for row in rows)
    cached = sum(row["status"] == "cached" for row in rows)
    lines += [
        "",
        f"{passed} of {len(rows)} notebooks passed ({cached} unchanged, from the cache); "
        f"{total:.0f} s of execution" + (f", {wall:.0f} s wall." if wall is not None else "."),
    ]
    return "\n".join(lines)


def save(out: Path, rows: list[dict], header: str, wall: float | None = None) -> str:
    table = markdown_table(rows, header, wall)
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    (out / "summary.md").write_text(table + "\n")
    return table


def in_order(paths: list[Path], done: dict[str, dict]) -> list[dict]:
    return [done[p.name] for p in paths if p.name in done]


def run_all(to_run: list[tuple[Path, str]], args, finished, previous: dict) -> None:
    """Execute ``to_run``, ``args.jobs`` notebooks at a time, calling ``finished`` after each.

    Each notebook runs in its own kernel whatever ``jobs`` is. With more than one job the
    longest notebooks (by their last recorded time) start first, so the run ends sooner, and each
    one is driven from its own worker process, since the results path travels in the
    environment the kernel inherits.
    """
    print(f"Executing {len(to_run)} notebook(s), {args.jobs} at a time.", flush=True)
    if args.jobs <= 1:
        for path, key in to_run:
            print(f"      {path.name} ...", flush=True)
            finished(path, key, run_one(path, args.out, args.parameters, args.cell_timeout))
        return
    last_time = {name: hit["row"].get("seconds", 0) for name, hit in previous.items()}
    ordered = sorted(to_run, key=lambda item: -last_time.get(item[0].name, 0))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = {}
        for path, key in ordered:
            futures[pool.submit(run_one, path, args.out, args.parameters, args.cell_timeout)] = (
                path,
                key,
            )
        for future in concurrent.futures.as_completed(futures):
            path, key = futures[future]
            finished(path, key, future.result())


def main() -> int:
    parser = argparse.ArgumentParser(description="Execute the notebooks headless.")
    parser.add_argument("--smoke", action="store_true", help="run with SMOKE_TEST=True")
    parser.add_argument("--only", action="append", default=[], help="notebook name prefix")
    parser.add_argument("--out", type=Path, help="default: build/full, or build/smoke")
    parser.add_argument(
        "--cache", action="store_true", help="skip notebooks unchanged since they passed"
    )
    parser.add_argument("--force", action="store_true", help="with --cache: run everything anyway")
    parser.add_argument(
        "--replicas",
        type=int,
        help="SIMULATED_REPLICAS for every notebook (default: each notebook's own, 8)",
    )
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks executed at once (default 1: timings stay clean)",
    )
    args = parser.parse_args()

    paths = [p for p in notebook_paths() if not args.only or p.name.startswith(tuple(args.only))]
    if not paths:
        parser.error(f"no notebook matches {args.only}")
    mode = "smoke" if args.smoke else "full"
    args.parameters = {"SMOKE_TEST": args.smoke}
    if args.replicas is not None:
        if args.replicas < 1:
            parser.error(f"--replicas must be at least 1, got {args.replicas}")
        args.parameters["SIMULATED_REPLICAS"] = args.replicas
    # Absolute: the kernels run in notebooks/ and must write their results where the summary looks.
    args.out = (args.out or ROOT / "build" / mode).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    cache_path = args.out / CACHE_FILE
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    replicas = "" if args.replicas is None else f", SIMULATED_REPLICAS={args.replicas}"
    header = f"Headless run ({mode} mode{replicas}), {time.strftime('%Y-%m-%d %H:%M')}"
    began = time.perf_counter()
    done: dict[str, dict] = {}  # notebook name -> row, in the order they finished
    to_run = []
    for i, path in enumerate(paths, 1):
        key = cache_key(path, args.parameters)
        hit = cache.get(path.name)
        executed = args.out / "executed" / path.name
        if args.cache and not args.force and hit and hit["key"] == key and executed.exists():
            done[path.name] = {**hit["row"], "status": "cached"}
            print(
                f"[{i}/{len(paths)}] {path.name}: skipped, passed on {hit['when']} with this "
                "notebook, helpers, parameters and stack (FORCE=1 re-runs it)",
                flush=True,
            )
        else:
            to_run.append((path, key))

    def finished(path: Path, key: str, row: dict) -> None:
        done[path.name] = row
        if row["status"] == "passed":
            cache[path.name] = {"key": key, "when": time.strftime("%Y-%m-%d %H:%M"), "row": row}
        else:
            cache.pop(path.name, None)
        cache_path.write_text(json.dumps(cache, indent=2))
        elapsed = time.perf_counter() - began
        stderr = row.get("stderr")
        print(
            f"      {path.name}: {row['status']} in {row['seconds']} s "
            f"(run so far: {elapsed:.0f} s, {len(done)} of {len(paths)} done)"
            + (f"; unexpected stderr in {len(stderr)} output(s)" if stderr else ""),
            flush=True,
        )
        save(args.out, in_order(paths, done), header)

    try:
        run_all(to_run, args, finished, previous=cache)
    except KeyboardInterrupt:
        print("\nInterrupted: the summary below covers the notebooks that finished.")
        for path, _ in to_run:
            done.setdefault(
                path.name,
                {
                    "notebook": path.name,
                    "status": "interrupted",
                    "seconds": 0.0,
                    "error": "",
                    "results": {},
                },
            )
    rows = in_order(paths, done)
    table = save(args.out, rows, header, wall=time.perf_counter() - began)
    print("\n" + table)
    print(f"\nExecuted notebooks: {args.out / 'executed'}; summary: {args.out / 'summary.md'}")
    return 0 if all(row["status"] in ("passed", "cached") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
