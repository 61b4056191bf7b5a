"""Checks of the Keras model: the strategy's scope, dtypes, and padding to the 128-wide tiles."""

from __future__ import annotations

import math

from tpucheck.readiness.report import Finding, Report
from tpucheck.tpu_facts import FLOAT64_WHY, TILE_COLS, round_up

# The check's own policy, not a hardware fact: a layer that pads away this share of its work or
# more is worth a warning (less is a note).
PADDING_WARNING_SHARE = 0.10
# A layer's share within this many points of that line is called borderline: the padding is an
# estimate over Dense and Conv layers only, rougher than that.
PADDING_BORDERLINE = 0.02


def check_model(model, strategy, report: Report) -> None:
    """Variables made outside the scope, float64 weights, the float16 policy, tile padding."""
    if not model.weights:
        report.skipped.append("model checks: the model is not built (call it once or use Input)")
        return
    if getattr(model, "built", True):
        report.checked.append("model")  # only once there is a built model to check
    else:  # a model of models: its built parts hold weights and are checked
        built, unbuilt = _parts(model)
        report.checked.append(f"model (built parts: {', '.join(built)})")
        if unbuilt:
            report.skipped.append(
                f"model checks of the unbuilt parts of '{model.name}': {', '.join(unbuilt)} "
                "(call the model once or build them)"
            )
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        _check_scope(model, strategy, report)
    doubles = [v.path for v in model.weights if v.dtype == "float64"]
    if doubles:
        report.add(
            "float64",
            "warning",
            f"{len(doubles)} model weights are float64",
            f"model '{model.name}', e.g. {doubles[0]}",
            f"{FLOAT64_WHY} float64 weights also take twice the memory.",
            "Leave Keras' float type at float32 (keras.config.set_floatx('float32')) or use "
            "the 'mixed_bfloat16' policy.",
        )
    half = [
        layer.name
        for layer in [model, *_all_layers(model)]
        if getattr(getattr(layer, "dtype_policy", None), "name", "") == "mixed_float16"
    ]
    if half:
        report.add(
            "float16-policy",
            "warning",
            "the model uses the 'mixed_float16' policy",
            f"model '{model.name}', dtype policy of {', '.join(half[:3])}",
            "TPUs compute in bfloat16, which keeps float32's range: float16 brings loss "
            "scaling a TPU does not need and is not the type its matrix units are built for.",
            "keras.mixed_precision.set_global_policy('mixed_bfloat16') before building.",
        )
    _check_tiles(model, report)


def _parts(model) -> tuple[list[str], list[str]]:
    """The direct sub-layers of an unbuilt model, built (with weights) and not built."""
    children = list(getattr(model, "_layers", None) or [])
    built = [f"'{c.name}'" for c in children if getattr(c, "built", False) and c.weights]
    unbuilt = [f"'{c.name}'" for c in children if not getattr(c, "built", False)]
    return built, unbuilt


def _variables_outside_scope(model, strategy) -> list:
    """The model's variables (Keras' wrappers) that were not created under ``strategy.scope()``."""
    import keras

    outside = []
    for v in model.variables:
        tf_var = v.value if isinstance(v, keras.Variable) else v  # Keras wraps the tf.Variable
        try:
            inside = strategy.extended.variable_created_in_scope(tf_var)
        except (AttributeError, TypeError, ValueError):
            continue
        if not inside:
            outside.append(v)
    return outside


def _is_random_state(variable) -> bool:
    """A Keras SeedGenerator's state: random-number bookkeeping, not a weight."""
    return not variable.trainable and variable.path.endswith("seed_generator_state")


def _check_scope(model, strategy, report: Report) -> None:
    """Weights and state made outside the scope apart from random-number state."""
    outside = _variables_outside_scope(model, strategy)
    random_state = [v for v in outside if _is_random_state(v)]
    weights = [v for v in outside if not _is_random_state(v)]
    if weights:
        trainable = sum(v.trainable for v in weights)
        report.add(
            "model-outside-scope",
            "error",
            f"{len(weights)} of {len(model.variables)} model variables ({trainable} "
            "trainable) were created outside strategy.scope()",
            f"model '{model.name}', e.g. {weights[0].path}",
            "They are ordinary variables on one device, not one copy per replica. Keras' "
            "fit() then stops with RuntimeError 'Need to be inside with strategy.scope()' "
            "(tf.distribute's check, shared by every strategy; seen here with Keras 3.15 on "
            "MirroredStrategy). TensorFlow's TPU guide: the model must be created inside "
            "strategy.scope() so that its variables exist on each TPU core (unverified on "
            "hardware by this project).",
            "Build (and compile) the model inside `with strategy.scope():`.",
        )
    if random_state:
        ids = {id(v) for v in random_state}
        layers = [
            layer.name
            for layer in _all_layers(model)
            if not getattr(layer, "layers", None) and any(id(v) in ids for v in layer.variables)
        ]
        report.add(
            "random-state-outside-scope",
            "note",
            f"{len(random_state)} random-number state variable(s) of augmentation layers "
            "were created outside strategy.scope()",
            f"model '{model.name}', e.g. {random_state[0].path}",
            "These are the seed-generator states of random layers (RandomFlip, "
            "RandomRotation, ...), not weights: nothing is trained in them. They stay one "
            "variable on the device where they were made, which every replica reads; the "
            "weights are replicated and fit() runs on every replica (seen here with Keras "
            "3.15 on MirroredStrategy; on a TPU the state lives on the host, unverified on "
            "hardware).",
            "Nothing to fix for training. To keep the state on each core, build the layers "
            f"inside the scope ({', '.join(layers[:4]) or 'the random layers'}).",
        )


