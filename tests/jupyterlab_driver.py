"""JupyterLab in a real browser, driven as a reader drives it: open, step, Run All, close.

:class:`Lab` starts JupyterLab the way a user does, ``make lab`` (as root too), on 127.0.0.1
with a token, over a folder of copies of the lessons, with autosave off: nothing a check does is
ever written back. The page helpers read what the reader would see: the tab's modified mark,
error and stderr outputs, images, the kernel's status.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import papermill

ROOT = Path(__file__).resolve().parents[1]
STDERR = "application/vnd.jupyter.stderr"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_smoke_copy(source: Path, folder: Path, parameters: dict) -> Path:
    """A copy of ``source`` with the smoke parameters in papermill's injected cell.

    This is how the smoke values reach a kernel that JupyterLab starts: the same cell headed
    ``# Parameters`` that a headless run adds, written by papermill without executing anything.
    """
    target = folder / source.name
    papermill.execute_notebook(
        str(source), str(target), parameters=parameters, prepare_only=True, log_output=False
    )
    return target


class Lab:
    """``make lab`` on ``folder``, for the ``with`` block; ``url(name)`` opens a notebook."""

    def __init__(self, folder: Path, venv: Path):
        self.folder, self.venv = folder, venv
        self.token, self.port = secrets.token_hex(12), free_port()
        self.home = folder.parent / "lab-home"

    def __enter__(self) -> Lab:
        # Autosave off: nothing is written back. Every cell in the page: JupyterLab 4 otherwise
        # renders only the cells near the screen, and a check would miss the others' outputs.
        for plugin, values in (
            ("docmanager-extension/plugin", {"autosave": False}),
            ("notebook-extension/tracker", {"windowingMode": "none"}),
            # No news or update check: no request leaves 127.0.0.1, and no pop-up on screenshots.
            ("apputils-extension/notification", {"fetchNews": "false", "checkForUpdates": False}),
        ):
            path = self.home / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        args = [
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.news_url=",  # no request to the internet for news or updates
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        env = {
            **os.environ,
            "JUPYTERLAB_SETTINGS_DIR": str(self.home / "settings"),
            "JUPYTER_RUNTIME_DIR": str(self.home / "runtime"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.home / "workspaces"),
            "MAKEFLAGS": "",
        }
        command = [
            "make",
            "--no-print-directory",
            "lab",
            f"VENV={self.venv}",
            f"LAB_DIR={self.folder}",
            f"LAB_ARGS={' '.join(args)}",
        ]
        self.log = open(self.home / "lab.log", "w")  # noqa: SIM115 - closed in __exit__
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"make lab stopped:\n{(self.home / 'lab.log').read_text()}")
            try:
                urllib.request.urlopen(f"{self.base}api/status?token={self.token}", timeout=2)
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"JupyterLab did not start:\n{(self.home / 'lab.log').read_text()}")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, name: str) -> str:
        # A workspace of its own per notebook: nothing restored from another check's tabs.
        workspace = Path(name).stem.replace("_", "-")
        return f"{self.base}lab/workspaces/{workspace}/tree/{name}?reset&token={self.token}"

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def copy_lessons(names: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(ROOT / "notebooks" / name, folder / name)


# --- what the reader sees -------------------------------------------------------------------

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def wait_for_kernel_idle(page, timeout: float = 600) -> None:
    """Until the open notebook's kernel is connected and idle."""
    page.wait_for_function(
        """() => {
            const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) '
                                             + '.jp-Notebook-ExecutionIndicator');
            return s && s.getAttribute('data-status') === 'idle';
        }""",
        timeout=timeout * 1000,
    )


# The open notebook's execution counts, one per code cell: 0 before a cell ran, -1 while it
# runs or waits to run ([*]).
_RUN_NUMBERS = """[...document.querySelectorAll(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
    .map(p => p.textContent.includes('*') ? -1
              : +((p.textContent.match(/\\[(\\d+)\\]/) || [0, 0])[1]))"""


def last_run_number(page) -> int:
    """The highest execution count the open notebook shows (0 before any cell ran)."""
    return page.evaluate(f"() => Math.max(0, ...{_RUN_NUMBERS})")


def wait_for_run_start(page, after: int, timeout: float = 120) -> None:
    """Until a cell runs or waits to run, or one ran since the count was `after`: on a busy
    machine the kernel may turn busy seconds after a keypress or a menu's click."""
    page.wait_for_function(
        f"(after) => {_RUN_NUMBERS}.some(n => n < 0 || n > after)",
        arg=after,
        timeout=timeout * 1000,
    )


def is_modified(page) -> bool:
    """Whether the notebook's tab shows the modified mark (JupyterLab's dirty state)."""
    tab = page.locator(".lm-TabBar-tab.lm-mod-current.jp-mod-current").first
    return "jp-mod-dirty" in (tab.get_attribute("class") or "")


def show_all_code(page) -> None:
    """View > Expand All Code: a cell whose source is hidden (the lessons' checks) shows no
    prompt, so whether it ran can be read only once its source is shown again."""
    page.locator(".lm-MenuBar-itemLabel", has_text="View").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Expand All Code").first.click()
    page.wait_for_timeout(500)


def outputs_seen(page) -> dict:
    """What the open notebook shows: code cells, how many ran or run, stderr outputs (a
    traceback is one too: JupyterLab renders both as stderr), images and broken images."""
    return page.evaluate(
        """(stderr) => {
            const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
            const cells = [...panel.querySelectorAll('.jp-CodeCell')];
            const prompts = cells.map(c => (c.querySelector('.jp-InputPrompt') || {}).textContent || '');
            const images = [...panel.querySelectorAll('.jp-OutputArea-output img')];
            return {
                code_cells: cells.length,
                executed: prompts.filter(p => /\\[\\d+\\]/.test(p)).length,
                running: prompts.filter(p => p.includes('*')).length,
                stderr: [...panel.querySelectorAll('[data-mime-type="' + stderr + '"]')]
                    .map(e => e.textContent.slice(0, 300)),
                images: images.length,
                broken_images: images.filter(i => !(i.naturalWidth > 0)).length,
            };
        }""",
        STDERR,
    )
