"""The package installs under one unique name and works from a user's project that has its own `core/`,
`gui/`, `resources/` and `config.py` (research code often does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def site_packages(venv: Path) -> Path:
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    return Path(purelib)


@pytest.mark.slow
def test_a_regular_install_adds_one_top_level_package(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    before = set(os.listdir(site_packages(venv)))
    # --no-deps: what is checked is this project's own files, not TensorFlow's.
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                           "--disable-pip-version-check", str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    added = set(os.listdir(site_packages(venv))) - before
    assert {name for name in added if not name.endswith((".dist-info", ".pth"))} == {"tf_device_panel"}, added
    package = site_packages(venv) / "tf_device_panel"
    for shipped in ("__main__.py", "launcher.py", "core/runproc/runtime_main.py", "core/runproc/jobs/script.py",
                    "core/panel_runs/command.py", "gui/shell/main_window.py",
                    "resources/style.qss", "resources/icons/tf-device-panel.svg"):
        assert (package / shipped).is_file(), f"{shipped} is missing from the installed package"
    assert (venv / "bin" / "tf-device-panel").is_file()


def make_user_project(folder: Path) -> Path:
    """A project whose own packages carry the panel's old top-level names, and a `tensorflow.py` (a
    classic beginner's file name): a panel process that imported from the current folder would break."""
    for package in ("core", "gui", "resources", "tests"):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(f"OWNER = 'user {package}'\n")
    (folder / "core" / "config.py").write_text("LEARNING_RATE = 0.25\n")
    (folder / "core" / "model.py").write_text("def build():\n    return 'user model'\n")
    (folder / "config.py").write_text("BATCH = 7\n")
    (folder / "tensorflow.py").write_text("raise ImportError('the project\\'s own tensorflow.py was imported')\n")
    (folder / "train.py").write_text(textwrap.dedent("""\
        import sys
        import config
        import gui
        import resources
        from core.config import LEARNING_RATE
        from core.model import build
        print(f"user script: {build()} lr={LEARNING_RATE} batch={config.BATCH} {gui.OWNER} {resources.OWNER}")
        print(f"first on sys.path: {sys.path[0]}")
        """))
    return folder


def cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.run([str(BIN / "tf-device-panel"), *args], cwd=folder, capture_output=True, text=True,
                          timeout=300, env=env)


def test_every_command_works_from_a_project_with_its_own_core_gui_and_config(tmp_path: Path) -> None:
    project = make_user_project(tmp_path / "research")

    done = cli(project, "devices", "--json")
    assert done.returncode == 0, done.stderr
    assert [d["short_name"] for d in json.loads(done.stdout)["logical"]] == ["/CPU:0"]

    done = cli(project, "run", "matmul", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["matrix"] == [[22, 28], [49, 64]]

    done = cli(project, "run", "script", "-p", "path=train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    # The script sees its own packages, and its own folder first on sys.path, as under `python train.py`.
    assert "user script: user model lr=0.25 batch=7 user gui user resources" in done.stdout, done.stdout
    assert f"first on sys.path: {project}" in done.stdout, done.stdout

    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "jobs", "--json"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "matmul" in {job["name"] for job in json.loads(done.stdout)}


def test_the_panel_does_not_shadow_a_users_core_package(tmp_path: Path) -> None:
    project = make_user_project(tmp_path / "research")
    code = "import core, gui, resources; print(core.OWNER, gui.OWNER, resources.OWNER)"
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "user core user gui user resources", done.stdout + done.stderr
    elsewhere = subprocess.run([sys.executable, "-c", "import core"], cwd=tmp_path, capture_output=True, text=True,
                               timeout=60)
    assert elsewhere.returncode != 0 and "No module named 'core'" in elsewhere.stderr


def test_the_window_works_from_that_project(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PySide6")
    from helpers import wait_for_message
    from PySide6.QtCore import QSettings, Qt
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.core.client.session import JobEnded
    from tf_device_panel.gui.shell.main_window import MainWindow

    project = make_user_project(tmp_path / "research")
    monkeypatch.chdir(project)  # as if `tf-device-panel` was started in the project's folder
    win = MainWindow(settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                     history=RunHistory())
    qtbot.addWidget(win)
    win.show()
    try:
        # Without the import-path guard the runtime imports the project's core/ and dies at start.
        qtbot.waitUntil(lambda: win.manager.state in ("ready", "exited"), timeout=120_000)
        assert win.manager.state == "ready", win.status.notices
        qtbot.waitUntil(win.runs.run_button.isEnabled, timeout=10_000)
        win.runs.select_job("matmul")
        with wait_for_message(qtbot, win.controller, JobEnded, 120_000) as finished:
            qtbot.mouseClick(win.runs.run_button, Qt.MouseButton.LeftButton)
        outcome = finished[0].outcome
        assert outcome.status == "ok" and outcome.result["matrix"] == [[22, 28], [49, 64]], outcome.error
    finally:
        win.close()
