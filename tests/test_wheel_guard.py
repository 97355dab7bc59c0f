"""Issue 41: a mouse wheel passing over a form changes nothing (scrolling the Configuration dock turned the GPU
allocator into cuda_malloc_async and the logical CPUs from 2 to 3); it scrolls the form instead. A field the
person clicked into (focused) still takes the wheel."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QScrollBar,
    QSpinBox,
    QWidget,
)
from tf_device_panel.core.devices.gpu_facts import GpuInfo
from tf_device_panel.gui.dialogs.share_dialog import show_share
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.widgets.common import guard_wheel

FIELDS = (QAbstractSpinBox, QComboBox, QAbstractSlider)


@pytest.fixture
def window_size() -> tuple[int, int]:
    return (1280, 720)


def wheel(widget: QWidget, steps: int = -3) -> None:
    """A mouse wheel turned over the middle of `widget` (negative: towards the person, scrolling down)."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def value(field: QWidget) -> Any:
    if isinstance(field, QComboBox):
        return field.currentText()
    if isinstance(field, QSpinBox | QDoubleSpinBox):
        return field.value()
    assert isinstance(field, QAbstractSlider)
    return field.value()


def fields_in(root: QWidget) -> list[QWidget]:
    return [child for child in root.findChildren(QWidget) if isinstance(child, FIELDS) and child.isEnabled()
            and not isinstance(child, QScrollBar)]  # a scroll bar is there to take the wheel


def changed_by_wheel(root: QWidget) -> list[str]:
    """Every field under `root` whose value a wheel (both ways) over it changed, by its tooltip or class."""
    changed = []
    for field in fields_in(root):
        if isinstance(field, QComboBox) and field.count() < 2:
            continue  # nothing to change to
        before = value(field)
        wheel(field, -3)
        wheel(field, 3)
        wheel(field, -1)
        if value(field) != before:
            changed.append(f"{type(field).__name__} {field.toolTip()[:40] or field.objectName()}: {before} → "
                           f"{value(field)}")
    return changed


def test_a_wheel_over_any_form_changes_no_field(qtbot, window: MainWindow) -> None:
    panel = window.config_panel
    panel.set_gpus([GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", total_mib=81559)])  # a split's spin boxes too
    panel.gpu_editors[0].add_split(2048)
    roots: list[tuple[str, QWidget]] = [("Configuration", panel), ("Memory (live)", window.panels["memory"]),
                                         ("Machines (lab)", window.panels["machines"])]
    for job in window.runs.forms:
        window.runs.select_job(job)
        roots.append((f"job form {job}", window.runs.forms[job]))
    share = show_share(window, window.config_panel.config())
    qtbot.addWidget(share)
    roots.append(("Share a GPU", share))
    seen = sum(len(fields_in(root)) for _, root in roots)
    assert seen >= 15, f"only {seen} fields found: the walk missed the forms"
    problems = [f"{name}: {change}" for name, root in roots for change in changed_by_wheel(root)]
    assert not problems, "\n".join(problems)


def test_the_wheel_scrolls_the_form_around_the_field_instead(qtbot, window: MainWindow) -> None:
    window.resize(1024, 600)
    window.docks["config"].show()
    window.docks["config"].raise_()
    qtbot.waitUntil(lambda: window.config_panel.scroll_area.verticalScrollBar().maximum() > 0, timeout=3000)
    area: QAbstractScrollArea = window.config_panel.scroll_area
    field = next(field for field in fields_in(area.widget()) if field.isVisible()
                 and isinstance(field, QSpinBox | QComboBox))
    before = value(field)
    area.verticalScrollBar().setValue(0)
    wheel(field, -3)
    assert value(field) == before
    assert area.verticalScrollBar().value() > 0, "the wheel over a field did not scroll the form"


def test_a_focused_field_still_takes_the_wheel(qtbot) -> None:
    spin = guard_wheel(QSpinBox())
    qtbot.addWidget(spin)
    spin.setRange(0, 10)
    spin.show()
    qtbot.waitExposed(spin)
    wheel(spin, 1)
    assert spin.value() == 0
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    wheel(spin, 1)
    assert spin.value() == 1
    assert spin.focusPolicy() == Qt.FocusPolicy.StrongFocus  # the wheel never gives it the focus
