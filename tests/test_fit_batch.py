"""fit-batch: the largest batch that fits a budget, predicted from probes in fresh capped processes and verified;
then checked from outside: the fit job at that batch fits the same budget, and at four times it does not."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from helpers import collect_job, of_type, wait_until
from tf_device_panel.core.catalogue import JOBS, ParamError
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.results import present
from tf_device_panel.core.runproc.jobs.fit_batch import MARGIN, MAX_BATCH, PROBE_MODULE, fit_line, predict

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def test_the_line_through_the_probes_and_the_prediction_under_the_margin() -> None:
    fixed, per_sample = fit_line([(8, 10 * MIB + 8 * MIB), (32, 10 * MIB + 32 * MIB), (128, 10 * MIB + 128 * MIB)])
    assert fixed == pytest.approx(10 * MIB) and per_sample == pytest.approx(MIB)
    # 256 MiB × MARGIN, less the fixed 10 MiB, at 1 MiB per sample.
    assert predict(fixed, per_sample, 256 * MIB) == int(256 * MARGIN - 10)
    assert predict(fixed, 0.0, 256 * MIB) == MAX_BATCH        # a peak that does not grow with the batch
    assert predict(300 * MIB, per_sample, 256 * MIB) == 1      # nothing fits: the smallest batch, to be verified


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.slow
def test_the_predicted_batch_fits_the_budget_and_four_times_it_does_not(tmp_path: Path) -> None:
    done = _run("fit-batch", "-p", "model=cnn", "-p", "budget_mib=256", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["result"]
    assert result["verified"] is True
    batch = result["predicted_max_batch"]
    assert isinstance(batch, int) and batch >= 128
    probes = [r for r in result["probes"] if r["role"] == "probe"]
    assert [r["batch"] for r in probes] == [8, 32, 128]
    assert [r["peak_bytes"] for r in probes] == sorted(r["peak_bytes"] for r in probes)  # grows with the batch
    verified = [r for r in result["probes"] if r["role"] == "verify"][-1]
    assert verified["batch"] == batch and verified["fits"] and verified["peak_bytes"] <= 256 * MIB
    step_up = result["step_up"]
    assert step_up["batch"] > batch
    assert step_up["fits"] is False or any("conservative" in flag for flag in result["flags"])
    # What the probes cost against one verified run is reported (its target, ≤ 3×, is judged in
    # benchmarks/fit_batch_cost.py: a ratio of times on a busy machine is no test).
    assert result["probe_cost_ratio"] == pytest.approx(result["probe_s"] / result["verify_s"]), result
    presentation = present(result)
    assert presentation is not None and f": {batch} (verified)" in presentation.title

    profile = tmp_path / "cap256.json"
    profile.write_text('{"version": 1, "cpu_memory_limit_mib": 256, "log_placement": false}')
    fits = _run("fit", "--config", str(profile), "-p", "model=cnn", "-p", f"batch_per_replica={batch}",
                "-p", f"samples={batch}", "-p", "epochs=1", "--json")
    assert fits.returncode == 0, fits.stderr
    assert json.loads(fits.stdout)["status"] == "ok"
    four = _run("fit", "--config", str(profile), "-p", "model=cnn", "-p", f"batch_per_replica={4 * batch}",
                "-p", f"samples={4 * batch}", "-p", "epochs=1", "--json")
    assert four.returncode != 0
    outcome = json.loads(four.stdout)
    assert outcome["status"] in ("error", "crashed")
    assert outcome["oom"] is not None and outcome["oom"]["limit_bytes"] == 256 * MIB  # explained, died or not


def probe_processes() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if PROBE_MODULE in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
    return found


def test_cancelling_fit_batch_ends_its_probe(start_runtime: Callable[..., RuntimeProcess]) -> None:
    runtime = start_runtime(DeviceConfig())
    runtime.wait_ready()
    job_id = runtime.submit("fit-batch", {"model": "cnn", "budget_mib": 256})
    wait_until(probe_processes, timeout=60, message="no probe process started")
    runtime.cancel(grace=20)
    seen = collect_job(runtime, job_id)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    wait_until(lambda: not probe_processes(), timeout=20, message=lambda: f"probes left: {probe_processes()}")


@pytest.mark.parametrize(("params", "problem"), [
    ({"budget_mib": 8}, "budget_mib"), ({"model": "resnet"}, "model"), ({"budget_mib": "lots"}, "budget_mib"),
])
def test_fit_batch_parameters_are_checked_before_it_starts(params: dict, problem: str) -> None:
    with pytest.raises(ParamError) as caught:
        JOBS["fit-batch"].resolve(params)
    assert [name for name, _ in caught.value.problems] == [problem]


def test_the_result_reads_for_a_peak_that_hardly_grows() -> None:
    result = {"kind": "fit_batch", "model": "dense", "device": "/CPU:0", "budget_mib": 64,
              "predicted_max_batch": MAX_BATCH, "prediction": MAX_BATCH, "verified": True,
              "fit": {"fixed_bytes": 30_000, "bytes_per_sample": 19.2, "margin": MARGIN},
              "probes": [{"role": "probe", "batch": 256, "fits": True, "peak_bytes": 33_000, "seconds": 2.0,
                          "predicted_peak_bytes": 31_000},
                         {"role": "verify", "batch": MAX_BATCH, "fits": True, "peak_bytes": 16 * MIB,
                          "seconds": 13.0, "predicted_peak_bytes": 18 * MIB}],
              "step_up": None, "probe_s": 7.0, "verify_s": 13.0, "probe_cost_ratio": 0.5,
              "flags": ["capped at 1,000,000, the fit job's largest batch: the budget holds more"]}
    presentation = present(result)
    assert presentation is not None
    assert presentation.title.endswith(f"{MAX_BATCH} (verified)")
    assert "+ 19 B × batch" in presentation.lines[0]  # not "0.0 KiB"
    assert presentation.warnings == tuple(result["flags"])
    (table,) = presentation.tables
    assert [row[0] for row in table.rows] == ["probe", "verify"]
