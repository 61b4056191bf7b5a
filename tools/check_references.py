"""References that stay true: every repository path and helpers module named in the text exists.

    python tools/check_references.py     # part of make lint

It reads what people read: Markdown pages, notebook cells, docstrings, comments and strings of the
Python files, the Makefile, CI scripts and workflows. In them it finds
- repository paths (``helpers/strategy.py``, ``tools/book/``, ``requirements-colab.txt``), which
  must exist in the working tree; and
- helper modules and names (``helpers.data.make_dataset``, ``helpers.connect``), whose module
  must exist and whose name, when one follows, must be defined there (read with ``ast``, so
  nothing is imported).
Paths under ``build/`` and other outputs of a run, and paths with placeholders (``NN_name``,
``X.Y``, ``*``, ``{...}``) are not checked. Statements of what a test does are generated from the
test instead (``tools/book/pages.py``), so they cannot go stale.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["main", "stale_references", "texts"]

TOP = r"(?:helpers|tools|tests|notebooks|book|binder|hardware|\.ci|\.github)"
PATH = re.compile(
    rf"(?<![\w./-])(?:{TOP}/[\w./-]*[\w/]|requirements[\w-]*\.txt|(?:README|CONTRIBUTING)\.md)"
)
MODULE = re.compile(r"(?<![\w./])helpers((?:\.\w+)+)")
PLACEHOLDER = re.compile(r"NN|X\.Y|\*|\{|<|\bname\b|_xx|\.\.\.")
READ_AS_TEXT = {".md", ".py", ".ipynb", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".css"}
NOT_READ = ("tests/data/",)  # recorded copies of other projects' files
# A path shortly after another project's "owner/repo" is that project's file, not ours.
OTHER_PROJECT = re.compile(
    r"\b(?:keras-team|tensorflow|googlecolab|Kaggle|google|jax-ml|pytorch)/[\w.-]+"
)


def texts() -> dict[str, str]:
    """Every tracked text file people read, by its path."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = {}
    for name in listed:
        path = ROOT / name
        wanted = path.suffix in READ_AS_TEXT or path.name in ("Makefile", "run", "postBuild")
        if wanted and not name.startswith(NOT_READ) and path.is_file():
            found[name] = path.read_text(encoding="utf-8", errors="replace")
    return found


def _defined(module: Path) -> set[str]:
    """Top-level names a module defines or imports (its public surface and re-exports)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_problem(dotted: str) -> str | None:
    """Why ``helpers.<dotted>`` names nothing, or None when it does."""
    here = ROOT / "helpers"
    for i, part in enumerate(parts := dotted.split(".")):
        if (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            here = here / f"{part}.py"
            rest = parts[i + 1 :]
            break
        package = here / "__init__.py"
        if package.is_file() and part in _defined(package):
            return None
        return f"helpers.{'.'.join(parts[: i + 1])} does not exist"
    else:
        return None
    if rest and rest[0] not in _defined(here) and not rest[0][0].isupper():
        return f"helpers.{dotted}: {here.relative_to(ROOT)} defines no {rest[0]}"
    return None


def stale_references(files: dict[str, str]) -> list[str]:
    """``file: what it names that does not exist``, for every stale reference in ``files``."""
    found = []
    for name, text in sorted(files.items()):
        for match in PATH.finditer(text):
            path = match.group(0).rstrip(".")
            if PLACEHOLDER.search(path) or (ROOT / path).exists():
                continue
            if OTHER_PROJECT.search(text[max(0, match.start() - 120) : match.start()]):
                continue
            found.append(f"{name}: {path} does not exist")
        for match in MODULE.finditer(text):
            dotted = match.group(1)[1:].rstrip(".")
            if dotted == "py" or dotted.startswith("__"):
                continue  # a file named helpers.py, or a module attribute such as __path__
            if problem := _module_problem(dotted):
                found.append(f"{name}: {problem}")
    return sorted(set(found))


def main() -> int:
    stale = stale_references(texts())
    for line in stale:
        print(line)
    if stale:
        print(f"{len(stale)} reference(s) to things that do not exist: correct or remove them.")
        return 1
    print("Every repository path and helpers name mentioned exists.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
