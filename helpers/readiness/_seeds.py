"""Random ops seeded by a constant: the same "random" numbers at every step (notebook 10_tpu_readiness_check).

A stateless random op (``tf.random.stateless_uniform``, ``tf.image.stateless_random_*``,
``keras.random.dropout(x, rate, seed=42)`` with the TensorFlow backend) is a pure function of its
seed. Seeded by a Python constant inside a compiled step or a ``dataset.map``, it returns the same
values every time it runs: dropout that always drops the same units, augmentation that never
changes. This module finds such ops in a traced graph, its nested functions included, by folding
constants backwards from each op's seed input.
"""

from __future__ import annotations

from helpers.readiness.report import Finding

__all__ = ["add_constant_seeds", "constant_seed_ops"]

# TensorFlow is imported inside the functions: see _pipeline.

# Where the seed enters each stateless op that turns a seed into random numbers. The newer
# ``...V2`` ops take a key made by ``StatelessRandomGetKeyCounter``, which is listed instead.
SEED_INPUT = {
    "StatelessRandomGetKeyCounter": 0,
    "StatelessRandomGetKeyCounterAlg": 0,
    "StatelessRandomUniform": 1,
    "StatelessRandomNormal": 1,
    "StatelessTruncatedNormal": 1,
    "StatelessRandomUniformInt": 1,
    "StatelessRandomUniformFullInt": 1,
    "StatelessRandomBinomial": 1,
    "StatelessRandomPoisson": 1,
    "StatelessRandomGammaV2": 1,
    "StatelessParameterizedTruncatedNormal": 1,
    "StatelessMultinomial": 2,
    "StatelessSampleDistortedBoundingBox": 3,
}
CONSTANT_OPS = frozenset({"Const", "HostConst"})


def _scopes(graph_def):
    """The node lists of a graph and of each function in its library (names are per scope)."""
    yield list(graph_def.node)
    for function in graph_def.library.function:
        yield list(function.node_def)


def _is_stateful(op: str) -> bool:
    from helpers import tf_internals

    return tf_internals.is_stateful_op(op)


def _constant(name: str, by_name: dict, known: dict, depth: int = 0) -> bool:
    """True when the tensor ``name`` folds to a constant: Const ops and pure ops of constants."""
    # "node:output:index" in functions, "node:index" in graphs; a name that is no node is an
    # argument of the function (a value from outside): not a constant.
    name = name.lstrip("^").split(":")[0]
    if name not in known:
        node = by_name.get(name)
        if node is None or depth > 50:
            known[name] = False
        elif node.op in CONSTANT_OPS:
            known[name] = True
        elif _is_stateful(node.op) or node.op.endswith("Call") or not node.input:
            known[name] = False  # variables, placeholders, random state, function calls
        else:
            data = [i for i in node.input if not i.startswith("^")]
            known[name] = all(_constant(i, by_name, known, depth + 1) for i in data)
    return known[name]


def constant_seed_ops(graph_def) -> list[str]:
    """Names of the stateless random ops in ``graph_def`` whose seed is a constant (notebook 10_tpu_readiness_check)."""
    found = []
    for nodes in _scopes(graph_def):
        by_name, known = {node.name: node for node in nodes}, {}
        for node in nodes:
            index = SEED_INPUT.get(node.op)
            if index is not None and len(node.input) > index:
                if _constant(node.input[index], by_name, known):
                    found.append(node.name)
    return found


def add_constant_seeds(report, where: str, *, pipeline: bool = False) -> None:
    """Report ops found by :func:`constant_seed_ops`, at ``where``, as a ``constant-seed`` warning.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """

    runs = "for every element and every epoch" if pipeline else "at every step"
    if pipeline:
        fix = (
            "Give each element its own seed: number the elements after repeat() (dataset.repeat()"
            ".enumerate(), so that epochs differ too) and pass seed=tf.stack([SEED, index]); or zip "
            "with tf.data.Dataset.random(seed=SEED).batch(2) and use that as the seed; Keras' "
            "random layers (RandomFlip, ...) keep their own seed state and are fine."
        )
    else:
        fix = (
            "Make the seed change every step: seed=tf.stack([SEED, tf.cast(optimizer.iterations, "
            "tf.int64)]), or draw from a tf.random.Generator or keras.random.SeedGenerator made "
            "once, outside the step."
        )
    report.findings.append(
        Finding(
            "constant-seed",
            "warning",
            f"a stateless random op is seeded by a constant: the same numbers {runs}",
            where,
            "A stateless random op is a pure function of its seed. With a Python constant as the "
            f"seed, the compiled graph draws identical 'noise' {runs}: dropout that always drops "
            "the same units, augmentation that never changes. Nothing fails; the model just "
            "trains on less randomness than written.",
            fix,
        )
    )
