"""The device map: its Qt-free layout (boxes, segments sized by memory limits, fallback arrows), and the
widget fed by a runtime's events."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.views.device_map_layout import (
    LINE_HEIGHT,
    MISSING_TITLE,
    TEXT_PAD,
    DeviceMap,
    GpuUse,
    LogicalDevice,
    PhysicalDevice,
    Piece,
    approximate_width,
    devices_from_ready,
    fit_pieces,
    layout_device_map,
)

from tests.fake_nvml import H100_FRACTION_LIMIT_MIB, H100_NAME, H100_RUN_HELD_MIB, H100_TOTAL_MIB

GIB = 1024


def full(short: str) -> str:
    return f"/job:localhost/replica:0/task:0/device:{short[1:]}"


def ready(cpus: int = 1, gpu_limits: list[int] | None = None, visible: bool = True,
          growth: bool = False) -> events.Ready:
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
    return events.Ready(physical=tuple(physical), logical=tuple(logical), config=config, pid=1)


def test_two_logical_gpus_on_a_24_gib_gpu_are_segments_sized_by_their_limits() -> None:
    devices = devices_from_ready(ready(gpu_limits=[8 * GIB, 4 * GIB]), None, {0: 24 * GIB})
    _, gpu = devices
    assert [d.name for d in gpu.logical] == ["/GPU:0", "/GPU:1"] and gpu.total_mib == 24 * GIB
    device_map = layout_device_map(devices, 1600)  # room enough for every segment's text at its share: to scale
    box = device_map.boxes[1]
    assert box.title.startswith("GPU 0: Fake GPU — 24.0 GiB — split into 2 logical GPUs") and box.to_scale
    first, second = box.segments
    inner = first.rect.width + second.rect.width + box.unassigned.rect.width
    assert first.rect.width / inner == pytest.approx(8 / 24) and second.rect.width / inner == pytest.approx(4 / 24)
    assert box.unassigned.rect.width / inner == pytest.approx(12 / 24)  # memory no logical GPU was given
    assert box.unassigned.lines == ["12.0 GiB", "not given to TensorFlow"] and not box.unassigned.compressed
    assert second.rect.x == pytest.approx(first.rect.x + first.rect.width)
    assert first.lines[:2] == ["/GPU:0", "limit 8.0 GiB"] and first.full_name == full("/GPU:0")
    assert all(box.rect.x <= s.rect.x and s.rect.x + s.rect.width <= box.rect.x + box.rect.width + 1e-6
               for s in box.segments)


def h100_info(count: int = 1, limits: list[int] | None = None, *, visible: bool = True, growth: bool = False,
              fraction: float | None = None, pid: int = 1) -> events.Ready:
    """A run's ready report on `count` NVIDIA H100 80GB, each split by `limits` MiB, and one CPU."""
    physical = [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0}]
    logical = [{"name": full("/CPU:0"), "short_name": "/CPU:0", "device_type": "CPU"}]
    per_gpu = limits or [0]
    for index in range(count):
        physical.append({"name": f"/physical_device:GPU:{index}", "device_type": "GPU", "index": index,
                         "visible": visible, "device_name": H100_NAME})
        if visible:
            for limit in per_gpu:
                short = f"/GPU:{len(logical) - 1}"
                logical.append({"name": full(short), "short_name": short, "device_type": "GPU",
                                **({"memory_limit_mib": limit} if limit else {})})
    config: dict = {"memory_growth": growth, **({"memory_fraction": fraction} if fraction else {})}
    if limits and not fraction:
        config["virtual_gpus"] = {str(index): limits for index in range(count)}
    return events.Ready(physical=tuple(physical), logical=tuple(logical), config=config, pid=pid)


def h100s(count: int = 1, limits: list[int] | None = None, **options) -> list[PhysicalDevice]:
    """The physical devices of `h100_info`, as NVML reads them: 81,559 MiB each."""
    info = h100_info(count, limits, **options)
    return devices_from_ready(info, None, {index: H100_TOTAL_MIB for index in range(count)})


