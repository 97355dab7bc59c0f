"""The doctor's probe: imports TensorFlow in a fresh process and reports what it sees, stage by stage.

After each stage (import, GPU discovery, first op) it writes everything gathered so far as one JSON line, so
when TensorFlow kills the process (a SIGSEGV from mismatched CUDA libraries) the doctor still has the facts
of the stages before, and knows the stage it died in. TensorFlow's own messages (driver, cuInit, dlopen) go
to this process's stderr, which the doctor reads.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import TypedDict

from tf_device_panel.core.catalogue.doctor_probe import PROBE_PREFIX, ProbePlacement
from tf_device_panel.core.protocol.events import PhysicalDevice
from tf_device_panel.core.runproc.tf_facts import BuildInfo, build_info, physical_devices

# What the probe does, in order; each fact line names the last stage completed.
STAGES = ("import", "GPU discovery", "first op")


class ProbeReport(TypedDict, total=False):
    """The facts gathered so far, as each line carries them (core.client.doctor reads them as its ProbeFacts)."""

    imported: bool
    stage: str                        # the last stage completed
    env: dict[str, str | None]
    import_error: str
    import_traceback: str
    version: str
    build: BuildInfo
    physical: list[PhysicalDevice]
    logical: list[dict[str, str]]     # each logical device's name and device_type
    placement: list[ProbePlacement]
    runtime_error: str


def report(facts: ProbeReport, completed: str) -> None:
    """Everything gathered so far, as one line: the doctor keeps the last it got."""
    facts["stage"] = completed
    facts["env"] = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH")}
    sys.stderr.flush()
    sys.stdout.write(PROBE_PREFIX + json.dumps(facts, default=str) + "\n")
    sys.stdout.flush()


def probe(place: bool) -> ProbeReport:
    facts: ProbeReport = {"imported": False}
    report(facts, "started")
    try:
        import tensorflow as tf
    except BaseException as exc:
        facts["import_error"] = f"{type(exc).__name__}: {exc}"
        facts["import_traceback"] = traceback.format_exc(limit=-4)
        return facts
    facts["imported"] = True
    facts["version"] = tf.__version__
    facts["build"] = build_info(tf)
    report(facts, "import")
    facts["physical"] = physical_devices(tf)
    report(facts, "GPU discovery")
    if place:
        tf.debugging.set_log_device_placement(True)
    facts["placement"] = []
    try:
        logical = tf.config.list_logical_devices()
        facts["logical"] = [{"name": d.name, "device_type": d.device_type} for d in logical]
        if place:
            for device in logical:
                if device.device_type != "GPU":
                    continue
                with tf.device(device.name):
                    product = tf.matmul(tf.constant([[1.0, 2.0]]), tf.constant([[3.0], [4.0]]))
                facts["placement"].append({"requested": device.name, "actual": product.device,
                                           "value": float(product.numpy()[0][0])})
    except Exception as exc:
        facts["runtime_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def main() -> int:
    if "--libraries" in sys.argv:  # where each CUDA library opens from, in a process of its own (no TensorFlow)
        from tf_device_panel.core.devices.cudalibs import locate

        sys.stdout.write(PROBE_PREFIX + json.dumps([found.__dict__ for found in locate()]) + "\n")
        sys.stdout.flush()
        return 0
    place = "--no-placement" not in sys.argv
    facts = probe(place)
    report(facts, "done")
    return 0


if __name__ == "__main__":
    code = main()
    os._exit(code)
