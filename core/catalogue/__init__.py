"""What both sides of a run know about the jobs: their declarations and the small facts they share.

The window (gui), the command line (core.cli), the panel's client (core.client) and the lab import this to list
jobs, build their forms, check parameters and read what a run process says; the run process (core.runproc)
imports it to check parameters again and find each job's code, which lives in core.runproc.jobs and is named
here only as "module:function" text. Nothing here imports TensorFlow, the run process, the client, the command
line or the lab.

- `jobs`: JobSpec, JOBS, get_job, JobError: each job's name, title, description, parameters and code's entry.
- `params`: Param (its kind is the settings' `Kind`), ParamValue and ParamValues (a job's parameter values),
  ParamError, device names and lists, paths.
- `script_checks`: whether a script can run at all, checked before any process starts.
- `share_params`: `share`'s options, declared once for its command line and the window's Share dialog.
- `fit_work`: the work fit-batch sizes and `share` seats, and its rules (core.panel_runs runs it).
- `cluster_layout`: TF_CONFIG and the commands that start a real cluster's tasks (`cluster-config`).
- `doctor_probe`: how the doctor's probe marks its report line.
"""

from tf_device_panel.core.catalogue.jobs import JOBS, MAX_BENCHMARK_SIZES, JobError, JobSpec, get_job, load_entry
from tf_device_panel.core.catalogue.params import (
    MAX_LIST_ITEMS,
    Param,
    ParamError,
    ParamValue,
    ParamValues,
    RunDevices,
    device_key,
    device_spec_problem,
    path_problem,
    profile_devices,
    split_devices,
)

__all__ = ["JOBS", "MAX_BENCHMARK_SIZES", "MAX_LIST_ITEMS", "JobError", "JobSpec", "Param", "ParamError",
           "ParamValue", "ParamValues", "RunDevices", "device_key", "device_spec_problem", "get_job", "load_entry",
           "path_problem", "profile_devices", "split_devices"]
