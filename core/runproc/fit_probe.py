"""One probe of the `fit-batch` job: the `fit` job's own training (one epoch, then evaluate) at one batch size, in a
fresh process whose device memory is capped at the budget, and the allocator's peak it reached.

    python -m tf_device_panel.core.runproc.fit_probe --model cnn --batch 32 --budget-mib 256 --out FILE
        [--image-size 32] [--device /CPU:0 | /GPU:N]
    python -m tf_device_panel.core.runproc.fit_probe --panel run fit ...   (the panel's CLI, dying with its parent)

On the CPU the cap is the CPU's BFC allocator (TF_CPU_ALLOCATOR_USE_BFC, TF_CPU_BFC_MEM_LIMIT_IN_MB: the
setting cpu_memory_limit_mib), set before TensorFlow is imported; on a GPU, that GPU alone made one logical GPU
with the budget as its memory_limit. Writes {"batch", "fits", "peak_bytes", "seconds", "error"} as JSON to
FILE; TensorFlow's own lines (and an allocator dump when it runs out) go to stderr as usual.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.config.steps import CPU_BFC_ENV, CPU_LIMIT_ENV
from tf_device_panel.core.processes import die_with_parent, module_command


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--panel"]:
        # A run of the panel's own command line (`tf-device-panel run fit ...`), as a user would start it, that
        # still dies with the job that started it: the parent-death signal set above outlives exec.
        os.execv(sys.executable, module_command("tf_device_panel", *argv[1:]))
    parser = argparse.ArgumentParser(prog="fit_probe")
    parser.add_argument("--model", choices=("dense", "cnn"), required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--budget-mib", type=int, required=True)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--device", default="/CPU:0")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    on_gpu = args.device.upper().startswith("/GPU:")
    if not on_gpu:
        os.environ[CPU_BFC_ENV] = "true"
        os.environ[CPU_LIMIT_ENV] = str(args.budget_mib)
    import tensorflow as tf
    from tf_device_panel.core.runproc.jobs import training
    from tf_device_panel.core.runproc.jobs.context import JobContext

    device = args.device
    if on_gpu:
        gpus = tf.config.list_physical_devices("GPU")
        index = int(device.split(":")[-1])
        tf.config.set_visible_devices([gpus[index]], "GPU")
        tf.config.set_logical_device_configuration(
            gpus[index], [tf.config.LogicalDeviceConfiguration(memory_limit=args.budget_mib)])
        device = "/GPU:0"  # the one visible GPU
    config = DeviceConfig(cpu_memory_limit_mib=0 if on_gpu else args.budget_mib, log_placement=False)
    context = JobContext("fit-batch-probe", lambda event: None, config)
    error = None
    started = time.monotonic()
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # fit's own progress lines
            training.fit(context, epochs=1, batch_per_replica=args.batch, samples=args.batch, devices=device,
                         model=args.model, image_size=args.image_size, evaluate=True)
        fits = True
    except tf.errors.ResourceExhaustedError as exc:
        fits = False
        error = (str(exc).strip().splitlines() or ["ResourceExhaustedError"])[0]
    finally:
        context.finish()
    seconds = time.monotonic() - started
    peak = int(tf.config.experimental.get_memory_info(device.lstrip("/"))["peak"])
    Path(args.out).write_text(json.dumps({"batch": args.batch, "fits": fits, "peak_bytes": peak,
                                          "seconds": seconds, "error": error}))
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main())  # skip TensorFlow's slow teardown: the figures are written
