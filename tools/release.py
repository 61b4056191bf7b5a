"""Set the release version everywhere it is written, regenerate the notebooks, commit and tag.

    python tools/release.py 0.2.0        (or: make release VERSION=0.2.0)

It writes the version into pyproject.toml (``version``, ``release``), ``helpers.__version__``
(which every setup cell checks), the README's mentions of the tag and CHANGELOG.md (its
"Unreleased" section becomes the version's), runs ``tools/sync_notebooks.py``, commits, and tags
``vX.Y.Z`` in this clone. It never pushes: until someone does, hosted notebooks cannot install it.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

from notebook_files import ROOT, toml

VERSION = re.compile(r"\d+\.\d+\.\d+")
# Files that quote the release tag; the notebooks get theirs from sync_notebooks.
INSTALL_LINES = ("README.md",)


def current_version(root: Path = ROOT) -> str:
    return toml(root / "pyproject.toml")["project"]["version"]


def _sub(path: Path, pattern: str, new: str, count: int = 0) -> None:
    text = path.read_text(encoding="utf-8")
    changed, n = re.subn(pattern, new, text, count=count, flags=re.MULTILINE)
    if n == 0:
        raise SystemExit(f"{path.name}: found nothing to change for {pattern!r}")
    path.write_text(changed, encoding="utf-8")


def set_version(version: str, root: Path = ROOT) -> str:
    """Write ``version`` into pyproject.toml, helpers/__init__.py, README.md and CHANGELOG.md;
    returns the old."""
    if not VERSION.fullmatch(version):
        raise SystemExit(f"{version!r} is not a version like 1.2.3")
    old = current_version(root)
    _sub(root / "pyproject.toml", r'^version = "[^"]*"', f'version = "{version}"', count=1)
    _sub(root / "pyproject.toml", r'^release = "v[^"]*"', f'release = "v{version}"', count=1)
    _sub(root / "helpers" / "__init__.py", r'^__version__ = "[^"]*"', f'__version__ = "{version}"')
    for path in INSTALL_LINES:  # `pip install git+...@vX.Y.Z` and "at tag `vX.Y.Z`"
        _sub(root / path, rf"(?<=[@`]v){re.escape(old)}\b", version)
    today = datetime.date.today().isoformat()
    _sub(
        root / "CHANGELOG.md",
        r"^## \[Unreleased\]$",
        f"## [Unreleased]\n\n## [{version}] - {today}",
    )
    return old


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the new version, X.Y.Z")
    args = parser.parse_args()
    if _git("status", "--porcelain").strip():
        raise SystemExit("The work tree has uncommitted changes: commit or stash them first.")
    tag = f"v{args.version}"
    if _git("tag", "--list", tag).strip():
        raise SystemExit(f"The tag {tag} exists already.")
    old = set_version(args.version)
    subprocess.run([sys.executable, str(ROOT / "tools" / "sync_notebooks.py")], check=True)
    _git("commit", "-am", f"Release {args.version}")
    _git("tag", "-a", tag, "-m", f"Release {args.version}")
    print(f"{old} -> {args.version}: committed and tagged {tag} in this clone (not pushed).")
    print(f"Publish it with: git push origin HEAD {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
