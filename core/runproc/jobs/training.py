"""Keras training under tf.distribute.MirroredStrategy, as in the seeds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from tf_device_panel.core.catalogue import split_devices
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.runproc.jobs.context import JobCancelled, JobContext

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import TrainingResult


def pick_devices(requested: str) -> list[str]:
    """The logical devices to mirror over: those named (which must exist), else all GPUs, else all CPUs."""
    import tensorflow as tf
    from tf_device_panel.core.protocol.output_lines import canonical_device

    logical = tf.config.list_logical_devices()
    by_short = {canonical_device(d.name): d.name for d in logical}
    names = split_devices(requested)
    if not names:
        gpus = [d.name for d in logical if d.device_type == "GPU"]
        return gpus or [d.name for d in logical if d.device_type == "CPU"]
    missing = [n for n in names if canonical_device(n) not in by_short]
    if missing:
        raise JobError(f"devices: {', '.join(missing)} not in this runtime; logical devices are "
                       f"{', '.join(sorted(by_short))}")
    return [by_short[canonical_device(n)] for n in names]


AUTO = "auto"
CROSS_DEVICE_OPS = (AUTO, "NcclAllReduce", "HierarchicalCopyAllReduce", "ReductionToOneDevice")
# The seed's table: a larger global batch takes a larger learning rate.
LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}


def nccl_unavailable(names: list[str], physical_of: Mapping[str, int] | None = None,
                     nccl_loads: Callable[[], tuple[str | None, str]] | None = None) -> str | None:
    """Why NCCL cannot all-reduce over these logical devices, or None if it can.

    `physical_of`: each logical GPU's physical GPU (canonical short name → index). NCCL runs one rank per
    device: two replicas on logical GPUs split from one physical GPU fail with "NCCL: invalid usage" (measured
    on an H100 with NCCL 2.27.7). `nccl_loads`: `cudalibs.nccl_version`, checked last (it opens the library).
    """
    import platform

    from tf_device_panel.core.protocol.output_lines import canonical_device

    if platform.system() == "Windows":
        return "NCCL does not exist on Windows"
    others = [canonical_device(n) for n in names if "GPU" not in n.upper()]
    if others:
        return f"NCCL all-reduces between NVIDIA GPUs only, not over {', '.join(others)}"
    if physical_of is not None:
        by_physical: dict[int, list[str]] = {}
        for name in names:
            short = canonical_device(name)
            by_physical.setdefault(physical_of.get(short, -1), []).append(short)
        shared = {index: group for index, group in by_physical.items() if len(group) > 1 and index >= 0}
        if shared:
            index, group = min(shared.items())
            return (f"{' and '.join(group)} are split from one physical GPU (GPU {index}), and NCCL runs one rank "
                    "per GPU (\"NCCL: invalid usage\")")
    if nccl_loads is not None:
        version, where = nccl_loads()
        if version is None:
            return f"NCCL does not load in this process: {where}"
    return None


def physical_gpu_of_logical(tf: Any, config: DeviceConfig) -> dict[str, int]:
    """Each logical GPU's physical GPU (TensorFlow's index), from the configuration the run applied."""
    from tf_device_panel.core.config.plan import logical_gpu_owners

    physical = tf.config.list_physical_devices("GPU")
    visible = [physical.index(gpu) for gpu in tf.config.get_visible_devices("GPU") if gpu in physical]
    return {f"/GPU:{i}": owner for i, owner in enumerate(logical_gpu_owners(config, visible))}


class StrategyChoice(TypedDict, total=False):
    strategy: str
    cross_device_ops: str | None
    requested_cross_device_ops: str
    note: str | None


def choose_cross_device_ops(requested: str, names: list[str], physical_of: Mapping[str, int] | None,
                            nccl_loads: Callable[[], tuple[str | None, str]] | None) -> tuple[str, str]:
    """(the cross-device ops to use, a note saying why when it is not what was asked).

    auto: NcclAllReduce when every replica is on its own physical GPU and NCCL loads, else
    HierarchicalCopyAllReduce (which runs anywhere). NcclAllReduce asked where it cannot run: the same
    fallback, said."""
    if requested not in (AUTO, "NcclAllReduce"):
        return requested, ""
    why = nccl_unavailable(names, physical_of, nccl_loads)
    if requested == AUTO:
        if why is None:
            version, where = nccl_loads() if nccl_loads else (None, "")
            found = f" (NCCL {version} from {where})" if version else ""
            return "NcclAllReduce", f"cross-device ops auto: NcclAllReduce, every replica on its own GPU{found}"
        return "HierarchicalCopyAllReduce", f"cross-device ops auto: HierarchicalCopyAllReduce, since {why}"
    if why is None:
        return requested, ""
    return "HierarchicalCopyAllReduce", (f"NcclAllReduce cannot run here ({why}); using HierarchicalCopyAllReduce "
                                         "instead — choose it (or ReductionToOneDevice, or auto) explicitly here")


def choose_strategy(names: list[str], cross_device_ops: str, devices_named: bool,
                    config: DeviceConfig | None = None) -> tuple[Any, StrategyChoice]:
    """The seeds' strategy for `names`: MirroredStrategy with the requested cross-device ops, or the default
    strategy when TensorFlow has just one device to use (the seeds' `tf.distribute.get_strategy()`)."""
    import tensorflow as tf
    from tf_device_panel.core.devices.cudalibs import nccl_version

    if len(names) == 1 and not devices_named:
        return tf.distribute.get_strategy(), {
            "strategy": "default strategy (tf.distribute.get_strategy())", "cross_device_ops": None,
            "note": f"one device ({names[0]}): nothing to mirror, so the default strategy runs as plain TensorFlow"}
    physical_of = physical_gpu_of_logical(tf, config) if config is not None else None
    used, note = choose_cross_device_ops(cross_device_ops, names, physical_of, nccl_version)
    ops = getattr(tf.distribute, used)()
    info: StrategyChoice = {"strategy": "MirroredStrategy", "cross_device_ops": used,
                            "requested_cross_device_ops": cross_device_ops, "note": note}
    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=ops), info


