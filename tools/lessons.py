"""Lessons known by their names: the manifest's order numbers them, and every reference follows.

A lesson is one ``[notebooks.NAME]`` entry of notebooks/manifest.toml; its place numbers it (the
first is 00) and so names its file, ``notebooks/NN_NAME.ipynb``. A reference bears the name: in
Markdown a link to the file (``[notebook NN](NN_NAME.ipynb)``), elsewhere the file name or stem
(``notebook NN_NAME``). ``make sync`` renames the files (``git mv``) and renumbers every reference
when the order changes, and follows a name changed in an entry (:func:`renamed`): CONTRIBUTING.md,
"Lessons by name". A bare "notebook NN" could follow nothing, so ``make lint`` refuses it::

    python tools/lessons.py --convert   # bare mentions -> references by name (idempotent)
    python tools/lessons.py             # the lessons, in order
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from notebook_files import MANIFEST, ROOT, dumps, source, toml

NUMBERED = re.compile(r"^(\d\d)_(.+)$")
# Files that record what was, under the names of then, or another project's text.
NOT_REWRITTEN = ("tests/data/", "hardware/records/")
READ_AS_TEXT = {".md", ".py", ".ipynb", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".css"}
# "notebook NN", "Lessons NN to MM", "notebooks NN, MM and KK": numbers that bear no name.
MENTION = re.compile(
    r"\b((?:notebook|lesson)s?)(\s+)(\d\d\b(?:(?:\s*(?:,|and|or|to|-|–)\s*)\d\d\b)*)",
    re.IGNORECASE,
)
NUMBER = re.compile(r"\b\d\d\b")
# A Markdown link to any lesson's file, its name current or not: never a bare mention.
LESSON_LINK = re.compile(r"\[([^\]]*)\]\([^)\s]*?\b(\d\d)_(\w+)\.ipynb")
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
    found = list(toml(path).get("notebooks", {}))
    numbered = [name for name in found if NUMBERED.match(name)]
    if numbered:
        raise SystemExit(
            f"notebooks/manifest.toml: [notebooks.{numbered[0]}]: an entry is keyed by the "
            f"lesson's name alone ([notebooks.{lesson_name(numbered[0])}]); its place numbers it"
        )
    return found


def numbering(path: Path = MANIFEST) -> dict[str, str]:
    """Each lesson's number (two digits) by its name."""
    return {name: f"{i:02d}" for i, name in enumerate(names(path))}


def renamed(root: Path = ROOT, numbers: dict[str, str] | None = None) -> dict[str, str]:
    """{old name: new name} of each lesson renamed in the manifest: a notebook ``NN_OLD.ipynb``
    that no entry names, where the entry numbered NN has no notebook."""
    numbers = numbering(root / "notebooks" / "manifest.toml") if numbers is None else numbers
    paths = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    present = {lesson_name(path) for path in paths}
    waiting = {number: name for name, number in numbers.items() if name not in present}
    return {
        lesson_name(path): waiting[path.name[:2]]
        for path in paths
        if lesson_name(path) not in numbers and path.name[:2] in waiting
    }


def renames(root: Path, numbers: dict[str, str], new_names: dict) -> list[tuple[Path, Path]]:
    """(file, the file it must become) for each lesson whose number or file name is not its own:
    a lesson that moved in the manifest or was renamed there (``new_names``, from
    :func:`renamed`), or a new ``NAME.ipynb`` or ``NN_NAME.ipynb``."""
    found = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        name = new_names.get(lesson_name(path), lesson_name(path))
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


def _names(numbers: dict[str, str]) -> str:
    """The lessons' names as a regular expression, the longest first (a name may start another)."""
    return "|".join(sorted(map(re.escape, numbers), key=len, reverse=True)) or "(?!)"


def _stem_pattern(numbers: dict[str, str]) -> re.Pattern:
    return re.compile(rf"\b(\d\d)_({_names(numbers)})\b")


def _renumber_text(text: str, numbers: dict[str, str]) -> str:
    def link(match: re.Match) -> str:  # a link to a lesson's file: its text's number follows too
        label, target, old, name = match.groups()
        label = re.sub(rf"\b{old}\b", numbers[name], label)
        return f"[{label}]({target}{numbers[name]}_{name}.ipynb"

    links = re.compile(rf"\[([^\]]*)\]\(([^)\s]*?)\b(\d\d)_({_names(numbers)})\.ipynb")
    text = links.sub(link, text)
    return _stem_pattern(numbers).sub(lambda m: f"{numbers[m[2]]}_{m[2]}", text)


