"""Hardware records: one JSON file per run of the lessons on a TPU host, and what they verify.

A record (schema :data:`SCHEMA`, version :data:`VERSION`) is written by ``hardware.driver`` at
the end of a run and stored by ``python -m tools.hardware`` under ``hardware/records/`` (a run
on this machine, ``local``, goes to ``build/hardware/records/`` and is never committed).

The rule that decides every "verified on a TPU" word (README's route table, the book's routes
page, each lesson page and the "Verified on hardware" page):

- a record counts only if its devices are TPUs, and its Python and TensorFlow are those of its
  platform's route today (``tpucheck.routes``): a record of an older route verifies nothing any
  more;
- a full record (every lesson run in full, not the quick versions) that counts verifies its
  platform's route when the self-test passed in it, and each lesson that passed in it;
- a quick record (``--quick``, the first light: the route, lesson 01_tpu_detection_and_connection, the self-test) that counts
  verifies its platform's route when the self-test passed in it, and nothing else: no lesson,
  not even the one it ran, waits on less than a full run;
- a smoke record (the lessons' quick versions) verifies nothing;
- a record from CPU devices (``local``, a dry run) is shown, and verifies nothing.

A record may also carry ``steps`` (from schema version 1 on, optional): what each step showed
and how long it took (the route installed, the lessons, the TPU connected, each self-test check,
the reference script), each ``{step, status, seconds, detail}``.
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

# field: type(s), for problems(); every field is required (None where the run could not tell).
FIELDS = {
    "schema": str,
    "version": int,
    "run_id": str,
    "platform": str,
    "mode": str,
    "created": str,
    "commit": str,
    "accelerator": str,
    "devices": list,
    "python": str,
    "tensorflow": (str, type(None)),
    "tensorflow_distribution": (str, type(None)),
    "keras": (str, type(None)),
    "libtpu": (str, type(None)),
    "route": (str, type(None)),
    "lessons": list,
    "selftest": (dict, type(None)),
    "wall_seconds": (int, float),
}
LESSON_FIELDS = ("notebook", "status", "seconds", "headline")
STEP_FIELDS = ("step", "status", "seconds", "detail")
MODES = ("full", "quick", "smoke")
ROUTE_MODES = ("full", "quick")  # the modes whose record can verify a route
DEVICE = re.compile(r"device:([A-Za-z_]+):\d+")


def problems(record: dict) -> list[str]:
    """What makes ``record`` unusable (an empty list: it is a valid record of this schema)."""
    found = [f"missing {name}" for name in FIELDS if name not in record]
    found += [
        f"{name} is {type(record[name]).__name__}"
        for name, kind in FIELDS.items()
        if name in record and not isinstance(record[name], kind)
    ]
    if record.get("schema") != SCHEMA or record.get("version") != VERSION:
        found.append(f"not a {SCHEMA} record of version {VERSION}")
    if not re.fullmatch(r"[0-9a-f]{40}", str(record.get("commit", ""))):
        found.append("commit is not a full 40-character hash")
    for row in record.get("lessons", []) if isinstance(record.get("lessons"), list) else []:
        found += [f"lesson row lacks {f}" for f in LESSON_FIELDS if f not in row]
    if record.get("mode") not in MODES:
        found.append(f"mode is not one of {', '.join(MODES)}")
    steps = record.get("steps", [])
    if not isinstance(steps, list):
        found.append("steps is not a list")
    for row in steps if isinstance(steps, list) else []:
        found += [f"step row lacks {f}" for f in STEP_FIELDS if f not in row]
    return found


def device_kind(record: dict) -> str:
    """``"TPU"``, ``"CPU"`` or ``"GPU"``: the kind of every device the run used, else ``"mixed"``."""
    kinds = {m.group(1).upper() for d in record["devices"] if (m := DEVICE.search(d))}
    return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "none"


def _route_of(platform: str) -> routes.Route | None:
    facts = routes.PLATFORMS.get(platform)
    if facts is None or not facts.python[:1].isdigit():
        return None
    try:
        return routes.choose_route(platform, facts.python)
    except routes.NoRoute:
        return None


def _on_todays_route(record: dict) -> bool:
    route = _route_of(record["platform"])
    return (
        route is not None
        and device_kind(record) == "TPU"
        and ".".join(record["python"].split(".")[:2]) == route.python
        and record["tensorflow_distribution"] == "tensorflow-tpu"
        and record["tensorflow"] == route.release.tensorflow
    )


def counts(record: dict) -> bool:
    """Whether ``record`` can verify lessons (a full run; see the module docstring)."""
    return record["mode"] == "full" and _on_todays_route(record)


def counts_for_route(record: dict) -> bool:
    """Whether ``record`` can verify its platform's route (a full or a quick run)."""
    return record["mode"] in ROUTE_MODES and _on_todays_route(record)


def _describe(record: dict) -> str:
    return (
        f"{PLATFORM_LABELS.get(record['platform'], record['platform'])}, "
        f"{record['created'][:10]}, commit {record['commit'][:7]}"
    )


def _newest_first(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["created"], reverse=True)


def verified_routes(records: list[dict]) -> dict[str, str]:
    """``{platform: "yes (Kaggle, 2026-11-25, commit abc1234)"}`` for each verified route."""
    found = {}
    for record in _newest_first(records):
        selftest = record["selftest"] or {}
        if counts_for_route(record) and selftest.get("passed") and record["platform"] not in found:
            found[record["platform"]] = f"yes ({_describe(record)})"
    return found


def lesson_status(notebook: str, records: list[dict]) -> str:
    """The "verified on a TPU" words for one lesson (``NN_name.ipynb``), for its book page."""
    for record in _newest_first(records):
        for row in record["lessons"] if counts(record) else []:
            if row["notebook"] == notebook and row["status"] == "passed":
                return f"verified on a TPU ({_describe(record)})"
    return NOT_YET


def load(*folders: Path) -> list[dict]:
    """Every record in ``folders`` (default: the committed ones), oldest first.

    A file that is not a valid record stops with its name and what is wrong: a record decides
    what the README and the book say, so a broken one must not be skipped quietly.
    """
    records = []
    for folder in folders or (RECORDS,):
        for path in sorted(Path(folder).glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            if found := problems(record):
                raise SystemExit(f"{path}: not a valid hardware record: {'; '.join(found)}")
            records.append({**record, "_file": path.name})
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


def _verifies(record: dict, kind: str) -> str:
    """The page's "verifies" words for one record."""
    if counts(record):
        return "yes"
    if counts_for_route(record):
        return "the route only (a quick run)" if (record["selftest"] or {}).get("passed") else "no"
    return "nothing: a dry run on CPUs" if kind == "CPU" else "no"


def _steps(record: dict) -> list[str]:
    """The record's timed steps as a table (a quick run's evidence), or nothing."""
    if not record.get("steps"):
        return []
    lines = ["| step | status | seconds | what it showed |", "|---|---|---:|---|"]
    lines += [
        f"| {s['step']} | {s['status']} | {s['seconds']} | {str(s['detail']).replace('|', '/')} |"
        for s in record["steps"]
    ]
    return [*lines, ""]


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
        verifies = _verifies(r, kind)
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
        lines += _steps(r)
        lines += ["| lesson | status | seconds | result |", "|---|---|---:|---|"]
        lines += [
            f"| {row['notebook'][:2]} | {row['status']} | {row['seconds']} | {row['headline']} |"
            for row in r["lessons"]
        ]
    return "\n".join(lines) + "\n"
