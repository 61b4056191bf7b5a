"""Checkpoints for custom loops and ``fit``, restored with clear errors (notebook 08_checkpoints_and_preemption).

Notebook 08_checkpoints_and_preemption writes the plain TensorFlow first: ``tf.train.Checkpoint`` and
``tf.train.CheckpointManager``, restores checked with ``status.assert_consumed()`` /
``assert_existing_objects_matched()``, and the ``keras.callbacks.BackupAndRestore`` call that
:func:`fit_backup_callbacks` returns (``tests/test_checkpoints.py`` ties the two). The
functions here wrap that code with messages that say what to do.

What this module adds to ``tf.train.Checkpoint`` and ``tf.train.CheckpointManager``:

- :func:`make_checkpoint` builds the pair for a custom loop (model, optimizer, step counter).
- :func:`restore` never fails silently. Plain ``checkpoint.restore(path)`` restores *nothing*
  and raises nothing when the names do not match (``Checkpoint(net=...)`` instead of
  ``Checkpoint(model=...)``) or when ``path`` is None; here both raise
  :class:`CheckpointMismatchError` / :class:`CheckpointNotFoundError` with what to do.
- :func:`latest_checkpoint` only returns a *committed* checkpoint: the newest one the state file
  lists whose files are complete. A listed checkpoint with missing files is skipped, with a
  warning; when none is complete it raises (``tf.train.latest_checkpoint`` returns None there,
  which would start a "resumed" job from scratch).
- :func:`repair` tidies what a save killed at any instant leaves (see below); :func:`make_checkpoint`
  runs it before the manager reads the directory.
- :func:`fit_backup_callbacks` gives ``fit`` Keras' ``BackupAndRestore`` with its previous
  backup kept, plus a check that the restored weights and the restored epoch agree.

Why a checkpoint interrupted mid-write is never picked as the latest: ``CheckpointManager.save``
first writes the checkpoint's files (``ckpt-N.index``, ``ckpt-N.data-...``), and only then
rewrites the small state file ``checkpoint`` that names the latest one, atomically (written to a
temporary file, then renamed over the old one). Until that rename, every reader still sees the
previous checkpoint. After the rename the manager deletes checkpoints beyond ``max_to_keep``
(``.index`` first) and rewrites the state file; a kill in between leaves a state file that lists a
checkpoint whose files are partly gone. And a kill while the files are written leaves a
``ckpt-N_temp/`` folder. :func:`repair` removes those leftovers and rewrites the state file to
list only complete checkpoints (``helpers.save_faults`` stops a real save in each of these
phases). :func:`simulate_torn_save` fabricates the leftovers of a save that died half-way.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from helpers import tf_internals
from helpers._arguments import positive_int

__all__ = [
    "STATE_FILE",
    "checkpoint_contents",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "fit_backup_callbacks",
    "latest_checkpoint",
    "make_checkpoint",
    "Repair",
    "repair",
    "restore",
    "simulate_torn_save",
]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

STATE_FILE = "checkpoint"  # the file CheckpointManager rewrites, atomically, after each save


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message says why and what to do."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """There is no (complete) checkpoint where one was expected."""


class CheckpointMismatchError(CheckpointError, ValueError):
    """The checkpoint does not fit the objects it is restored into."""


def make_checkpoint(directory: str | os.PathLike, *, max_to_keep: int = 3, **objects):
    """Return ``(checkpoint, manager)`` saving ``objects`` (e.g. model, optimizer, step).

    Create the model and optimizer inside ``strategy.scope()`` first, and build the optimizer
    (``helpers.loops.build_optimizer``) so its slot variables exist and are saved too. The
    manager keeps the ``max_to_keep`` newest checkpoints in ``directory``; call
    ``manager.save(checkpoint_number=step)`` from the host, outside ``strategy.run``: saving
    reads every replica's copy of each variable, so it is always called in cross-replica
    context. First :func:`repair` tidies ``directory`` after a save that was killed. Taught in
    notebook 08_checkpoints_and_preemption.
    """
    import tensorflow as tf

    if not objects:
        raise ValueError("nothing to checkpoint: pass objects as keywords, e.g. model=model")
    positive_int("max_to_keep", max_to_keep)
    repair(directory)  # the manager reads the state file once, now: it must be consistent
    checkpoint = tf.train.Checkpoint(**objects)
    manager = tf.train.CheckpointManager(checkpoint, os.fspath(directory), max_to_keep=max_to_keep)
    return checkpoint, manager


def checkpoint_files(prefix: str | os.PathLike) -> list[str]:
    """The files of the checkpoint ``prefix`` (``.../ckpt-3``): its index and data shards."""
    prefix = Path(prefix)
    return sorted(
        p.name
        for p in prefix.parent.glob(prefix.name + ".*")
        if p.name.endswith(".index") or ".data-" in p.name
    )


def _complete(prefix: str) -> bool:
    """A V2 checkpoint is readable when its index and every data shard it names exist."""
    files = checkpoint_files(prefix)
    index = Path(prefix + ".index")
    if not index.exists():
        return False
    shards = [f for f in files if ".data-" in f]
    if not shards:
        return False
    total = int(shards[0].rsplit("-of-", 1)[1])
    return len(shards) == total


def _listed(directory: str) -> tuple[list[str], dict]:
    """The checkpoints the state file lists, oldest first, the latest last; and their timestamps
    (with ``None`` for the state file's ``last_preserved_timestamp``)."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    if state is None or not state.model_checkpoint_path:
        return [], {}
    times = dict(
        zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps, strict=False)
    )
    listed = [p for p in state.all_model_checkpoint_paths if p != state.model_checkpoint_path]
    listed.append(state.model_checkpoint_path)
    paths = [p if os.path.isabs(p) else os.path.join(directory, p) for p in listed]
    times = {path: times.get(p) for path, p in zip(paths, listed, strict=True)}
    return paths, {**times, None: state.last_preserved_timestamp}