def assert_readable(device_map: DeviceMap, line_height: float = LINE_HEIGHT) -> None:
    """Every segment and every gap is wide and tall enough for all its lines (first one bold), inside its box,
    and no two overlap."""
    for box in device_map.boxes:
        pieces = [(s.rect, s.lines) for s in box.segments]
        if box.unassigned is not None:
            pieces.append((box.unassigned.rect, box.unassigned.lines))
        for rect, lines in pieces:
            needed = max(approximate_width(line, number == 0) for number, line in enumerate(lines)) + 2 * TEXT_PAD
            assert rect.width >= needed - 1e-6, (box.title, lines, rect.width, needed)
            assert rect.height >= len(lines) * line_height + 2 * TEXT_PAD - 1e-6, (lines, rect.height)
            assert box.rect.x <= rect.x and rect.x + rect.width <= box.rect.x + box.rect.width + 1e-6
            assert box.rect.y <= rect.y and rect.y + rect.height <= box.rect.y + box.rect.height + 1e-6
        for number, (first, _) in enumerate(pieces):
            for second, _ in pieces[number + 1:]:
                apart = (first.x + first.width <= second.x + 1e-6 or second.x + second.width <= first.x + 1e-6
                         or first.y + first.height <= second.y + 1e-6 or second.y + second.height <= first.y + 1e-6)
                assert apart, (box.title, first, second)
        assert approximate_width(box.title, True) <= box.rect.width - 2 * 6 or box.title == box.title.split(" — ")[0]


@pytest.mark.parametrize("width", [400, 700, 1270, 1910])
def test_a_2_and_a_4_gib_gpu_carved_from_an_80_gb_h100_are_readable_and_the_rest_is_a_labelled_gap(width) -> None:
    """On the real H100 the two logical GPUs were slivers of a few pixels ("/...", "li...") and "not given"
    filled the box: drawn in proportion, a 2,048 MiB segment of 81,559 MiB is 1/40 of the box."""
    ops, memory = {"/CPU:0": 2, "/GPU:0": 25}, {"/GPU:0": 512.0}
    device_map = layout_device_map(h100s(1, [2048, 4096]), width, ops=ops, memory=memory)
    assert_readable(device_map)
    box = device_map.boxes[1]
    first, second = box.segments
    assert first.lines == ["/GPU:0", "limit 2.0 GiB", "25 ops", "512 MiB allocated"]
    assert second.lines == ["/GPU:1", "limit 4.0 GiB", "0 ops"]
    assert not box.to_scale and box.unassigned.compressed  # 75,415 MiB left: the scale gives way
    assert box.unassigned.lines == ["73.6 GiB", "not given to TensorFlow", "(not to scale)"]
    order = [(r.y, r.x) for r in (first.rect, second.rect, box.unassigned.rect)]
    assert order == sorted(order)  # in reading order: GPU:0, GPU:1, then the rest
    if width >= 1270:  # a window's width: one row, the picture of one GPU
        assert first.rect.y == second.rect.y == box.unassigned.rect.y
    assert second.rect.width >= first.rect.width  # the larger limit is never drawn smaller


def test_eight_h100s_each_split_2048_4096_stay_readable_in_a_wide_and_a_narrow_map() -> None:
    devices = h100s(8, [2048, 4096])
    assert [d.name for d in devices[8].logical] == ["/GPU:14", "/GPU:15"]
    ops = {f"/GPU:{n}": 10 * n for n in range(16)}
    memory = {f"/GPU:{n}": 64.0 * n for n in range(16)}
    for width in (400, 1270, 1910):
        device_map = layout_device_map(devices, width, ops=ops, memory=memory)
        assert_readable(device_map)
        assert len({b.rect.height for b in device_map.boxes}) == 1  # one grid: the boxes line up
        assert "150 ops" in device_map.segment("/GPU:15").lines


