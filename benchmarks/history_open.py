"""How long the window takes to open with a long history, History listing it: 500 hour-long runs (one `tf_memory`
line every 0.5 s in each run's events.jsonl, as every GPU run and every run under `cpu_memory_limit_mib` records:
about 1 MB a run) in a temporary TF_DEVICE_PANEL_HOME.

Two histories are timed, each in a fresh process: runs recorded by this version (their peaks kept in run.json) and
the same runs as an earlier version recorded them (no peaks in run.json: History reads them from events.jsonl,
off the GUI thread). Figures: the window's open time (built and shown, the GUI thread blocked meanwhile) and the
time until History lists the page (target ≤ 1 s each), the GUI thread's longest stall while History loads, and
for the older records how long the peaks take to fill in behind.

    python benchmarks/history_open.py [--runs 500] [--minutes 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import report

OPEN_TARGET_S = 1.0


def make_history(home: Path, runs: int, minutes: float, keep_peaks: bool) -> None:
    """`runs` finished fit runs of `minutes` each, a tf_memory line every 0.5 s (the same bytes in each run but
    its peak)."""
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.core.config import DeviceConfig
    from tf_device_panel.core.protocol import events

    home.mkdir(mode=0o700)  # private, as the panel makes it (else the first run says it is not, once)
    history = RunHistory(home)
    samples = int(minutes * 60 / 0.5)
    started = time.time() - runs * minutes * 60
    lines = []
    for index in range(samples):
        event = events.TfMemory(device="/CPU:0", current_mib=100.0 + index % 50, peak_mib=150.0,
                                time=started + index * 0.5, job_id="1-1-1")
        lines.append(json.dumps({**event.to_json(), "at": 0}) + "\n")
    body = "".join(lines)
    history.root.mkdir(parents=True, exist_ok=True)
    for run in range(runs):
        recorder = history.new_run("fit", {"epochs": 100, "batch_per_replica": 32}, DeviceConfig().to_json(), None)
        folder = recorder.folder
        recorder.append(events.TfMemory(device="/CPU:0", current_mib=1.0, peak_mib=150.0 + run, job_id="1-1-1"))
        recorder.append(events.JobFinished(job="fit", status="ok", rss_peak_mib=900.0, job_id="1-1-1"))
        recorder.finish(status="ok", duration_s=minutes * 60)
        with open(folder / "events.jsonl", "a", encoding="utf-8") as handle:
            handle.write(body)
        summary = json.loads((folder / "run.json").read_text())
        summary["started"] = started + run * minutes * 60
        if not keep_peaks:
            summary.pop("peaks", None)
        (folder / "run.json").write_text(json.dumps(summary))
        # Run ids carry the second they were made: one a second at most would take minutes, so number them.
        folder.rename(folder.with_name(f"20250101-{run // 3600:02d}{run // 60 % 60:02d}{run % 60:02d}-fit-{run:06x}"))


def measure(home: Path) -> dict[str, float]:
    """In this process: open the window on `home`'s history and time it (run in a child per history)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["TF_DEVICE_PANEL_HOME"] = str(home)
    from PySide6.QtCore import QElapsedTimer, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    settings = QSettings(str(home / "settings.ini"), QSettings.Format.IniFormat)
    begun = time.perf_counter()
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    window.show()
    app.processEvents()
    opened = time.perf_counter() - begun
    panel = window.history_panel
    stall = [0.0]
    ticks = QElapsedTimer()
    ticks.start()

    def tick() -> None:
        stall[0] = max(stall[0], ticks.restart() / 1000)

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(5)
    listed = None
    deadline = time.perf_counter() + 600
    while panel.loading and time.perf_counter() < deadline:
        app.processEvents()
        if listed is None and panel.table.rowCount():
            listed = time.perf_counter() - begun
        time.sleep(0.001)
    filled = time.perf_counter() - begun
    timer.stop()
    rows = panel.table.rowCount()
    window.close()
    app.processEvents()
    return {"open_s": opened, "listed_s": listed if listed is not None else filled, "filled_s": filled,
            "stall_s": stall[0], "rows": rows, "total": panel.total_runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child: time the window on this home
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)), flush=True)
        return 0
    ok = True
    with tempfile.TemporaryDirectory(prefix="history-open-") as temp:
        empty = Path(temp) / "empty"
        empty.mkdir(mode=0o700)
        done = subprocess.run([sys.executable, __file__, "--measure", str(empty)], capture_output=True, text=True,
                              env={**os.environ, "TF_DEVICE_PANEL_HOME": str(empty)}, timeout=900)
        baseline = json.loads(done.stdout.strip().splitlines()[-1])["open_s"] if done.returncode == 0 else float("nan")
        print(f"the window opens in {baseline:.3f} s with an empty history (the same machine, a moment before)")
        for keep_peaks, label in ((True, "peaks in run.json"), (False, "older records: peaks read from events")):
            home = Path(temp) / ("new" if keep_peaks else "old")
            made = time.perf_counter()
            make_history(home, args.runs, args.minutes, keep_peaks)
            size = sum(path.stat().st_size for path in home.rglob("*") if path.is_file())
            print(f"{label}: {args.runs} runs of {args.minutes:g} min, {size / 2**20:,.0f} MiB on disk "
                  f"(made in {time.perf_counter() - made:.1f} s)")
            os.sync()
            done = subprocess.run([sys.executable, __file__, "--measure", str(home)], capture_output=True, text=True,
                                  env={**os.environ, "TF_DEVICE_PANEL_HOME": str(home)}, timeout=900)
            if done.returncode != 0:
                print(done.stderr[-3000:])
                return 1
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            detail = (f"{figures['rows']:.0f} rows of {figures['total']:.0f} runs listed; {baseline:.3f} s with an "
                      "empty history")
            ok &= report(f"window open, {label}", figures["open_s"], OPEN_TARGET_S, unit="s", detail=detail)
            ok &= report(f"History listed, {label}", figures["listed_s"], OPEN_TARGET_S, unit="s")
            print(f"  every peak shown after {figures['filled_s']:.2f} s; the GUI thread's longest stall meanwhile "
                  f"{figures['stall_s'] * 1000:.0f} ms")
            shutil.rmtree(home)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