def _no_complete_checkpoint(directory: str, listed: list[str]) -> CheckpointNotFoundError:
    found = checkpoint_files(listed[-1]) or "none"
    return CheckpointNotFoundError(
        f"{os.path.join(directory, STATE_FILE)} lists {[os.path.basename(p) for p in listed]}, "
        f"but none of them has complete files (found for the latest: {found}). The directory was "
        "partly deleted or copied; restore the files, or start a new run in a new directory."
    )


def latest_checkpoint(directory: str | os.PathLike) -> str | None:
    """The newest *committed* checkpoint in ``directory``, or None if none was ever committed.

    Committed: listed in the state file, with all its files. A listed checkpoint whose files are
    missing (a kill while old checkpoints were deleted, or a partial copy) is skipped with a
    warning in favour of the newest complete one. Raises :class:`CheckpointNotFoundError` when the
    state file lists checkpoints and none is complete: ``tf.train.latest_checkpoint`` only logs
    an error and returns None there, and a restarted job would silently begin again from step 0.
    """

    directory = os.fspath(directory)
    listed, _ = _listed(directory)
    if not listed:
        return None
    complete = [p for p in listed if _complete(p)]
    if not complete:
        raise _no_complete_checkpoint(directory, listed)
    if complete[-1] != listed[-1]:
        warnings.warn(
            f"{os.path.basename(listed[-1])} is listed as the latest checkpoint in {directory}, "
            f"but its files are incomplete; using {os.path.basename(complete[-1])} "
            "(helpers.checkpoints.repair fixes the state file)",
            stacklevel=2,
        )
    return complete[-1]


@dataclass
class Repair:
    """What :func:`repair` found and did."""

    latest: str | None  # the checkpoint a restart resumes from
    dropped: list[str] = field(default_factory=list)  # listed, incomplete: no longer listed
    removed: list[str] = field(default_factory=list)  # leftover folders and files, deleted

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.removed)

    def __str__(self) -> str:
        latest = os.path.basename(self.latest) if self.latest else None
        if not self.changed:
            return f"nothing to repair; latest checkpoint: {latest}"
        return (
            f"repaired: dropped {self.dropped or 'nothing'} from the state file, removed "
            f"{self.removed or 'nothing'}; latest checkpoint: {latest}"
        )


_NUMBERED = re.compile(r"^((.+)-(\d+))\.(index|data-\d{5}-of-\d{5})$")


