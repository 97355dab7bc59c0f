"""Open the real window, apply a configuration, run a job, and save a screenshot of the X screen.

Run under a display, e.g.: xvfb-run -s "-screen 0 1280x720x24" .venv/bin/python scripts/screenshot.py OUT.png
Options: --cpus N (logical CPUs), --job NAME, --param NAME=VALUE, --dock NAME (raise that dock first),
--runs N (run the job N times in a row), --dock-height PX, --doctor (run the Doctor's checks first),
--presentation (View → Presentation mode).

--replay-h100 MODE [--gpus N] draws what the window showed on the real H100 without one: NVML is faked as
N NVIDIA H100 80GB (81,559 MiB each, tests/fake_nvml.py), and the run's ready report, the `memory` job's
placements (25 ops on /GPU:0, 2 on /CPU:0) and allocator figures and the run's exit are fed to the window
as its runtime would send them, with the run's process holding what it held there after its first op
(NVML per-process memory, ../shared/gpu-host/README.md). MODE: split (2048+4096 MiB on each GPU),
default, growth, fraction (0.25) or hidden. No job runs; the Runs panel shows no result.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.main_window import MainWindow

ROOT = Path(__file__).resolve().parent.parent
REPLAY_PID = 4242  # the replayed run's process id, as NVML lists it


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--job", default="replicate")
    parser.add_argument("--param", action="append", default=[])
    parser.add_argument("--dock", action="append", default=[])
    parser.add_argument("--during", action="store_true", help="shoot while the job runs, not after")
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=1, help="run the job this many times in a row")
    parser.add_argument("--dock-height", type=int, help="height in pixels for the raised docks")
    parser.add_argument("--doctor", action="store_true", help="run the Doctor's checks and shoot once they are in")
    parser.add_argument("--replay-h100", choices=["split", "default", "growth", "fraction", "hidden"],
                        help="fake NVML as H100s and replay a run on them (see above)")
    parser.add_argument("--gpus", type=int, default=1, help="with --replay-h100: how many H100s")
    parser.add_argument("--presentation", action="store_true", help="View → Presentation mode first")
    args = parser.parse_args()
    if args.replay_h100:
        return replay_h100(args)

    app = QApplication(sys.argv[:1])
    settings = QSettings(str(Path(tempfile.mkdtemp()) / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    window.show()
    # The whole screen, as a person maximises the window for a class (there is no window manager to ask).
    window.setGeometry(app.primaryScreen().availableGeometry())
    for name in args.dock:
        window.docks[name].show()
        window.docks[name].raise_()
    if args.dock and args.dock_height:
        docks = [window.docks[name] for name in args.dock]
        window.resizeDocks(docks, [args.dock_height] * len(docks), Qt.Orientation.Vertical)
    if args.doctor:
        window.open_doctor()
    if args.presentation:
        window.set_presentation(True)
    window.memory.window_choice.setCurrentIndex(0)  # the last minute: a fresh window has no older history
    window.config_panel.set_config(DeviceConfig(cpu_devices=args.cpus))
    window.apply(window.config_panel.config())
    state = {"submitted": False, "since": 0.0, "runs": 0, "done_at": 0.0}

    def tick() -> None:
        finished = window.manager.job_run is not None and window.manager.job_run.outcome.finished
        if state["submitted"] and finished and state["runs"] < args.runs and window.manager.state == "ready":
            state["submitted"] = False
        if not state["submitted"] and window.manager.state == "ready":
            window.runs.select_job(args.job)
            for item in args.param:
                name, _, value = item.partition("=")
                window.runs.form().set_value(name, type(window.runs.form().values()[name])(value))
            window.run_job(args.job, window.runs.form().values())
            state["submitted"], state["since"], state["done_at"] = True, time.monotonic(), 0.0
            state["runs"] += 1
        elif state["submitted"]:
            done = window.manager.job_run is not None and window.manager.job_run.outcome.finished
            if done and not state["done_at"]:
                state["done_at"] = time.monotonic()
            waited = time.monotonic() - state["since"] > args.delay
            # A result's plots paint on a later pass of the event loop than the one that created them.
            painted = done and time.monotonic() - state["done_at"] > 0.6
            painted = painted and not (args.doctor and (window.doctor.running or not window.doctor.checks))
            if waited and (args.during or painted):
                shot = app.primaryScreen().grabWindow(0)  # the whole X screen, as a person sees it
                shot.save(args.out)
                print(f"saved {args.out} ({shot.width()}x{shot.height()})")
                window.close()
                app.quit()

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(200)
    QTimer.singleShot(240_000, app.quit)
    app.exec()
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
    window.memory.window_choice.setCurrentIndex(0)
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
            window._on_events(batch)  # the slot the controller's batches arrive at
            state["fed"] = now
            return
        canvas = window.device_map.canvas
        read = not gpu_job or (0 in canvas.use and canvas.use[0].run_mib is not None)
        if read and not state["exited"]:
            # The run's process exits after its job (each run has its own): NVML no longer lists it.
            fake.processes[0] = []
            fake.used = [0] * args.gpus
            window._on_events([events.RuntimeExited(returncode=0, expected=True, description="exited")])
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