def test_many_logical_gpus_on_one_gpu_wrap_onto_rows_instead_of_shrinking() -> None:
    device_map = layout_device_map(h100s(1, [1024] * 8), 400, ops={f"/GPU:{n}": n for n in range(8)})
    assert_readable(device_map)
    rows = {s.rect.y for s in device_map.boxes[1].segments}
    assert len(rows) > 1


def test_fit_pieces_keeps_proportions_while_they_leave_every_piece_its_text_and_gives_way_after() -> None:
    even = fit_pieces([Piece(10, 20), Piece(30, 20)], 40, 400)
    assert even.to_scale and [p.width for p in even.placed] == pytest.approx([100, 300])
    squeezed = fit_pieces([Piece(2048, 90), Piece(4096, 90), Piece(75_415, 150)], 81_559, 400)
    assert not squeezed.to_scale and squeezed.rows == 1
    widths = [p.width for p in squeezed.placed]
    assert widths[0] >= 90 and widths[1] >= 90 and widths[2] >= 150 and sum(widths) == pytest.approx(400)
    big = fit_pieces([Piece(1, 50), Piece(300, 10), Piece(600, 10)], 901, 330)  # large ones keep their ratio
    assert big.placed[2].width / big.placed[1].width == pytest.approx(2, rel=1e-3)
    wrapped = fit_pieces([Piece(1, 120)] * 5, 5, 300)
    assert wrapped.rows == 3 and all(p.width >= 120 for p in wrapped.placed)
    assert fit_pieces([], 0, 100).placed == []


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
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    panel.show()
    info = ready(cpus=1, gpu_limits=[12 * GIB, 12 * GIB])
    placed = events.Placement(op="MatMul", op_type="MatMul", kernel="MatMul", short_device="/GPU:1",
                              device=full("/GPU:1"), mode="eager", job_id="j")
    panel.set_devices(info, None, DeviceInventory.from_ready(info, [GpuSnapshot(0, memory_total_mib=24 * GIB)]))
    panel.on_events([events.JobStarted(job="matmul", job_id="j"), placed, placed,
                     events.TfMemory(device="/GPU:1", current_mib=512.0, peak_mib=600.0),
                     events.Fallback(op="MatMul", requested="/device:GPU:2", requested_short="/GPU:2",
                                     actual=full("/GPU:1"), actual_short="/GPU:1", job_id="j")])
    device_map = panel.canvas.current_map()
    assert device_map.segment("/GPU:1").lines == ["/GPU:1", "limit 12.0 GiB", "2 ops", "512 MiB allocated"]
    assert len(device_map.arrows) == 1 and panel.canvas.height() >= device_map.height
    image = panel.canvas.grab()
    assert not image.isNull() and image.width() > 800
    # the host box: the runtime's resident memory; an exited run's process (a zombie, 0 MiB) does not zero it
    from tf_device_panel.core.devices.telemetry import HostSample, Sample

    panel.on_sample(Sample(0.0, host=HostSample(runtime_rss_mib=612.0), runtime_pid=info.pid))
    panel.on_sample(Sample(1.0, host=HostSample(runtime_rss_mib=0.0), runtime_pid=info.pid))
    assert panel.canvas.current_map().boxes[0].title.endswith("612 MiB in use")
    panel.on_sample(Sample(2.0, host=HostSample(runtime_rss_mib=90.0), runtime_pid=info.pid + 1))  # the next spare
    assert panel.canvas.current_map().boxes[0].title.endswith("612 MiB in use")