def learning_rate_for(rule: str, global_batch: int, fixed: float) -> tuple[float, str]:
    """The learning rate and where it came from; the seed's table knows global batches 5, 10 and 20 only."""
    if rule == "fixed":
        return fixed, "fixed"
    if global_batch not in LEARNING_RATES_BY_BATCH_SIZE:
        known = ", ".join(map(str, LEARNING_RATES_BY_BATCH_SIZE))
        raise JobError(f"lr_rule: the global batch is {global_batch}, and LEARNING_RATES_BY_BATCH_SIZE only knows "
                       f"{known}; choose batch_per_replica so that it times the replicas is one of those, "
                       "or use lr_rule=fixed")
    return LEARNING_RATES_BY_BATCH_SIZE[global_batch], f"LEARNING_RATES_BY_BATCH_SIZE[{global_batch}]"


def seed_cnn(image_size: int) -> Any:
    """The seeds' small CNN: Conv2D/MaxPooling stack, dropout, a sigmoid output for two classes."""
    import tensorflow as tf

    layers = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input(shape=(image_size, image_size, 3))])
    size = image_size
    for filters in (32, 64, 128, 128):
        if size < 4:  # small images: stop pooling before the feature map vanishes
            break
        model.add(layers.Conv2D(filters, (3, 3), activation="relu", padding="same"))
        model.add(layers.MaxPooling2D((2, 2)))
        size //= 2
    model.add(layers.Flatten())
    model.add(layers.Dropout(0.5))
    model.add(layers.Dense(512, activation="relu"))
    model.add(layers.Dense(1, activation="sigmoid"))
    return model


def synthetic_images(samples: int, image_size: int) -> Any:
    """Two learnable classes: bright images are labelled 1, dark ones 0."""
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=(samples, 1)).astype("float32")
    images = rng.random((samples, image_size, image_size, 3), dtype=np.float32) * 0.5
    images += labels[:, :, None, None] * 0.5
    return images, labels


