"""What the input pipeline's own functions run: Python on the host, constant seeds (notebook 10_tpu_readiness_check).

``element_spec`` (``inputs``) only describes what comes out of a pipeline. This module looks
inside it: every transformation of the ``tf.data`` graph (``map``, ``filter``, ``flat_map``,
``interleave``, ...) holds a traced function, and ``Dataset.from_generator`` is built from
``tf.numpy_function`` calls. Their graphs are read, no data is pulled.
"""

from __future__ import annotations

import inspect
import re

from helpers.readiness._batching import transformation_kind
from helpers.readiness._seeds import add_constant_seeds, constant_seed_ops
from helpers.readiness._xla import PYTHON_OPS, graph_nodes
from helpers.readiness.report import Finding, Report

__all__ = ["check_pipeline"]

# TensorFlow is imported inside the functions that need it (here and in every module of the
# check): ``import helpers.readiness`` must not import TensorFlow before the setup cell's
# ``quiet.quiet_tensorflow()`` has set its logging.


def _datasets(dataset):
    """The dataset and every dataset it reads from (tf.data's private but long-stable links)."""
    seen, todo = set(), [dataset]
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        yield ds
        todo += list(getattr(ds, "_inputs", list)())


def _transformation(ds, function_name: str) -> str:
    """``dataset.map(parse)`` from a dataset object and its traced function's name."""
    kind = transformation_kind(ds)
    name = re.sub(rf"^__inference_Dataset_{kind}_|_\d+$", "", function_name)
    return f"dataset.{kind}({name})"


def _python_callable(token: bytes) -> str | None:
    """The Python function a ``PyFunc`` op calls back, as ``name() at file:line``."""
    from helpers import tf_internals

    func = tf_internals.py_function_callback(token.decode())
    func = getattr(func, "_func", func)  # tf.py_function wraps it in an EagerFunc
    if func is None:
        return None
    func = inspect.unwrap(func)
    name = getattr(func, "__qualname__", repr(func))
    if "_from_generator" in name or "_GeneratorState" in name:
        return "generator"
    try:
        return f"{name}() at {inspect.getsourcefile(func)}:{inspect.getsourcelines(func)[1]}"
    except (OSError, TypeError):
        return f"{name}()"


def check_pipeline(dataset, report: Report) -> None:
    """Python in ``map`` & co. or a Python generator feeding the pipeline; constant seeds.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    functions, generator, seeded = [], False, []
    for ds in _datasets(dataset):
        for wrapper in getattr(ds, "_functions", list)():
            function = wrapper.function
            where = _transformation(ds, function.name.decode())
            for op, _, node in graph_nodes(function):
                if op not in PYTHON_OPS:
                    continue
                target = _python_callable(node.attr["token"].s) if "token" in node.attr else None
                if target == "generator":
                    generator = True
                else:
                    functions.append(f"{where}: {PYTHON_OPS[op]}({target or node.name})")
            names = constant_seed_ops(function.graph.as_graph_def())
            if names:
                seeded.append(f"{where} ({', '.join(names[:2])})")
    report.checked.append("pipeline functions")
    if functions:
        report.findings.append(_host_python(sorted(set(functions)), generator=False))
    if generator:
        report.findings.append(_host_python(["dataset, built by Dataset.from_generator"], True))
    if seeded:
        add_constant_seeds(report, "; ".join(seeded[:3]), pipeline=True)


def _host_python(places: list[str], generator: bool) -> Finding:
    if generator:
        what = "a Python generator feeds the input pipeline (Dataset.from_generator)"
        fix = (
            "Read the data with tf.data itself: Dataset.from_tensor_slices for arrays that fit "
            "in memory, or write it once to sharded TFRecord files and read them with "
            "TFRecordDataset (notebook 06_input_pipelines)."
        )
    else:
        what = "the input pipeline runs Python on the host (tf.py_function / tf.numpy_function)"
        fix = (
            "Rewrite the function with TensorFlow ops (tf.image, tf.strings, tf.io, "
            "keras.ops), vectorised over the batch; or preprocess once, offline, and store "
            "the result as TFRecords (notebook 06_input_pipelines)."
        )
    return Finding(
        "python-in-pipeline",
        "warning",
        what,
        "; ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else ""),
        "The host must prepare batches for every TPU core. Python code in the pipeline runs "
        "under the interpreter's lock, one element at a time, however many parallel calls "
        "map is given: the classic cause of an idle TPU. Such a pipeline also cannot be "
        "serialised, so it cannot move to tf.data service or to other hosts.",
        fix,
    )
