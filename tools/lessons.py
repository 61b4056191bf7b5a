"""Lessons known by their names: the manifest's order numbers them, and every reference follows.

A lesson is one ``[notebooks.NAME]`` entry of notebooks/manifest.toml (``tpu_readiness_check``).
Its place among the entries gives its number (the first is 00), and so its file,
``notebooks/NN_NAME.ipynb``. A text refers to a lesson in a form that bears its name:

- in Markdown (notebooks, ``.md`` pages, the manifest's texts), a link to its file, whose text
  may say its number: ``[notebook NN](NN_NAME.ipynb)``, ``[NN · Title](../notebooks/NN_NAME.ipynb)``;
- anywhere else (docstrings, comments, code), its file name or stem: ``notebook NN_NAME``,
  ``notebooks/NN_NAME.ipynb``.

``make sync`` (:func:`renames`, :func:`renumbered`) renames a lesson's file when its place
changed, with ``git mv``, and rewrites the number of every reference from the name beside it, so
inserting, removing or reordering a lesson is one edit of the manifest (and the new notebook;
CONTRIBUTING.md, "Lessons by name"). A bare "notebook NN" bears no name, so nothing could follow
it: ``make lint`` (tools/check_references.py) refuses it, and ``--convert`` writes every bare
mention in the form above, from the current numbering::

    python tools/lessons.py --convert   # bare mentions -> references by name (idempotent)
    python tools/lessons.py             # the lessons, in order

Hardware records and recorded test data keep the names they were made with (:data:`NOT_REWRITTEN`).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from notebook_files import NOTEBOOKS, ROOT, dumps, source, tomllib

__all__ = [
    "apply_renames",
    "as_links",
    "bare_mentions",
    "convert",
    "lesson_name",
    "names",
    "numbering",
    "references_in",
    "rekeyed_manifest",
    "renames",
    "renumbered",
    "texts",
]

MANIFEST = NOTEBOOKS / "manifest.toml"
NUMBERED = re.compile(r"^(\d\d)_(.+)$")
# Files that record what was, under the names of then, or another project's text.
NOT_REWRITTEN = ("tests/data/", "hardware/records/")
READ_AS_TEXT = {".md", ".py", ".ipynb", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".css"}
# "notebook NN", "Lessons NN to MM", "notebooks NN, MM and KK" with numbers: they bear no name.
MENTION = re.compile(
    r"\b((?:notebook|lesson)s?)(\s+)(\d\d\b(?:(?:\s*(?:,|and|or|to|-|–)\s*)\d\d\b)*)",
    re.IGNORECASE,
)
NUMBER = re.compile(r"\b\d\d\b")
# tools/provenance.py writes and checks this line from the lessons' code cells.
GENERATED = re.compile(r"Taught in notebooks? \d\d(?:, \d\d)*\.")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)


def lesson_name(path: str | Path) -> str:
    """A lesson's name from its file or stem: ``10_tpu_readiness_check.ipynb`` -> its name."""
    stem = Path(path).stem
    match = NUMBERED.match(stem)
    return match[2] if match else stem


def names(path: Path = MANIFEST) -> list[str]:
    """The lessons' names in the manifest's order, which numbers them."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        found = list(tomllib.load(f).get("notebooks", {}))
    numbered = [name for name in found if NUMBERED.match(name)]
    if numbered:
        raise SystemExit(
            f"notebooks/manifest.toml: [notebooks.{numbered[0]}]: an entry is keyed by the "
            f"lesson's name alone ([notebooks.{lesson_name(numbered[0])}]); its place numbers it. "
            "python tools/lessons.py --convert rekeys the manifest"
        )
    return found


def numbering(path: Path = MANIFEST) -> dict[str, str]:
    """Each lesson's number (two digits) by its name."""
    return {name: f"{i:02d}" for i, name in enumerate(names(path))}


