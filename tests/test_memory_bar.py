"""The configuration panel's split bar: each logical GPU's limit and share, and what is left, readable as
numbers on a real 80 GB GPU (a 2 GiB limit drawn to scale is 1/40 of the bar)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings
from PySide6.QtGui import QFontMetricsF
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.views.memory_bar import MemoryBar

from tests.fake_nvml import H100_NAME, H100_TOTAL_MIB


def painted(bar: MemoryBar) -> list[str]:
    """Paints the bar; fails if a label was elided or is wider than its rectangle by the font's metrics."""
    image = bar.grab()
    assert not image.isNull() and bar.painted
    metrics = QFontMetricsF(bar.font())
    for text, rect in bar.painted:
        assert "…" not in text, (text, rect.width())
        assert metrics.horizontalAdvance(text) <= rect.width() + 0.5, (text, rect.width())
        assert rect.right() <= bar.width() + 0.5 and rect.bottom() <= bar.height() + 0.5
    return [text for text, _ in bar.painted]


@pytest.mark.parametrize("width", [260, 300, 420, 800])
def test_a_2048_and_a_4096_mib_limit_on_an_h100_are_written_with_their_share_and_the_rest(qtbot, width) -> None:
    bar = MemoryBar()
    qtbot.addWidget(bar)
    bar.resize(width, bar.height())
    bar.show()
    bar.set_values([2048, 4096], H100_TOTAL_MIB, 0)
    texts = painted(bar)
    assert len(texts) == 3 and "2.0 GiB" in texts[0] and "4.0 GiB" in texts[1] and "73.6 GiB" in texts[2]
    # Every width keeps each limit's share and says what is left: a narrow bar takes a second row for them.
    assert texts[0].endswith("2.0 GiB · 2.5 %") and texts[1].endswith("4.0 GiB · 5.0 %")
    assert texts[2].startswith("73.6 GiB left")
    if width >= 420:
        assert texts == ["/GPU:0 2.0 GiB · 2.5 %", "/GPU:1 4.0 GiB · 5.0 %", "73.6 GiB left · 92 %"]
    _, _, fit = bar.layout_pieces(bar.width() - 1)
    assert fit.rows == (1 if width >= 300 else 2) and not fit.to_scale  # the scale gave way to the numbers
    assert bar.height() == fit.rows * bar._row_height()
    assert "2,048 MiB (2.5 %)" in bar.toolTip() and "left: 75,415 MiB" in bar.toolTip()


def test_eight_limits_wrap_onto_rows_and_an_over_commit_and_an_unknown_size_are_written(qtbot) -> None:
    bar = MemoryBar()
    qtbot.addWidget(bar)
    bar.resize(280, bar.height())
    bar.show()
    bar.set_values([1024] * 8, H100_TOTAL_MIB, 2)
    texts = painted(bar)
    assert all(text.startswith("1.0 GiB") for text in texts[:8]) and texts[8].startswith("71.6 GiB")
    one_row = bar._row_height()
    assert bar.height() > one_row  # taller, not narrower: every number stays whole
    bar.set_values([60_000, 30_000], H100_TOTAL_MIB, 0)
    assert painted(bar)[-1] == "over by 8.2 GiB" and "over by 8,441 MiB" in bar.toolTip()
    bar.set_values([2048], None, 0)
    assert painted(bar) == ["/GPU:0 2.0 GiB", "GPU memory unknown"]
    bar.set_values([4096, 4096], 8192, 0)  # a GPU split whole, drawn to scale: no rest piece
    assert painted(bar) == ["/GPU:0 4.0 GiB · 50 %", "/GPU:1 4.0 GiB · 50 %"]
    assert bar.layout_pieces(bar.width() - 1)[2].to_scale


def window_with_an_h100(qtbot, tmp_path, size=(1280, 720), reserved_mib: int | None = None) -> MainWindow:
    """The real window, not started, told by a runtime's ready report that TensorFlow sees one H100."""
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    window.session.nvml_gpus = [GpuSnapshot(0, name=H100_NAME, memory_total_mib=H100_TOTAL_MIB,
                                          memory_reserved_mib=reserved_mib)]
    report = {"tf_version": "2.21.0", "python": "3.12", "pid": 1, "build": {"is_cuda_build": True},
              "physical": [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0},
                           {"name": "/physical_device:GPU:0", "device_type": "GPU", "index": 0, "visible": True,
                            "device_name": H100_NAME}],
              "logical": [{"name": "/job:localhost/replica:0/task:0/device:GPU:0", "short_name": "/GPU:0",
                           "device_type": "GPU"}]}
    window.controller.deliver([events.from_json({"type": events.READY, "data": report})])
    window.docks["config"].show()
    window.docks["config"].raise_()
    return window


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_the_configuration_panels_split_bar_is_readable_in_the_window(qtbot, tmp_path, size) -> None:
    window = window_with_an_h100(qtbot, tmp_path, size)
    (editor,) = window.config_panel.gpu_editors
    editor.add_split(2048)
    editor.add_split(4096)
    qtbot.waitUntil(editor.bar.isVisible, timeout=2000)
    qtbot.waitUntil(lambda: editor.bar.width() > 150, timeout=2000)
    texts = painted(editor.bar)
    assert len(texts) == 3 and "2.0 GiB · 2.5 %" in texts[0] and "4.0 GiB · 5.0 %" in texts[1]
    assert texts[2].startswith("73.6 GiB left")
    window.close()


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_the_configuration_dock_shows_its_fields_whole_once_a_gpu_is_split(qtbot, tmp_path, size) -> None:
    """The dock scrolls down, never sideways; its rows for a split GPU came with the runtime's report and were
    wider than the dock, so the split bar's "73.6 GiB left", the remove buttons and the fraction field were cut
    at the right edge with no way to see them (screenshot at 1280×720)."""
    window = window_with_an_h100(qtbot, tmp_path, size)
    (editor,) = window.config_panel.gpu_editors
    editor.add_split(2048)
    editor.add_split(4096)
    viewport = window.config_panel.scroll_area.viewport()

    def cut() -> list[tuple[str, int, int]]:  # what reaches past the dock's visible width
        rights = [(type(widget).__name__, widget.mapTo(viewport, widget.rect().topRight()).x())
                  for widget in (editor.bar, editor, window.config_panel)]
        return [(name, right, viewport.width()) for name, right in rights if right >= viewport.width()]

    dock = window.docks["config"]
    qtbot.waitUntil(lambda: editor.bar.isVisible() and dock.width() > window.config_panel.minimumSizeHint().width()
                    and not cut(), timeout=3000)
    window.close()


def test_the_window_checks_a_split_against_cudas_total_not_nvmls(qtbot, tmp_path) -> None:
    """On an H100 NVML counts 81,559 MiB and CUDA 81,079 (the driver keeps 480): a split between the two passed
    the panel's check and was refused by the run. The panel now checks what the run checks."""
    from tests.fake_nvml import H100_CUDA_TOTAL_MIB

    window = window_with_an_h100(qtbot, tmp_path, reserved_mib=H100_TOTAL_MIB - H100_CUDA_TOTAL_MIB)
    (editor,) = window.config_panel.gpu_editors
    assert editor.bar.total == H100_CUDA_TOTAL_MIB
    editor.add_split(81_300)  # under NVML's total, over CUDA's
    qtbot.waitUntil(lambda: not window.config_panel.apply_button.isEnabled(), timeout=2000)
    problem = editor.problem_label.text().replace(",", "")
    assert "81300" in problem and "81079" in problem, problem
    window.close()
