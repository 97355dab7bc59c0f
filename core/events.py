"""Structured events between the runtime process and its client, and their wire format.

The runtime writes one JSON object per line to a dedicated pipe that TensorFlow's C++ code never
writes into; the client turns the runtime's raw stdout/stderr into `log` and `placement` events.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

READY = "ready"
STARTUP_ERROR = "startup_error"
JOB_STARTED = "job_started"
PROGRESS = "progress"
LOG = "log"
PLACEMENT = "placement"
FALLBACK = "fallback"
METRIC = "metric"
TF_MEMORY = "tf_memory"          # TensorFlow's allocator figures for one logical GPU while a job runs
RESULT = "result"
ERROR = "error"
JOB_FINISHED = "job_finished"
RUNTIME_EXITED = "runtime_exited"

# Events that close a job: the client holds them back until every line the job printed has arrived.
JOB_CLOSING = frozenset({RESULT, ERROR, JOB_FINISHED})


@dataclass
class Event:
    type: str
    data: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "job_id": self.job_id, "time": self.time, "data": self.data}

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), default=str, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Event:
        return cls(type=str(obj["type"]), data=dict(obj.get("data") or {}),
                   job_id=obj.get("job_id"), time=float(obj.get("time", time.time())))

    @classmethod
    def decode(cls, line: bytes | str) -> Event:
        return cls.from_json(json.loads(line))
