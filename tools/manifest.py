"""notebooks/manifest.toml: what the tools know about each notebook, declared once.

One ``[notebooks.name]`` entry per lesson, keyed by its name; their order numbers the lessons
(``tools/lessons.py``). An entry holds ``title``, ``promise`` and ``need`` (its generated preamble,
the README's table, the book); ``headline`` (its result in words, a format string over the numbers
it records with ``helpers.results.record``, or a list of them: the first whose numbers were
recorded is used); and optionally ``kept_files`` (parameters naming a folder kept for the reader,
and the sub-folder a headless run gives it), ``[...smoke]`` (the parameters of the quick version
``make smoke`` and ``make test`` run), ``[...settings]`` (its own values of the shared settings,
:data:`SHARED_SETTINGS`; the defaults are ``[settings]`` and ``helpers.strategy.SIMULATED_REPLICAS``),
``parameters`` (a sentence on its own parameters), ``setup`` (the setup cell's variant),
``hardware`` (the runtime its badges ask for, "tpu") and ``nbval = true`` (``make test`` also runs
the stored notebook under ``pytest --nbval-lax``: lessons that finish in about 20 s here).

    python tools/manifest.py --nbval     # the notebooks marked nbval, as paths (the Makefile)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from lessons import lesson_name, numbering
from notebook_files import MANIFEST, NOTEBOOKS, ROOT, read, source, toml

REQUIRED = ("title", "promise", "need", "headline")
OPTIONAL = ("parameters", "setup", "kept_files", "smoke", "settings", "hardware", "nbval")
# Settings many lessons share, each with one default; a lesson's own value is in its entry.
SHARED_SETTINGS = ("SIMULATED_REPLICAS", "PER_REPLICA_BATCH")
SETUP_VARIANTS = ("tensorflow", "helpers-only", "jax")
PARAMETER_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def load(path: Path = MANIFEST) -> dict[str, dict]:
    """The ``[notebooks.name]`` entries of the manifest, in order, by file stem (``NN_name``)."""
    if not path.exists():
        return {}
    numbers = numbering(path)
    entries = toml(path).get("notebooks", {})
    return {f"{numbers[name]}_{name}": entry for name, entry in entries.items()}


def entry_for(manifest: dict, name: str) -> dict:
    """The manifest entry of notebook ``name``, checked, or SystemExit naming what is wrong."""
    stem = Path(name).stem
    entry = manifest.get(stem)
    where = f"notebooks/manifest.toml, [notebooks.{lesson_name(stem)}]"
    if entry is None:
        raise SystemExit(
            f"{where}: no such entry, or {name} is not the number its place gives it. Run "
            "`make sync` (it renames the files and copies a new notebook's title cell and "
            "its '## What you need' cell into a new entry) or write the entry by hand."
        )
    missing = [key for key in REQUIRED if not entry.get(key)]
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise SystemExit(
            f"{where}: missing {missing or 'nothing'}, unknown keys {unknown or 'none'}"
        )
    if entry.get("setup", "tensorflow") not in SETUP_VARIANTS:
        raise SystemExit(f"{where}: setup = {entry['setup']!r}; known: {list(SETUP_VARIANTS)}")
    for table in ("kept_files", "smoke"):
        bad = [key for key in entry.get(table, {}) if not PARAMETER_NAME.match(key)]
        if bad:
            raise SystemExit(f"{where}.{table}: {bad} are not parameter names (UPPER_CASE)")
    if unknown := sorted(set(entry.get("settings", {})) - set(SHARED_SETTINGS)):
        raise SystemExit(f"{where}.settings: {unknown} are not shared settings {SHARED_SETTINGS}")
    return entry


def defaults(path: Path = MANIFEST) -> dict:
    """The default of each shared setting, from its one home."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from helpers.strategy import SIMULATED_REPLICAS

    table = toml(path).get("settings", {})
    if unknown := sorted(set(table) - set(SHARED_SETTINGS) - {"SIMULATED_REPLICAS"}):
        raise SystemExit(f"notebooks/manifest.toml, [settings]: {unknown} are not shared settings")
    if "SIMULATED_REPLICAS" in table:
        raise SystemExit(
            "notebooks/manifest.toml, [settings]: SIMULATED_REPLICAS's default is "
            "helpers.strategy.SIMULATED_REPLICAS (the stacks and the README follow it)"
        )
    return {"SIMULATED_REPLICAS": SIMULATED_REPLICAS, **table}


