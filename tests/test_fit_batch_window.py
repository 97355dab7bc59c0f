"""The window's side of fit-batch: a script that ran out of memory offers "Find the batch that fits", which opens
Batch that fits prefilled with that script, its batch-size argument marked {batch}."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import job_ended

pytest.importorskip("PySide6")
from PySide6.QtCore import Qt
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.gui.shell.main_window import MainWindow

OOM = {"verdict": "fragmentation", "request_bytes": 58 * 2**20, "limit_bytes": 256 * 2**20,
       "in_use_bytes": 118 * 2**20, "largest_free_bytes": 40 * 2**20, "explanation": "", "advice": []}


def _script_ended(window: MainWindow, path: Path, args: str, oom: dict | None) -> None:
    runs = window.runs
    runs.select_job("script")
    runs.job_started("script")
    job_ended(runs, JobOutcome("script", {"path": str(path), "args": args}, {}, status="error" if oom else "ok",
                                 oom=oom))  # type: ignore[arg-type]


def test_a_script_out_of_memory_offers_the_batch_that_fits_prefilled(qtbot, window: MainWindow, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    runs = window.runs
    _script_ended(window, script, "--epochs 2 --batch-size 512", None)
    assert not runs.find_batch_button.isVisible()  # it held: nothing to find
    _script_ended(window, script, "--epochs 2 --batch-size 512", OOM)
    assert runs.find_batch_button.isVisible()
    runs.select_job("fit")
    assert not runs.find_batch_button.isVisible()  # the offer belongs to the script's result
    runs.select_job("script")
    qtbot.mouseClick(runs.find_batch_button, Qt.MouseButton.LeftButton)
    assert runs.current_job == "fit-batch"
    values = runs.form().values()
    assert values["script"] == str(script) and values["args"] == "--epochs 2 --batch-size {batch}"


def test_arguments_without_a_recognisable_batch_are_left_for_the_person_to_mark(qtbot, window: MainWindow,
                                                                                tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    _script_ended(window, script, "--lr 0.1", OOM)
    window.runs.find_batch_for_script()
    assert window.runs.form().values()["args"] == "--lr 0.1"