def _all_layers(model) -> list:
    """Every layer, nested models' too, depth first in order (``_flatten_layers`` reverses them)."""
    found, seen = [], set()

    def walk(layer):
        for child in getattr(layer, "_layers", None) or []:  # private, but it sees nested models
            if id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                walk(child)

    walk(model)
    return found


def _matmul_layers(model) -> list[tuple]:
    """``(layer, unit word, K, N, rows per example)`` for Dense and plain Conv layers, in order."""
    import keras

    convs = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
    found = []
    for layer in _all_layers(model):
        kernel = getattr(layer, "kernel", None)
        if kernel is None or not getattr(layer, "built", False):
            continue
        shape = tuple(int(d) for d in kernel.shape)
        if isinstance(layer, keras.layers.Dense) and len(shape) == 2:
            found.append((layer, "units", shape[0], shape[1], _rows(layer, "input")))
        elif isinstance(layer, convs):
            found.append((layer, "filters", shape[-2], shape[-1], _rows(layer, "output")))
    return found


def _rows(layer, which: str) -> int:
    """Rows per example a layer multiplies: the dimensions between batch and features."""
    try:
        shape = getattr(layer, which).shape
        return max(1, math.prod(int(d) for d in shape[1:-1]))
    except (AttributeError, TypeError, ValueError):
        return 1


def _check_tiles(model, report: Report) -> None:
    layers = _matmul_layers(model)
    if not layers:
        return
    report.checked.append("tile padding")
    padded_work = [
        rows * round_up(k, TILE_COLS) * round_up(n, TILE_COLS) for _, _, k, n, rows in layers
    ]
    useful = sum(rows * k * n for _, _, k, n, rows in layers)
    padded = sum(padded_work)
    for (layer, word, _, n, _), work in zip(layers[:-1], padded_work, strict=False):
        # The last layer's width is the number of outputs: set by the task, never reported.
        waste = 1 - n / round_up(n, TILE_COLS)
        if waste < PADDING_WARNING_SHARE:
            continue
        # Below one tile, the layer already costs the least it can (one tile): its padding is
        # free capacity, not lost time. Above, the padded columns are time the model pays for;
        # a warning when they are a sizeable share of the whole model's (estimated) work.
        share = work * waste / padded if n >= TILE_COLS else 0.0
        report.findings.append(_layer_tiles(model, layer, word, n, waste, share))
    overall = 1 - useful / padded
    report.stats["tile_padding"] = round(overall, 4)
    if overall >= PADDING_WARNING_SHARE:
        first, last = layers[0], layers[-1]
        report.add(
            "tile-padding",
            "note",
            f"about {overall:.0%} of the model's matrix work would be tile padding (estimate)",
            f"model '{model.name}': {first[2]} input features into '{first[0].name}', "
            f"{last[3]} outputs from '{last[0].name}'",
            f"Sizes set by the data and the task (input features, number of classes) rarely "
            f"fill {TILE_COLS}-wide tiles; in a small model that padding dominates, in a "
            "large one it fades.",
            f"Nothing to change for sizes the data sets; keep the sizes you choose at "
            f"multiples of {TILE_COLS}.",
        )


def _layer_tiles(model, layer, word: str, n: int, waste: float, share: float) -> Finding:
    up, down = round_up(n, TILE_COLS), n // TILE_COLS * TILE_COLS
    where = f"model '{model.name}', layer '{layer.name}' ({type(layer).__name__})"
    what = f"layer '{layer.name}' has {n} {word}, not a multiple of {TILE_COLS}"
    if not down:  # below one tile: advice, never a problem
        return Finding(
            "layer-tiles",
            "note",
            what,
            where,
            f"The matrix units are {TILE_COLS} wide: {n} {word} are padded to {up}, so about "
            f"{waste:.0%} of this layer's multiply work is padding (an estimate). The layer "
            f"already costs the least a layer can, one tile: the padding is unused capacity, not "
            "lost time.",
            f"Nothing to fix. Up to {up} {word} cost the same step time on a TPU, if the model "
            "would gain from them.",
        )
    borderline = ""
    if abs(share - PADDING_WARNING_SHARE) < PADDING_BORDERLINE:
        what += " (borderline)"
        borderline = (
            f" Borderline: {share:.1%} is within {PADDING_BORDERLINE:.0%} of the "
            f"{PADDING_WARNING_SHARE:.0%} line between a warning and a note, closer than the "
            "estimate is precise."
        )
    return Finding(
        "layer-tiles",
        "warning" if share >= PADDING_WARNING_SHARE else "note",
        what,
        where,
        f"The matrix units are {TILE_COLS} wide: {n} {word} are padded to {up}, so about "
        f"{waste:.0%} of this layer's multiply work (and of the next layer's input) is padding: "
        f"about {share:.0%} of the whole model's estimated matrix work, paid in step time."
        + borderline,
        f"Use {up} {word} (the same step time on a TPU) or {down} (less time, if {n} was chosen "
        "to save it).",
    )
