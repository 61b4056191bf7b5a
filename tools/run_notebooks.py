"""The main job: execute every notebook headless with papermill and print a summary table.

    python tools/run_notebooks.py            # the full lessons, into build/full
    python tools/run_notebooks.py --smoke    # the small, quick versions CI runs, build/smoke
    python tools/run_notebooks.py --only keras_compile_and_fit --only 04   # by name or number
    python tools/run_notebooks.py --replicas 1   # SIMULATED_REPLICAS=1: one TPU core, as on Colab
    python tools/run_notebooks.py --cache    # skip what is unchanged (make run, smoke and test)
    python tools/run_notebooks.py --blocks   # each block only some runtimes take, and where

A smoke run passes each notebook ``SMOKE_TEST=True`` and the smaller values of its
``[notebooks.name.smoke]`` table in notebooks/manifest.toml. With ``--cache`` a notebook is
skipped when it passed before with the same notebook, helpers, parameters and stack (see
``runner.cache``); ``--force`` re-executes anyway. Without it every notebook executes.

Writes, into the run's folder (``runner.folders``; ``--out`` chooses another):
- ``executed/NN_name.ipynb``: each executed notebook, saved after every cell;
- ``results/NN_name.json``: the numbers the notebook recorded with ``helpers.results.record``;
- ``summary.json`` and ``summary.md``: status, seconds and headline per notebook, rewritten after
  each notebook, so an interrupted run still leaves a summary of what finished;
- ``files/NN_name/...``: files a notebook keeps for the reader (``kept_files`` in the manifest).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import platform
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # helpers, without an install

import manifest  # noqa: E402
from lessons import lesson_name  # noqa: E402
from notebook_files import notebook_paths  # noqa: E402
from runner import blocks, execute, summary  # noqa: E402
from runner.cache import Cache, cache_key, stack  # noqa: E402
from runner.folders import run_folder  # noqa: E402


def parameters_for(entry: dict, smoke: bool, replicas: int | None) -> dict:
    """A notebook's parameters: its smoke values in a smoke run, the replica count if given."""
    parameters = manifest.smoke_parameters(entry) if smoke else {"SMOKE_TEST": False}
    if replicas is not None:
        parameters["SIMULATED_REPLICAS"] = replicas
    return parameters


def _parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description="Execute the notebooks headless.")
    parser.add_argument("--smoke", action="store_true", help="the small, quick versions")
    parser.add_argument(
        "--only", action="append", default=[], help="a lesson's name (keras3_on_jax) or number (12)"
    )
    parser.add_argument("--out", type=Path, help="default: build/full, build/smoke, ...")
    parser.add_argument("--where", action="store_true", help="print the run's folder and stop")
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="list each lesson's blocks that only some runtimes take, and where, then stop",
    )
    parser.add_argument(
        "--cache", action="store_true", help="skip notebooks unchanged since they passed"
    )
    parser.add_argument("--force", action="store_true", help="with --cache: run everything anyway")
    parser.add_argument(
        "--replicas",
        type=int,
        help="SIMULATED_REPLICAS for every notebook (default: each notebook's own)",
    )
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks executed at once (default 1: timings stay clean)",
    )
    args = parser.parse_args(argv)
    if args.replicas is not None and args.replicas < 1:
        parser.error(f"--replicas must be at least 1, got {args.replicas}")
    args.mode = "smoke" if args.smoke else "full"
    # Absolute: the kernels run in notebooks/ and must write their results where the summary looks.
    args.out = (args.out or run_folder(args.mode, args.only)).resolve()
    args.paths = [p for p in notebook_paths() if not args.only or _selected(p, args.only)]
    if not args.paths:
        parser.error(f"no notebook matches {args.only}")
    return args


def _selected(path: Path, only: list[str]) -> bool:
    """Whether ``--only`` names the notebook: by the lesson's name, or its number or prefix."""
    return lesson_name(path) in only or path.name.startswith(tuple(only))


