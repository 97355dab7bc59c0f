"""Open the real window, apply a configuration, run a job, and save a screenshot of the X screen.

Run under a display, e.g.: xvfb-run -s "-screen 0 1280x720x24" .venv/bin/python scripts/screenshot.py OUT.png
Options: --cpus N (logical CPUs), --job NAME, --param NAME=VALUE, --dock NAME (raise that dock first),
--runs N (run the job N times in a row), --dock-height PX, --doctor (run the Doctor's checks first),
--presentation (View → Presentation mode).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.history import RunHistory
from tf_device_panel.gui.main_window import MainWindow


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
    parser.add_argument("--presentation", action="store_true", help="View → Presentation mode first")
    args = parser.parse_args()

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
        finished = window.controller.job_run is not None and window.controller.job_run.outcome.finished
        if state["submitted"] and finished and state["runs"] < args.runs and window.controller.state == "ready":
            state["submitted"] = False
        if not state["submitted"] and window.controller.state == "ready":
            window.runs.select_job(args.job)
            for item in args.param:
                name, _, value = item.partition("=")
                window.runs.form().set_value(name, type(window.runs.form().values()[name])(value))
            window.run_job(args.job, window.runs.form().values())
            state["submitted"], state["since"], state["done_at"] = True, time.monotonic(), 0.0
            state["runs"] += 1
        elif state["submitted"]:
            done = window.controller.job_run is not None and window.controller.job_run.outcome.finished
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


if __name__ == "__main__":
    sys.exit(main())
