"""Shared helpers for the TPU Field Guide notebooks.

Everything a notebook needs beyond plain TensorFlow lives here, once, with tests:

- ``runtime``: where am I running, is there TPU hardware, can this TensorFlow drive it? (01)
- ``strategy``: ``connect()``, which calls the reference script's ``train_tpu.connect`` (01)
- ``data``: a real dataset that works offline, and pipelines with static shapes (01, 03)
- ``fitting``: strategy-aware ``compile``/``fit`` choices and a one-device loss check (03)
- ``loops``: the script's step run many per call, and the 8-vs-1-replica equivalence check (04)
- ``precision``: bfloat16 and per-layer dtypes (05); ``pipelines``: ``tf.data`` that feeds a TPU (06)
- ``topology``: TPU topologies and device assignments, built (07; drawn by ``plots``)
- ``checkpoints``, ``preemption`` and ``save_faults``: a ``fit`` backup that survives a kill, the
  leftovers of a killed save, and kills at any instant of a save (08); the custom loop's
  checkpoint and restore are the script's
- ``multiworker``: several worker processes on one machine (09); ``pods``: a pod slice's hosts
  and the gcloud commands that launch the reference script on it (09)
- ``jax_port``: the same training on Keras 3 with the JAX backend, never importing TensorFlow (12)
- ``models``, ``results``, ``expected_errors``: small shared pieces; one home each for every clock
  (``timing``) and every plot (``plots``)
- ``tf_internals``: every TensorFlow internal the helpers use, each wrapped with the reason
  (04, 06, 07, 08)

The TPU tools the lessons teach and every lesson runs on its own work are a package of their
own, ``tpucheck`` (it never imports this one): the readiness check (10), the self-test (00), the
profile reader (11), the table of failures users post (01), the TPU's facts and batch arithmetic.

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