def test_the_cpu_box_says_the_runs_resident_memory_after_every_job_even_a_quick_one(qtbot) -> None:
    """Issue 33: the CPU box's title showed resident memory after some jobs (one a sample read while it ran),
    not others. Now: while the run's process runs, its samples; after the job, its figure as the job ended."""
    pytest.importorskip("PySide6")
    from job_helpers import run_job
    from tf_device_panel.core.config import DeviceConfig
    from tf_device_panel.core.units import short_mib_text
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    _result, error, seen = run_job(DeviceConfig(), "matmul")
    assert error is None
    finished = next(e for e in seen if isinstance(e, events.JobFinished))
    assert finished.rss_mib is not None and 50 < finished.rss_mib < 64 * 1024  # TensorFlow's process: tens of MiB+
    info = next(e for e in seen if isinstance(e, events.Ready))
    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    panel.show()
    panel.set_devices(info, None, DeviceInventory.from_ready(info, []))
    assert "in use" not in panel.canvas.current_map().boxes[0].title
    panel.on_events(seen)  # a quick job: no sample read its process while it ran
    assert panel.canvas.current_map().boxes[0].title.endswith(f"{short_mib_text(finished.rss_mib)} in use")


def test_a_quick_jobs_op_counts_are_shown_with_the_batch_that_ends_it(qtbot, tmp_path) -> None:
    """A quick job's events reach the window as one batch: its process's ready report (its devices), the job's
    start, its placements and its end. The window used to give the device map the whole batch and only then
    handle the ready report, which resets the map to those devices: the counts were wiped as the job's end was
    shown (matmul: 5 ops shown of 14, the ones of a later batch; a one-batch job: none)."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import QSettings
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.show()

    def placed(short: str) -> Event:
        return events.Placement(op="MatMul", op_type="MatMul", kernel="MatMul", short_device=short,
                                device=full(short), mode="eager", job_id="j")

    def report(cpus: int) -> events.Ready:  # as a run's process sends it
        return ready(cpus=cpus).replace(tf_version="2.21.0", build={"is_cuda_build": False})

    batch = [report(2), events.JobStarted(job="matmul", job_id="j"),
             *[placed("/CPU:0")] * 3, *[placed("/CPU:1")] * 2,
             events.JobFinished(job="matmul", status="ok", job_id="j")]
    window.controller.deliver(batch)  # the slot the controller's batches arrive at
    assert dict(window.panels["map"].canvas.ops) == {"/CPU:0": 3, "/CPU:1": 2}
    assert "3 ops" in window.panels["map"].canvas.current_map().segment("/CPU:0").lines
    # the next run's report resets the map (a new configuration's devices), and its own placements count anew
    window.controller.deliver([report(1), events.JobStarted(job="m", job_id="k"), placed("/CPU:0").replace(job_id="k")])
    assert dict(window.panels["map"].canvas.ops) == {"/CPU:0": 1}
    window.close()


def test_growth_no_growth_fraction_split_and_hidden_differ_at_a_glance_on_an_80_gb_gpu() -> None:
    """What the run's process held after its first op on the real H100 (NVML per-process memory), drawn as a
    bar across each GPU's box: nearly full without growth, a sliver with it, a quarter with a 0.25 fraction;
    a hidden GPU has no segments and says so."""
    held = H100_RUN_HELD_MIB
    cases = {
        "default": (h100s(), held["default"]),
        "growth": (h100s(growth=True), held["growth"]),
        "fraction": (h100s(1, [H100_FRACTION_LIMIT_MIB], fraction=0.25), held["fraction 0.25"]),
        "split": (h100s(1, [2048, 4096]), held["split 2048+4096"]),
        "hidden": (h100s(visible=False), None),
    }
    boxes = {}
    for name, (devices, run_mib) in cases.items():
        use = {0: GpuUse(run_mib)}
        boxes[name] = box = layout_device_map(devices, 1270, use=use).boxes[1]
        filled = box.usage.run_width / box.usage.rect.width
        if run_mib is not None:
            assert filled == pytest.approx(run_mib / H100_TOTAL_MIB, abs=0.01), name
    assert boxes["default"].usage.label == "this run holds 77.4 GiB of 79.6 GiB (97 %)"
    assert boxes["default"].title.endswith("no memory growth: reserves nearly all")
    assert boxes["default"].segments[0].lines[1] == "takes all memory"
    growth = boxes["growth"]
    assert growth.usage.label == "this run holds 522 MiB of 79.6 GiB (0.6 %)" and growth.usage.run_width >= 2
    assert growth.growth and growth.title.endswith("memory growth on")
    assert growth.segments[0].lines[1] == "grows as needed"
    fraction = boxes["fraction"]
    assert fraction.title.endswith("memory fraction 0.25") and fraction.to_scale  # 19.8 GiB has room to scale
    assert fraction.segments[0].lines[1] == "limit 19.8 GiB" and fraction.unassigned.lines[0] == "59.9 GiB"
    share = fraction.segments[0].rect.width / (fraction.segments[0].rect.width + fraction.unassigned.rect.width)
    assert share == pytest.approx(H100_FRACTION_LIMIT_MIB / H100_TOTAL_MIB, abs=0.005)
    assert boxes["split"].usage.label == "this run holds 2.5 GiB of 79.6 GiB (3.2 %)"
    hidden = boxes["hidden"]
    assert hidden.hidden and hidden.segments == [] and hidden.title.endswith("hidden from TensorFlow")
    assert hidden.unassigned.lines[0] == "hidden from TensorFlow" and hidden.usage.run_width == 0
    assert hidden.usage.label == "hidden: this run cannot use it"
    fills = [round(b.usage.run_width) for b in boxes.values()]
    assert len(set(fills)) == len(fills) and len({b.mode for b in boxes.values()}) == len(boxes)


def test_after_the_run_the_bar_keeps_what_its_process_held_and_says_so() -> None:
    devices = h100s(1, [2048, 4096])
    ended = layout_device_map(devices, 1270, use={0: GpuUse(2570.0, run_ended=True)}).boxes[1]
    assert ended.usage.label == "the run held 2.5 GiB of 79.6 GiB (3.2 %) at its end"
    never = layout_device_map(devices, 1270, use={0: GpuUse(None, run_ended=True)}).boxes[1]
    assert never.usage.label == "the run ended before NVML read what it held" and never.usage.run_width == 0
    shared = layout_device_map(devices, 1270, use={0: GpuUse(2570.0, 30_000.0)}).boxes[1]
    assert shared.usage.label.endswith("· others 29.3 GiB")  # another process on the same GPU
    assert shared.usage.others_width == pytest.approx(shared.usage.rect.width * 30_000 / H100_TOTAL_MIB)


def test_the_panel_shows_what_the_runs_process_holds_and_keeps_it_once_the_process_has_exited(qtbot) -> None:
    from tf_device_panel.core.devices.nvml import GpuProcess, GpuSample
    from tf_device_panel.core.devices.telemetry import Sample
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(1270, 260)
    panel.show()
    first = h100_info(1, [2048, 4096], pid=4242)
    panel.set_devices(first, None, DeviceInventory.from_ready(first, [GpuSnapshot(0, memory_total_mib=H100_TOTAL_MIB)]))

    def sample(runtime_pid: int | None, processes: list | None) -> Sample:
        return Sample(0.0, gpus=[GpuSample(0, memory_used_mib=2579.0, memory_total_mib=H100_TOTAL_MIB,
                                           processes=processes)], runtime_pid=runtime_pid)

    panel.on_sample(sample(4242, None))  # NVML could not list the processes: no reading, not "nothing"
    assert panel.canvas.use[0] == GpuUse(None)
    panel.on_sample(sample(4242, [GpuProcess(4242, 2570), GpuProcess(77, 300, "jupyter")]))
    assert panel.canvas.use[0] == GpuUse(2570.0, 300.0)
    usage = panel.canvas.current_map().boxes[1].usage
    assert usage.label == "this run holds 2.5 GiB of 79.6 GiB (3.2 %) · others 300 MiB"
    panel.on_sample(sample(None, [GpuProcess(77, 300, "jupyter")]))  # the run's process has exited
    assert panel.canvas.use[0] == GpuUse(2570.0, 300.0, run_ended=True)
    panel.on_sample(sample(5151, [GpuProcess(5151, 0)]))  # the next spare, before its own run reports ready
    assert panel.canvas.use[0].run_ended and panel.canvas.use[0].run_mib == 2570.0
    assert "held at its last reading" in panel.canvas.tooltip_at(QPointF(*_centre(
        panel.canvas.current_map().boxes[1].usage.rect)) + QPointF(1, 1))
    gap = panel.canvas.current_map().boxes[1].unassigned
    tip = panel.canvas.tooltip_at(QPointF(*_centre(gap.rect)) + QPointF(1, 1))
    assert tip.startswith("75,415 MiB of 81,559 MiB not given to any logical GPU (limits: 6,144 MiB")
    assert "Drawn narrower than its share" in tip
    segment = panel.canvas.current_map().segment("/GPU:1")
    assert panel.canvas.tooltip_at(QPointF(*_centre(segment.rect)) + QPointF(1, 1)).startswith(full("/GPU:1"))
    second = h100_info(1, [2048, 4096], pid=5151)
    h100 = [GpuSnapshot(0, memory_total_mib=H100_TOTAL_MIB)]
    panel.set_devices(second, None, DeviceInventory.from_ready(second, h100))
    assert panel.canvas.use == {}  # a new run: its own readings from now on


def _centre(rect) -> tuple[float, float]:
    return rect.centre


def painted_texts_fit(canvas) -> list[str]:
    """Paints the canvas and returns what it wrote; fails if any text was elided or is wider than its rectangle
    by the font's own metrics."""
    from PySide6.QtGui import QFont, QFontMetricsF

    canvas.painted = []
    image = canvas.grab()
    assert not image.isNull() and canvas.painted
    for text, rect, bold in canvas.painted:
        font = QFont(canvas.font())
        font.setBold(bold)
        assert "…" not in text, (text, rect.width())
        assert QFontMetricsF(font).horizontalAdvance(text) <= rect.width() + 0.5, (text, rect.width())
    return [text for text, _, _ in canvas.painted]


