"""The marked parts of ``train_tpu.py``, and the lesson cells that show them.

The script marks each part with a line ``# ---- part: NAME ----`` before it and
``# ---- end of part ----`` after it. ``make sync`` writes the source of each code cell tagged
``script-part:NAME`` from that part, and ``make lint`` fails on a cell naming no part, and on a part
no lesson shows, but those in :data:`NOT_YET_SHOWN` (a note names them; the list only shrinks).
"""

from __future__ import annotations

import re

from notebook_files import ROOT, settings

SCRIPT = ROOT / settings()["script"]  # pyproject.toml's [tool.tpu-field-guide] script
START = re.compile(r"^# ---- part: ([a-z0-9_-]+) ----$")
END = "# ---- end of part ----"
TAG = "script-part:"
NOT_YET_SHOWN: tuple[str, ...] = ()


def parts(text: str | None = None) -> dict[str, str]:
    """``{name: code}`` of the script's parts, in the script's order."""
    if text is None and not SCRIPT.exists():
        raise SystemExit(
            f"No reference script at {SCRIPT.relative_to(ROOT)}: set [tool.tpu-field-guide] "
            "script in pyproject.toml to where it is."
        )
    text = SCRIPT.read_text(encoding="utf-8") if text is None else text
    found: dict[str, str] = {}
    name, lines = None, []
    for number, line in enumerate(text.splitlines(), 1):
        start = START.match(line)
        if start and name is None:
            name, lines = start.group(1), []
            if name in found:
                raise ValueError(f"train_tpu.py, line {number}: part {name!r} is marked twice")
        elif line == END and name is not None:
            found[name] = "\n".join(lines).strip("\n")
            name = None
        elif start or line == END:
            raise ValueError(f"train_tpu.py, line {number}: {line!r} does not close or open a part")
        elif name is not None:
            lines.append(line)
    if name is not None:
        raise ValueError(f"train_tpu.py: part {name!r} has no {END!r}")
    return found


def cell_source(name: str, code: str) -> str:
    return f'# From train_tpu.py, part "{name}" (make sync writes this cell).\n{code}'


def tagged(cell: dict) -> str | None:
    """The part a code cell shows, from its ``script-part:NAME`` tag, or None."""
    if cell.get("cell_type") != "code":
        return None
    names = [t[len(TAG) :] for t in cell.get("metadata", {}).get("tags", []) if t.startswith(TAG)]
    return names[0] if names else None


def sync_cells(notebook: dict, known: dict[str, str]) -> None:
    """Write each tagged cell's source from ``known`` (cells naming no known part stay)."""
    for cell in notebook["cells"]:
        part = tagged(cell)
        if part in known:
            cell["source"] = cell_source(part, known[part]).splitlines(keepends=True)


def unknown_tags(notebook: dict, name: str, known: dict[str, str]) -> list[str]:
    """Cells tagged with a part the script does not have."""
    return [
        f"{name}, cell {i}: tagged {TAG}{part}, but train_tpu.py has no such part "
        f"(its parts: {', '.join(known)})"
        for i, cell in enumerate(notebook["cells"])
        if (part := tagged(cell)) is not None and part not in known
    ]


def shown(notebooks: list[dict]) -> set[str]:
    return {part for nb in notebooks for c in nb["cells"] if (part := tagged(c))}


def coverage(
    known: dict[str, str], shown_parts: set[str], pending=NOT_YET_SHOWN
) -> tuple[list[str], list[str]]:
    """(errors, warnings) about parts that no lesson shows."""
    missing = [p for p in known if p not in shown_parts]
    checks = [
        ([p for p in missing if p not in pending], "train_tpu.py parts shown in no lesson: {}"),
        (
            [p for p in pending if p in shown_parts],
            "a lesson shows {}: remove it from NOT_YET_SHOWN in tools/script_parts.py",
        ),
        (
            [p for p in pending if p not in known],
            "NOT_YET_SHOWN names parts train_tpu.py lacks: {}",
        ),
    ]
    waiting = [p for p in missing if p in pending]
    warning = (
        "train_tpu.py parts not shown in a lesson yet (tools/script_parts.py NOT_YET_SHOWN): {}"
    )
    errors = [message.format(", ".join(parts)) for parts, message in checks if parts]
    return errors, [warning.format(", ".join(waiting))] if waiting else []
