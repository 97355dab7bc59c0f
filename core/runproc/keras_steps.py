"""Train a saved Keras model for a few steps at one batch, on synthetic data: what `fit-batch` and `share` run for
`model=PATH.keras`, through `run script` like any user's script (so under the same profile, cap and record).

    python keras_steps.py MODEL.keras BATCH [DEVICE]

The inputs are random values of the model's input shapes and dtypes; the labels are shaped as its outputs
(class indices for a sparse loss). It trains with the model's own compiled loss and optimizer, then evaluates
once, as the fit job does. A model whose inputs have an unknown dimension other than the batch cannot be given
synthetic inputs: it says so and exits 2.
"""

from __future__ import annotations

import contextlib
import sys

STEPS = 3


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not argv[1].isdigit() or int(argv[1]) < 1:
        print("usage: keras_steps.py MODEL.keras BATCH [DEVICE]", file=sys.stderr)
        return 2
    path, batch = argv[0], int(argv[1])
    device = argv[2] if len(argv) == 3 else ""
    import numpy as np
    import tensorflow as tf

    keras = tf.keras
    model = keras.models.load_model(path)
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        print(f"{path}: the model was saved without compiling (no loss and optimizer); call model.compile(...) "
              "before model.save", file=sys.stderr)
        return 2
    generator = np.random.default_rng(0)

    def synthetic(shape: tuple[int | None, ...], dtype: str, what: str, sparse: bool = False) -> np.ndarray:
        inner = shape[1:-1] if sparse else shape[1:]
        if any(size is None for size in inner):
            raise SystemExit(f"{path}: {what} has the shape {tuple(shape)}, with an unknown size besides the batch; "
                             "save the model with fixed input sizes (keras.Input(shape=(...)))")
        full = (batch, *(int(size) for size in inner))  # type: ignore[arg-type]
        if sparse or dtype.startswith(("int", "uint", "bool")):
            return np.zeros(full, dtype="int32" if sparse else dtype)
        return generator.random(full, dtype=np.float32).astype(dtype)

    loss_text = str(getattr(model, "loss", "")).lower()
    sparse = "sparse" in loss_text
    inputs = [synthetic(tuple(t.shape), str(t.dtype), f"input {t.name!r}") for t in model.inputs]
    labels = [synthetic(tuple(t.shape), "float32", f"output {t.name!r}", sparse) for t in model.outputs]
    data = tf.data.Dataset.from_tensors((tuple(inputs) if len(inputs) > 1 else inputs[0],
                                         tuple(labels) if len(labels) > 1 else labels[0])).repeat(STEPS)
    with tf.device(device) if device else contextlib.nullcontext():
        model.fit(data, epochs=1, verbose=2)
        model.evaluate(data.take(1), verbose=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
