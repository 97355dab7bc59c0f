"""A screenshot of the Machines view over a small lab: several `tf-device-panel exporter` processes on this
machine (fake GPUs through the test-only NVML hook, one host-only), one target that does not answer, all read
through a real Prometheus server when one is installed (else the exporters directly).

    xvfb-run -s "-screen 0 1400x900x24" .venv/bin/python scripts/lab_screenshot.py resources/screenshot-machines.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.gui.docks.machines_panel import EXPORTERS, PROMETHEUS
from tf_device_panel.gui.shell.main_window import MainWindow

ROOT = Path(__file__).resolve().parent.parent
# (fake GPUs, used GiB per GPU, or None for a host-only exporter)
LAB = [(4, "3.5,14.8,9,0.6"), (2, "1,15.6"), (8, "12,12,12,12,2,2,2,2"), (None, "")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--delay", type=float, default=6.0, help="seconds of data before the shot")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfdp-lab-"))
    children: list[subprocess.Popen[bytes]] = []
    targets = []
    try:
        for count, used in LAB:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "TF_DEVICE_PANEL_HOME": str(work / "home"),
                   "TF_DEVICE_PANEL_TEST_NVML": "exporter_fake_nvml" if count else "exporter_no_nvml",
                   "TF_DEVICE_PANEL_FAKE_GPUS": str(count or 0), "TF_DEVICE_PANEL_FAKE_USED_GIB": used}
            port = free_port()
            children.append(subprocess.Popen([sys.executable, "-m", "tf_device_panel", "exporter", "--listen",
                                              f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL))
            targets.append(f"127.0.0.1:{port}")
        targets.append(f"127.0.0.1:{free_port()}")  # nothing listens: the offline tile
        prometheus = shutil.which("prometheus")
        if prometheus:
            port = free_port()
            config = work / "prometheus.yml"
            config.write_text("global: {scrape_interval: 1s, scrape_timeout: 900ms}\nscrape_configs:\n"
                              f"  - job_name: tf-device-panel\n    static_configs: [{{targets: {targets}}}]\n")
            children.append(subprocess.Popen([prometheus, f"--config.file={config}",
                                              f"--storage.tsdb.path={work / 'tsdb'}",
                                              f"--web.listen-address=127.0.0.1:{port}"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            kind, address = PROMETHEUS, f"http://127.0.0.1:{port}"
        else:
            kind, address = EXPORTERS, " ".join(targets)
        app = QApplication(sys.argv[:1])
        settings = QSettings(str(work / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, history=RunHistory(work / "window-home"), start_runtime=False)
        window.resize(1400, 900)
        window.move(0, 0)
        window.show()
        for name in ("config", "devices", "history", "doctor", "log", "memory"):
            window.docks[name].hide()
        dock, machines = window.docks["machines"], window.panels["machines"]
        machines.kind.setCurrentText(kind)
        machines.address.setText(address)
        machines.columns.setValue(3)
        dock.show()
        dock.raise_()
        window.resizeDocks([dock], [1000], Qt.Orientation.Horizontal)
        started = time.monotonic()

        def shoot() -> None:
            ready = len(machines.tiles) == len(targets) and time.monotonic() - started > args.delay
            if ready or time.monotonic() - started > 90:
                shot = app.primaryScreen().grabWindow(0)
                shot.save(args.out)
                print(f"saved {args.out} ({shot.width()}x{shot.height()}); tiles: {len(machines.tiles)}")
                window.close()
                app.quit()

        timer = QTimer()
        timer.timeout.connect(shoot)
        timer.start(250)
        app.exec()
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(15)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
