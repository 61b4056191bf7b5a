"""Hardware records: one JSON file per run on a TPU host, and what they verify.

Written by ``hardware.driver``, stored by ``python -m tools.hardware`` in ``hardware/records/``
(``local``: ``build/hardware/records/``, never committed). The rule behind every "verified on a
TPU" word of the README and the book:

- a record counts only if its devices are TPUs and its Python and TensorFlow are those of its
  platform's route today (``tpucheck.routes``);
- a full record that counts verifies its route when its self-test passed, and each lesson that
  passed in it; a quick record (``--quick``) that counts verifies its route the same way, and no
  lesson, not even the one it ran;
- a smoke record, or one from CPU devices (``local``, a dry run), verifies nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tpucheck import routes

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "hardware" / "records"
LOCAL_RECORDS = ROOT / "build" / "hardware" / "records"
SCHEMA = "tpu-field-guide/hardware-record"
VERSION = 1
NOT_YET = "not yet run on a TPU"
PLATFORM_LABELS = {"kaggle": "Kaggle", "colab": "Colab", "local": "this machine (dry run)"}
# Every field is required; MAYBE_TEXT's are None where the run could not tell.
TEXT = ("schema", "run_id", "platform", "mode", "created", "commit", "accelerator", "python")
MAYBE_TEXT = ("tensorflow", "tensorflow_distribution", "keras", "libtpu", "route")
FIELDS = {
    **dict.fromkeys(TEXT, str),
    **dict.fromkeys(MAYBE_TEXT, (str, type(None))),
    "version": int,
    "devices": list,
    "lessons": list,
    "selftest": (dict, type(None)),
    "wall_seconds": (int, float),
}
LESSON_FIELDS = ("notebook", "status", "seconds", "headline")
STEP_FIELDS = ("step", "status", "seconds", "detail")  # of the optional "steps"
MODES = ("full", "quick", "smoke")
DEVICE = re.compile(r"device:([A-Za-z_]+):\d+")


def problems(record: dict) -> list[str]:
    """What makes ``record`` unusable (an empty list: it is a valid record of this schema)."""
    found = []
    for name, kind in FIELDS.items():
        if name not in record:
            found.append(f"missing {name}")
        elif not isinstance(record[name], kind):
            found.append(f"{name} is {type(record[name]).__name__}")
    if record.get("schema") != SCHEMA or record.get("version") != VERSION:
        found.append(f"not a {SCHEMA} record of version {VERSION}")
    if not re.fullmatch(r"[0-9a-f]{40}", str(record.get("commit", ""))):
        found.append("commit is not a full 40-character hash")
    if record.get("mode") not in MODES:
        found.append(f"mode is not one of {', '.join(MODES)}")
    if not isinstance(record.get("steps", []), list):
        found.append("steps is not a list")
    for kind, names, rows in (
        ("lesson", LESSON_FIELDS, record.get("lessons")),
        ("step", STEP_FIELDS, record.get("steps")),
    ):
        for row in rows if isinstance(rows, list) else []:
            found += [f"{kind} row lacks {name}" for name in names if name not in row]
    return found


def device_kind(record: dict) -> str:
    """``"TPU"``, ``"CPU"`` or ``"GPU"``: the kind of all the run's devices; else ``"mixed"``."""
    kinds = {m.group(1).upper() for d in record["devices"] if (m := DEVICE.search(d))}
    return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "none"


def _on_todays_route(record: dict) -> bool:
    facts = routes.PLATFORMS.get(record["platform"])  # None for local
    if device_kind(record) != "TPU" or facts is None:
        return False
    try:
        route = routes.choose_route(record["platform"], facts.python)
    except routes.NoRoute:
        return False
    return (
        ".".join(record["python"].split(".")[:2]) == route.python
        and record["tensorflow_distribution"] == "tensorflow-tpu"
        and record["tensorflow"] == route.release.tensorflow
    )


def counts(record: dict) -> bool:
    """Whether ``record`` can verify lessons (a full run; see the module docstring)."""
    return record["mode"] == "full" and _on_todays_route(record)


def verifies_route(record: dict) -> bool:
    """Whether ``record`` verifies its platform's route: a full or quick run that counts, and
    whose self-test passed."""
    passed = bool((record["selftest"] or {}).get("passed"))
    return record["mode"] in ("full", "quick") and passed and _on_todays_route(record)


def failures(record: dict) -> list[str]:
    """What failed or did not run in ``record``: lessons, the self-test, steps (empty: none)."""
    failed = [row["notebook"] for row in record["lessons"] if row["status"] != "passed"]
    if not record["lessons"]:
        failed.append("the lessons (the runner wrote no summary)")
    if not (record["selftest"] or {}).get("passed"):
        failed.append("the self-test")
    return failed + [s["step"] for s in record.get("steps", []) if s["status"] == "failed"]


