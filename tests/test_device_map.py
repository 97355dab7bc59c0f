"""The device map: its Qt-free layout (boxes, segments sized by memory limits, fallback arrows), and the
widget fed by a runtime's events."""

from __future__ import annotations

import pytest
from tf_device_panel.core import events
from tf_device_panel.core.events import Event
from tf_device_panel.gui.device_map_layout import (
    MISSING_TITLE,
    LogicalDevice,
    PhysicalDevice,
    devices_from_ready,
    layout_device_map,
)

GIB = 1024


def full(short: str) -> str:
    return f"/job:localhost/replica:0/task:0/device:{short[1:]}"


def ready(cpus: int = 1, gpu_limits: list[int] | None = None, visible: bool = True, growth: bool = False) -> dict:
    """A runtime's ready report: one CPU split in `cpus`, and a 24 GiB GPU split by `gpu_limits` if given."""
    physical = [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0, "visible": True}]
    logical = [{"name": full(f"/CPU:{n}"), "short_name": f"/CPU:{n}", "device_type": "CPU"} for n in range(cpus)]
    config: dict = {"cpu_devices": cpus, "memory_growth": growth}
    if gpu_limits is not None:
        physical.append({"name": "/physical_device:GPU:0", "device_type": "GPU", "index": 0, "visible": visible,
                         "device_name": "Fake GPU"})
        if visible:
            logical += [{"name": full(f"/GPU:{n}"), "short_name": f"/GPU:{n}", "device_type": "GPU",
                         **({"memory_limit_mib": limit} if limit else {})} for n, limit in enumerate(gpu_limits)]
        config["virtual_gpus"] = {"0": [limit for limit in gpu_limits if limit]}
    return {"physical": physical, "logical": logical, "config": config, "pid": 1}


def test_two_logical_gpus_on_a_24_gib_gpu_are_segments_sized_by_their_limits() -> None:
    devices = devices_from_ready(ready(gpu_limits=[8 * GIB, 4 * GIB]), None, {0: 24 * GIB})
    _, gpu = devices
    assert [d.name for d in gpu.logical] == ["/GPU:0", "/GPU:1"] and gpu.total_mib == 24 * GIB
    device_map = layout_device_map(devices, 800)
    box = device_map.boxes[1]
    assert box.title.startswith("GPU 0: Fake GPU — 24 GiB")
    first, second = box.segments
    inner = first.rect.width + second.rect.width + box.unassigned.width
    assert first.rect.width / inner == pytest.approx(8 / 24) and second.rect.width / inner == pytest.approx(4 / 24)
    assert box.unassigned.width / inner == pytest.approx(12 / 24)  # memory no logical GPU was given
    assert second.rect.x == pytest.approx(first.rect.x + first.rect.width)
    assert first.lines[:2] == ["/GPU:0", "limit 8.0 GiB"] and first.full_name == full("/GPU:0")
    assert all(box.rect.x <= s.rect.x and s.rect.x + s.rect.width <= box.rect.x + box.rect.width + 1e-6
               for s in box.segments)


def test_three_logical_cpus_share_the_cpu_box_equally() -> None:
    device_map = layout_device_map(devices_from_ready(ready(cpus=3), None), 500, ops={"/CPU:1": 7})
    (box,) = device_map.boxes
    assert [s.device for s in box.segments] == ["/CPU:0", "/CPU:1", "/CPU:2"]
    widths = {round(s.rect.width, 6) for s in box.segments}
    assert len(widths) == 1 and box.unassigned is None
    assert device_map.segment("/CPU:1").lines == ["/CPU:1", "7 ops"]


def test_a_hidden_gpu_has_no_segments_and_growth_is_named() -> None:
    hidden = devices_from_ready(ready(gpu_limits=[0], visible=False), None, {0: 24 * GIB})
    box = layout_device_map(hidden, 800).boxes[1]
    assert box.hidden and box.segments == [] and "hidden from TensorFlow" in box.title
    growing = devices_from_ready(ready(gpu_limits=[0], growth=True), {"memory_growth": True}, {0: 24 * GIB})
    box = layout_device_map(growing, 800).boxes[1]
    assert box.growth and "memory growth on" in box.title and box.segments[0].lines[1] == "grows as needed"


def test_a_fallback_to_a_missing_device_is_an_arrow_from_a_missing_segment() -> None:
    devices = devices_from_ready(ready(cpus=2), None)
    device_map = layout_device_map(devices, 900, fallbacks=[("/GPU:2", "/CPU:0"), ("/GPU:2", "/CPU:0")])
    missing = device_map.boxes[-1]
    assert missing.title == MISSING_TITLE and missing.segments[0].lines == ["/GPU:2", "does not exist",
                                                                           "soft placement ran it on /CPU:0"]
    (arrow,) = device_map.arrows
    source, target = missing.segments[0].rect, device_map.segment("/CPU:0").rect
    assert arrow.start == (source.centre[0], source.y + source.height)
    assert arrow.end == (target.centre[0], target.y + target.height)
    lane = arrow.points[1][1]  # the run between them passes below every box, through no other segment
    assert lane > max(box.rect.y + box.rect.height for box in device_map.boxes) and device_map.height >= lane


