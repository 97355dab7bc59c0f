"""The work `fit-batch` sizes and `share` seats: the fit job's built-in model, a user's script whose arguments
carry `{batch}`, or a saved Keras model (a .keras file) trained for a few steps on synthetic inputs. Each is run
by the panel's own command line, at one batch, as a user would run it (core.panel_runs.runs).

Everything about the work is checked here before any process starts: a script without `{batch}` in its
arguments, a .keras file that is not a saved model or was saved without compiling.
"""

from __future__ import annotations

import json
import shlex
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tf_device_panel.core.text import quote

BATCH = "{batch}"                   # in a script's arguments: replaced by each batch tried
BUILT_IN_MODELS = ("dense", "cnn")
KERAS_SUFFIX = ".keras"
# The script that trains a saved model a few steps at one batch, run by `run script` like any user's script
# (a file path, not an import: the panel's side never imports the run process's modules).
KERAS_STEPS = Path(__file__).resolve().parent.parent / "runproc" / "keras_steps.py"


def keras_model_problem(text: str) -> str | None:
    """Why the file is not a compiled saved Keras model, or None: read from its config.json, no TensorFlow."""
    path = Path(text.strip()).expanduser()
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, UnicodeDecodeError):
        return (f"{quote(text)} is not a saved Keras model (a .keras file is a zip archive holding config.json); "
                "save the model with model.save('NAME.keras')")
    except OSError as exc:
        return f"{quote(text)} cannot be read: {exc.strerror or exc}"
    compiled = config.get("compile_config") if isinstance(config, dict) else None
    if not isinstance(compiled, dict) or not compiled.get("loss") or not compiled.get("optimizer"):
        return (f"{quote(text)} was saved without a compiled loss and optimizer, so it cannot be trained as it "
                "stands; call model.compile(optimizer=..., loss=...) before model.save")
    return None


def fit_batch_problems(values: Mapping[str, object]) -> list[tuple[str, str]]:
    """The rules between fit-batch's parameters (each one's own are its declaration's)."""
    script, args, model = str(values.get("script", "")), str(values.get("args", "")), str(values.get("model", ""))
    problems: list[tuple[str, str]] = []
    if script.strip():
        if BATCH not in args:
            problems.append(("args", f"the script's arguments must say where the batch goes: write {BATCH} "
                                     f"where your script takes its batch size, e.g. --batch-size {BATCH}"))
        if model not in BUILT_IN_MODELS:
            problems.append(("model", "give a script or a saved model, not both"))
    elif args.strip():
        problems.append(("args", "arguments are for a script; give the script too (script=PATH)"))
    elif model not in BUILT_IN_MODELS and model.strip():
        problem = keras_model_problem(model)
        if problem:
            problems.append(("model", problem))
    return problems


@dataclass(frozen=True)
class Work:
    """One work as the panel's command line runs it at a batch."""

    model: str = "cnn"              # dense, cnn, or a .keras file
    script: str = ""
    args: str = ""                  # the script's arguments, with {batch}
    image_size: int = 32            # the built-in cnn's

    @property
    def name(self) -> str:
        """What the work is, in a few words: "cnn", "script train.py", "model my.keras"."""
        if self.script:
            return f"script {Path(self.script).name}"
        return self.model if self.model in BUILT_IN_MODELS else f"model {Path(self.model).name}"

    @property
    def first_batch(self) -> int:
        return 256 if self.model == "dense" and not self.script else 8

    def run_args(self, batch: int, device: str) -> tuple[str, ...]:
        """`tf-device-panel run ...` arguments (after `run`, before --config) at this batch on this device (the
        run's own: a capped CPU or the one logical GPU of its profile)."""
        if self.script:
            return ("script", "-p", f"path={self.script}", "-p", f"args={self.args.replace(BATCH, str(batch))}")
        if self.model not in BUILT_IN_MODELS:
            steps_args = shlex.join([str(Path(self.model).expanduser()), str(batch), device])
            return ("script", "-p", f"path={KERAS_STEPS}", "-p", f"args={steps_args}")
        return ("fit", "-p", f"model={self.model}", "-p", f"batch_per_replica={batch}", "-p", f"samples={batch}",
                "-p", "epochs=1", "-p", f"image_size={self.image_size}", "-p", f"devices={device}")
