"""Parse TensorFlow's placement log and classify the runtime's raw output lines.

Formats (TF 2.21, see TF-RUNTIME-NOTES.md):
  I0000 00:00:1795270979.856254  5908 placer.cc:162] MatMul: (MatMul): /job:localhost/.../device:CPU:0
  I0000 00:00:1795270979.856597  5908 execute.cc:1775] Executing op MatMul in device /job:localhost/...
The placer line is echoed, unprefixed, on stdout; those echoes are kept as raw lines but are not
counted again as placements.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_CPP_PREFIX = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:[\d.]+\s+\d+ ([\w.]+):\d+\] ")
_EAGER = re.compile(r"Executing op (\S+) in device (\S+)")
_GRAPH = re.compile(r"^(\S.*?): \((\w+)\): (/job:\S+)$")
# TensorFlow 1's Session log, as in the seeds: 'b: /job:localhost/replica:0/task:0/gpu:0' (no op type).
_GRAPH_V1 = re.compile(r"^(\S+): (/job:[\w-]+/replica:\d+/task:\d+/(?:device:)?[A-Za-z_]+:\d+)$")
# A Session's 'Device mapping:' block: '/job:localhost/replica:0/task:0/device:GPU:0 -> device: 0, name: …'
_MAPPING = re.compile(r"^(/job:[\w-]+/replica:\d+/task:\d+/(?:device:)?[A-Za-z_]+:\d+) -> (.+)$")
_DEVICE = re.compile(r"(?:^|/task:\d+)/(?:device:)?([A-Za-z_]+):(\d+)$")
_ONEDNN_PREFIXES = ("_MklNative", "_Mkl")

PLACEMENT = "placement"
TF_INFO = "tf-info"
WARNING = "warning"
ERROR = "error"
OUTPUT = "output"
CONTINUED_KINDS = (TF_INFO, WARNING, ERROR)
# A Log event's `source` when TensorFlow's C++ log (absl) wrote the line: the Placement log's, never the job's console.
TENSORFLOW = "tensorflow"
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called"


def starts_tf_message(line: str) -> bool:
    """True for the first line of a C++ log message (continuation lines follow unprefixed)."""
    return bool(_CPP_PREFIX.match(line))


def is_tensorflow_log(line: str) -> bool:
    """True for a line of TensorFlow's C++ log: a prefixed message (`W0000 00:00:… dataset.cc:997] …`) or absl's
    own preamble (`WARNING: All log messages before absl::InitializeLog() is called …`)."""
    return bool(_CPP_PREFIX.match(line)) or line.startswith(_ABSL_PREAMBLE)


@dataclass(frozen=True, kw_only=True)
class PlacedOp:
    """One op placed on a device: a line of TensorFlow's placement log parsed (or a notebook's op callback), the
    `events.Placement` that carries it to the panel (this, with where it was logged), and what a run's outcome
    keeps of it. The fields' order is the order of their keys in every JSON a placement is written as."""

    op: str             # node name for graph lines; op type for eager lines
    op_type: str        # the op, with oneDNN's kernel prefix removed (_MklMatMul -> MatMul)
    device: str         # full name, /job:localhost/replica:0/task:0/device:CPU:0
    short_device: str   # /CPU:0 (`short_device_name`)
    mode: str = ""      # "eager" or "graph" ("" in a record that did not say)
    kernel: str = ""    # the name TF logged ("" where its log names only the node)

    def record_json(self) -> dict[str, str]:
        """As a run's outcome keeps it (`run --json`'s placements): the kernel's name is the log's detail."""
        return {"op": self.op, "op_type": self.op_type, "device": self.device, "short_device": self.short_device,
                "mode": self.mode}


def _placed(op: str, op_type: str, kernel: str, device: str, mode: str) -> PlacedOp:
    return PlacedOp(op=op, op_type=op_type, device=device, short_device=short_device_name(device), mode=mode,
                    kernel=kernel)


_TASK = re.compile(r"^/job:([\w-]+)(?:/replica:\d+)?/task:(\d+)/")


@functools.lru_cache(maxsize=1024)  # every placement line names one of a run's few devices
def short_device_name(device: str) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:1' -> '/GPU:1' (unchanged if not a device name).

    Devices of a cluster keep their task: '/job:worker/replica:0/task:1/device:CPU:0' -> '/job:worker/task:1/CPU:0'.
    """
    match = _DEVICE.search(device)
    if not match:
        return device
    short = f"/{match.group(1).upper()}:{match.group(2)}"
    task = _TASK.match(device)
    if task and task.group(1) != "localhost":
        return f"/job:{task.group(1)}/task:{task.group(2)}{short}"
    return short


def canonical_device(spec: str) -> str:
    """Normalise a user's device spec ('gpu:1', '/device:GPU:1', full name) to '/GPU:1'."""
    text = spec.strip()
    match = re.search(r"(?:^|/)(?:device:)?([A-Za-z_]+):(\d+)$", text)
    return f"/{match.group(1).upper()}:{match.group(2)}" if match else text


def _node_type(node: str) -> str:
    """TF1 placement lines name the node only; TF's default node names are the op type plus '_N'."""
    return re.sub(r"_\d+$", "", node.rsplit("/", 1)[-1])


def _op_type(kernel: str) -> str:
    for prefix in _ONEDNN_PREFIXES:
        if kernel.startswith(prefix) and len(kernel) > len(prefix):
            return kernel[len(prefix):]
    return kernel


def parse_line(line: str, stream: str) -> tuple[str, PlacedOp | None]:
    """Return (kind, placement) for one raw line from the runtime's stdout or stderr."""
    prefix = _CPP_PREFIX.match(line)
    if prefix:
        severity, source = prefix.group(1), prefix.group(2)
        body = line[prefix.end():]
        if source == "execute.cc":
            eager = _EAGER.match(body)
            if eager:
                kernel = eager.group(1)
                return PLACEMENT, _placed(kernel, _op_type(kernel), kernel, eager.group(2), "eager")
        if source == "placer.cc":
            graph = _GRAPH.match(body)
            if graph:
                kernel = graph.group(2)
                return PLACEMENT, _placed(graph.group(1), _op_type(kernel), kernel, graph.group(3), "graph")
        return {"I": TF_INFO, "W": WARNING}.get(severity, ERROR), None
    if stream == "stdout" and _GRAPH.match(line):
        return PLACEMENT, None
    v1 = _GRAPH_V1.match(line)
    if v1:
        return PLACEMENT, _placed(v1.group(1), _node_type(v1.group(1)), "", v1.group(2), "graph")
    if _MAPPING.match(line) or line.strip() == "Device mapping:":
        return TF_INFO, None
    if line.startswith(("INFO:tensorflow:", "INFO:absl:")):
        return TF_INFO, None
    if line.startswith(("WARNING:tensorflow:", "WARNING:absl:", "WARNING: All log messages")):
        return WARNING, None
    if line.startswith(("ERROR:tensorflow:", "Traceback (most recent call last)")):
        return ERROR, None
    if stream == "stderr" and re.match(r"^\S*(Error|Exception|Warning): ", line):
        return WARNING if "Warning: " in line else ERROR, None
    return OUTPUT, None