def _describe(record: dict) -> str:
    return (
        f"{PLATFORM_LABELS.get(record['platform'], record['platform'])}, "
        f"{record['created'][:10]}, commit {record['commit'][:7]}"
    )


def _newest_first(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["created"], reverse=True)


def verified_routes(records: list[dict]) -> dict[str, str]:
    """``{platform: "yes (Kaggle, 2026-11-25, commit abc1234)"}`` for each verified route."""
    oldest_first = sorted(records, key=lambda r: r["created"])  # so the newest one names it
    return {r["platform"]: f"yes ({_describe(r)})" for r in oldest_first if verifies_route(r)}


def lesson_status(notebook: str, records: list[dict]) -> str:
    """The "verified on a TPU" words for one lesson (``NN_name.ipynb``), for its book page."""
    for record in _newest_first(records):
        for row in record["lessons"] if counts(record) else []:
            if row["notebook"] == notebook and row["status"] == "passed":
                return f"verified on a TPU ({_describe(record)})"
    return NOT_YET


def read_json(path: Path) -> dict:
    """``path``'s JSON object; ``{}`` when it is missing, unreadable or not an object."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def load(*folders: Path) -> list[dict]:
    """Every record in ``folders`` (default: the committed ones), oldest first; a broken one
    stops with its name, never skipped quietly: records decide what the README and book say."""
    records = []
    for folder in folders or (RECORDS,):
        for path in sorted(Path(folder).glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            if found := problems(record):
                raise SystemExit(f"{path}: not a valid hardware record: {'; '.join(found)}")
            records.append(record)
    return sorted(records, key=lambda r: r["created"])


def store(record: dict, folder: Path) -> Path:
    """Write ``record`` into ``folder`` as ``<platform>-<date>-<commit>-<run>.json``."""
    name = (
        f"{record['platform']}-{record['created'][:10]}-{record['commit'][:7]}-"
        f"{record['run_id'][-6:]}.json"
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def _figures(record: dict) -> list[str]:
    """The self-test's figures in words: the recipes compared first, when the record has them."""
    figures = dict((record["selftest"] or {}).get("figures", {}))
    lines = []
    if (speedup := figures.pop("recipe_speedup", None)) is not None:
        rates = [figures.pop(f"{k}_examples_per_second", None) for k in ("collection", "classic")]
        of = f" ({rates[0]:,.0f} against {rates[1]:,.0f} examples/s)" if None not in rates else ""
        lines.append(
            f"The collection's recipe trained at {speedup:.2f}x the classic one{of}; the goal on "
            "a TPU is at least 2x."
        )
    if figures:
        shown = (f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())
        lines.append(f"Other self-test figures: {', '.join(shown)}.")
    return lines


def page(records: list[dict]) -> str:
    """The book's "Verified on hardware" page body: every record, newest first."""
    if not records:
        return (
            f"No record yet: every route and lesson is **{NOT_YET}**. A record is added by "
            "`make hardware PLATFORM=kaggle` (or `colab`); see CONTRIBUTING.md.\n"
        )
    lines = [
        "| date | platform | mode | devices | accelerator | Python | TensorFlow | libtpu | commit "
        "| lessons passed | self-test | verifies |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in _newest_first(records):
        kind = device_kind(r)
        passed = sum(row["status"] == "passed" for row in r["lessons"])
        selftest = r["selftest"] or {}
        verdict = "passed" if selftest.get("passed") else "failed" if selftest else "did not run"
        verifies = (
            "yes"
            if counts(r)
            else "the route only (a quick run)"
            if verifies_route(r)
            else "nothing: a dry run on CPUs"
            if kind == "CPU"
            else "no"
        )
        lines.append(
            f"| {r['created'][:10]} | {PLATFORM_LABELS.get(r['platform'], r['platform'])} "
            f"| {r['mode']} | {len(r['devices'])} {kind} | {r['accelerator']} | {r['python']} "
            f"| {r['tensorflow_distribution']} {r['tensorflow']} | {r['libtpu'] or 'none'} "
            f"| `{r['commit'][:7]}` | {passed} of {len(r['lessons'])} | {verdict} | {verifies} |"
        )
    for r in _newest_first(records):
        lines += ["", f"## {_describe(r)} ({r['mode']} mode, {device_kind(r)} devices)", ""]
        for line in _figures(r):
            lines += [line, ""]
        if r.get("steps"):
            lines += ["| step | status | seconds | what it showed |", "|---|---|---:|---|"]
            lines += [
                f"| {s['step']} | {s['status']} | {s['seconds']} | "
                f"{str(s['detail']).replace('|', '/')} |"
                for s in r["steps"]
            ]
            lines.append("")
        lines += ["| lesson | status | seconds | result |", "|---|---|---:|---|"]
        lines += [
            f"| {row['notebook'][:2]} | {row['status']} | {row['seconds']} | {row['headline']} |"
            for row in r["lessons"]
        ]
    return "\n".join(lines) + "\n"
