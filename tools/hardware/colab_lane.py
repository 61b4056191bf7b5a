"""``python -m tools.hardware colab``: the hardware run on Colab's TPU v5e-1, via ``colab run``.

``colab run`` (google-colab-cli 0.7.5, read in its wheel's ``commands/run.py``) runs a local
script on a fresh VM, streams its output back, releases the VM and exits with the script's
status. Its ``--timeout`` defaults to 30 s, so it is always given; it brings no files back, so the
script prints the record between two marker lines.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .driver import streamed
from .lane import RECORD_BEGIN, RECORD_END, Run, Stop, checked_commit, finish, log_tail

TPU = "v5e1"
OUT = "hardware-run"  # colab run starts the script in /content
SIGN_IN = Path("~/.config/colab-cli")
INSTALL = (
    "`colab` (google-colab-cli) is not on PATH. Install it with `pip install "
    "google-colab-cli==0.7.5` (Python 3.12 or newer) and sign in once, in a terminal with a "
    "browser: `colab new` opens Google's sign-in and caches it in ~/.config/colab-cli/."
)


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
    script.write_text(run.script(OUT, echo=True))
    session = f"tfg-{run.nonce}"
    command = [colab, "run", "--tpu", TPU, "--timeout", str(int(limit)), "-s", session, str(script)]
    log = run.out / "colab.log"
    try:
        code = streamed(command, log)
    except KeyboardInterrupt:
        raise Stop(
            f"\nInterrupted. `colab run` releases its VM as it exits; if `colab sessions` still "
            f"lists {session}, the run goes on there: `colab stop -s {session}` ends it.",
            "interrupted while Colab runs.",
        ) from None
    output = log.read_text(encoding="utf-8")
    if RECORD_BEGIN not in output or RECORD_END not in output:
        raise Stop(
            f"`colab run` exited {code} without a record. Last lines of its output ({log}):\n"
            f"{log_tail(output)}",
            "no record came back from Colab.",
        )
    record = output.split(RECORD_BEGIN, 1)[1].split(RECORD_END, 1)[0].strip()
    (run.out / "record.json").write_text(record + "\n", encoding="utf-8")
    return finish(run.out / "record.json", folder, run.run_id)
