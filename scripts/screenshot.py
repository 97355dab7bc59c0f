"""Open the real window, drive it as a person does, and save a screenshot of the X screen.

Run under a display, e.g.: xvfb-run -a -s "-screen 0 1280x720x24" .venv/bin/python scripts/screenshot.py OUT.png

What it does, in a person's order: the window maximised to the screen; File → Open profile (--config) and/or the
Configuration's "Logical CPU devices" field (--cpus), then "Apply (restart runtime)"; View menu: the docks
(--dock), Presentation mode (--presentation), Zoom in/out (--zoom); Runtime → Doctor (--doctor); the job
picked in the job list (--job), its form's fields typed (--param), Run pressed (again, --runs times); once the
window shows the job's end (and the Doctor's checks), the screen is shot after --delay seconds.

Options:
  --config PATH      a profile (JSON, as File → Save profile writes it), opened before Apply
  --cpus N           logical CPU devices in the Configuration (default 2 without --config; with it, the profile's)
  --job NAME         the job to run (default replicate; `tf-device-panel jobs` lists them)
  --param NAME=VALUE a field of the job's form (repeat it); NAME as `tf-device-panel jobs NAME` shows it
  --runs N           press Run N times in a row, each after the last has ended
  --dock NAME        show and raise that dock (repeat it): devices, config, log, history, doctor, memory,
                     machines, map
  --dock-height PX   height of the raised bottom docks
  --doctor           run the Doctor's checks and wait for them
  --presentation     View → Presentation mode
  --zoom STEPS       View → Zoom in STEPS times (negative: Zoom out)
  --during           shoot while the job runs, not after it
  --delay S          seconds to wait after the job's end (or its start, with --during) before the shot
A bad option or value exits with status 2 and says which.

--replay-h100 MODE [--gpus N] draws what the window showed on the real H100 without one: NVML is faked as
N NVIDIA H100 80GB (81,559 MiB each, tests/fake_nvml.py), and the run's ready report, the `memory` job's
placements (25 ops on /GPU:0, 2 on /CPU:0) and allocator figures and the run's exit are fed to the window
as its runtime would send them, with the run's process holding what it held there after its first op
(NVML per-process memory, ../shared/gpu-host/README.md). MODE: split (2048+4096 MiB on each GPU),
default, growth, fraction (0.25) or hidden. No job runs; the Runs panel shows no result.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.config import DeviceConfig, ProfileError, load_profile
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.shell.menus import PRESENTATION

ROOT = Path(__file__).resolve().parent.parent
REPLAY_PID = 4242  # the replayed run's process id, as NVML lists it
SETTLE_S = 0.6  # a result's plots paint on a later pass of the event loop than the one that shows them
TIMEOUT_S = 300


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the module's docstring (scripts/screenshot.py) for the order of "
                                            "the steps.")
    parser.add_argument("out", help="the PNG to write: the whole X screen")
    parser.add_argument("--config", metavar="PATH", help="a profile opened (File → Open profile) before Apply")
    parser.add_argument("--cpus", type=int, metavar="N",
                        help="logical CPU devices in the Configuration (default 2 without --config)")
    parser.add_argument("--job", default="replicate", help="the job to run (default: replicate)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a field of the job's form (repeat it)")
    parser.add_argument("--dock", action="append", default=[], metavar="NAME", help="show and raise a dock")
    parser.add_argument("--during", action="store_true", help="shoot while the job runs, not after")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between the job's end and the shot")
    parser.add_argument("--runs", type=int, default=1, help="run the job this many times in a row")
    parser.add_argument("--dock-height", type=int, metavar="PX", help="height in pixels for the raised docks")
    parser.add_argument("--doctor", action="store_true", help="run the Doctor's checks and shoot once they are in")
    parser.add_argument("--presentation", action="store_true", help="View → Presentation mode")
    parser.add_argument("--zoom", type=int, default=0, metavar="STEPS",
                        help="View → Zoom in this many times (negative: Zoom out)")
    parser.add_argument("--replay-h100", choices=["split", "default", "growth", "fraction", "hidden"],
                        help="fake NVML as H100s and replay a run on them (see the docstring)")
    parser.add_argument("--gpus", type=int, default=1, help="with --replay-h100: how many H100s")
    args = parser.parse_args(argv)
    docks = ("devices", "config", "log", "history", "doctor", "memory", "machines", "map")
    for name in args.dock:
        if name not in docks:
            parser.error(f"--dock {name}: no such dock; choose from {', '.join(docks)}")
    if args.job not in JOBS:
        parser.error(f"--job {args.job}: no such job; choose from {', '.join(JOBS)}")
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: run the job at least once (1 or more)")
    if args.cpus is not None and args.cpus < 1:
        parser.error(f"--cpus {args.cpus}: at least 1 logical CPU device")
    if args.config is not None:
        try:
            load_profile(args.config)
        except ProfileError as exc:
            parser.error(f"--config {args.config}: " + "; ".join(str(problem) for problem in exc.problems))
    known = {param.name: param for param in JOBS[args.job].params}
    for item in args.param:
        name, equals, value = item.partition("=")
        if not equals or name not in known:
            parser.error(f"--param {item}: give NAME=VALUE with NAME one of {args.job}'s parameters: "
                         f"{', '.join(known) or 'it has none'}")
        try:
            typed(known[name].default, value)
        except ValueError:
            kind = {int: "whole number", float: "number"}.get(type(known[name].default), "value")
            parser.error(f"--param {item}: {value!r} is not a {kind} ({args.job}'s {name} takes one)")
    return args


def typed(current: Any, text: str) -> Any:
    """`text` as the field's own type (a box's on/off, a spin box's number), as typing it would give."""
    if isinstance(current, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    return text


def main() -> int:
    args = parse()
    if args.replay_h100:
        return replay_h100(args)

    app = QApplication(sys.argv[:1])
    settings = QSettings(str(Path(tempfile.mkdtemp()) / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    window.show()
    # The whole screen, as a person maximises the window for a class (there is no window manager to ask).
    window.setGeometry(app.primaryScreen().availableGeometry())
    QTest.qWaitForWindowExposed(window)
    runs = window.runs
    # The Configuration: a profile opened, the logical CPUs typed, then Apply pressed.
    if args.config is not None and not window.profiles.open(args.config):
        notices = window.status.notices
        print(f"screenshot.py: --config {args.config}: {notices[-1] if notices else 'not opened'}", file=sys.stderr)
        return 2
    cpus = args.cpus if args.cpus is not None else (None if args.config else 2)
    if cpus is not None:
        window.config_panel.set_config(dataclasses.replace(window.config_panel.config(), cpu_devices=cpus))
    # The View menu: docks, then presentation mode and zoom; the Doctor from the Runtime menu.
    for name in args.dock:
        dock = window.docks[name]
        if not dock.isVisible():
            dock.toggleViewAction().trigger()
        dock.raise_()
    if args.dock and args.dock_height:
        docks = [window.docks[name] for name in args.dock]
        window.resizeDocks(docks, [args.dock_height] * len(docks), Qt.Orientation.Vertical)
    if args.presentation:
        window.menu_actions[PRESENTATION].trigger()
    for _ in range(abs(args.zoom)):
        window.dock_layout.zoom_in() if args.zoom > 0 else window.dock_layout.zoom_out()
    window.panels["memory"].window_choice.setCurrentIndex(0)  # the last minute: a fresh window has no older history
    QTest.mouseClick(window.config_panel.apply_button, Qt.MouseButton.LeftButton)
    if args.doctor:
        window.open_doctor()
    # The job picked in the list, its fields typed.
    runs.select_job(args.job)
    form = runs.form()
    for item in args.param:
        name, _, value = item.partition("=")
        form.set_value(name, typed(form.values()[name], value))  # checked by parse()
    state: dict[str, Any] = {"pressed": 0, "since": 0.0, "done_at": 0.0, "failed": "", "saved": False}
    job_state = runs.states[args.job]

    def tick() -> None:
        now = time.monotonic()
        busy = runs.running_job is not None or runs.waiting_job is not None
        if state["pressed"] < args.runs and not busy and runs.run_button.isEnabled():
            if state["pressed"] and not job_state.outcome:
                return
            QTest.mouseClick(runs.run_button, Qt.MouseButton.LeftButton)  # "Run", or "Run when ready"
            if not runs.form_error.isHidden():
                state["failed"] = runs.form_error.text()
                app.quit()
                return
            state["pressed"] += 1
            state["since"], state["done_at"] = now, 0.0
            return
        if not state["pressed"]:
            return
        # What the window shows, not the manager's state: the result is drawn once the window has the job's end.
        ended = not busy and job_state.outcome is not None and not job_state.running and not job_state.waiting
        if ended and not state["done_at"] and state["pressed"] >= args.runs:
            state["done_at"] = now
        doctor_busy = args.doctor and (window.doctor.running or not window.doctor.checks)
        if args.during:
            ready = job_state.running and now - state["since"] > args.delay
        else:
            ready = bool(state["done_at"]) and now - state["done_at"] > max(args.delay, SETTLE_S)
        if ready and not doctor_busy:
            QApplication.processEvents()
            shot = app.primaryScreen().grabWindow(0)  # the whole X screen, as a person sees it
            state["saved"] = shot.save(args.out)
            print(f"saved {args.out} ({shot.width()}x{shot.height()})")
            window.close()
            app.quit()

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(200)
    QTimer.singleShot(TIMEOUT_S * 1000, app.quit)
    app.exec()
    if state["failed"]:
        print(f"screenshot.py: the form refused the parameters: {state['failed']}", file=sys.stderr)
        window.close()
        return 2
    if not state.get("saved"):
        print(f"screenshot.py: no screenshot after {TIMEOUT_S} s (job {args.job}: {job_state.status or 'not run'})",
              file=sys.stderr)
        window.close()
        return 1
    return 0


def h100_report(mode: str, gpus: int) -> tuple[events.Ready, DeviceConfig]:
    """A run's ready report on `gpus` H100s configured by `mode`, and that configuration."""
    from tests.fake_nvml import H100_FRACTION_LIMIT_MIB, H100_NAME

    def full(short: str) -> str:
        return f"/job:localhost/replica:0/task:0/device:{short[1:]}"

    limits = {"split": [2048, 4096], "fraction": [H100_FRACTION_LIMIT_MIB]}.get(mode, [0])
    physical: list[events.PhysicalDevice] = [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0,
                                              "visible": True}]
    logical: list[events.LogicalDevice] = [{"name": full("/CPU:0"), "short_name": "/CPU:0", "device_type": "CPU"}]
    for index in range(gpus):
        physical.append({"name": f"/physical_device:GPU:{index}", "device_type": "GPU", "index": index,
                         "visible": mode != "hidden", "device_name": H100_NAME, "compute_capability": "9.0"})
        if mode != "hidden":
            for limit in limits:
                short = f"/GPU:{len(logical) - 1}"
                device: events.LogicalDevice = {"name": full(short), "short_name": short, "device_type": "GPU"}
                if limit:
                    device["memory_limit_mib"] = limit
                logical.append(device)
    config = DeviceConfig(memory_growth=mode == "growth", memory_fraction=0.25 if mode == "fraction" else None,
                     virtual_gpus={i: (2048, 4096) for i in range(gpus)} if mode == "split" else {},
                     visible_gpus=() if mode == "hidden" else None)
    report = events.Ready(tf_version="2.21.0", python="3.12.3", pid=REPLAY_PID, build={"is_cuda_build": True},
                          physical=tuple(physical), logical=tuple(logical), config=config.to_json())
    return report, config


def replay_h100(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    import pytest
    from tf_device_panel.core.config import GpuInfo

    from tests.fake_nvml import H100_NAME, H100_RUN_HELD_MIB, H100_TOTAL_MIB, MIB, FakeGpus, process

    held = {"split": H100_RUN_HELD_MIB["split 2048+4096"], "fraction": H100_RUN_HELD_MIB["fraction 0.25"],
            "default": H100_RUN_HELD_MIB["default"], "growth": H100_RUN_HELD_MIB["growth"], "hidden": 0}
    fake = FakeGpus(args.gpus, total_mib=H100_TOTAL_MIB, name=H100_NAME)
    monkeypatch = pytest.MonkeyPatch()
    fake.install(monkeypatch)
    run_mib = held[args.replay_h100]
    if run_mib:
        fake.processes[0] = [process(REPLAY_PID, run_mib)]
    fake.used = [(run_mib + 9 if index == 0 and run_mib else 0) * MIB for index in range(args.gpus)]

    app = QApplication(sys.argv[:1])
    settings = QSettings(str(Path(tempfile.mkdtemp()) / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    window.show()
    window.setGeometry(app.primaryScreen().availableGeometry())
    for name in args.dock:
        window.docks[name].show()
        window.docks[name].raise_()
    if args.dock and args.dock_height:
        docks = [window.docks[name] for name in args.dock]
        window.resizeDocks(docks, [args.dock_height] * len(docks), Qt.Orientation.Vertical)
    window.panels["memory"].window_choice.setCurrentIndex(0)
    report, config = h100_report(args.replay_h100, args.gpus)
    window.config_panel.set_gpus([GpuInfo(i, H100_NAME, H100_TOTAL_MIB) for i in range(args.gpus)])
    window.config_panel.set_config(config)
    window.runs.select_job("memory")

    def placed(short: str) -> Event:
        return events.Placement(op="Fill", op_type="Fill", kernel="Fill", short_device=short,
                                device=f"/job:localhost/replica:0/task:0/device:{short[1:]}", mode="eager",
                                job_id="replay")

    gpu_job = args.replay_h100 != "hidden"
    device = "/GPU:0" if gpu_job else "/CPU:0"
    batch: list[Event] = [report, events.JobStarted(job="memory", job_id="replay"),
             *[placed(device)] * 25, *[placed("/CPU:0")] * 2]
    if gpu_job:
        batch += [events.TfMemory(device="/GPU:0", current_mib=64.0 * step, peak_mib=64.0 * step, job_id="replay")
                  for step in range(1, 9)]
        batch.append(events.TfMemory(device="/GPU:0", current_mib=64.0, peak_mib=512.0, job_id="replay"))
    batch.append(events.JobFinished(job="memory", status="ok", job_id="replay"))
    state = {"fed": 0.0, "exited": 0.0}

    def tick() -> None:
        now = time.monotonic()
        if not state["fed"]:
            window.controller.deliver(batch)  # the slot the controller's batches arrive at
            state["fed"] = now
            return
        canvas = window.panels["map"].canvas
        read = not gpu_job or (0 in canvas.use and canvas.use[0].run_mib is not None)
        if read and not state["exited"]:
            # The run's process exits after its job (each run has its own): NVML no longer lists it.
            fake.processes[0] = []
            fake.used = [0] * args.gpus
            window.controller.deliver([events.RuntimeExited(returncode=0, expected=True, description="exited")])
            state["exited"] = now
        elif state["exited"] and now - state["exited"] > max(args.delay, 1.5):
            shot = app.primaryScreen().grabWindow(0)
            shot.save(args.out)
            print(f"saved {args.out} ({shot.width()}x{shot.height()})")
            window.close()
            app.quit()

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(200)
    QTimer.singleShot(60_000, app.quit)
    app.exec()
    monkeypatch.undo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
