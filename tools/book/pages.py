"""The book's pieces made from data, never typed: each is a Markdown file a page includes.

The data: notebooks/manifest.toml, ``tpucheck.routes`` and ``tpucheck.failures``, the hardware
records, the requirements files, the JupyterLab tests, the run's summary.json and CI's timings.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import manifest
import sync_notebooks
from notebook_files import ROOT, settings
from stacks import STACK_FILES

from hardware import records as hardware_records
from tpucheck import failures, routes


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return re.split(r"(?<=[.:])\s", text, maxsplit=1)[0].rstrip(":.") + "."


def lesson_map(names: list[str]) -> str:
    cfg, entries = settings(), manifest.load()
    rows = ["| lesson | what you will learn | open |", "|---|---|---|"]
    for name in names:
        entry = manifest.entry_for(entries, name)
        promise = sync_notebooks._fill(entry["promise"], cfg)
        links = sync_notebooks.urls(name, cfg)
        title = f"[{name[:2]} · {entry['title']}]({name})"
        opens = f"[Colab]({links['colab']}) · [Kaggle]({links['kaggle']})"
        rows.append(f"| {title} | {_first_sentence(promise)} | {opens} |")
    return "\n".join(rows) + "\n"


def route_facts() -> str:
    rows = ["| claim | source | verified on hardware |", "|---|---|---|"]
    facts = [f for p in routes.PLATFORMS.values() for f in p.facts]
    facts += [f for r in routes.RELEASES for f in r.facts]
    for fact in facts:
        rows.append(
            f"| {fact.text} | {fact.source} | {'yes' if fact.verified_on_hardware else 'no'} |"
        )
    return "\n".join(rows) + "\n"


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if match := re.match(r"^# (python|replicas|stands in for): (.+)$", line):
            pins[f"#{match[1]}"] = match[2].strip()
        elif match := re.match(r"^([A-Za-z][\w.-]*)==([\w.]+)", line):
            pins[match[1].lower()] = match[2]
    return pins


def stacks() -> dict[str, dict[str, str]]:
    """Each CI stack's pins and declared facts (``# python:``, ``# stands in for:`` lines)."""
    return {name: _pins(ROOT / file) for name, (file, _) in STACK_FILES.items()}


def stacks_table() -> str:
    rows = [
        "| stack | file | Python | TensorFlow | Keras | JAX | replicas | stands in for |",
        "|---|---|---|---|---|---|---:|---|",
    ]
    for name, pins in stacks().items():
        tensorflow = next(
            (f"{d} {pins[d]}" for d in ("tensorflow", "tensorflow-cpu") if d in pins), "?"
        )
        rows.append(
            f"| `{name}` | `{STACK_FILES[name][0]}` | {pins.get('#python', 'the machine’s python3')} "
            f"| {tensorflow} | {pins.get('keras', '?')} | {pins.get('jax', '?')} "
            f"| {pins.get('#replicas', '8')} | {pins.get('#stands in for', '')} |"
        )
    return "\n".join(rows) + "\n"


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def run_page(run: Path) -> str:
    record = json.loads((run / "summary.json").read_text())
    lines = [f"{record['header']}.", ""]
    if record.get("stack"):
        stack = ", ".join(f"{k} {v}" for k, v in record["stack"].items() if v)
        lines += [f"Stack: {stack}.", ""]
    if record.get("machine"):
        lines += [f"Machine: {record['machine']}.", ""]
    lines += [
        "| lesson | status | seconds | peak memory, GiB | result |",
        "|---|---|---:|---:|---|",
    ]
    for row in record["rows"]:
        result = row.get("error") or row.get("headline", "")
        lines.append(
            f"| [{row['notebook'][:2]}]({row['notebook']}) | {row['status']} "
            f"| {row['seconds']} | {row.get('peak_gib', '')} | {result} |"
        )
    lines += ["", "Every number the lessons recorded (``helpers.results.record``) in this run:", ""]
    lines += ["| lesson | measurement | value |", "|---|---|---:|"]
    for row in record["rows"]:
        for key, value in row.get("results", {}).items():
            if not key.startswith("_"):
                lines.append(f"| {row['notebook'][:2]} | `{key}` | {_number(value)} |")
    return "\n".join(lines) + "\n"


def generated_pages(run: Path, names: list[str], records: list[dict]) -> dict[str, str]:
    """Every generated piece, by file name, for a book of ``names`` built from ``run``."""
    return {
        "lesson_map.md": lesson_map(names),
        "routes.md": routes.markdown_table(hardware_records.verified_routes(records)) + "\n",
        "hardware.md": hardware_records.page(records),
        "route_facts.md": route_facts(),
        "failures.md": failures.markdown_table() + "\n",
        "stacks.md": stacks_table(),
        "lab_checks.md": lab_checks(),
        "measured.md": measured_page(run),
    }


def lab_checks() -> str:
    """What the JupyterLab checks do, one line per test: its name, and the lessons it opens (its
    module's constants), read from the test module, so the page cannot go stale."""
    module = ROOT / "tests" / "test_browser_lab.py"
    tree = ast.parse(module.read_text(encoding="utf-8"))
    constants = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets
        if isinstance(t, ast.Name) and str(node.value.value).endswith(".ipynb")
    }
    lines = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            said = node.name.removeprefix("test_").replace("_", " ")
            opened = sorted(
                {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(constants)
            )
            where = "".join(f" (`{constants[n]}`)" for n in opened)
            lines.append(f"- {said[0].upper()}{said[1:]}{where}.")
    return "\n".join(lines) + "\n"


def measured_page(run: Path) -> str:
    """The Measured page: the run the book was built from, then CI's timings if there are any."""
    text = f"## The run this book was built from\n\n{run_page(run)}"
    timings = ROOT / "build" / "ci-timings.json"
    if not timings.exists():
        return text
    data = json.loads(timings.read_text())
    lines = [
        "## Continuous integration",
        "",
        f"`.ci/run` at commit `{data['commit']}`, {data['date']}, on {data['machine']}: "
        f"**{data['total_seconds']:,} s** in all.",
        "",
        "| part | seconds |",
        "|---|---:|",
    ]
    lines += [f"| {part} | {seconds:,} |" for part, seconds in data["parts"].items()]
    return text + "\n" + "\n".join(lines) + "\n"
