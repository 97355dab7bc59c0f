"""The seeds' placement examples: one matmul, and manual replication with tf.add_n."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.runproc.jobs.context import JobContext

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import MatrixResult

SEED_A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
SEED_B = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def matmul(ctx: JobContext, device: str = "") -> MatrixResult:
    import tensorflow as tf

    ctx.progress(0, 1, f"MatMul on {device or 'the default device'}")
    with tf.device(device) if device else contextlib.nullcontext():
        a = tf.constant(SEED_A)
        b = tf.constant(SEED_B)
        c = tf.matmul(a, b)
    placed_as_asked = ctx.check_placement(device, c.device, "MatMul")
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "matrix",
        "matrix": c.numpy().tolist(),
        "device": c.device,
        "requested_device": device or None,
        "fallback": not placed_as_asked,
    }


def replicate(ctx: JobContext, device_type: str = "auto", reduce_device: str = "/CPU:0") -> MatrixResult:
    import tensorflow as tf

    logical = tf.config.list_logical_devices()
    if device_type == "auto":
        device_type = "GPU" if any(d.device_type == "GPU" for d in logical) else "CPU"
    devices = [d.name for d in logical if d.device_type == device_type]
    if not devices:
        raise JobError(f"no logical {device_type} devices in this runtime; "
                       "change the device configuration or choose another device type")

    products = []
    placements: dict[str, str] = {}
    for step, name in enumerate(devices):
        ctx.check_cancelled()
        ctx.progress(step, len(devices) + 1, f"MatMul on {name}")
        with tf.device(name):
            a = tf.constant(SEED_A)
            b = tf.constant(SEED_B)
            product = tf.matmul(a, b)
        ctx.check_placement(name, product.device, "MatMul")
        placements[name] = product.device
        products.append(product)

    ctx.progress(len(devices), len(devices) + 1, f"add_n on {reduce_device}")
    with tf.device(reduce_device):
        total = tf.add_n(products)
    ctx.check_placement(reduce_device, total.device, "AddN")
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "matrix",
        "matrix": total.numpy().tolist(),
        "device": total.device,
        "device_type": device_type,
        "replicas": placements,
        "products": [p.numpy().tolist() for p in products],
    }
