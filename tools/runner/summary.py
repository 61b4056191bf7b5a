"""Each notebook's row of the summary: its status, its stderr, its plots and its headline.

Only cells tagged ``expected-stderr`` (a lesson that teaches a warning) may write to stderr;
start-up notices no setting silences count apart (:func:`helpers.processes.is_harmless_log`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from notebook_files import ROOT, source

from helpers import processes

EXPECTED_STDERR_TAG = "expected-stderr"
# A notebook that ran to its end but wrote to stderr outside the cells that teach it: not counted
# as passed, not cached (so it runs again), but not a failure of the run either.
STDERR_STATUS = "stderr"
RAN = ("passed", "cached", STDERR_STATUS)  # the statuses of a notebook that ran to its end
SINGULAR = re.compile(r"\b1 (replica|device|worker)s\b")  # "1 replicas" and the like


def _stderr_outputs(notebook: dict, every_cell: bool):
    """(cell index, text) of each stderr or error output, in cells not tagged for them."""
    for index, cell in enumerate(notebook.get("cells", [])):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.get("cell_type") != "code" or (not every_cell and EXPECTED_STDERR_TAG in tags):
            continue
        stderr = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                yield index, f"{output.get('ename')}: {output.get('evalue')}"
            elif output.get("name") == "stderr":
                stderr.append(source({"source": output.get("text", "")}))
        if stderr:  # one text: the kernel forwards stderr in chunks that may end mid-line
            yield index, "".join(stderr)


def unexpected_stderr(
    notebook: dict, every_line: bool = False, *, tolerate: bool | None = None
) -> list[tuple[int, str]]:
    """(cell index, first line, or with ``every_line`` each line) of each stderr or error output in
    a cell not tagged for it, harmless notices left out; ``tolerate`` (default: on TensorFlow 2.19
    or 2.20) also leaves out the absl lines those releases write before any setting applies."""
    found = []
    for index, text in _stderr_outputs(notebook, every_cell=False):
        lines = [line[:200] for line in text.splitlines() if line.strip()] or [""]
        lines = [line for line in lines if not processes.is_harmless_log(line, early_absl=tolerate)]
        found += [(index, line) for line in (lines if every_line else lines[:1])]
    return found


def inspect(notebook: dict) -> dict:
    """An executed notebook's unexpected stderr, harmless TensorFlow log lines, and plots."""
    plots = sum(
        "image/png" in output.get("data", {})
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", [])
    )
    harmless = sum(
        processes.is_harmless_log(line, early_absl=True)
        for _, text in _stderr_outputs(notebook, every_cell=True)
        for line in text.splitlines()
    )
    stderr = [f"cell {i}: {line}" for i, line in unexpected_stderr(notebook)]
    return {"stderr": stderr, "tf_log_lines": harmless, "plots": plots}


def filled_headline(templates: tuple[str, ...], results: dict) -> str | None:
    """The first template whose numbers were all recorded, filled in; None if none was."""
    for template in templates:
        try:
            return SINGULAR.sub(r"1 \1", template.format(**results))
        except (KeyError, ValueError, TypeError, IndexError):
            pass  # not recorded in this run (or renamed): try the next
    return None


def headline(templates: tuple[str, ...], results: dict) -> str:
    """The notebook's result in words, or its first raw numbers when no template could be filled."""
    if filled := filled_headline(templates, results):
        return filled
    shown = {k: v for k, v in results.items() if not k.startswith("_")}  # helpers.results.count
    parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()]
    more = f" (+{len(parts) - 3} more in results/)" if len(parts) > 3 else ""
    return ", ".join(parts[:3]) + more


def _result_text(row: dict) -> str:
    """The result column: the error of a failed run, else the headline, with what to notice."""
    if row.get("error"):
        return row["error"]
    if row["status"] not in RAN:
        return ""  # interrupted before it ran: no result to speak of
    text = row.get("headline", "")
    if row.get("stderr"):
        text += f" ({len(row['stderr'])} unexpected stderr outputs)"
    if row.get("tf_log_lines"):
        text += f" ({row['tf_log_lines']} log lines TensorFlow wrote before any setting applies)"
    return text


def markdown_table(rows: list[dict], header: str, wall: float | None = None) -> str:
    lines = [
        header,
        "",
        "| notebook | status | seconds | peak GiB | result | executed copy (plots inside) |",
        "|---|---|---:|---:|---|---|",
    ]
    for row in rows:
        where = ""
        if row.get("executed"):
            executed = Path(row["executed"])
            if executed.is_relative_to(ROOT):
                executed = executed.relative_to(ROOT)
            plots = row.get("plots", 0)
            where = f"{executed} ({plots} plot{'' if plots == 1 else 's'})"
        lines.append(
            f"| {row['notebook'][:2]} {Path(row['notebook']).stem[3:]} | {row['status']} "
            f"| {row['seconds']} | {row.get('peak_gib', '')} | {_result_text(row)} | {where} |"
        )
    total = sum(row["seconds"] for row in rows)
    passed = sum(row["status"] in ("passed", "cached") for row in rows)
    cached = sum(row["status"] == "cached" for row in rows)
    noisy = sum(row["status"] == STDERR_STATUS for row in rows)
    peak, heaviest = max(
        ((row.get("peak_gib") or 0, row["notebook"][:2]) for row in rows), default=(0, "")
    )
    lines += [
        "",
        f"{passed} of {len(rows)} notebooks passed ({cached} unchanged, from the cache)"
        + (f"; {noisy} ran to the end but wrote unexpected stderr" if noisy else "")
        + f"; {total:.0f} s of execution"
        + (f"; largest peak memory {peak:g} GiB ({heaviest})" if peak else "")
        + (f", {wall:.0f} s wall." if wall is not None else "."),
    ]
    return "\n".join(lines)


def save(out: Path, rows: list[dict], header: str, about: dict, wall: float | None = None) -> str:
    """Write ``summary.json`` (``about``: stack, machine) and ``summary.md``; return the table."""
    table = markdown_table(rows, header, wall)
    record = {"header": header, "wall_seconds": wall, **about, "rows": rows}
    (out / "summary.json").write_text(json.dumps(record, indent=2))
    (out / "summary.md").write_text(table + "\n")
    return table