def repair(directory: str | os.PathLike) -> Repair:
    """Tidy ``directory`` after a save killed at any instant; call it before a run resumes.

    1. Deletes leftover temporary folders (``ckpt-N_temp/``) and state files
       (``checkpoint.tmp...``), the files of any numbered checkpoint that is incomplete, and
       complete ones newer than the latest committed one (saves killed before their commit).
    2. Rewrites the state file to list only complete checkpoints, the newest of them as the
       latest (a kill while old checkpoints were deleted lists one whose ``.index`` is gone).

    Committed checkpoints and older unlisted ones are never touched. Raises
    :class:`CheckpointNotFoundError` when the state file lists checkpoints and none is complete
    (nothing is deleted then). Run it only while no other process saves into ``directory``.
    :func:`make_checkpoint` calls it.
    """

    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return Repair(None)
    listed, times = _listed(directory)
    complete = [p for p in listed if _complete(p)]
    if listed and not complete:
        raise _no_complete_checkpoint(directory, listed)
    result = Repair(complete[-1] if complete else None)
    result.dropped = [os.path.basename(p) for p in listed if p not in complete]
    latest = _NUMBERED.match(os.path.basename(result.latest) + ".index") if complete else None
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        numbered = _NUMBERED.match(name)
        prefix = os.path.join(directory, numbered.group(1)) if numbered else None
        uncommitted = (
            numbered
            and latest
            and prefix not in complete
            and numbered.group(2) == latest.group(2)
            and int(numbered.group(3)) > int(latest.group(3))
        )
        temp_dir = name.endswith("_temp") and os.path.isdir(path)
        leftover = temp_dir or name.startswith(STATE_FILE + ".tmp") or ".tempstate" in name
        if leftover or uncommitted or (prefix and not _complete(prefix)):
            if os.path.isdir(path):
                shutil.rmtree(path)
                name += "/"
            else:
                os.remove(path)
            result.removed.append(name)
    if result.dropped:
        tf_internals.write_checkpoint_state(
            directory,
            model_checkpoint_path=complete[-1],
            all_model_checkpoint_paths=complete,
            all_model_checkpoint_timestamps=[times[p] for p in complete]
            if all(times[p] is not None for p in complete)
            else None,
            last_preserved_timestamp=times[None],
            save_relative_paths=True,
        )
    return result