def segment_texts_fit(canvas) -> None:
    """Every line of every segment and gap was painted whole, inside that segment's (or gap's) rectangle."""
    for box in canvas.current_map().boxes:
        pieces = [(s.rect, s.lines) for s in box.segments]
        if box.unassigned is not None:
            pieces.append((box.unassigned.rect, box.unassigned.lines))
        for rect, lines in pieces:
            for line in lines:
                inside = [r for text, r, _ in canvas.painted if text == line
                          and rect.x <= r.x() and r.right() <= rect.x + rect.width + 0.5
                          and rect.y <= r.y() and r.bottom() <= rect.y + rect.height + 0.5]
                assert inside, (line, rect)


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
@pytest.mark.parametrize("gpus", [1, 8])
def test_on_an_80_gb_gpu_split_2048_4096_every_segments_text_fits_in_the_window(qtbot, tmp_path, monkeypatch,
                                                                                size, gpus) -> None:
    """The real window, offscreen, with NVML faked as the H100 it ran on (81,559 MiB; and 8 of them), the
    run's process holding what it held there (2,570 MiB), and a job's 25 ops on /GPU:0."""
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFont, QFontMetricsF
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.core.devices import nvml
    from tf_device_panel.gui.shell.main_window import MainWindow

    from tests.fake_nvml import FakeGpus, process

    fake = FakeGpus(gpus, total_mib=H100_TOTAL_MIB, name=H100_NAME)
    fake.install(monkeypatch)
    monkeypatch.setattr(nvml, "_shared", None)  # the window's NVML reads the fake, not what an earlier test found
    fake.processes[0] = [process(4242, H100_RUN_HELD_MIB["split 2048+4096"])]
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    window.docks["map"].show()
    window.docks["map"].raise_()
    qtbot.waitExposed(window)

    def placed(short: str) -> Event:
        return events.Placement(op="Fill", op_type="Fill", kernel="Fill", short_device=short, device=full(short),
                                mode="eager", job_id="j")

    report = h100_info(gpus, [2048, 4096], pid=4242).replace(tf_version="2.21.0", python="3.12",
                                                             build={"is_cuda_build": True})
    window.controller.deliver([report, events.JobStarted(job="memory", job_id="j"),
                       *[placed("/GPU:0")] * 25, *[placed("/CPU:0")] * 2,
                       events.TfMemory(device="/GPU:0", current_mib=512.0, peak_mib=512.0),
                       events.JobFinished(job="memory", status="ok", job_id="j")])
    canvas = window.panels["map"].canvas
    qtbot.waitUntil(lambda: canvas.use.get(0) is not None and canvas.use[0].run_mib is not None, timeout=10_000)
    assert canvas.width() >= size[0] - 60  # the map dock spans the window's width
    texts = painted_texts_fit(canvas)
    segment_texts_fit(canvas)
    device_map = canvas.current_map()
    first = device_map.segment("/GPU:0")
    assert "25 ops" in first.lines and "512 MiB allocated" in first.lines
    assert "0 ops" in device_map.segment("/GPU:1").lines
    assert "this run holds 2.5 GiB of 79.6 GiB (3.2 %)" in texts and "73.6 GiB" in texts
    # each segment's lines lie inside its rectangle, as the font draws them
    font = QFont(canvas.font())
    font.setBold(True)
    for segment in [s for box in device_map.boxes for s in box.segments]:
        assert QFontMetricsF(font).horizontalAdvance(segment.lines[0]) + 2 * TEXT_PAD <= segment.rect.width
        assert len(segment.lines) * canvas.line_height() + 2 * TEXT_PAD <= segment.rect.height + 0.5
    window.close()


