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
- ``readiness``: the TPU readiness check (10), run by every notebook on its own pipeline
- ``profiling``: capture a profile and read it without TensorBoard: input waits, compute,
  retracing, and a diagnosis (11)
- ``jax_port``: the same training on Keras 3 with the JAX backend, never importing TensorFlow (12)
- ``selftest``: the TPU self-test, ``python -m helpers.selftest``, with a shareable report (00)
- ``models``, ``results``, ``expected_errors``: small shared pieces; one home each for every clock
  (``timing``), every plot (``plots``) and the TPU's tile and chip facts (``tpu_facts``)
- ``tf_internals``: every TensorFlow internal the helpers use, each wrapped with the reason
  (04, 06, 07, 08)

TensorFlow is imported lazily, so ``import helpers`` works even where TensorFlow is missing
(a fresh Colab TPU runtime) and can then tell the user what to install.
"""

from helpers.strategy import connect, describe

# Read by every notebook's setup cell before it uses anything else here: it confirms that
# `import helpers` found this project's package, at the release the notebooks are written for,
# and not a module of the reader's own that happens to share the name. tools/release.py sets both.
__project__ = "tpu-field-guide"
__version__ = "0.1.0"

__all__ = ["connect", "describe"]
