"""The Colab lane (``python -m tools.hardware colab``) against a stand-in ``colab`` executable.

The stand-in (tests/standins/colab) runs the generated host script on this machine as
google-colab-cli's ``colab run`` runs it on a VM; the script really fetches this checkout's
commit from ``FIELD_GUIDE_REPO`` and starts a fake driver there, which writes the fixture record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STANDINS = ROOT / "tests" / "standins"


def lane(tmp_path: Path, path: str = str(STANDINS), signed_in: bool = True, **env: str):
    home = tmp_path / "home"
    if signed_in:
        (home / ".config" / "colab-cli").mkdir(parents=True)
        (home / ".config" / "colab-cli" / "token.json").write_text("{}")
    full_env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
        "FIELD_GUIDE_REPO": str(ROOT),
        "FIELD_GUIDE_HARDWARE_DRIVER": "fake_hardware_driver",
        "PYTHONPATH": str(STANDINS),
        "COLAB_STANDIN_LOG": str(tmp_path / "colab-calls.jsonl"),
        **env,
    }
    command = [sys.executable, "-m", "tools.hardware", "colab", "--limit-hours", "0.05"]
    command += ["--records", str(tmp_path / "records"), "--out", str(tmp_path / "out")]
    proc = subprocess.run(
        command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_colab_run_on_a_v5e1_brings_the_record_back(tmp_path):
    code, output = lane(tmp_path)
    assert code == 0, output
    (call,) = [
        json.loads(line) for line in (tmp_path / "colab-calls.jsonl").read_text().splitlines()
    ]
    assert call["command"] == "run" and call["tpu"] == "v5e1" and call["timeout"] == 180
    stored = list((tmp_path / "records").glob("colab-*.json"))
    assert len(stored) == 1 and output.strip().splitlines()[-1] == str(stored[0])
    record = json.loads(stored[0].read_text())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert record["commit"] == commit.stdout.strip() and record["platform"] == "colab"


def test_a_run_that_writes_no_record_exits_2_with_its_last_lines(tmp_path):
    code, output = lane(tmp_path, FAKE_DRIVER="crash")
    assert code == 2 and "`colab run` exited 3 without a record" in output
    assert "RuntimeError: the driver crashed" in output
    assert output.strip().splitlines()[-1] == "No record: no record came back from Colab."


def test_without_the_cli_or_a_sign_in_nothing_runs(tmp_path):
    code, output = lane(tmp_path / "a", path=str(tmp_path / "empty"))
    assert code == 2 and "pip install google-colab-cli==0.7.5" in output
    code, output = lane(tmp_path / "b", signed_in=False)
    assert code == 2 and "Not signed in to Colab" in output
    assert "Traceback" not in output
