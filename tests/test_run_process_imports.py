"""What a run process imports of its own before a job starts: only what every run needs.

A job's code (core.runproc.jobs.<module>) is imported when that job runs, the script job's module only for a
user's script, and the panel's result kinds (core.results) and CUDA library checks (core.devices.cudalibs)
never on the way to warm. Their cost is measured by benchmarks/run_process_imports.py; this pins which modules
are imported, in a fresh interpreter that imports the run process's main module as `python -m` does (it imports
TensorFlow only inside `serve`, so none of this needs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tf_device_panel.core.catalogue import JOBS

RUN_PROCESS = "tf_device_panel.core.runproc.runtime_main"
JOB_MODULES = sorted({spec.entry.split(":")[0] for spec in JOBS.values()})
NEVER_BEFORE_A_JOB = ["tf_device_panel.core.results", "tf_device_panel.core.devices.cudalibs"]


def modules_after(code: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter has once `code` ran."""
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_run_process_imports_no_jobs_code_before_a_job(tmp_path: Path) -> None:
    imported = modules_after(f"import {RUN_PROCESS}", tmp_path)
    assert RUN_PROCESS in imported and "tf_device_panel.core.catalogue.jobs" in imported  # what every run needs
    assert "tensorflow" not in imported
    assert sorted(imported & set(JOB_MODULES)) == []
    assert sorted(imported & set(NEVER_BEFORE_A_JOB)) == []


@pytest.mark.parametrize("job", ["matmul", "session", "fit", "memory", "benchmark", "script"])
def test_a_jobs_code_loads_without_the_result_kinds(job: str, tmp_path: Path) -> None:
    code = (f"import {RUN_PROCESS}\nfrom tf_device_panel.core.runproc.jobs import implementation\n"
            f"implementation({job!r})")
    imported = modules_after(code, tmp_path)
    assert JOBS[job].entry.split(":")[0] in imported
    assert "tf_device_panel.core.results" not in imported
