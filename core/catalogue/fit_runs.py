"""The fit job run by the panel's own command line at one batch, under a profile, and what such a run did.

fit-batch verifies its prediction this way (core.runproc.jobs.fit_batch), and so does `share --verify` for each
seat (core.client.share): one request (the command line's arguments) and one answer (its outcome and record).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.processes import start_module
from tf_device_panel.core.results import FitProbe

MIB = 1024 * 1024
# The module that runs the panel's command line (`--panel`) or one probe: named as the launcher names a module.
PROBE_MODULE = "tf_device_panel.core.runproc.fit_probe"


def start_panel_fit(profile: Path, folder: Path, model: str, batch: int, image_size: int,
                    extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """`tf-device-panel run fit --config PROFILE --json` at this batch (one epoch, `batch` samples), dying with
    its parent, its record in a history of its own under FOLDER/home; its outcome and stderr go to FOLDER.
    `extra`: more `-p NAME=VALUE` arguments."""
    home = folder / "home"
    with open(folder / "outcome.json", "wb") as stdout, open(folder / "stderr.txt", "wb") as stderr:
        return start_module(PROBE_MODULE, "--panel", "run", "fit", "--config", str(profile), "--json",
                            "-p", f"model={model}", "-p", f"batch_per_replica={batch}", "-p", f"samples={batch}",
                            "-p", "epochs=1", "-p", f"image_size={image_size}", *extra,
                            env={"TF_DEVICE_PANEL_HOME": str(home)}, stdout=stdout, stderr=stderr,
                            die_with_parent=True)


def read_panel_fit(folder: Path, returncode: int | None, batch: int, seconds: float) -> FitProbe:
    """What a finished `start_panel_fit` run in FOLDER did: whether it fitted, its peak (the largest allocator
    peak its record's tf_memory events give, over its devices), its error and, for an OOM, the figures."""
    try:
        outcome = json.loads((folder / "outcome.json").read_text())
    except (OSError, ValueError):
        tail = (folder / "stderr.txt").read_text(errors="replace").strip().splitlines()[-3:]
        raise JobError(f"the fit run at batch {batch} printed no outcome (exit {returncode}): "
                       + " / ".join(tail)) from None
    peaks: dict[str, int] = {}
    for events_file in (folder / "home").rglob("events.jsonl"):
        for line in events_file.read_text(errors="replace").splitlines():
            if '"tf_memory"' in line:
                with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                    data = json.loads(line)["data"]
                    device = str(data.get("device", ""))
                    peaks[device] = max(peaks.get(device, 0), int(data["peak_mib"] * MIB))
    peak = max(peaks.values()) if peaks else None
    fits = outcome.get("status") == "ok"
    row: FitProbe = {"batch": batch, "fits": fits, "peak_bytes": peak, "seconds": seconds,
                     "error": None if fits else (outcome.get("error") or {}).get("message"), "run": "fit",
                     "peaks": peaks}
    if fits and peak is None:
        raise JobError(f"the fit run at batch {batch} fitted but reported no allocator figures")
    oom = outcome.get("oom")
    if oom:
        row["oom"] = {key: oom.get(key) for key in ("request_bytes", "limit_bytes", "in_use_bytes",
                                                    "largest_free_bytes", "verdict")}
    return row