def renames(root: Path = ROOT, numbers: dict[str, str] | None = None) -> list[tuple[Path, Path]]:
    """(file, the file it must become) for each lesson whose number or file name is not its own:
    a lesson that moved in the manifest, or a new ``NAME.ipynb`` or ``NN_NAME.ipynb``."""
    numbers = numbering(root / "notebooks" / "manifest.toml") if numbers is None else numbers
    found = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        name = lesson_name(path)
        if name in numbers and path.name != (wanted := f"{numbers[name]}_{name}.ipynb"):
            found.append((path, path.with_name(wanted)))
    return found


def apply_renames(moves: list[tuple[Path, Path]], root: Path = ROOT) -> None:
    """Rename the files: ``git mv`` for a tracked file (history follows it), else a rename."""
    for old, new in moves:
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", str(old)], cwd=root, capture_output=True
        )
        if new.exists():
            raise SystemExit(f"{old.name} should become {new.name}, which exists already")
        if tracked.returncode == 0:
            subprocess.run(["git", "mv", str(old), str(new)], cwd=root, check=True)
        else:
            os.replace(old, new)


def texts(root: Path = ROOT, skip: tuple[str, ...] = NOT_REWRITTEN) -> dict[str, str]:
    """Every tracked text file people read (that may refer to a lesson), by its path (relative to
    ``root``), but those under the folders ``skip``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = {}
    for name in listed:
        path = root / name
        wanted = path.suffix in READ_AS_TEXT or path.name in ("Makefile", "run", "postBuild")
        if wanted and not name.startswith(skip) and path.is_file():
            found[name] = path.read_text(encoding="utf-8", errors="replace")
    return found


def _stem_pattern(numbers: dict[str, str]) -> re.Pattern:
    alternatives = "|".join(sorted(map(re.escape, numbers), key=len, reverse=True)) or "(?!)"
    return re.compile(rf"\b(\d\d)_({alternatives})\b")


def _link_pattern(numbers: dict[str, str]) -> re.Pattern:
    """A Markdown link to a lesson's file: its text, then the number and name of its target."""
    alternatives = "|".join(sorted(map(re.escape, numbers), key=len, reverse=True)) or "(?!)"
    return re.compile(rf"\[([^\]]*)\]\(([^)\s]*?)\b(\d\d)_({alternatives})\.ipynb")


def _renumber_text(text: str, numbers: dict[str, str]) -> str:
    def link(match: re.Match) -> str:
        label, target, old, name = match.groups()
        label = re.sub(rf"\b{old}\b", numbers[name], label)
        return f"[{label}]({target}{numbers[name]}_{name}.ipynb"

    text = _link_pattern(numbers).sub(link, text)
    return _stem_pattern(numbers).sub(lambda m: f"{numbers[m[2]]}_{m[2]}", text)


def as_links(text: str, prefix: str, numbers: dict[str, str]) -> str:
    """Plain text's references by name (``notebook NN_name``) as Markdown links to the files, for
    a docstring shown in Markdown (README.md's module map): ``notebook [NN](prefixNN_name.ipynb)``."""
    stems = re.compile(rf"(?<![\w/\[]){_stem_pattern(numbers).pattern}(?![\w.])")
    return stems.sub(lambda m: f"[{m[1]}]({prefix}{m[1]}_{m[2]}.ipynb)", text)


def _map_notebook(text: str, change) -> str:
    """A notebook's text with ``change(cell_source, cell_type)`` applied to every cell."""
    notebook = json.loads(text)
    changed = False
    for cell in notebook.get("cells", []):
        before = source(cell)
        after = change(before, cell["cell_type"])
        if after != before:
            cell["source"], changed = after.splitlines(keepends=True), True
    return dumps(notebook) if changed else text


def renumbered(files: dict[str, str], numbers: dict[str, str]) -> dict[str, str]:
    """{file: its new text} for the files whose references to lessons bear an old number."""
    found = {}
    for file, text in files.items():
        if file.endswith(".ipynb"):
            after = _map_notebook(text, lambda cell, _kind: _renumber_text(cell, numbers))
        else:
            after = _renumber_text(text, numbers)
        if after != text:
            found[file] = after
    return found


