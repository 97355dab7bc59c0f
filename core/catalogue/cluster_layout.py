"""The layout of a TensorFlow cluster: each task's TF_CONFIG, and the commands that start a real cluster's tasks
(`cluster-config`), each running the panel's cluster task module under its own TF_CONFIG.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import TypedDict

# The module each task runs (core.runproc.cluster_task), named as the launcher names a module.
TASK_MODULE = "tf_device_panel.core.runproc.cluster_task"


class TaskAddress(TypedDict):
    type: str                         # worker, ps, chief
    index: int


class TfConfig(TypedDict):
    """TF_CONFIG, as TensorFlow's TFConfigClusterResolver reads it."""

    cluster: dict[str, list[str]]     # task type -> HOST:PORT of each task
    task: TaskAddress                 # which of them this process is


class TaskCommand(TypedDict):
    """One task of a real cluster as `cluster-config` prints it."""

    task: str                         # "worker:0"
    address: str
    tf_config: TfConfig
    command: str


def tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, index: int) -> TfConfig:
    return {"cluster": {k: list(v) for k, v in cluster.items()}, "task": {"type": task_type, "index": index}}


def parse_address(text: str) -> str:
    """Check HOST:PORT; raises ValueError with what to write instead."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 10.0.0.5:12345)")
    return f"{host}:{int(port)}"


def cluster_commands(workers: Sequence[str], ps: Sequence[str] = (), *, chief: str | None = None,
                     job: str | None = None, profile: str | None = None) -> list[TaskCommand]:
    """TF_CONFIG and the start command of every task of a real cluster, for `cluster-config`.

    With `profile`, every task applies that device configuration profile before TensorFlow initializes.
    """
    cluster: dict[str, list[str]] = {"worker": [parse_address(w) for w in workers]}
    if ps:
        cluster["ps"] = [parse_address(p) for p in ps]
        cluster["chief"] = [parse_address(chief)] if chief else []
    every = [a for addresses in cluster.values() for a in addresses]
    duplicates = sorted({a for a in every if every.count(a) > 1})
    if duplicates:
        raise ValueError(f"address used by more than one task: {', '.join(duplicates)}")
    job = job or ("parameter-server" if ps else "multi-worker")
    tasks: list[TaskCommand] = []
    for task_type, addresses in cluster.items():
        for index, address in enumerate(addresses):
            config = tf_config({k: v for k, v in cluster.items() if v}, task_type, index)
            roles = {"worker": "server" if ps else "mwms-worker", "ps": "server", "chief": "ps-coordinator"}
            role = roles[task_type]
            tasks.append({"task": f"{task_type}:{index}", "address": address, "tf_config": config,
                          "command": f"TF_CONFIG={shlex.quote(json.dumps(config))} python -m {TASK_MODULE} {role}"
                                     + (f" --profile {shlex.quote(profile)}" if profile else "")})
    return tasks
