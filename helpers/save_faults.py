"""Stop a checkpoint save at a chosen phase: fault injection for kill-and-resume (notebook 08_checkpoints_and_preemption).

``tf.train.CheckpointManager.save`` goes through these phases, in this order (TensorFlow 2.19
and 2.21); a preemption can land in any of them:

``shards``   each shard's data and index are written into the folder ``ckpt-N_temp/``
``merge``    ``ckpt-N.data-*`` and ``ckpt-N.index`` are put in place, then ``ckpt-N_temp/`` goes
``commit``   the state file ``checkpoint`` is rewritten to name ``ckpt-N`` ...
``rename``   ... first as ``checkpoint.tmp<hex>``, then renamed over the old one: the commit point
``sweep``    checkpoints beyond ``max_to_keep`` are deleted, ``.index`` first, then the data
``restate``  the state file is written once more, without the deleted checkpoints

:func:`interrupt_save` calls your ``action`` at the start of one phase (``merge``: before
``ckpt-N_temp/`` is deleted; ``sweep``: right after the first ``.index`` is deleted): a SIGKILL
in a separate process (:func:`kill_at_save`), or in a notebook an exception, which leaves the
same files behind. It wraps private TensorFlow functions: never for production saves.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Callable

from helpers import tf_internals

__all__ = ["PHASES", "crash", "interrupt_save", "kill_at_save", "SaveInterrupted"]

PHASES = ("shards", "merge", "commit", "rename", "sweep", "restate")


class SaveInterrupted(RuntimeError):
    """Raised by :func:`crash` in place of a kill, when the process must survive (notebooks)."""


def crash(phase: str) -> None:
    """An action for :func:`interrupt_save`: raise :class:`SaveInterrupted`."""
    raise SaveInterrupted(f"save interrupted in phase '{phase}'")


def sigkill(phase: str = "") -> None:
    """An action for :func:`interrupt_save`: SIGKILL this process (no cleanup of any kind)."""
    os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def interrupt_save(phase: str, action: Callable[[str], None] = crash):
    """Within the block, call ``action(phase)`` the first time a checkpoint save reaches
    ``phase`` (see the module docstring); later saves run normally."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    fired, state_writes = [], []

    def fire(now: str) -> None:
        if now == phase and not fired:
            fired.append(now)
            action(now)

    def merge(checkpoint_prefixes, destination_prefix, delete_old_dirs=True, **kwargs):
        fire("shards")
        result = originals["merge"](checkpoint_prefixes, destination_prefix, False, **kwargs)
        fire("merge")
        if delete_old_dirs:  # what the merge op would have done last: remove ckpt-N_temp/
            for prefix in checkpoint_prefixes:
                if (folder := os.path.dirname(_text(prefix))).endswith("_temp"):
                    shutil.rmtree(folder, ignore_errors=True)
        return result

    def update_state(save_dir, *args, **kwargs):
        state_writes.append(save_dir)
        fire("commit" if len(state_writes) == 1 else "restate")
        return originals["state"](save_dir, *args, **kwargs)

    def rename(old, new, overwrite=False):
        if os.path.basename(_text(new)) == "checkpoint":
            fire("rename")
        return originals["rename"](old, new, overwrite)

    def delete(filespec):
        originals["delete"](filespec)
        if _text(filespec).endswith(".index"):
            fire("sweep")

    wrappers = {"merge": merge, "state": update_state, "rename": rename, "delete": delete}
    targets = {key: (*at, wrappers[key]) for key, at in tf_internals.save_steps().items()}
    originals = {key: getattr(module, name) for key, (module, name, _) in targets.items()}
    for module, name, wrapper in targets.values():
        setattr(module, name, wrapper)
    try:
        yield
    finally:
        for key, (module, name, _) in targets.items():
            setattr(module, name, originals[key])


def _text(value) -> str:
    value = value.numpy() if hasattr(value, "numpy") else value
    return value.decode() if isinstance(value, bytes) else str(value)


def kill_at_save(step: int, phase: str = "before") -> None:
    """SIGKILL this process at the checkpoint save of ``step`` (``tf.train.CheckpointManager.save``
    with ``checkpoint_number=step``, as the reference script saves): ``"before"`` it (the steps
    since the previous save are lost) or inside it, in one of :data:`PHASES`.

    ``python -m helpers.simulation --kill-at STEP --phase PHASE train_tpu.py ARGS`` runs the script
    so (notebook 08_checkpoints_and_preemption, tests/test_train_tpu.py): the script is unchanged.
    """
    import tensorflow as tf

    if phase != "before" and phase not in PHASES:
        raise ValueError(f"phase must be 'before' or one of {PHASES}, got {phase!r}")
    save = tf.train.CheckpointManager.save

    def killing_save(manager, checkpoint_number=None, **more):
        if checkpoint_number == step and phase == "before":
            sigkill()
        if checkpoint_number == step:
            with interrupt_save(phase, sigkill):
                return save(manager, checkpoint_number, **more)
        return save(manager, checkpoint_number, **more)

    tf.train.CheckpointManager.save = killing_save
