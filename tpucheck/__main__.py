"""``python -m tpucheck COMMAND``: the TPU tools as commands.

    python -m tpucheck selftest [--out DIR] [--smoke] [--simulated-replicas N]
        check this TPU runtime with short real runs; write tpu-self-test.md and .json
    python -m tpucheck profile LOGDIR
        read the newest profile TensorBoard's profiler (or tf.profiler) wrote under LOGDIR and
        say what limits the profiled steps: retracing, input, host overhead or the ops
    python -m tpucheck explain [TEXT ...] | --table
        what a pasted TPU error (TEXT, or stdin) means and its fix; --table lists them all

The readiness check is Python: ``from tpucheck import readiness; readiness.check(dataset, model,
strategy=strategy, step=step)``.
"""

import importlib
import sys

COMMANDS = {
    "selftest": "tpucheck.selftest",
    "profile": "tpucheck.profiling",
    "explain": "tpucheck.failures",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    asked = argv[:1] in (["-h"], ["--help"])
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip().split("\n\n", 1)[1], file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