def test_odd_inputs_still_lay_out_inside_their_boxes() -> None:
    """A hidden GPU that still lists logical devices, a run holding more than the GPU's size, a box squeezed
    to a pixel, logical GPUs without limits beside ones with: a picture, never an exception."""
    odd = [PhysicalDevice("GPU", 0, "", 1000.0, visible=False,
                          logical=(LogicalDevice("/GPU:0", full("/GPU:0"), 512.0),)),
           PhysicalDevice("GPU", 1, "", 1000.0, logical=(LogicalDevice("/GPU:1", full("/GPU:1"), 512.0),
                                                        LogicalDevice("/GPU:2", full("/GPU:2")))),
           PhysicalDevice("GPU", 2, "", None, logical=(LogicalDevice("/GPU:3", full("/GPU:3"), 4096.0),))]
    use = {0: GpuUse(0.0), 1: GpuUse(100_000.0, 300.0), 2: GpuUse(10.0)}
    for width in (1, 50, 340, 1270):
        device_map = layout_device_map(odd, width, use=use)
        hidden, mixed, unknown = device_map.boxes
        assert hidden.segments == [] and hidden.usage.label.startswith("hidden")
        assert 0 < mixed.usage.run_width <= mixed.usage.rect.width and mixed.usage.others_width >= 0
        assert [s.device for s in mixed.segments] == ["/GPU:1", "/GPU:2"] and unknown.unassigned is None
        assert all(s.rect.width > 0 for box in device_map.boxes for s in box.segments)
        if width >= 340:
            assert_readable(device_map)


