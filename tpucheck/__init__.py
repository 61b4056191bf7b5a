"""tpucheck: the TPU tools for your own TensorFlow work, one package of their own (README.md):
``readiness``, ``selftest``, ``profiling`` and ``failures`` (``python -m tpucheck``), the install
``routes`` and ``runtime`` checks, TPU slices (``topology``, ``pods``), ``timing``, and the shared
``tpu_facts``, ``batches`` and ``host``. Nothing here imports TensorFlow until a function needs
it, nor the lessons' ``helpers``.
"""
