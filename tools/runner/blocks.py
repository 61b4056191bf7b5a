"""The runner's side of ``helpers.blocks.runs_on``: did each declared block run where it says?"""

from __future__ import annotations

import ast
import glob
import os

from IPython.core.inputtransformer2 import TransformerManager
from notebook_files import read, source

from helpers.blocks import RECORD, is_place, source_digest
from tpucheck import runtime

# A lesson's names for where it runs: an ``if`` on one of them is a block that only some
# runtimes take, and must say where with ``runs_on`` (``conditional_blocks``).
PLATFORM_NAMES = {
    "REPLICAS",
    "SIMULATED_REPLICAS",
    "ON_TPU",
    "KIND",
    "COLLECTIVE",
    "CAN_SPLIT",
    "num_replicas_in_sync",
    "TPUStrategy",
    "MirroredStrategy",
    "tpu_hints",
    "tpu_signs",
    "SIMULATED",
    "ON_POD",
    "DEVICES",
    "PLATFORM",
    "detect_platform",
    "steps_per_execution",
    "cpu_devices",
    "COLAB_RELEASE_TAG",
    "/kaggle/working",
}

_TRANSFORM = TransformerManager()
ALWAYS_KNOWN = {"TPU", "GPU", "CPU", "one host", "pod", "Colab", "Kaggle"}


def places_of_run(hardware: str, replicas: int | None, platform: str | None = None) -> set[str]:
    """The places a run is at: its ``hardware``, Colab or Kaggle (``platform``), and its replica
    count (None on a TPU or GPUs, where only TensorFlow counts: blocks by count go unjudged)."""
    # The hosts of a TPU slice: Cloud TPU VMs set this variable (unverified on hardware).
    hosts = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    places = {hardware, "pod" if hardware == "TPU" and len(hosts) > 1 else "one host"}
    if platform in ("colab", "kaggle"):
        places.add(platform.capitalize())
    if replicas is not None:
        places |= {"one replica" if replicas == 1 else "several replicas", f"{replicas} replicas"}
        if hardware == "CPU" and replicas > 1:
            places.add("simulated TPU")
    return places


def hardware() -> str:
    """This host's accelerator as the runner sees it: TPU hints, NVIDIA device nodes, or none."""
    if runtime.tpu_hints():
        return "TPU"
    return "GPU" if glob.glob("/dev/nvidia[0-9]*") else "CPU"


def _meant(place: str, run_places: set[str]) -> bool:
    return all(part in run_places for part in place.split(" and "))


def _judged(place: str, run_places: set[str]) -> bool:
    """Whether the runner can tell if ``place`` is this run's (not when the count is unknown)."""
    known_count = any(p[0].isdigit() for p in run_places)
    return known_count or all(part in ALWAYS_KNOWN for part in place.split(" and "))


def _code_cells(notebook: dict):
    """(index, code as IPython compiles it) of each code cell."""
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") == "code":
            yield index, _TRANSFORM.transform_cell(source(cell))


def _names(node: ast.AST) -> set[str]:
    """The names, attributes and string constants in ``node``."""
    return {
        getattr(n, "id", None)
        or getattr(n, "attr", None)
        or (n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None)
        for n in ast.walk(node)
    } - {None}


def _top_level_ifs(tree: ast.Module):
    """Every ``if`` and ``elif`` outside a function or class body."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo += [n for n in getattr(node, field, []) if isinstance(n, ast.AST)]


def conditional_blocks(notebook: dict) -> list[tuple[int, int, str, tuple[str, ...] | None]]:
    """(cell, line, condition, declared places or None) of each block whose condition names
    where the lesson runs (:data:`PLATFORM_NAMES`); its first statement must be ``runs_on``."""
    found = []
    for index, code in _code_cells(notebook):
        for node in _top_level_ifs(ast.parse(code)):
            if not _names(node.test) & PLATFORM_NAMES:
                continue
            first = node.body[0]
            call = isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
            places = next((declared for _, declared in _calls(first)), None) if call else None
            found.append((index, node.lineno, ast.unparse(node.test), places))
    return found


def listing(paths) -> str:
    """A Markdown table of every conditional block in the notebooks at ``paths``."""
    lines = ["| lesson | cell | condition | runs on |", "|---|---:|---|---|"]
    for path in paths:
        for cell, _, condition, places in conditional_blocks(read(path)):
            where = ", ".join(places) if places else "**undeclared**"
            lines.append(f"| {path.name[:2]} | {cell} | `{condition}` | {where} |")
    return "\n".join(lines)


def _calls(tree: ast.AST):
    """(line, places) of each ``runs_on("...")`` call in ``tree``; places must be literals."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if getattr(node.func, "id", getattr(node.func, "attr", None)) != "runs_on":
            continue
        places = tuple(arg.value for arg in node.args if isinstance(arg, ast.Constant))
        if len(places) != len(node.args) or not all(map(is_place, places)):
            raise ValueError(f"line {node.lineno}: runs_on takes literal places, got {places}")
        yield node.lineno, places


def misplaced(notebook: dict, results: dict, run_places: set[str], completed: bool) -> list[str]:
    """One sentence per block that did not run where it says, or ran where it says it does not
    (read from the cells as IPython compiles them: the digest the kernel recorded finds its cell).
    Unless ``completed`` (ran to its end), a block in a cell that never ran is not blamed."""
    ran = {(digest, line) for digest, line, _ in results.get(f"_{RECORD}", [])}
    executed_cells = {
        i
        for i, cell in enumerate(notebook.get("cells", []))
        if cell.get("cell_type") == "code" and cell.get("execution_count") is not None
    }
    problems = []
    for cell, code in _code_cells(notebook):
        if "runs_on" not in code:
            continue
        digest = source_digest(code)
        for line, places in _calls(ast.parse(code)):
            if not all(_judged(place, run_places) for place in places):
                continue
            meant = any(_meant(place, run_places) for place in places)
            did = (digest, line) in ran
            at = f"on {describe(run_places)} (cell {cell}, line {line})"
            if meant and not did and (completed or cell in executed_cells):
                problems.append(f"a block for {' or '.join(places)} did not run {at}")
            elif did and not meant:
                problems.append(f"a block declared for {' or '.join(places)} ran {at}")
    return problems


def describe(run_places: set[str]) -> str:
    """The run's place in words: "CPU, one host, 8 replicas"."""
    kinds = [p for p in run_places if p in ALWAYS_KNOWN or p[0].isdigit()]
    return ", ".join(sorted(kinds, key=lambda p: (p[0].isdigit(), p)))
