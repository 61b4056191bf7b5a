"""The benchmark's pieces, one module per measurement; ``tools/benchmark.py`` is the command.

- ``common``: the settings of each mode, report rows, progress output, shared training setups;
- ``loops``: many training steps per ``tf.function`` call (notebook 04_custom_training_loops);
- ``fit``: ``steps_per_execution`` in Keras ``fit`` (notebook 03_keras_compile_and_fit);
- ``overhead``: the simulated TPU against one device, at the lessons' workload and at a tiny one;
- ``recipes``: the classic Keras TPU recipe against the collection's (notebooks 03_keras_compile_and_fit and 06_input_pipelines),
  with what each change contributes (the stages of ``helpers.selftest.speed``);
- ``precision``: ``mixed_bfloat16`` against ``float32`` (notebook 05_bfloat16_mixed_precision);
- ``pipeline``: the optimised input pipeline against the naive one (notebook 06_input_pipelines);
- ``suites``: whole-suite times (notebooks in smoke mode, the unit tests), full mode only;
- ``machine``: the hardware, the load and the environment of the child processes;
- ``worker``: which measurement runs in which child process, and running them;
- ``report``: the Markdown report.

Every timing comes from ``helpers.timing`` (and ``helpers.fitting.time_fit``, built on it).
"""
