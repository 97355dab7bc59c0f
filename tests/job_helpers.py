"""Running jobs in real run processes from tests, independent of the shared fixtures in conftest.

Every run has a fresh process of its own (as in the product), so a test names a configuration, not a runtime."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event


@contextmanager
def runtime_with(config: DeviceConfig) -> Iterator[RuntimeProcess]:
    """A ready queue-mode runtime with `config`, stopped (and waited for) afterwards."""
    runtime = RuntimeProcess(config)
    runtime.start()
    try:
        runtime.wait_ready()
        while runtime.next_event(0.2) is not None:  # drop start-up events
            pass
        yield runtime
    finally:
        runtime.stop(timeout=5)
        assert runtime.wait_exited(10), "runtime did not exit"


def run_job(config: DeviceConfig, job: str, params: dict[str, Any] | None = None,
            timeout: float = 180.0) -> tuple[Any, events.Error | None, list[Event]]:
    """Run one job in a fresh process with `config` to its end: (result or None, error or None, every event
    seen meanwhile)."""
    with runtime_with(config) as runtime:
        return _finish(runtime, runtime.submit(job, params or {}), job, timeout)


def _finish(runtime: RuntimeProcess, job_id: str, job: str,
            timeout: float) -> tuple[Any, events.Error | None, list[Event]]:
    deadline = time.monotonic() + timeout
    seen: list[Event] = []
    while time.monotonic() < deadline:
        event = runtime.next_event(0.5)
        if event is None:
            continue
        seen.append(event)
        if isinstance(event, events.JobFinished) and event.job_id == job_id:
            results = [e.result for e in seen if isinstance(e, events.Result) and e.job_id == job_id]
            errors = [e for e in seen if isinstance(e, events.Error) and e.job_id == job_id]
            return (results[0] if results else None), (errors[0] if errors else None), seen
    raise AssertionError(f"job {job} did not finish in {timeout} s; got {[e.type for e in seen]}")


def placements(seen: list[Event]) -> list[events.Placement]:
    return [e for e in seen if isinstance(e, events.Placement)]
