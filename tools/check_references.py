"""References that stay true: every path, helpers name, relative link and lesson named exists.

    python tools/check_references.py     # part of make lint

In what people read (Markdown, notebook cells, the Python files, the Makefile, CI's scripts and
workflows) it checks that
- repository paths (``helpers/strategy.py``, ``tools/book/``) exist in the working tree;
- modules and names of ``helpers`` and ``tpucheck`` (``helpers.loops.compare_runs``) exist, read
  with ``ast``, so nothing is imported;
- relative links in Markdown (``[text](target)``, ``[label]: target``, ``src``/``href``) lead to a
  file, and to one of its headings when they name a ``#section`` (a book page may also link to a
  lesson: the book puts the lessons beside its pages);
- references to lessons bear the name of a lesson that exists (``tools/lessons.py``); a mention by
  number alone fails, as nothing could renumber it.
Paths under ``build/`` and paths with placeholders (``NN_name``, ``X.Y``, ``*``, ``{...}``) are not
checked.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import lessons
from notebook_files import ROOT, notebook_paths

TOP = r"(?:helpers|tpucheck|tools|tests|notebooks|book|binder|hardware|\.ci|\.github)"
PATH = re.compile(
    rf"(?<![\w./-])(?:{TOP}/[\w./-]*[\w/]|requirements[\w-]*\.txt|(?:README|CONTRIBUTING)\.md)"
)
# The packages whose modules and names are checked where text mentions them.
MODULE = re.compile(r"(?<![\w./])(helpers|tpucheck)((?:\.\w+)+)")
PLACEHOLDER = re.compile(r"NN|X\.Y|\*|\{|<|\bname\b|_xx|\.\.\.")
NOT_READ = ("tests/data/",)  # recorded copies of other projects' files
# A path shortly after another project's "owner/repo" is that project's file, not ours.
OTHER_PROJECT = re.compile(
    r"\b(?:keras-team|tensorflow|googlecolab|Kaggle|google|jax-ml|pytorch)/[\w.-]+"
)


def texts() -> dict[str, str]:
    """Every tracked text file people read, by its path."""
    return lessons.texts(ROOT, NOT_READ)


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


def _module_problem(top: str, dotted: str) -> str | None:
    """Why ``<top>.<dotted>`` names nothing, or None when it does."""
    here = ROOT / top
    for i, part in enumerate(parts := dotted.split(".")):
        if (here / part).is_dir():
            here = here / part
        elif (module := here / f"{part}.py").is_file():
            name = parts[i + 1] if i + 1 < len(parts) else None
            if name and name not in _defined(module) and not name[0].isupper():
                return f"{top}.{dotted}: {module.relative_to(ROOT)} defines no {name}"
            return None
        elif (here / "__init__.py").is_file() and part in _defined(here / "__init__.py"):
            return None
        else:
            return f"{top}.{'.'.join(parts[: i + 1])} does not exist"
    return None


# Markdown links: inline ``[text](target "title")``, reference definitions, and HTML attributes.
LINK = re.compile(
    r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)"
    r"|^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)"
    r"|\b(?:href|src)=\"([^\"]+)\"",
    re.MULTILINE,
)
EXTERNAL = re.compile(r"^(?:[a-zA-Z][\w+.-]*:|//)")  # https:, mailto:, data:, //host
FENCE, CODE_SPAN = lessons.FENCE, lessons.CODE_SPAN
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
BARE_FIX = (
    "; refer to it by name (a link to its file in Markdown, its NN_name stem elsewhere): "
    "python tools/lessons.py --convert"
)
# "notebook NN_name": a lesson's stem after the word, whose name must be a lesson's.
LESSON_STEM = re.compile(r"\b(?:notebook|lesson)s?\s+\d\d_(\w+)", re.IGNORECASE)


def markdown_of(name: str, text: str) -> str | None:
    """The Markdown a reader sees in a file (a notebook's Markdown cells), or None."""
    if name.endswith(".md"):
        return text
    if name.endswith(".ipynb"):
        try:
            cells = json.loads(text).get("cells", [])
        except json.JSONDecodeError:
            return None
        sources = ("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "markdown")
        return "\n\n".join(sources)
    return None


def slug(heading: str) -> str:
    """The anchor GitHub, JupyterLab's Markdown and MyST give a heading, for the usual headings."""
    text = re.sub(r"<[^>]+>|`", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(path: Path) -> set[str] | None:
    """The section anchors of a Markdown file or notebook, or None for other files."""
    markdown = markdown_of(path.name, path.read_text(encoding="utf-8", errors="replace"))
    if markdown is None:
        return None
    return {slug(m[1]) for m in HEADING.finditer(FENCE.sub("", markdown))}


def broken_links(name: str, markdown: str, root: Path = ROOT) -> list[str]:
    """The relative links of one file's Markdown that lead nowhere, as ``target: why``."""
    folder = (root / name).parent
    # The book puts the lessons beside its pages (tools/book/build.py).
    bases = [folder, root / "notebooks"] if name.startswith("book/") else [folder]
    found = []
    for match in LINK.finditer(CODE_SPAN.sub("", FENCE.sub("", markdown))):
        target = next(g for g in match.groups() if g)
        if EXTERNAL.match(target) or PLACEHOLDER.search(target) or target.startswith("/"):
            continue
        path, _, anchor = target.partition("#")
        path = path.split("?")[0]
        if not path:
            continue  # a section of the same file: the book's build checks its own anchors
        where = next((b / path for b in bases if (b / path).exists()), None)
        if where is None:
            found.append(f"{target}: no such file")
        elif anchor and where.is_file() and (anchors := _anchors(where)) is not None:
            if anchor.lower() not in anchors:
                found.append(f"{target}: {path} has no section #{anchor}")
    return found


def misnamed_lessons(text: str, markdown: str | None, numbers: dict[str, str]) -> list[str]:
    """The references by name in ``text`` that name no lesson, and the links of its ``markdown``
    whose text says another number than their target has (``[notebook NN](MM_name.ipynb)``)."""
    found = [f"notebook {m[0].split()[-1]} names no lesson" for m in LESSON_STEM.finditer(text)
             if m[1] not in numbers]  # fmt: skip
    for match in lessons.LESSON_LINK.finditer(markdown or ""):
        label, number = match[1], match[2]
        if any(n != number for n in re.findall(r"\b\d\d\b", label)):
            found.append(f"the link [{label}] to lesson {number}_{match[3]} says another number")
    return found


def stale_references(files: dict[str, str]) -> list[str]:
    """``file: what it names that does not exist``, for every stale reference in ``files``."""
    found, numbers = [], lessons.numbering()
    existing = {path.name[:2] for path in notebook_paths()}
    for name, text in files.items():
        markdown = markdown_of(name, text)
        if markdown is not None:
            found += [f"{name}: the link {link}" for link in broken_links(name, markdown)]
        found += [
            f"{name}: notebook {n} does not exist"
            for mention in lessons.MENTION.finditer(text)
            for n in re.findall(r"\d\d", mention[3])
            if n not in existing
        ]
        found += [f"{name}: {problem}" for problem in misnamed_lessons(text, markdown, numbers)]
        for match in PATH.finditer(text):
            path = match.group(0).rstrip(".")
            if PLACEHOLDER.search(path) or (ROOT / path).exists():
                continue
            if OTHER_PROJECT.search(text[max(0, match.start() - 120) : match.start()]):
                continue
            found.append(f"{name}: {path} does not exist")
        for match in MODULE.finditer(text):
            dotted = match.group(2)[1:].rstrip(".")
            if dotted == "py" or dotted.startswith("__"):
                continue  # a file named helpers.py, or a module attribute such as __path__
            if problem := _module_problem(match.group(1), dotted):
                found.append(f"{name}: {problem}")
    found += [f"{mention}: a lesson named by its number alone{BARE_FIX}"
              for mention in lessons.bare_mentions(files, numbers)]  # fmt: skip
    return sorted(set(found))


def main() -> int:
    if stale := stale_references(texts()):
        print(*stale, sep="\n")
        print(f"{len(stale)} reference(s) to things that do not exist: correct or remove them.")
        return 1
    print("Every repository path, helpers name, relative link and lesson mentioned exists.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
