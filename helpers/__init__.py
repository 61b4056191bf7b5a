"""Shared helpers for the TPU Field Guide notebooks.

Everything a notebook needs beyond plain TensorFlow lives here, once, with tests:

- ``lesson``: the start of every lesson (the simulated TPU, offline data, quiet logs);
  ``simulation``: the simulated TPU a CPU runs the reference script on, in process or as a command
- ``strategy``: ``connect()``, which calls the reference script's ``train_tpu.connect`` (01)
- ``loops``: the 8-vs-1-replica equivalence check (04, 10)
- ``precision``: bfloat16 and per-layer dtypes (05); ``pipelines``: ``tf.data`` stages to measure
  (06, 11)
- ``save_faults``: kills at any instant of a checkpoint save (08); ``processes``: child processes
- ``multiworker``: several worker processes on one machine (09)
- ``jax_port``: the same training on Keras 3 with the JAX backend, never importing TensorFlow (12)
- ``models``: small models the tests and asides share; ``results``, ``expected_errors``,
  ``blocks``, ``plots``: small shared pieces
- ``tf_internals``: every TensorFlow internal the helpers use, each wrapped with the reason
  (04, 06, 07, 08)

The TPU tools the lessons teach and every lesson runs on its own work are a package of their
own, ``tpucheck`` (it never imports this one): the readiness check (10), the self-test (00), the
profile reader (11), the table of failures users post (01), the TPU's facts and batch arithmetic,
the install routes and the runtime check (00, 01), slice topologies and device assignments (07),
the pod launch plan (09), and ``timing``, the one clock of every lesson's measured ratio.

TensorFlow is imported lazily, so ``import helpers`` works even where TensorFlow is missing
(a fresh Colab TPU runtime) and can then tell the user what to install.
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
