"""``python -m tools.hardware colab``: the hardware run on Colab's TPU v5e-1, via ``colab run``.

Google's ``google-colab-cli`` (0.7.5, Python 3.12+; read in its wheel): ``colab run [--tpu
v5e1|v6e1] [--timeout SECONDS] SCRIPT`` allocates a fresh VM, runs the local Python script there
with its output streamed back, releases the VM, and exits with the script's own exit status
(``commands/run.py``: a ``SystemExit`` maps to its code, any other error to 1, a missing script to
2); ``--timeout`` defaults to 30 s, so it is always given. ``run`` takes a script, not a notebook,
and brings no files back (``<stem>_output.ipynb`` is what ``colab exec -f NOTEBOOK.ipynb``
writes, ``commands/execution.py``): the script prints the record between two marker lines and
this lane reads it from the output. Sign-in is an interactive browser flow, cached in
``~/.config/colab-cli/``: a maintainer's command, not a CI job.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from . import kernel
from .lane import Run, Stop, checked_commit, finish, log_tail

TPU = "v5e1"
OUT = "hardware-run"  # colab run starts the script in /content
SIGN_IN = Path("~/.config/colab-cli")
INSTALL = (
    "`colab` (google-colab-cli) is not on PATH. Install it with `pip install "
    "google-colab-cli==0.7.5` (Python 3.12 or newer) and sign in once, in a terminal with a "
    "browser: `colab new` opens Google's sign-in and caches it in ~/.config/colab-cli/."
)


def record_text(output: str) -> str | None:
    """The record the script printed between its marker lines, or None."""
    if kernel.RECORD_BEGIN not in output or kernel.RECORD_END not in output:
        return None
    return output.split(kernel.RECORD_BEGIN, 1)[1].split(kernel.RECORD_END, 1)[0].strip()


def main(run: Run, folder: Path, limit: float) -> int:
    colab = shutil.which("colab")
    if colab is None:
        raise Stop(INSTALL, "google-colab-cli is not installed.")
    if not any(SIGN_IN.expanduser().glob("*.json")):
        raise Stop(
            f"Not signed in to Colab ({SIGN_IN}/ holds no credentials): run `colab new` once in "
            "a terminal with a browser, then `colab stop`.",
            "not signed in to Colab.",
        )
    run.commit = checked_commit()
    run.out.mkdir(parents=True, exist_ok=True)
    script = run.out / "run.py"
    script.write_text(
        kernel.script(run.commit, run.run_id, "colab", OUT, run.driver_args(), echo=True)
    )
    session = f"tfg-{run.nonce}"
    command = [colab, "run", "--tpu", TPU, "--timeout", str(int(limit)), "-s", session, str(script)]
    print("$", " ".join(command), flush=True)
    lines = []
    try:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            for line in proc.stdout:
                print(line, end="", flush=True)
                lines.append(line)
    except KeyboardInterrupt:
        raise Stop(
            f"\nInterrupted. `colab run` releases its VM as it exits; if `colab sessions` still "
            f"lists {session}, the run goes on there: `colab stop -s {session}` ends it.",
            "interrupted while Colab runs.",
        ) from None
    output = "".join(lines)
    (run.out / "colab.log").write_text(output, encoding="utf-8")
    text = record_text(output)
    if text is None:
        raise Stop(
            f"`colab run` exited {proc.returncode} without a record. Last lines of its "
            f"output ({run.out / 'colab.log'}):\n{log_tail(output)}",
            "no record came back from Colab.",
        )
    (run.out / "record.json").write_text(text + "\n", encoding="utf-8")
    return finish(run.out / "record.json", folder, run.run_id)
