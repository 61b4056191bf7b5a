"""The main job: execute every notebook headless with papermill and print a summary table.

    python tools/run_notebooks.py            # full lessons (minutes per notebook on a CPU)
    python tools/run_notebooks.py --smoke    # SMOKE_TEST=True: the small run CI uses
    python tools/run_notebooks.py --only 01 --only 03

Writes, under ``build/`` (or ``--out``):
- ``executed/NN_name.ipynb``: each executed notebook, saved by papermill after every cell, so an
  interrupted or failed run keeps everything up to the cell that stopped it;
- ``results/NN_name.json``: the numbers the notebook recorded with ``helpers.results.record``;
- ``summary.json`` and ``summary.md``: status, seconds and key numbers per notebook, rewritten
  after each notebook, so an interrupted run still leaves a summary of what finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from notebook_files import ROOT, notebook_paths

RESULTS_ENV = "FIELD_GUIDE_RESULTS"  # the name helpers.results reads


def run_one(path: Path, out: Path, smoke: bool, cell_timeout: int) -> dict:
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
            parameters={"SMOKE_TEST": smoke},
            cwd=str(path.parent),
            kernel_name="python3",
            execution_timeout=cell_timeout,
            progress_bar=sys.stderr.isatty(),
            log_output=False,
        )
    except Exception as err:  # papermill raises on a failing cell; report it and go on
        row["status"] = "FAILED"
        row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["results"] = json.loads(results.read_text()) if results.exists() else {}
    return row


def format_results(results: dict, limit: int = 4) -> str:
    parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in results.items()]
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def markdown_table(rows: list[dict], header: str) -> str:
    lines = [header, "", "| notebook | status | seconds | key numbers |", "|---|---|---:|---|"]
    for row in rows:
        numbers = format_results(row["results"]) or row["error"]
        lines.append(f"| {row['notebook']} | {row['status']} | {row['seconds']} | {numbers} |")
    total = sum(row["seconds"] for row in rows)
    passed = sum(row["status"] == "passed" for row in rows)
    lines += ["", f"{passed} of {len(rows)} notebooks passed in {total:.0f} s."]
    return "\n".join(lines)


def save(out: Path, rows: list[dict], header: str) -> str:
    table = markdown_table(rows, header)
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    (out / "summary.md").write_text(table + "\n")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description="Execute the notebooks headless.")
    parser.add_argument("--smoke", action="store_true", help="run with SMOKE_TEST=True")
    parser.add_argument("--only", action="append", default=[], help="notebook name prefix")
    parser.add_argument("--out", type=Path, default=ROOT / "build")
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args()

    paths = [p for p in notebook_paths() if not args.only or p.name.startswith(tuple(args.only))]
    if not paths:
        parser.error(f"no notebook matches {args.only}")
    # Absolute: the kernels run in notebooks/ and must write their results where the summary looks.
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    mode = "smoke" if args.smoke else "full"
    header = f"Headless run ({mode} mode), {time.strftime('%Y-%m-%d %H:%M')}"
    rows: list[dict] = []
    try:
        for i, path in enumerate(paths, 1):
            print(f"[{i}/{len(paths)}] {path.name} ...", flush=True)
            row = run_one(path, args.out, args.smoke, args.cell_timeout)
            rows.append(row)
            print(f"      {row['status']} in {row['seconds']} s", flush=True)
            save(args.out, rows, header)
    except KeyboardInterrupt:
        print("\nInterrupted: the summary below covers the notebooks that finished.")
        rows.append(
            {
                "notebook": path.name,
                "status": "interrupted",
                "seconds": 0.0,
                "error": "",
                "results": {},
            }
        )
    table = save(args.out, rows, header)
    print("\n" + table)
    print(f"\nExecuted notebooks: {args.out / 'executed'}; summary: {args.out / 'summary.md'}")
    return 0 if all(row["status"] == "passed" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
