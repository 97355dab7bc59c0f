"""Every run has its own process, so any sequence of jobs gives each job the result it gets alone.

Before, one long-lived runtime ran every job: with 2 logical CPUs, `custom-loop` then `fit` (cnn) failed with
"Shape mismatch in the collective instance". Each job here runs in the order drawn, in its own process, and
its result is compared with the same job run alone.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.config import DeviceConfig

TWO_CPUS = DeviceConfig(cpu_devices=2)
JOBS: dict[str, dict[str, Any]] = {
    "custom-loop": {"steps": 3, "batch_per_replica": 4},
    "fit-dense": {"epochs": 2, "samples": 32, "batch_per_replica": 4},
    "fit-cnn": {"epochs": 1, "samples": 16, "batch_per_replica": 4, "model": "cnn", "image_size": 16},
    "replicate": {},
    "memory": {"device": "/CPU:1", "step_mib": 4, "steps": 2},
    "multi-worker": {"workers": 2, "steps": 3, "log_placement": False},
}
_alone: dict[str, Any] = {}


def essence(job: str, result: Any) -> Any:
    """What must not depend on what ran before. The training jobs start from unseeded weights, so their
    losses differ from run to run even alone: their shape must match, and every loss be finite."""
    if job in ("custom-loop", "fit-dense", "fit-cnn"):
        return {"replicas": result["replicas_in_sync"], "batch": result["global_batch_size"],
                "losses": len(result["loss"]), "finite": all(math.isfinite(float(v)) for v in result["loss"])}
    if job == "replicate":
        return result["matrix"]
    if job == "memory":
        return [row["step"] for row in result["rows"]]
    if job == "multi-worker":
        return sorted(len(losses) for losses in result["losses"].values())
    raise AssertionError(job)


def run(job: str) -> Any:
    name = "fit" if job.startswith("fit") else job
    outcome = run_job_once(TWO_CPUS, name, JOBS[job])
    assert outcome.status == "ok", f"{job}: {outcome.error}"
    return essence(job, outcome.result)


def alone(job: str) -> Any:
    if job not in _alone:
        _alone[job] = run(job)
    return _alone[job]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-4)
    return bool(a == b)


@pytest.mark.slow
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(sorted(JOBS)), min_size=2, max_size=3))
@example(["custom-loop", "fit-cnn"])  # the sequence that broke the long-lived runtime
def test_any_sequence_of_jobs_gives_each_its_result_alone(sequence: list[str]) -> None:
    for job in sequence:
        result = run(job)
        assert same(result, alone(job)), f"{job} after {sequence[:sequence.index(job)]}: {result} != {alone(job)}"