def _execute(jobs: list[tuple], args, finished, cache: Cache) -> None:
    """Run ``jobs`` (path, key, parameters, kept files), ``args.jobs`` at a time.

    Each notebook runs in its own kernel whatever ``--jobs`` is. With more than one job the
    longest notebooks (by their last recorded time) start first, so the run ends sooner, and each
    one is driven from its own worker process, since the results path travels in the
    environment the kernel inherits.
    """
    print(f"Executing {len(jobs)} notebook(s), {args.jobs} at a time.", flush=True)
    if args.jobs <= 1:
        for path, key, parameters, kept in jobs:
            print(f"      {path.name} ...", flush=True)
            finished(
                path, key, execute.run_one(path, args.out, parameters, args.cell_timeout, kept)
            )
        return
    ordered = sorted(jobs, key=lambda job: -cache.last_seconds(job[0].name))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = {
            pool.submit(execute.run_one, path, args.out, parameters, args.cell_timeout, kept): (
                path,
                key,
            )
            for path, key, parameters, kept in ordered
        }
        for future in concurrent.futures.as_completed(futures):
            path, key = futures[future]
            finished(path, key, future.result())


def machine() -> str:
    """This machine's CPU model, usable cores and memory, for the summary."""
    cpu = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cores = len(os.sched_getaffinity(0))
    return f"{cpu[1].strip() if cpu else platform.machine()}, {cores} cores, {memory:.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.where:
        print(args.out)
        return 0
    if args.blocks:
        print(blocks.listing(args.paths))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    entries = manifest.load()
    cache = Cache(args.out)
    replicas = "" if args.replicas is None else f", SIMULATED_REPLICAS={args.replicas}"
    header = f"Headless run ({args.mode} mode{replicas}), {time.strftime('%Y-%m-%d %H:%M')}"
    began = time.perf_counter()
    about = {"stack": stack(), "machine": machine()}
    paths = args.paths
    done: dict[str, dict] = {}  # notebook name -> row

    def with_headline(row: dict) -> dict:
        templates = manifest.headlines(manifest.entry_for(entries, row["notebook"]))
        return {**row, "headline": summary.headline(templates, row.get("results", {}))}

    jobs = []
    for i, path in enumerate(paths, 1):
        entry = manifest.entry_for(entries, path.name)
        parameters = parameters_for(entry, args.smoke, args.replicas)
        key = cache_key(path, parameters)
        hit = cache.hit(path.name, key, args.out / "executed" / path.name)
        if args.cache and not args.force and hit:
            done[path.name] = with_headline({**hit["row"], "status": "cached"})
            print(
                f"[{i}/{len(paths)}] {path.name}: skipped, passed on {hit['when']} with this "
                "notebook, helpers, parameters and stack (FORCE=1 re-runs it)",
                flush=True,
            )
        else:
            jobs.append((path, key, parameters, entry.get("kept_files", {})))

    def in_order() -> list[dict]:
        return [done[p.name] for p in paths if p.name in done]

    def finished(path: Path, key: str, row: dict) -> None:
        done[path.name] = with_headline(row)
        cache.record(path.name, key, row)
        stderr = row.get("stderr")
        print(
            f"      {path.name}: {row['status']} in {row['seconds']} s "
            f"(run so far: {time.perf_counter() - began:.0f} s, {len(done)} of {len(paths)} done)"
            + (f"; unexpected stderr in {len(stderr)} output(s)" if stderr else ""),
            flush=True,
        )
        summary.save(args.out, in_order(), header, about=about)

    try:
        _execute(jobs, args, finished, cache)
    except KeyboardInterrupt:
        print("\nInterrupted: the summary below covers the notebooks that finished.")
        for path, *_ in jobs:
            done.setdefault(
                path.name,
                {"notebook": path.name, "status": "interrupted", "seconds": 0.0, "error": ""},
            )
    rows = in_order()
    table = summary.save(args.out, rows, header, wall=time.perf_counter() - began, about=about)
    print("\n" + table)
    print(f"\nExecuted notebooks: {args.out / 'executed'}; summary: {args.out / 'summary.md'}")
    ran = ("passed", "cached", summary.STDERR_STATUS)  # stderr is make test's to judge
    return 0 if all(row["status"] in ran for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