# --- bare mentions: found (make lint) and converted (--convert) -----------------------------------


def _hidden(text: str, markdown: bool, numbers: dict[str, str]) -> str:
    """``text`` with what is not a bare mention blanked out (same length, so offsets hold):
    links to lessons, provenance lines, and in Markdown code spans and blocks."""

    def blank(match: re.Match) -> str:
        return re.sub(r"\S", " ", match[0])

    text = GENERATED.sub(blank, _link_pattern(numbers).sub(blank, text))
    if markdown:
        text = CODE_SPAN.sub(blank, FENCE.sub(blank, text))
    return text


def references_in(text: str, markdown: bool, numbers: dict[str, str]) -> list[re.Match]:
    """The bare mentions of lessons by number in ``text``."""
    return list(MENTION.finditer(_hidden(text, markdown, numbers)))


def _is_markdown(file: str, kind: str = "") -> bool:
    return file.endswith((".md", "manifest.toml")) or kind == "markdown"


def bare_mentions(files: dict[str, str], numbers: dict[str, str]) -> list[str]:
    """``file: the bare mention`` for every mention of existing lessons by number alone (one of
    a missing lesson is tools/check_references.py's)."""
    found, existing = [], set(numbers.values())
    for file, text in sorted(files.items()):
        if file.endswith(".ipynb"):
            cells = json.loads(text).get("cells", [])
            parts = [(source(c), _is_markdown(file, c["cell_type"])) for c in cells]
        else:
            parts = [(text, _is_markdown(file))]
        for part, markdown in parts:
            found += [
                f"{file}: {m[0]!r}"
                for m in references_in(part, markdown, numbers)
                if set(NUMBER.findall(m[3])) <= existing
            ]
    return found


def _link_prefix(file: str) -> str:
    """The path from ``file``'s folder to the lessons, for a Markdown link written there. The
    notebooks, the manifest's texts (written into them) and the book's pages (the book puts the
    lessons beside them) link to the file name alone."""
    folder = Path(file).parent
    if file.endswith("manifest.toml") or folder.parts[:1] in (("notebooks",), ("book",)):
        return ""
    return os.path.relpath("notebooks", folder).replace(os.sep, "/") + "/"


def _convert_text(text: str, markdown: bool, prefix: str, numbers: dict[str, str]) -> str:
    by_number = {number: name for name, number in numbers.items()}
    pieces, last = [], 0
    for match in references_in(text, markdown, numbers):
        word, space, listed = match.group(1, 2, 3)
        if any(n not in by_number for n in NUMBER.findall(listed)):
            continue  # a lesson that does not exist: lint names it

        def named(number: re.Match) -> str:
            stem = f"{number[0]}_{by_number[number[0]]}"
            return f"[{number[0]}]({prefix}{stem}.ipynb)" if markdown else stem

        if markdown and len(NUMBER.findall(listed)) == 1:  # one number: link the words too
            stem = f"{listed}_{by_number[listed]}"
            new = f"[{word}{space}{listed}]({prefix}{stem}.ipynb)"
        else:
            new = word + space + NUMBER.sub(named, listed)
        pieces += [text[last : match.start()], new]
        last = match.end()
    return "".join(pieces) + text[last:]


PRAGMA = re.compile(
    r"#\s*(noqa(?::\s*[A-Z]+\d+(?:,\s*[A-Z]+\d+)*)?|fmt:\s*\w+|type:\s*\S+)?\s*(.*)$"
)
LINE_LENGTH = 100  # ruff's (pyproject.toml): past it, ruff format splits a statement
# What ruff format leaves as it is: a plain import, a statement already split after its bracket.
UNSPLITTABLE = re.compile(r"^\s*(?:import [\w.]+(?: as \w+)?\s*|.*[(\[{]\s*|\s*)$")


