"""The seeds' TensorFlow 1 examples: a graph built by hand, run in a tf.compat.v1.Session.

The session's ConfigProto asks for the placement log (`log_device_placement`), so TensorFlow prints
the `Device mapping:` block and one `name: (Op): device` line per node, which the panel parses into
placements like any other. Whether a node pinned to a missing device fails or moves is the session's
`allow_soft_placement`, not tf.config's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tf_device_panel.core.catalogue import split_devices
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.runproc.jobs.context import JobContext

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import MatrixResult

EXAMPLES = ("placement", "pin-cpu", "two-devices", "missing-device")


def session(ctx: JobContext, example: str = "placement", soft_placement: bool = False,
            devices: str = "") -> MatrixResult:
    import tensorflow as tf
    from tensorflow.python.client import device_lib
    from tensorflow.python.eager import context

    v1 = tf.compat.v1
    graph = tf.Graph()
    pinned: dict[str, str] = {}  # node name -> the device the graph asks for
    with graph.as_default():  # a TF1 graph: nothing runs until the session does
        if example == "two-devices":
            logical = tf.config.list_logical_devices()
            kind = "GPU" if any(d.device_type == "GPU" for d in logical) else "CPU"
            names = split_devices(devices) or [d.name for d in logical if d.device_type == kind]
            products = []
            for name in names:
                with tf.device(name):
                    a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3])
                    b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2])
                    products.append(tf.matmul(a, b))
                    pinned[products[-1].op.name] = name
            with tf.device("/cpu:0"):
                fetch = tf.add_n(products)
            pinned[fetch.op.name] = "/cpu:0"
        else:
            device = {"pin-cpu": "/cpu:0", "missing-device": "/gpu:2"}.get(example)
            with tf.device(device):  # None: no device asked for, the placer chooses
                a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
                b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
            with tf.device(device if example == "missing-device" else None):
                fetch = tf.matmul(a, b)
            if device is not None:
                pinned.update({"a": device, "b": device})
            if example == "missing-device":
                pinned[fetch.op.name] = "/gpu:2"

    # The seeds' ConfigProto(log_device_placement=True, allow_soft_placement=...). A Session creates its
    # devices from the ConfigProto it is given, not from tf.config: a bare one sees one CPU however many
    # logical CPUs tf.config made, so start from the one tf.config built for this runtime.
    config = v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.log_device_placement = True
    config.allow_soft_placement = soft_placement
    # Both of TensorFlow's graph optimizers would fold a matmul of two constants into one constant before
    # anything runs, and no MatMul would run anywhere: keep the seeds' graph as written.
    config.graph_options.rewrite_options.constant_folding = config.graph_options.rewrite_options.OFF
    config.graph_options.optimizer_options.opt_level = v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    # TF1's gpu_options.allow_growth and per_process_gpu_memory_fraction come from the profile's memory_growth
    # and memory_fraction: GPU memory is set up once per process, before TensorFlow initializes, so a
    # session in a running runtime could not change it. Show what this session's ConfigProto carries.
    gpu_options = {"allow_growth": config.gpu_options.allow_growth,
                   "per_process_gpu_memory_fraction": config.gpu_options.per_process_gpu_memory_fraction,
                   "virtual_device_limits_mib": [list(v.memory_limit_mb)
                                                 for v in config.gpu_options.experimental.virtual_devices]}
    print(f"session ConfigProto: log_device_placement=True, allow_soft_placement={soft_placement}, "
          f"gpu_options {gpu_options}", flush=True)
    mapping = {d.name: d.physical_device_desc for d in device_lib.list_local_devices(config)
               if d.physical_device_desc}  # what the session prints as its "Device mapping:" block
    metadata = v1.RunMetadata()
    ctx.progress(0, 1, f"Session.run ({example}, soft placement {'on' if soft_placement else 'off'})")
    with v1.Session(graph=graph, config=config) as sess:
        try:
            value = sess.run(fetch, options=v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
        except tf.errors.InvalidArgumentError as exc:
            reason = next((line for line in exc.message.splitlines() if "Cannot assign a device" in line),
                          exc.message.strip().splitlines()[-1])
            raise tf.errors.InvalidArgumentError(
                None, None, f"{reason} — soft placement is off (ConfigProto allow_soft_placement=False); "
                "turn it on to let TensorFlow run the node on a device that exists") from None

    placed = {node.name: node.device for graph_def in metadata.partition_graphs for node in graph_def.node}
    missing = [name for name in pinned if name not in placed]
    if missing:
        raise JobError(f"the session did not report where {', '.join(missing)} ran")
    for name, requested in pinned.items():
        ctx.check_placement(requested, placed[name], name)
    ctx.progress(1, 1, "done", force=True)
    result: MatrixResult = {
        "kind": "matrix",
        "matrix": value.tolist(),
        "device": placed[fetch.op.name],
        "requested_device": pinned.get(fetch.op.name),
        "fallback": any(not _same(requested, placed[name]) for name, requested in pinned.items()),
        "example": example,
        "session_config": {"log_device_placement": True, "allow_soft_placement": soft_placement},
        "device_mapping": mapping,
        "gpu_options": gpu_options,
        "nodes": {name: device for name, device in sorted(placed.items()) if not name.startswith("_")},
    }
    if example == "two-devices":
        result["replicas"] = {pinned[p.op.name]: placed[p.op.name] for p in products}
    return result


def _same(requested: str, actual: str) -> bool:
    from tf_device_panel.core.protocol.output_lines import canonical_device, short_device_name

    return canonical_device(requested) == short_device_name(actual)