def as_links(text: str, prefix: str, numbers: dict[str, str]) -> str:
    """Plain text's references by name as Markdown links to the files, for a docstring shown in
    Markdown (README.md's module map): ``notebook NN_name`` as ``notebook [NN](prefixNN_name.ipynb)``,
    ``notebooks/NN_name.ipynb`` as a link with those words. Code spans stay as they are. A
    reference it cannot link (``../notebooks/NN_name.ipynb``) is a SystemExit, never dropped."""
    # A sentence may end right after a name: a "." then is not a file's suffix.
    names = _names(numbers)
    reference = re.compile(rf"(?<![\w/\[])(notebooks/)?(\d\d)_({names})(\.ipynb)?(?!\w|\.\w)")

    def link(match: re.Match) -> str:
        words = match[0] if match[1] or match[4] else match[2]
        return f"[{words}]({prefix}{match[2]}_{match[3]}.ipynb)"

    pieces = re.split(r"(`[^`]*`)", text)  # the odd pieces are code spans
    linked = "".join(p if i % 2 else reference.sub(link, p) for i, p in enumerate(pieces))
    left = _stem_pattern(numbers).search(re.sub(r"\[[^\]]*\]\([^)]*\)|`[^`]*`", "", linked))
    if left:
        raise SystemExit(f"{text!r}: {left[0]} cannot be linked here; write notebook {left[0]}")
    return linked


def _rewrite(files: dict[str, str], change) -> dict[str, str]:
    """{file: its new text} for the files that ``change(text, file, kind)`` changes; a notebook
    cell by cell, ``kind`` being the cell's type."""
    found = {}
    for file, text in files.items():
        if not file.endswith(".ipynb"):
            after = change(text, file, "")
        else:
            notebook, changed = json.loads(text), False
            for cell in notebook.get("cells", []):
                before = source(cell)
                if (after := change(before, file, cell["cell_type"])) != before:
                    cell["source"], changed = after.splitlines(keepends=True), True
            after = dumps(notebook) if changed else text
        if after != text:
            found[file] = after
    return found


def renumbered(
    files: dict[str, str], numbers: dict[str, str], new_names: dict[str, str] | None = None
) -> dict[str, str]:
    """{file: its new text} for the files whose references to lessons bear an old number, or
    an old name (``new_names``: {old: new}, from :func:`renamed`)."""
    old = _stem_pattern(new_names or {})

    def change(text: str, _file: str, _kind: str) -> str:
        text = old.sub(lambda m: f"{m[1]}_{new_names[m[2]]}", text) if new_names else text
        return _renumber_text(text, numbers)

    return _rewrite(files, change)


# --- bare mentions: found (make lint) and converted (--convert) -----------------------------------


def references_in(text: str, markdown: bool) -> list[re.Match]:
    """The bare mentions of lessons by number in ``text``: not in links to lessons (a renamed
    lesson's old target is check_references' to report) nor in Markdown's code. What is not read
    is blanked out, so the offsets hold."""

    def blank(match: re.Match) -> str:
        return re.sub(r"\S", " ", match[0])

    text = LESSON_LINK.sub(blank, text)
    if markdown:
        text = CODE_SPAN.sub(blank, FENCE.sub(blank, text))
    return list(MENTION.finditer(text))


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
                for m in references_in(part, markdown)
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

    def link(number: str, words: str) -> str:
        return f"[{words}]({prefix}{number}_{by_number[number]}.ipynb)"

    for match in reversed(references_in(text, markdown)):  # from the end: the offsets hold
        word, space, listed = match.group(1, 2, 3)
        if any(n not in by_number for n in NUMBER.findall(listed)):
            continue  # a lesson that does not exist: lint names it
        if markdown and len(NUMBER.findall(listed)) == 1:  # one number: link the words too
            new = link(listed, f"{word}{space}{listed}")
        elif markdown:
            new = word + space + NUMBER.sub(lambda n: link(n[0], n[0]), listed)
        else:
            new = word + space + NUMBER.sub(lambda n: f"{n[0]}_{by_number[n[0]]}", listed)
        text = text[: match.start()] + new + text[match.end() :]
    return text


def convert(files: dict[str, str], numbers: dict[str, str]) -> dict[str, str]:
    """{file: its new text} with every bare mention of an existing lesson written by name."""

    def converted(text: str, file: str, kind: str) -> str:
        return _convert_text(text, _is_markdown(file, kind), _link_prefix(file), numbers)

    return _rewrite(files, converted)


def main(argv: list[str]) -> int:
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