def fit(ctx: JobContext, epochs: int = 2, batch_per_replica: int = 5, samples: int = 100,
        devices: str = "", model: str = "dense", image_size: int = 32, cross_device_ops: str = AUTO,
        data: str = "dataset", lr_rule: str = "fixed", evaluate: bool = True) -> TrainingResult:
    import numpy as np
    import tensorflow as tf

    names = pick_devices(devices)
    strategy, chosen = choose_strategy(names, cross_device_ops, bool(devices.strip()), ctx.device_config)
    replicas = strategy.num_replicas_in_sync
    global_batch = batch_per_replica * replicas
    steps_per_epoch = -(-samples // global_batch)
    learning_rate, lr_source = learning_rate_for(lr_rule, global_batch, 1e-4 if model == "cnn" else 0.01)

    with strategy.scope():  # the model must be built and compiled inside the scope to be replicated
        if model == "cnn":
            keras_model = seed_cnn(image_size)
            keras_model.compile(loss="binary_crossentropy", optimizer=tf.keras.optimizers.Adam(learning_rate),
                                metrics=["acc"])
        else:
            keras_model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
            keras_model.compile(loss="mse", optimizer=tf.keras.optimizers.SGD(learning_rate))
    # A dataset is batched by the global batch; NumPy arrays get batch_size, which Keras splits across replicas.
    if model == "cnn":
        inputs, targets = synthetic_images(samples, image_size)
        dataset = tf.data.Dataset.from_tensor_slices((inputs, targets)).batch(global_batch)
    else:
        inputs, targets = np.ones((samples, 1)), np.ones((samples, 1))
        dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(samples).batch(global_batch)

    # Keras hands each callback its logs as its own dict (metric name -> value), taken as given.
    class Progress(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if ctx.cancel_requested.is_set():
                self.model.stop_training = True
            done = self.epoch * steps_per_epoch + batch + 1
            ctx.progress(done, epochs * steps_per_epoch, f"epoch {self.epoch + 1}/{epochs}")

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if ctx.cancel_requested.is_set():  # stopped mid-epoch: no loss of a part epoch, no "one more epoch"
                return
            loss = float((logs or {}).get("loss", float("nan")))
            ctx.metric("loss", loss, step=epoch + 1)
            print(f"epoch {epoch + 1}/{epochs}: loss {loss:.6f}", flush=True)

    print(f"{chosen['strategy']} over {', '.join(names)}: {replicas} replicas in sync, global batch {global_batch} "
          f"({batch_per_replica} per replica), cross-device ops {chosen['cross_device_ops']}, "
          f"learning rate {learning_rate:g} ({lr_source}), input {data}", flush=True)
    if chosen.get("note"):
        print(f"note: {chosen['note']}", flush=True)
    if data == "numpy":
        history = keras_model.fit(inputs, targets, epochs=epochs, batch_size=global_batch, verbose=0,
                                  callbacks=[Progress()])
    else:
        # A dataset is taken in its own order: Keras' default shuffle=True cannot apply to it (Keras warns so on
        # every fit); the synthetic samples need no shuffle, and the NumPy input keeps Keras' own.
        history = keras_model.fit(dataset, epochs=epochs, verbose=0, shuffle=False, callbacks=[Progress()])
    if ctx.cancel_requested.is_set():
        raise JobCancelled("training stopped by the user")
    result: TrainingResult = {
        "kind": "training",
        "model": model,
        "parameters": int(keras_model.count_params()),
        "devices": names,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch,
        "batch_per_replica": batch_per_replica,
        "steps_per_epoch": steps_per_epoch,
        "loss": [float(v) for v in history.history.get("loss", [])],
        "input": data,
        "learning_rate": learning_rate,
        "learning_rate_rule": lr_source,
        **chosen,
    }
    if evaluate:
        ctx.progress(1, 1, "model.evaluate on the training data", force=True)
        scores = keras_model.evaluate(dataset, verbose=0, return_dict=True)
        result["evaluate"] = {name: float(value) for name, value in scores.items()}
        print(f"evaluate: {', '.join(f'{k} {v:.6f}' for k, v in result['evaluate'].items())}", flush=True)
    result["notes"] = [n for n in (chosen.get("note"),) if n]
    return result


def custom_loop(ctx: JobContext, steps: int = 20, batch_per_replica: int = 5, learning_rate: float = 0.1,
                devices: str = "", cross_device_ops: str = AUTO, lr_rule: str = "fixed") -> TrainingResult:
    """The seeds' custom training loop under MirroredStrategy."""
    import tensorflow as tf

    names = pick_devices(devices)
    strategy, chosen = choose_strategy(names, cross_device_ops, bool(devices.strip()), ctx.device_config)
    replicas = strategy.num_replicas_in_sync
    global_batch_size = batch_per_replica * replicas  # the global batch grows with the replicas
    learning_rate, lr_source = learning_rate_for(lr_rule, global_batch_size, learning_rate)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(learning_rate)

    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(steps * global_batch_size).batch(
        global_batch_size)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    loss_object = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    def compute_loss(labels: Any, predictions: Any) -> Any:
        per_example_loss = loss_object(labels, predictions)
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)

    def train_step(inputs: Any) -> Any:
        features, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = compute_loss(labels, predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def distributed_train_step(dist_inputs: Any) -> Any:
        per_replica_losses = strategy.run(train_step, args=(dist_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    print(f"{chosen['strategy']} over {', '.join(names)}: {replicas} replicas, global batch {global_batch_size} "
          f"({batch_per_replica} per replica), cross-device ops {chosen['cross_device_ops']}, "
          f"learning rate {learning_rate:g} ({lr_source})", flush=True)
    if chosen.get("note"):
        print(f"note: {chosen['note']}", flush=True)
    losses: list[float] = []
    for step, dist_inputs in enumerate(dist_dataset, 1):
        ctx.check_cancelled()
        loss = float(distributed_train_step(dist_inputs))
        losses.append(loss)
        ctx.metric("loss", loss, step=step)
        ctx.progress(step, steps, f"step {step}/{steps}: loss {loss:.5f}")
        print(f"step {step}: loss {loss:.6f}", flush=True)
    return {
        "kind": "training",
        "model": "dense",
        "loop": "custom",
        "devices": names,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch_size,
        "batch_per_replica": batch_per_replica,
        "steps": len(losses),
        "loss": losses,
        "learning_rate": learning_rate,
        "learning_rate_rule": lr_source,
        **chosen,
        "notes": [n for n in (chosen.get("note"),) if n],
    }
