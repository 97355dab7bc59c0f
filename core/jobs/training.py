"""Keras training under tf.distribute.MirroredStrategy, as in the seeds."""

from __future__ import annotations

from typing import Any

from tf_device_panel.core.jobs import split_devices
from tf_device_panel.core.jobs.context import JobCancelled, JobContext, JobError
from tf_device_panel.core.results import TrainingResult


def pick_devices(requested: str) -> list[str]:
    """The logical devices to mirror over: those named (which must exist), else all GPUs, else all CPUs."""
    import tensorflow as tf
    from tf_device_panel.core.placement import canonical_device

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


def mirrored_strategy(names: list[str]) -> Any:
    """MirroredStrategy over `names`. Each run has a fresh process, so its collectives never meet an earlier
    job's groups (TF keys them per process: a second strategy over other devices used to fail)."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(devices=names)


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
        devices: str = "", model: str = "dense", image_size: int = 32) -> TrainingResult:
    import tensorflow as tf

    names = pick_devices(devices)
    strategy = mirrored_strategy(names)
    replicas = strategy.num_replicas_in_sync
    global_batch = batch_per_replica * replicas
    steps_per_epoch = -(-samples // global_batch)

    with strategy.scope():  # the model must be built and compiled inside the scope to be replicated
        if model == "cnn":
            keras_model = seed_cnn(image_size)
            keras_model.compile(loss="binary_crossentropy", optimizer=tf.keras.optimizers.Adam(1e-4),
                                metrics=["acc"])
        else:
            keras_model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
            keras_model.compile(loss="mse", optimizer="sgd")
    if model == "cnn":
        dataset = tf.data.Dataset.from_tensor_slices(synthetic_images(samples, image_size)).batch(global_batch)
    else:
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
    history = keras_model.fit(dataset, epochs=epochs, verbose=0, callbacks=[Progress()])
    if ctx.cancel_requested.is_set():
        raise JobCancelled("training stopped by the user")
    return {
        "kind": "training",
        "model": model,
        "parameters": int(keras_model.count_params()),
        "devices": names,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch,
        "batch_per_replica": batch_per_replica,
        "steps_per_epoch": steps_per_epoch,
        "loss": [float(v) for v in history.history.get("loss", [])],
    }


def custom_loop(ctx: JobContext, steps: int = 20, batch_per_replica: int = 5, learning_rate: float = 0.1,
                devices: str = "") -> TrainingResult:
    """The seeds' custom training loop under MirroredStrategy."""
    import tensorflow as tf

    names = pick_devices(devices)
    strategy = mirrored_strategy(names)
    replicas = strategy.num_replicas_in_sync
    global_batch_size = batch_per_replica * replicas  # the global batch grows with the replicas

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

    print(f"MirroredStrategy over {', '.join(names)}: {replicas} replicas, "
          f"global batch {global_batch_size} ({batch_per_replica} per replica)", flush=True)
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
    }
