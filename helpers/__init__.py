"""Shared helpers for the TPU Field Guide notebooks.

Everything a notebook needs beyond plain TensorFlow lives here, once, with tests (README.md's
module map lists the modules). The TPU tools the lessons teach are a package of their own,
``tpucheck``, which never imports this one. TensorFlow is imported lazily, so ``import helpers``
works where TensorFlow is missing (a fresh Colab TPU runtime) and can say what to install.
"""

from helpers import results as _results
from helpers.strategy import connect, describe
from tpucheck.readiness import report as _readiness

# Each readiness check that passes counts itself in a headless run's results, so the tests of the
# executed lessons see what ran (tests/test_executed_notebooks.py).
_readiness.WHEN_CLEAN.append(lambda: _results.count("readiness_clean"))

# Read by every notebook's setup cell before it uses anything else here: it confirms that
# `import helpers` found this project's package, at the release the notebooks are written for,
# and not a module of the reader's own that happens to share the name. tools/release.py sets both.
__project__ = "tpu-field-guide"
__version__ = "0.1.0"

__all__ = ["connect", "describe"]