def lesson_settings(entry: dict, default: dict | None = None) -> dict:
    """Each shared setting's value for the lesson of ``entry``: its own, else the default."""
    return {**(defaults() if default is None else default), **entry.get("settings", {})}


def setting_home(stem: str, name: str, entry: dict) -> str:
    """Where the value a lesson gets for shared setting ``name`` is written, in words."""
    if name in entry.get("settings", {}):
        return f"notebooks/manifest.toml, [notebooks.{lesson_name(stem)}.settings] {name}"
    if name == "SIMULATED_REPLICAS":
        return "the default, helpers.strategy.SIMULATED_REPLICAS"
    return f"the default, [settings] {name} in notebooks/manifest.toml"


def headlines(entry: dict) -> tuple[str, ...]:
    """The entry's headline templates, in the order they are tried."""
    headline = entry["headline"]
    return (headline,) if isinstance(headline, str) else tuple(headline)


def nbval_notebooks(manifest: dict | None = None) -> list[Path]:
    """The notebooks whose entry says ``nbval = true``, in order."""
    manifest = load() if manifest is None else manifest
    return [NOTEBOOKS / f"{stem}.ipynb" for stem, e in manifest.items() if e.get("nbval")]


def smoke_parameters(entry: dict) -> dict:
    """The parameters of the entry's smoke run: ``SMOKE_TEST=True`` and its smaller values."""
    return {"SMOKE_TEST": True, **entry.get("smoke", {})}


# --- a new notebook's entry, copied from its own cells by its first `make sync` --------------


def _toml_text(text: str) -> str:
    text = text.strip()
    if "\n" not in text and '"' not in text and "\\" not in text:
        return f'"{text}"'
    if "'''" not in text:
        return f"'''\n{text}\n'''"
    return '"""\n' + text.replace("\\", "\\\\").replace('"""', '\\"""') + '\n"""'


def adopt(notebook: dict, name: str) -> dict:
    """A manifest entry from a notebook not yet in the manifest: its title and 'What you need'."""
    cells = notebook["cells"]
    first = source(cells[0]).strip().splitlines() if cells else []
    first = [line for line in first if not line.startswith("<!--")]
    if not first or not first[0].startswith("# "):
        raise SystemExit(f"{name}: the first cell must be the title, '# Title' or '# NN · Title'")
    promise = " ".join(line.strip() for line in first[1:] if line.strip())
    need = next((source(c) for c in cells if source(c).startswith("## What you need")), None)
    if not promise or need is None:
        raise SystemExit(f"{name}: needs a promise under the title and a '## What you need' cell")
    body = need.split("\n", 1)[1] if "\n" in need else ""
    return {
        "title": re.sub(r"^# (\d\d · )?", "", first[0]),
        "promise": promise,
        "need": body.strip(),
        "headline": "see results/ (no headline written yet)",
    }


def adopt_missing(paths: list[Path], manifest_path: Path = MANIFEST) -> list[str]:
    """Append a manifest entry (the last lesson) for every notebook that has none, by its name;
    returns their file names. Moving the entry elsewhere in the manifest renumbers the lessons."""
    known = set(numbering(manifest_path))
    added = []
    for path in paths:
        if (name := lesson_name(path)) not in known:
            entry = adopt(read(path), path.name)
            lines = [f"[notebooks.{name}]", *(f"{k} = {_toml_text(v)}" for k, v in entry.items())]
            text = manifest_path.read_text(encoding="utf-8") if manifest_path.exists() else ""
            manifest_path.write_text(text + ("\n" if text else "") + "\n".join(lines) + "\n")
            known.add(name)
            added.append(path.name)
    return added


if __name__ == "__main__":
    if sys.argv[1:] != ["--nbval"]:
        raise SystemExit("usage: python tools/manifest.py --nbval")
    print(" ".join(str(p.relative_to(NOTEBOOKS.parent)) for p in nbval_notebooks()))
