"""Which packages are installed, and their versions: the one place that asks pip's metadata.

Nothing here imports the packages it asks about, so it is safe before TensorFlow's first import
and on a runtime with no TensorFlow at all.
"""

from __future__ import annotations

import importlib.metadata

__all__ = ["installed", "tensorflow_distribution"]

# Distribution names under which TensorFlow is installed, most specific first.
TF_DISTRIBUTIONS = (
    "tensorflow-tpu",
    "tensorflow-cpu",
    "tensorflow",
    "tensorflow-intel",
    "tf-nightly",
)


def installed(*names: str) -> str | None:
    """The version of the first of ``names`` that is installed, or None if none is."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_distribution() -> tuple[str, str] | None:
    """Return ``(distribution, version)`` of the installed TensorFlow, or None if there is none.

    Taught in notebook 01.
    """
    for name in TF_DISTRIBUTIONS:
        version = installed(name)
        if version is not None:
            return name, version
    return None
