from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tf_device_panel.core import events  # noqa: E402
from tf_device_panel.core.config import DeviceConfig  # noqa: E402
from tf_device_panel.core.events import Event  # noqa: E402
from tf_device_panel.core.runtime import RuntimeProcess  # noqa: E402


@pytest.fixture(autouse=True)
def panel_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "panel-home"
    monkeypatch.setenv("TF_DEVICE_PANEL_HOME", str(home))
    return home


def collect_job(runtime: RuntimeProcess, job_id: str, timeout: float = 120.0) -> list[Event]:
    """Events from a queue-mode runtime until `job_id` finishes."""
    import time

    deadline = time.monotonic() + timeout
    seen: list[Event] = []
    while time.monotonic() < deadline:
        event = runtime.next_event(0.5)
        if event is None:
            continue
        seen.append(event)
        if event.type == events.JOB_FINISHED and event.job_id == job_id:
            return seen
    raise AssertionError(f"job {job_id} did not finish in {timeout} s; got {[e.type for e in seen]}")


def of_type(seen: list[Event], kind: str) -> list[Event]:
    return [e for e in seen if e.type == kind]


@pytest.fixture
def start_runtime() -> Iterator:
    """Start runtimes for a test and make sure every one is gone afterwards."""
    started: list[RuntimeProcess] = []

    def start(config: DeviceConfig | None = None, **kwargs) -> RuntimeProcess:
        runtime = RuntimeProcess(config or DeviceConfig(), **kwargs)
        runtime.start()
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop(timeout=5)
        assert runtime.wait_exited(10), "runtime did not exit"


@pytest.fixture(scope="module")
def three_cpus() -> Iterator[RuntimeProcess]:
    """One shared runtime with 3 logical CPUs, for tests that only run jobs in it."""
    runtime = RuntimeProcess(DeviceConfig(cpu_devices=3))
    runtime.start()
    runtime.wait_ready()
    while runtime.next_event(0.2) is not None:  # drop start-up events
        pass
    yield runtime
    runtime.stop()