def test_the_placement_table_and_the_device_map_count_the_same_run(qtbot, tmp_path) -> None:
    """Both read the window's one run state: when a run ends and the next begins within one batch, the table
    and the map show the new run's counts alike (the table once kept counting across runs, the map did not)."""
    from PySide6.QtCore import QSettings
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)

    def placed(short: str, job_id: str) -> Event:
        return events.Placement(op="MatMul", op_type="MatMul", kernel="MatMul", short_device=short,
                                device=full(short), mode="eager", job_id=job_id)

    first = ready(cpus=2).replace(job_id="a")
    window.controller.deliver([first, events.JobStarted(job="matmul", job_id="a"), *[placed("/CPU:0", "a")] * 4,
                       events.JobFinished(job="matmul", status="ok", job_id="a"),
                       ready(cpus=2).replace(job_id="b"), events.JobStarted(job="matmul", job_id="b"),
                       placed("/CPU:1", "b"), placed("/CPU:1", "b")])
    table = {row[2]: row[3] for row in window.panels["log"].model.rows}
    assert table == dict(window.panels["map"].canvas.ops) == {"/CPU:1": 2}
    window.close()


def test_a_clusters_tasks_placements_are_counted_on_their_devices_and_add_up(qtbot) -> None:
    """Issue 41: after multi-worker the map said "0 ops" on /CPU:0 and /CPU:1, though the workers ran there (their
    placements name /job:worker/task:N devices). Each task's ops now count on the local device of that name, per
    task, and the map says whose they are; another job selected, it says these are the last run's."""
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    panel.show()
    info = ready(cpus=2)
    panel.set_devices(info, None, DeviceInventory.from_ready(info, []))

    def placed(task: int, cpu: int) -> events.Placement:
        device = f"/job:worker/replica:0/task:{task}/device:CPU:{cpu}"
        return events.Placement(op="MatMul", op_type="MatMul", device=device,
                                short_device=f"/job:worker/task:{task}/CPU:{cpu}", job_id="j", task=f"worker:{task}")

    batch = [placed(0, 0)] * 3 + [placed(1, 0)] * 2 + [placed(0, 1)] * 4 + [placed(1, 1)] * 5
    panel.on_events([events.JobStarted(job="multi-worker", job_id="j"), *batch,
                     events.JobFinished(job_id="j", job="multi-worker", status="ok")])
    device_map = panel.canvas.current_map()
    assert "5 ops (worker:0 3, worker:1 2)" in device_map.segment("/CPU:0").lines
    assert "9 ops (worker:0 4, worker:1 5)" in device_map.segment("/CPU:1").lines
    assert sum(panel.canvas.ops.values()) == len(batch)
    assert panel.whose.isVisible() and "multi-worker" in panel.whose.text() and "worker:1" in panel.whose.text()
    panel.select_job("fit")
    assert "fit has not run since" in panel.whose.text()
    panel.select_job("multi-worker")
    assert "has not run" not in panel.whose.text()