def checkpoint_contents(path: str | os.PathLike) -> list[str]:
    """The top-level names saved in the checkpoint at ``path`` (``["model", "optimizer", ...]``).

    Read from the checkpoint's object graph, not from the variable keys: a variable is stored
    under the *shortest* path that reaches it, so a model's weights may appear under
    ``optimizer/...`` (the optimizer also tracks them) although they belong to ``model``.
    """
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.fspath(path))
    graph = tf_internals.checkpoint_object_graph(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return sorted(child.local_name for child in graph.nodes[0].children)


def _unmatched(message: str, limit: int = 4) -> str:
    """The names of the objects in a TensorFlow matching error, not the variables' values."""
    names = re.findall(r"path=([^,\s]+)", message)
    names += re.findall(r"Unresolved object in checkpoint \(root\)\.?(\S*):", message)
    names = list(dict.fromkeys(names))
    if not names:
        return message.strip().splitlines()[0][:200]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def restore(checkpoint, source: str | os.PathLike, *, partial: bool = False) -> str:
    """Restore ``checkpoint`` from a checkpoint prefix or a directory; return the path used.

    Every variable of ``checkpoint`` must get a value from the file, else
    :class:`CheckpointMismatchError`. Unless ``partial``, every value in the file must also be
    used: ``partial=True`` is for restoring part of a training checkpoint, e.g. only the model
    for serving on another strategy (notebook 08_checkpoints_and_preemption). A directory means its latest committed
    checkpoint; a missing one raises :class:`CheckpointNotFoundError`.
    """
    import tensorflow as tf

    if source is None:
        raise CheckpointNotFoundError(
            "no checkpoint path given (None): tf.train.Checkpoint.restore(None) would restore "
            "nothing and keep the fresh weights without a word"
        )
    source = os.fspath(source)
    if os.path.isdir(source):
        path = latest_checkpoint(source)
        if path is None:
            raise CheckpointNotFoundError(
                f"no committed checkpoint in {source} (no '{STATE_FILE}' state file naming one). "
                "If this run may start from scratch, ask latest_checkpoint(directory) first: "
                "None means there is nothing to restore."
            )
    else:
        path = source
        if not _complete(path):
            found = checkpoint_files(path) or "none"
            raise CheckpointNotFoundError(
                f"no complete checkpoint at {path} (files found: {found}); a checkpoint path is "
                "the prefix without suffix, e.g. .../ckpt-8"
            )
    saved = checkpoint_contents(path)
    try:
        status = checkpoint.restore(path)
    except (ValueError, tf.errors.InvalidArgumentError) as err:
        raise CheckpointMismatchError(
            f"{path} does not fit the objects restored into it: {str(err).splitlines()[0]} "
            "It was written by a model of another shape (layer sizes, input shape, classes)."
        ) from err
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        status.expect_partial()  # the error says it all; no second warning when status is freed
        raise CheckpointMismatchError(
            f"{path} holds {saved}, but these variables found no value in it: "
            f"{_unmatched(str(err))}. The names passed to tf.train.Checkpoint(...) or the "
            "model's structure differ from the program that wrote it."
        ) from err
    if partial:
        status.expect_partial()  # silences the warning about the values deliberately left unused
    else:
        try:
            status.assert_consumed()
        except AssertionError as err:
            status.expect_partial()
            raise CheckpointMismatchError(
                f"{path} holds values that nothing here takes: {_unmatched(str(err))}. To "
                "restore only part of it (e.g. the model without its optimizer), pass "
                "partial=True."
            ) from err
    return path


def simulate_torn_save(directory: str | os.PathLike, number: int, *, size: int = 4096) -> list[str]:
    """Leave in ``directory`` what a save killed half-way leaves: partial files of ``ckpt-number``.

    The data writer's temporary folder with a truncated shard, and a truncated data file with
    no index, just as if the process died before ``CheckpointManager`` committed the save. The
    state file is not touched. Returns the names created. For notebook 08_checkpoints_and_preemption and the tests.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointNotFoundError(f"{directory} is not a directory")
    prefix = f"ckpt-{number}"
    if (directory / f"{prefix}.index").exists():
        raise ValueError(f"{prefix} already exists in {directory}; pick a new number")
    garbage = os.urandom(size)
    temp = directory / f"{prefix}_temp"
    temp.mkdir(exist_ok=True)
    (temp / "part-00000-of-00001.data-00000-of-00001").write_bytes(garbage)
    (directory / f"{prefix}.data-00000-of-00001").write_bytes(garbage[: size // 2])
    return [f"{prefix}_temp/", f"{prefix}.data-00000-of-00001"]


def fit_backup_callbacks(backup_dir: str | os.PathLike, steps_per_epoch: int) -> list:
    """Callbacks that make ``model.fit`` resumable after a kill (notebook 08_checkpoints_and_preemption, cell ``backup-callback``).

    1. ``keras.callbacks.BackupAndRestore`` saving at the end of every epoch, with
       ``double_checkpoint=True``: Keras rewrites its backup file in place, so a kill during that
       write leaves a torn file; with the previous backup kept, the restart falls back to it
       instead of failing.
    2. A check that runs once training (re)starts: the optimizer's step counter, restored with
       the weights, must equal ``first_epoch * steps_per_epoch``. Keras writes the weights and the
       epoch number to two files, one after the other; a kill between the two would make
       ``fit`` redo an epoch on weights that already learnt it. The check turns that into a
       :class:`CheckpointMismatchError` instead of extra, silent training.

    Needs ``steps_per_epoch`` (pass the same value to ``fit``).
    """
    import keras

    positive_int("steps_per_epoch", steps_per_epoch)
    backup_dir = os.fspath(backup_dir)

    class ResumeCheck(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.first_epoch = None

        def on_train_begin(self, logs=None):
            self.first_epoch = None

        def on_epoch_begin(self, epoch, logs=None):
            if self.first_epoch is not None:
                return
            self.first_epoch = epoch
            steps = int(self.model.optimizer.iterations.numpy())
            if steps != epoch * steps_per_epoch:
                raise CheckpointMismatchError(
                    f"the backup in {backup_dir} is inconsistent: its weights are from step "
                    f"{steps}, but fit resumes at epoch {epoch} (step "
                    f"{epoch * steps_per_epoch} with steps_per_epoch={steps_per_epoch}). Either "
                    "steps_per_epoch changed, or the last run died between writing the weights "
                    "and the epoch number. Delete the directory to start over."
                )

    backup = keras.callbacks.BackupAndRestore(
        backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False
    )
    return [backup, ResumeCheck()]
