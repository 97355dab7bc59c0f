"""Keras training under tf.distribute.MirroredStrategy, as in the seeds."""

from __future__ import annotations

from typing import Any

from core.jobs import split_devices
from core.jobs.context import JobCancelled, JobContext, JobError


def pick_devices(requested: str) -> list[str]:
    """The logical devices to mirror over: those named (which must exist), else all GPUs, else all CPUs."""
    import tensorflow as tf

    from core.placement import canonical_device

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


def fit(ctx: JobContext, epochs: int = 2, batch_per_replica: int = 5, samples: int = 100,
        devices: str = "") -> dict[str, Any]:
    import tensorflow as tf

    names = pick_devices(devices)
    strategy = tf.distribute.MirroredStrategy(devices=names)
    replicas = strategy.num_replicas_in_sync
    global_batch = batch_per_replica * replicas
    steps_per_epoch = -(-samples // global_batch)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
        model.compile(loss="mse", optimizer="sgd")
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(samples).batch(global_batch)

    class Progress(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if ctx.cancel_requested.is_set():
                self.model.stop_training = True
            done = self.epoch * steps_per_epoch + batch + 1
            ctx.progress(done, epochs * steps_per_epoch, f"epoch {self.epoch + 1}/{epochs}")

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            loss = float((logs or {}).get("loss", float("nan")))
            ctx.metric("loss", loss, step=epoch + 1)
            print(f"epoch {epoch + 1}/{epochs}: loss {loss:.6f}", flush=True)

    print(f"MirroredStrategy over {', '.join(names)}: {replicas} replicas in sync, "
          f"global batch {global_batch} ({batch_per_replica} per replica)", flush=True)
    history = model.fit(dataset, epochs=epochs, verbose=0, callbacks=[Progress()])
    if ctx.cancel_requested.is_set():
        raise JobCancelled("training stopped by the user")
    return {
        "kind": "training",
        "devices": names,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch,
        "batch_per_replica": batch_per_replica,
        "steps_per_epoch": steps_per_epoch,
        "loss": [float(v) for v in history.history.get("loss", [])],
    }