def test_a_job_that_placed_nothing_here_says_so_on_the_map(qtbot) -> None:
    """After fit-batch (its probes run in processes of their own) both boxes were blank."""
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.show()
    info = ready(cpus=2)
    panel.set_devices(info, None, DeviceInventory.from_ready(info, []))
    panel.on_events([events.JobStarted(job="fit-batch", job_id="j"),
                     events.JobFinished(job_id="j", job="fit-batch", status="ok")])
    assert "fit-batch placed no ops in the runtime's process" in panel.whose.text()


@pytest.mark.slow
def test_after_a_real_multi_worker_run_the_maps_counts_add_up_to_the_workers_placements(qtbot) -> None:
    pytest.importorskip("PySide6")
    from job_helpers import run_job
    from tf_device_panel.core.config import DeviceConfig
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    result, error, seen = run_job(DeviceConfig(cpu_devices=2), "multi-worker", {"workers": 2, "steps": 2},
                                  timeout=240)
    assert error is None and result is not None, error
    placed = [e for e in seen if isinstance(e, events.Placement)]
    assert {e.task for e in placed} >= {"worker:0", "worker:1"}
    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    panel.show()
    info = ready(cpus=2)
    panel.set_devices(info, None, DeviceInventory.from_ready(info, []))
    panel.on_events(seen)
    device_map = panel.canvas.current_map()
    counts = {name: panel.canvas.ops.get(name, 0) for name in ("/CPU:0", "/CPU:1")}
    assert sum(counts.values()) == len(placed) and counts["/CPU:0"] > 0, counts
    by_task = panel.canvas.ops_by_task["/CPU:0"]
    assert set(by_task) >= {"worker:0", "worker:1"}
    assert f"{counts['/CPU:0']} ops (" in " ".join(device_map.segment("/CPU:0").lines)
