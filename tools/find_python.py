"""Print the path of a CPython X.Y interpreter on this machine, or say clearly that there is none.

    python3 tools/find_python.py 3.13     # -> /root/.pyenv/versions/3.13.0/bin/python3.13

The Makefile builds each stack's environment with it. It tries ``pythonX.Y`` on the PATH, pyenv's
versions (``$PYENV_ROOT`` or ``~/.pyenv``), ``/usr/local/bin`` and ``/usr/bin``, and runs each to
confirm its version (a pyenv shim for a version not selected exists but fails). Standard library
only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def _reports(path: str, version: str) -> bool:
    try:
        out = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def candidates(version: str) -> list[str]:
    """Places where a Python ``version`` may be, most likely first."""
    name = f"python{version}"
    found = [shutil.which(name)]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    # Newest patch release first: 3.13.10 before 3.13.9.
    versions = glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin", name))
    found += sorted(versions, key=_patch_number, reverse=True)
    found += [f"/usr/local/bin/{name}", f"/usr/bin/{name}"]
    return [p for p in dict.fromkeys(found) if p and os.path.exists(p)]


def _patch_number(path: str) -> int:
    """3.13.10's 10, from pyenv's ``versions/3.13.10/bin/...``; -1 for 3.13.0rc1 or 3.13-dev."""
    patch = re.fullmatch(r"\d+\.\d+\.(\d+)", Path(path).parents[1].name)
    return int(patch[1]) if patch else -1


def find_python(version: str) -> str | None:
    return next((p for p in candidates(version) if _reports(p, version)), None)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].count(".") != 1:
        print("usage: find_python.py X.Y   (for example 3.13)", file=sys.stderr)
        return 2
    version = argv[0]
    path = find_python(version)
    if path is None:
        print(
            f"Python {version} was not found (looked for python{version} on the PATH, in "
            f"pyenv's versions and in /usr/bin). This stack needs it to stand in for the "
            f"platform that runs it. Install it, for example `pyenv install {version}` or your "
            f"system's python{version} package, then run the command again.",
            file=sys.stderr,
        )
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
