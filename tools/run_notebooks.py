"""The main job: execute every notebook headless with papermill and print a summary table.

    python tools/run_notebooks.py            # the full lessons, into build/full
    python tools/run_notebooks.py --smoke    # the small, quick versions CI runs, build/smoke
    python tools/run_notebooks.py --only keras_compile_and_fit --only 04   # by name or number
    python tools/run_notebooks.py --replicas 1   # SIMULATED_REPLICAS=1: one TPU core, as on Colab
    python tools/run_notebooks.py --cache    # skip what is unchanged (make run, smoke and test)
    python tools/run_notebooks.py --blocks   # each block only some runtimes take, and where

A smoke run passes ``SMOKE_TEST=True`` and the notebook's ``[notebooks.name.smoke]`` values from
notebooks/manifest.toml. The run's folder (``runner.folders``, or ``--out``) receives
``executed/`` (saved after every cell), ``results/`` (from ``helpers.results.record``), ``files/``
(``kept_files``), and ``summary.json`` and ``summary.md``, rewritten after each notebook.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
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


def _parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description="Execute the notebooks headless.")
    parser.add_argument("--smoke", action="store_true", help="the small, quick versions")
    parser.add_argument("--only", action="append", default=[], help="a lesson's name or number")
    parser.add_argument("--out", type=Path, help="default: build/full, build/smoke, ...")
    parser.add_argument("--where", action="store_true", help="print the run's folder and stop")
    parser.add_argument("--blocks", action="store_true", help="list the runtime-dependent blocks")
    parser.add_argument("--cache", action="store_true", help="skip notebooks that passed as is")
    parser.add_argument("--force", action="store_true", help="with --cache: run everything anyway")
    parser.add_argument("--replicas", type=int, help="SIMULATED_REPLICAS for every notebook")
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks at once (1: clean timings)")
    args = parser.parse_args(argv)
    if args.replicas is not None and args.replicas < 1:
        parser.error(f"--replicas must be at least 1, got {args.replicas}")
    args.mode = "smoke" if args.smoke else "full"
    # Absolute: the kernels run in notebooks/ and must write their results where the summary looks.
    args.out = (args.out or run_folder(args.mode, args.only)).resolve()
    only = tuple(args.only)  # lessons by name, or by number or prefix
    args.paths = [
        p for p in notebook_paths() if not only or lesson_name(p) in only or p.name.startswith(only)
    ]
    if not args.paths:
        parser.error(f"no notebook matches {args.only}")
    return args


def _execute(jobs: list[tuple], args, cache: Cache):
    """Yield (path, key, row) for each of ``jobs`` (path, key, parameters, kept files) as it
    finishes, ``args.jobs`` at a time. In parallel the longest start first, each driven from its
    own process, since the results path reaches the kernel in the environment."""
    print(f"Executing {len(jobs)} notebook(s), {args.jobs} at a time.", flush=True)
    run = functools.partial(execute.run_one, out=args.out, cell_timeout=args.cell_timeout)
    if args.jobs <= 1:
        for path, key, parameters, kept in jobs:
            print(f"      {path.name} ...", flush=True)
            yield path, key, run(path, parameters=parameters, kept_files=kept)
        return
    ordered = sorted(jobs, key=lambda job: -cache.last_seconds(job[0].name))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = {
            pool.submit(run, path, parameters=parameters, kept_files=kept): (path, key)
            for path, key, parameters, kept in ordered
        }
        for future in concurrent.futures.as_completed(futures):
            yield *futures[future], future.result()


def machine() -> str:
    """This machine's CPU model, usable cores and memory, for the summary."""
    cpu = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cores = len(os.sched_getaffinity(0))
    return f"{cpu[1].strip() if cpu else platform.machine()}, {cores} cores, {memory:.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.where or args.blocks:
        print(blocks.listing(args.paths) if args.blocks else args.out)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    entries = manifest.load()
    cache = Cache(args.out)
    replicas = "" if args.replicas is None else f", SIMULATED_REPLICAS={args.replicas}"
    header = f"Headless run ({args.mode} mode{replicas}), {time.strftime('%Y-%m-%d %H:%M')}"
    began = time.perf_counter()
    about = {"stack": stack(), "machine": machine()}
    done: dict[str, dict] = {}  # notebook name -> row

    def with_headline(row: dict) -> dict:
        templates = manifest.headlines(manifest.entry_for(entries, row["notebook"]))
        return {**row, "headline": summary.headline(templates, row.get("results", {}))}

    jobs = []
    for i, path in enumerate(args.paths, 1):
        entry = manifest.entry_for(entries, path.name)
        parameters = manifest.smoke_parameters(entry) if args.smoke else {"SMOKE_TEST": False}
        if args.replicas is not None:
            parameters["SIMULATED_REPLICAS"] = args.replicas
        key = cache_key(path, parameters)
        hit = cache.hit(path.name, key)
        if args.cache and not args.force and hit:
            done[path.name] = with_headline({**hit["row"], "status": "cached"})
            print(
                f"[{i}/{len(args.paths)}] {path.name}: skipped, passed on {hit['when']} with this "
                "notebook, helpers, parameters and stack (FORCE=1 re-runs it)",
                flush=True,
            )
        else:
            jobs.append((path, key, parameters, entry.get("kept_files", {})))

    def in_order() -> list[dict]:
        return [done[p.name] for p in args.paths if p.name in done]

    try:
        for path, key, row in _execute(jobs, args, cache):
            done[path.name] = with_headline(row)
            cache.record(path.name, key, row)
            stderr = row.get("stderr")
            print(
                f"      {path.name}: {row['status']} in {row['seconds']} s (run so far: "
                f"{time.perf_counter() - began:.0f} s, {len(done)} of {len(args.paths)} done)"
                + (f"; unexpected stderr in {len(stderr)} output(s)" if stderr else ""),
                flush=True,
            )
            summary.save(args.out, in_order(), header, about)
    except KeyboardInterrupt:
        print("\nInterrupted: the summary below covers the notebooks that finished.")
        interrupted = {"status": "interrupted", "seconds": 0.0, "error": ""}
        for path, *_ in jobs:
            done.setdefault(path.name, {"notebook": path.name, **interrupted})
    rows = in_order()
    table = summary.save(args.out, rows, header, about, wall=time.perf_counter() - began)
    print("\n" + table)
    print(f"\nExecuted notebooks: {args.out / 'executed'}; summary: {args.out / 'summary.md'}")
    # A notebook that wrote unexpected stderr still ran: that is make test's to judge.
    return 0 if all(row["status"] in summary.RAN for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
