"""Keep TensorFlow's own logging out of the notebooks; every notebook's setup cell calls it.

Jupyter shows a kernel's stderr, C++ included, in the cell: without this, a headless run put
about 600 lines of TensorFlow logging into the cells. Log levels only work when set before
TensorFlow is first imported. Kept: C++ errors and Python warnings. A level already set (e.g.
``TF_CPP_MIN_LOG_LEVEL=0`` to see everything) is never changed.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import warnings

from helpers import processes
from tpucheck import runtime
from tpucheck.profiling import captured_stderr as _captured_stderr

__all__ = ["quiet_tensorflow"]


def quiet_tensorflow(import_now: bool | None = None) -> list[str]:
    """Lower TensorFlow's C++ and Python logging to warnings; return the startup lines dropped.

    With ``import_now`` (default: unless TPU hardware is in sight, whose start-up lines are worth
    seeing) TensorFlow is imported here with the C-level stderr captured, and the notices no
    log level reaches (:func:`helpers.processes.is_harmless_log`) are dropped; other lines are
    passed on. Does nothing more if TensorFlow is already imported or missing.
    """
    if import_now is None:
        import_now = not runtime.tpu_hints()
    os.environ.setdefault(processes.LOG_LEVEL_VARIABLE, processes.TF_LOG_LEVEL)
    # Keras' fit defaults to shuffle=True and warns that a tf.data.Dataset ignores it; the
    # lessons' pipelines shuffle themselves, so the warning asks nothing of the reader.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed", category=UserWarning)
    for name in ("tensorflow", "absl"):
        logger = logging.getLogger(name)
        if logger.level in (logging.NOTSET, logging.DEBUG, logging.INFO):
            logger.setLevel(logging.WARNING)
    if "tensorflow" in sys.modules:
        _tensorflow_warnings_once()
    if not import_now or "tensorflow" in sys.modules:
        return []
    dropped: list[str] = []
    try:
        with _captured_stderr() as captured:
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")  # the GPU probe writes its lines here
    except ImportError:
        return []  # runtime.ensure_tensorflow() says what to install
    finally:
        _quiet_absl()
    for line in captured.text.splitlines():
        if processes.is_harmless_log(line):
            dropped.append(line)
        elif line.strip():
            print(line, file=sys.stderr)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # TF may reset it on import
    _tensorflow_warnings_once()
    return dropped


def _tensorflow_warnings_once() -> None:
    """Show each TensorFlow warning once, on stderr, and none after the kernel has gone.

    TensorFlow's own handler writes to stdout in Jupyter, and once any library calls
    ``logging.warning()`` the root logger's stderr handler shows each warning a second time.
    Objects freed at shutdown (a checkpoint with unrestored values) would log to closed output:
    "--- Logging error ---" tracebacks on the terminal.
    """
    logger = logging.getLogger("tensorflow")
    own = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]
    if own:  # TensorFlow adds none when the root logger was set up before it was imported
        logger.propagate = False
        for handler in own:
            if handler.stream is sys.stdout:
                handler.setStream(sys.stderr)
    if not getattr(logger, "_field_guide_exit_hook", False):
        atexit.register(setattr, logger, "disabled", True)
        logger._field_guide_exit_hook = True


def _quiet_absl() -> None:
    try:
        from absl import logging as absl_logging
    except ImportError:  # absl comes with TensorFlow; nothing to do without it
        return
    if absl_logging.get_verbosity() > absl_logging.WARNING:
        absl_logging.set_verbosity(absl_logging.WARNING)
