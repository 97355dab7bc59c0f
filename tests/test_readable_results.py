"""Issue 41: every number a class reads, whole. Every result kind as a real run returns it (no runtime), drawn
in the window at 1024×768, 1280×720, 1920×1080 and in presentation mode at 1280×720: no table cell elided, no
column out of sight, every caption ending on a whole line, the job's output at its last line (8 lines tall at
1280×720). The same checks after real runs are in test_classroom_layout.py (slow)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
from readable import CLASSROOM_SIZES, cut_captions, elided_cells, output_end_hidden, size_name
from test_classroom_layout import BENCHMARK
from test_window_layout import RESULTS
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.gui.main_window import MainWindow

OUTPUT_LINES = [(f"step {n}: loss {1 / n:.4f}", False) for n in range(1, 41)]


def settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    yield win
    if not win.closing:
        win.close()


@pytest.mark.parametrize("size", CLASSROOM_SIZES, ids=size_name)
def test_every_result_kind_reads_whole(qtbot, window: MainWindow, size: tuple[int, int, bool]) -> None:
    width, height, presentation = size
    window.resize(width, height)
    window.set_presentation(presentation)
    runs = window.runs
    problems = []
    for job, result in {**RESULTS, "benchmark": BENCHMARK}.items():
        runs.select_job(job)
        runs.job_started(job)
        runs.add_output(job, OUTPUT_LINES)
        runs.job_finished(JobOutcome(job, {}, {}, status="ok", result=result))
        settle(qtbot)
        least_lines = 8 if (width, height, presentation) == (1280, 720, False) else 2
        problems += [f"{job}: {problem}" for problem in
                     elided_cells(window) + cut_captions(window) + output_end_hidden(runs, least_lines)]
    assert not problems, "\n".join(problems)