def _comment_above(code: str, numbers: dict[str, str]) -> str:
    """Python ``code`` with each trailing comment that names a lesson and makes its line too long
    moved onto its own line above, where ruff format would split the statement instead."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code
    lines, named = code.split("\n"), _stem_pattern(numbers)
    for token in reversed([t for t in tokens if t.type == tokenize.COMMENT]):
        (row, col), line = token.start, lines[token.start[0] - 1]
        splittable = not UNSPLITTABLE.match(line[:col])
        if splittable and len(line) > LINE_LENGTH and named.search(token.string):
            indent = line[: len(line) - len(line.lstrip())]
            # A pragma (noqa, fmt:, type:) stays on its line; only the words after it move up.
            pragma, words = PRAGMA.match(token.string).groups()
            kept = line[:col].rstrip() + (f"  # {pragma.rstrip()}" if pragma else "")
            lines[row - 1 : row] = [f"{indent}# {words.strip()}", kept]
    moved = "\n".join(lines)
    return moved if _parses(moved) or not _parses(code) else code  # e.g. after a backslash


def _parses(code: str) -> bool:
    """Whether ``code`` is Python, IPython's magics and shell escapes aside."""
    try:
        ast.parse(re.sub(r"(?m)^(\s*)[%!].*$", r"\1pass", code))
    except SyntaxError:
        return False
    return True


def convert(files: dict[str, str], numbers: dict[str, str]) -> dict[str, str]:
    """{file: its new text} with every bare mention of an existing lesson written by name; in
    Python, a comment made too long by it moves above its statement."""

    def converted(text: str, file: str, kind: str = "") -> str:
        after = _convert_text(text, _is_markdown(file, kind), _link_prefix(file), numbers)
        python = kind == "code" or (not kind and file.endswith(".py"))
        return _comment_above(after, numbers) if python and after != text else after

    found = {}
    for file, text in files.items():
        if file.endswith(".ipynb"):
            after = _map_notebook(text, lambda cell, kind, f=file: converted(cell, f, kind))
        else:
            after = converted(text, file)
        if after != text:
            found[file] = after
    return found


MANIFEST_TABLE = re.compile(r"^\[notebooks\.(\w+?)(\.\w+)?\]", re.MULTILINE)


def rekeyed_manifest(text: str) -> str:
    """The manifest with entries keyed ``[notebooks.NN_name]`` keyed by name, in NN's order
    (how the manifest was written before its order numbered the lessons)."""
    head, *blocks = re.split(r"(?m)^(?=\[notebooks\.)", text)
    stems = [MANIFEST_TABLE.match(block)[1] for block in blocks]
    if not any(NUMBERED.match(stem) for stem in stems):
        return text
    ordered = sorted(range(len(blocks)), key=lambda i: (stems[i], i))
    body = "".join(
        MANIFEST_TABLE.sub(lambda m: f"[notebooks.{lesson_name(m[1])}{m[2] or ''}]", blocks[i])
        .rstrip("\n")
        .join(("", "\n\n"))
        for i in ordered
    )
    return head + body.rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--convert"]:
        text = MANIFEST.read_text(encoding="utf-8")
        if (rekeyed := rekeyed_manifest(text)) != text:
            MANIFEST.write_text(rekeyed, encoding="utf-8")
            print("converted: notebooks/manifest.toml (entries keyed by name, in order)")
    numbers = numbering()
    if argv == ["--convert"]:
        changed = convert(texts(), numbers)
        for file, text in sorted(changed.items()):
            (ROOT / file).write_text(text, encoding="utf-8")
            print(f"converted: {file}")
        print(f"{len(changed)} file(s) converted" if changed else "no bare mention left")
        return 0
    if argv:
        raise SystemExit("usage: python tools/lessons.py [--convert]")
    for name, number in numbers.items():
        print(f"{number}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
