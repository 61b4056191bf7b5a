"""Around checkpoints (notebook 08_checkpoints_and_preemption): the leftovers of a killed save.

The custom loop's checkpoint, save and its one restore path, and ``fit``'s backup, are the
reference script's part "checkpoint" (``train_tpu.checkpointing``, ``restore``,
``fit_backup``), shown by notebook 08_checkpoints_and_preemption. This module keeps
what is not a learner's training code: :func:`repair` tidies what a save killed at any instant
leaves (see below).

Why a checkpoint interrupted mid-write is never picked as the latest: ``CheckpointManager.save``
first writes the checkpoint's files (``ckpt-N.index``, ``ckpt-N.data-...``), and only then
rewrites the small state file ``checkpoint`` that names the latest one, atomically (written to a
temporary file, then renamed over the old one). Until that rename, every reader still sees the
previous checkpoint. After the rename the manager deletes checkpoints beyond ``max_to_keep``
(``.index`` first) and rewrites the state file; a kill in between leaves a state file that lists a
checkpoint whose files are partly gone. And a kill while the files are written leaves a
``ckpt-N_temp/`` folder. :func:`repair` removes those leftovers and rewrites the state file to
list only complete checkpoints (``helpers.save_faults`` stops a real save in each of these
phases).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from helpers import tf_internals

__all__ = [
    "STATE_FILE",
    "CheckpointError",
    "CheckpointNotFoundError",
    "Repair",
    "repair",
]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

STATE_FILE = "checkpoint"  # the file CheckpointManager rewrites, atomically, after each save


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message says why and what to do."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """There is no (complete) checkpoint where one was expected."""


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
