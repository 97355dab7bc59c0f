"""Run history: each run's configuration, full event stream and result, written as it happens.

Layout: <home>/runs/<run_id>/run.json (summary, rewritten atomically) and events.jsonl (appended and
flushed per event), so a crash mid-run loses nothing already produced.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import platformdirs
import psutil
from tf_device_panel.core.events import Event

HOME_ENV = "TF_DEVICE_PANEL_HOME"


def home() -> Path:
    override = os.environ.get(HOME_ENV)
    return Path(override).expanduser() if override else platformdirs.user_data_path("tf-device-panel")


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class RunRecorder:
    def __init__(self, folder: Path, summary: dict[str, Any]):
        self.folder = folder
        self.run_id = folder.name
        self.summary = summary
        folder.mkdir(parents=True, exist_ok=False)
        _write_json_atomic(folder / "run.json", summary)
        self._events = (folder / "events.jsonl").open("a", encoding="utf-8", buffering=1)

    def append(self, event: Event) -> None:
        if not self._events.closed:
            self._events.write(json.dumps(event.to_json(), default=str) + "\n")

    def finish(self, **fields: Any) -> None:
        self.summary.update(fields)
        self.summary["finished"] = time.time()
        _write_json_atomic(self.folder / "run.json", self.summary)
        self._events.close()


class RunHistory:
    def __init__(self, root: Path | None = None):
        self.root = (root or home()) / "runs"

    def new_run(self, job: str, params: dict[str, Any], config: dict[str, Any],
                devices: dict[str, Any] | None) -> RunRecorder:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{job}-{secrets.token_hex(3)}"
        summary = {"run_id": run_id, "job": job, "params": params, "config": config, "devices": devices,
                   "status": "running", "started": time.time(), "client_pid": os.getpid()}
        return RunRecorder(self.root / run_id, summary)

    def summaries(self, limit: int | None = None) -> list[dict[str, Any]]:
        """At most `limit` summaries (all with None), newest first; a run whose client died mid-run shows as
        'interrupted'."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        if not self.root.is_dir() or limit == 0:
            return []
        runs = []
        for folder in sorted(self.root.iterdir(), reverse=True):
            if not folder.is_dir():
                continue
            try:
                summary = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                summary = {"run_id": folder.name, "status": "unreadable", "error": {"message": str(exc)}}
            if summary.get("status") == "running" and not psutil.pid_exists(int(summary.get("client_pid", 0))):
                summary["status"] = "interrupted"
            runs.append(summary)
            if limit is not None and len(runs) >= limit:
                break
        return runs

    def get(self, run_id: str) -> dict[str, Any]:
        folder = self._folder(run_id)
        return dict(json.loads((folder / "run.json").read_text(encoding="utf-8")))

    def events(self, run_id: str) -> list[Event]:
        """The recorded events; a line cut short by a crash is skipped, not fatal."""
        folder = self._folder(run_id)
        loaded = []
        with (folder / "events.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    loaded.append(Event.from_json(json.loads(line)))
                except (ValueError, KeyError):
                    continue
        return loaded

    def _folder(self, run_id: str) -> Path:
        folder = self.root / run_id
        if "/" in run_id or run_id.startswith(".") or not folder.is_dir():
            raise KeyError(f"no run {run_id!r} in {self.root}")
        return folder
