"""Where each helper is used: the "Taught in notebook NN." line of its docstring, generated.

A public function or class of ``helpers/`` whose name appears in a lesson's code cells (called,
imported or named through its module: ``timing.measure``, ``from helpers.timing import measure``,
``helpers.connect``) ends its docstring with one line that lists those lessons::

    Taught in notebooks 03, 12.

``make sync`` writes that line from the notebooks (as d2l's build writes "Defined in"), removes it
from a helper no lesson uses, and ``make lint`` (``sync_notebooks.py --check``) fails while one is
stale. Nobody edits the line by hand, and a merge conflict on it is resolved by taking either side
and running ``make sync``. The line stands alone, last in the docstring, so that edits to the
prose above it and changes to the lessons do not touch the same lines.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from notebook_files import ROOT, read, source

__all__ = ["docstring_lines", "hand_written", "stale_lines", "sync_file", "uses"]

# The generated line, alone on its line: "Taught in notebook 08." / "Taught in notebooks 08, 09."
LINE = re.compile(r"^[ \t]*Taught in notebooks? \d{2}(?:, \d{2})*\.[ \t]*$")
# The same words anywhere else in a docstring: a hand-written provenance, which lint refuses.
HAND = re.compile(r"[Tt]aught in notebooks? \d{2}")
# Lines of IPython that are not Python (magics, shell escapes, help).
NOT_PYTHON = re.compile(r"^\s*[%!?]")
TIMED = re.compile(r"^\s*%(?:time|timeit|prun)\s+(?:-\S+\s+)*")  # the statement after it counts


def _modules(root: Path) -> dict[str, Path]:
    """Each module of helpers/ by its dotted name -> its file."""
    found = {}
    for path in sorted((root / "helpers").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith("_")
    }


def _reexports(tree: ast.Module, module: str, modules: dict[str, Path]) -> dict[str, tuple]:
    """Names a module imports from another helpers module at top level: name -> (module, name)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("helpers"):
            for alias in node.names:
                if f"{node.module}.{alias.name}" not in modules:
                    found[alias.asname or alias.name] = (node.module, alias.name)
    return found


class _Index:
    """What the helpers define, so a dotted name in a lesson resolves to its definition."""

    def __init__(self, root: Path):
        self.modules = _modules(root)
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in self.modules.items()}
        self.defined = {m: set(_definitions(t)) for m, t in self.trees.items()}
        self.reexported = {m: _reexports(t, m, self.modules) for m, t in self.trees.items()}

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        if name in self.defined.get(module, ()):
            return module, name
        if depth < 3 and name in self.reexported.get(module, {}):
            return self.resolve(*self.reexported[module][name], depth + 1)
        return None


def _python(cell_source: str) -> ast.Module | None:
    lines = [TIMED.sub("", line) for line in cell_source.splitlines()]
    text = "\n".join("" if NOT_PYTHON.match(line) else line for line in lines)
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _used_in(cells: list[str], index: _Index) -> set[tuple[str, str]]:
    """(module, name) of every helpers definition that these code cells name."""
    bound: dict[str, str] = {}  # local name -> helpers module it stands for
    found = set()

    def note(module: str, name: str) -> None:
        if (hit := index.resolve(module, name)) is not None:
            found.add(hit)

    for text in cells:
        tree = _python(text)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "helpers":
                        if alias.asname:
                            bound[alias.asname] = alias.name
                        else:
                            bound["helpers"] = "helpers"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in index.modules:
                        bound[alias.asname or alias.name] = full
                    else:
                        note(node.module, alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (parts := _dotted(node)):
                module = bound.get(parts[0])
                for part in parts[1:]:
                    if module is None:
                        break
                    if f"{module}.{part}" in index.modules:
                        module = f"{module}.{part}"
                        continue
                    note(module, part)
                    break
    return found


def uses(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(module, name) -> the numbers of the lessons whose code cells name it, sorted."""
    index = _Index(root)
    lessons = defaultdict(set)
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = [source(c) for c in read(path)["cells"] if c["cell_type"] == "code"]
        for hit in _used_in(cells, index):
            lessons[hit].add(path.name[:2])
    return {hit: sorted(numbers) for hit, numbers in lessons.items()}


def docstring_lines(numbers: list[str]) -> str:
    """The generated line for these lessons ("" for none)."""
    if not numbers:
        return ""
    return f"Taught in notebook{'s' if len(numbers) > 1 else ''} {', '.join(numbers)}."


def _rewrite(lines: list[str], node: ast.AST, line: str) -> list[str] | None:
    """The docstring of ``node`` (lines of its file) with only ``line`` as its provenance."""
    body = node.body[0] if node.body else None
    if not (
        isinstance(body, ast.Expr)
        and isinstance(body.value, ast.Constant)
        and isinstance(body.value.value, str)
    ):
        return None
    first, last = body.lineno - 1, body.end_lineno - 1
    opening = lines[first]
    quote = opening.lstrip()[:3]
    if quote not in ('"""', "'''"):
        return None
    indent = opening[: len(opening) - len(opening.lstrip())]
    doc = [text for text in lines[first : last + 1] if not LINE.match(text)]
    # The closing quotes on a line of their own; then no blank line left before them.
    if doc[-1].strip() == quote:
        doc[-1] = indent + quote
    else:
        doc = [*doc[:-1], doc[-1].rstrip()[: -len(quote)], indent + quote]
    while len(doc) > 2 and not doc[-2].strip():
        del doc[-2]
    if line:
        if len(doc) == 2:  # a one-line summary: a blank line after it (PEP 257)
            doc.insert(1, "")
        doc.insert(len(doc) - 1, indent + line)
    elif len(doc) == 2:
        doc = [doc[0] + quote]
    return doc


def sync_file(path: Path, module: str, found: dict, root: Path = ROOT) -> str:
    """The text of ``path`` with every public definition's provenance line regenerated."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    tree = ast.parse(text)
    nodes = sorted(_definitions(tree).values(), key=lambda n: n.lineno, reverse=True)
    for node in nodes:  # bottom up: line numbers above stay valid
        body = node.body[0]
        doc = _rewrite(lines, node, docstring_lines(found.get((module, node.name), [])))
        if doc is not None:
            lines[body.lineno - 1 : body.end_lineno] = doc
    return "\n".join(lines)


def stale_lines(root: Path = ROOT) -> dict[str, str]:
    """{file (relative): its text with the provenance lines regenerated} for each stale file."""
    found = uses(root)
    stale = {}
    for module, path in _modules(root).items():
        before = path.read_text(encoding="utf-8")
        after = sync_file(path, module, found, root)
        if after != before:
            stale[str(path.relative_to(root))] = after
    return stale


def hand_written(root: Path = ROOT) -> list[str]:
    """Docstrings that state "taught in notebook NN" other than in the generated line."""
    found = []
    for path in _modules(root).values():
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HAND.search(text) and not LINE.match(text):
                found.append(
                    f"{path.relative_to(root)}:{number}: a hand-written 'taught in notebook NN' "
                    "(make sync writes that line from the lessons; say it in other words)"
                )
    return found
