"""tpucheck: the TPU tools for your own TensorFlow work, one package of their own.

- ``readiness``: find on a CPU what would fail or be slow on a TPU: a ``tf.data`` pipeline, a
  Keras model and your training step (``readiness.check(dataset, model, strategy=...)``);
- ``selftest``: check a TPU runtime with short real runs of the reference script and write a
  report to share (``python -m tpucheck selftest``);
- ``profiling``: capture a profile of a few steps and read it without TensorBoard, with a
  diagnosis (``python -m tpucheck profile LOGDIR``);
- ``failures``: the errors TPU users post, what each means and its fix (``python -m tpucheck
  explain``); ``tpu_facts`` and ``batches``: the TPU's tiles, chips and batch arithmetic;
  ``host``: the platform, the signs of TPU hardware and what is installed;
- ``routes`` and ``runtime``: which TensorFlow drives a TPU on each platform and Python, how to
  install it, and whether the one installed here can (``runtime.tensorflow_tpu_support()``);
- ``topology``: TPU slices, their topologies and device assignments, built without a TPU;
  ``pods``: a pod slice's hosts and the gcloud commands that run the reference script on it;
- ``timing``: timings to trust (synchronised, warmed up, repeated, variants taken in turns).

Nothing here imports TensorFlow until a function needs it, and nothing imports the lessons'
``helpers``; the self-test runs the reference script, ``train_tpu``.
"""