def test_a_map_with_room_grows_its_boxes_up_to_a_limit() -> None:
    devices = devices_from_ready(ready(cpus=2), None)
    plain, filled = layout_device_map(devices, 600), layout_device_map(devices, 600, height=150)
    assert plain.height < filled.height <= 150 + 1e-6
    assert layout_device_map(devices, 600, height=2000).height < 250  # not one giant box


def test_boxes_wrap_into_columns_by_width() -> None:
    devices = [PhysicalDevice("GPU", n, "", 16 * GIB, logical=(LogicalDevice(f"/GPU:{n}", full(f"/GPU:{n}")),))
               for n in range(4)]
    narrow, wide = layout_device_map(devices, 400), layout_device_map(devices, 1500)
    assert len({b.rect.x for b in narrow.boxes}) == 1 and len({b.rect.x for b in wide.boxes}) == 4
    assert wide.height < narrow.height
    assert all(b.rect.x + b.rect.width <= 1500 + 1e-6 for b in wide.boxes)


def test_the_widget_counts_ops_memory_and_fallbacks_from_events(qtbot) -> None:
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.device_map import DeviceMapPanel

    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    panel.show()
    info = ready(cpus=1, gpu_limits=[12 * GIB, 12 * GIB])
    placed = {"op": "MatMul", "op_type": "MatMul", "kernel": "MatMul", "short_device": "/GPU:1",
              "device": full("/GPU:1"), "mode": "eager", "line": ""}
    panel.set_devices(info, None, {0: {"index": 0, "memory_total_mib": 24 * GIB}})
    panel.on_events([Event(events.JOB_STARTED, {"job": "matmul"}, job_id="j"),
                     Event(events.PLACEMENT, placed, job_id="j"), Event(events.PLACEMENT, placed, job_id="j"),
                     Event(events.TF_MEMORY, {"device": "/GPU:1", "current_mib": 512.0, "peak_mib": 600.0}),
                     Event(events.FALLBACK, {"op": "MatMul", "requested": "/device:GPU:2", "requested_short": "/GPU:2",
                                             "actual": full("/GPU:1"), "actual_short": "/GPU:1"}, job_id="j")])
    device_map = panel.canvas.current_map()
    assert device_map.segment("/GPU:1").lines == ["/GPU:1", "limit 12.0 GiB", "2 ops", "512 MiB in use"]
    assert len(device_map.arrows) == 1 and panel.canvas.height() >= device_map.height
    image = panel.canvas.grab()
    assert not image.isNull() and image.width() > 800
    # the host box: the runtime's resident memory; an exited run's process (a zombie, 0 MiB) does not zero it
    from tf_device_panel.core.telemetry import HostSample, Sample

    panel.on_sample(Sample(0.0, host=HostSample(runtime_rss_mib=612.0)))
    panel.on_sample(Sample(1.0, host=HostSample(runtime_rss_mib=0.0)))
    assert panel.canvas.current_map().boxes[0].title.endswith("612 MiB in use")


def test_a_quick_jobs_op_counts_are_shown_with_the_batch_that_ends_it(qtbot, tmp_path) -> None:
    """A quick job's events reach the window as one batch: its process's ready report (its devices), the job's
    start, its placements and its end. The window used to give the device map the whole batch and only then
    handle the ready report, which resets the map to those devices: the counts were wiped as the job's end was
    shown (matmul: 5 ops shown of 14, the ones of a later batch; a one-batch job: none)."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import QSettings
    from tf_device_panel.core.history import RunHistory
    from tf_device_panel.gui.main_window import MainWindow

    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.show()

    def placed(short: str) -> Event:
        return Event(events.PLACEMENT, {"op": "MatMul", "op_type": "MatMul", "kernel": "MatMul",
                                        "short_device": short, "device": full(short), "mode": "eager", "line": ""},
                     job_id="j")

    def report(cpus: int) -> dict:  # as a run's process sends it
        return {**ready(cpus=cpus), "tf_version": "2.21.0", "cuda_build": False}

    batch = [Event(events.READY, report(2)), Event(events.JOB_STARTED, {"job": "matmul"}, job_id="j"),
             *[placed("/CPU:0")] * 3, *[placed("/CPU:1")] * 2,
             Event(events.JOB_FINISHED, {"job": "matmul", "status": "ok"}, job_id="j")]
    window._on_events(batch)  # the slot the controller's batches arrive at
    assert dict(window.device_map.canvas.ops) == {"/CPU:0": 3, "/CPU:1": 2}
    assert "3 ops" in window.device_map.canvas.current_map().segment("/CPU:0").lines
    # the next run's report resets the map (a new configuration's devices), and its own placements count anew
    window._on_events([Event(events.READY, report(1)), Event(events.JOB_STARTED, {"job": "m"}, job_id="k"),
                       Event(events.PLACEMENT, {**placed("/CPU:0").data}, job_id="k")])
    assert dict(window.device_map.canvas.ops) == {"/CPU:0": 1}
    window.close()
