"""What the window remembers about each job between runs: its status line, progress, clock and last outcome.

Qt-free, so the window's state is held apart from the widgets that draw it: the Runs panel keeps one
`JobState` per job and draws the selected one, so switching jobs never shows another job's outcome.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from tf_device_panel.core.client.run_record import JobOutcome

# Error types the panel itself raises: their names say nothing to a user, so they appear only in the details.
INTERNAL_ERROR_TYPES = frozenset({"JobError", "ScriptExit", "ParamError", "RuntimeUnavailable", "ProtocolError",
                                  "RuntimeExited", "TaskFailed", "StepError", "ConfigStepError", "Cancelled",
                                  "JobCancelled"})
MAX_OUTPUT_LINES = 5000  # a job's own output kept for its console (the run history keeps all of it)
STATUS_WORDS = {"ok": "Finished", "error": "Failed", "cancelled": "Cancelled", "crashed": "The runtime died"}


@dataclass
class JobState:
    """One job's state as the Runs panel shows it when that job is selected."""

    status: str = ""                       # the line beside the progress bar ("Running fit…", "Failed in 2.1 s")
    progress: float | None = 0.0           # 0..1, or None while busy without a known fraction
    started_at: float | None = None        # time.monotonic() of the start, while it runs
    elapsed_s: float | None = None         # the run's duration once it ended
    outcome: JobOutcome | None = None      # the last finished run's outcome
    waiting: bool = False                  # Run was pressed; it starts when the spare is ready
    live_losses: list[float] = field(default_factory=list)
    stopping: bool = False
    output: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_OUTPUT_LINES))  # its last run's lines
    live_line: str = ""                    # a line being redrawn with "\r" (a progress bar), not yet ended

    @property
    def running(self) -> bool:
        return self.started_at is not None

    def elapsed(self, now: float | None = None) -> float | None:
        if self.started_at is not None:
            return (time.monotonic() if now is None else now) - self.started_at
        return self.elapsed_s

    def queue(self) -> None:
        self.waiting = True
        self.status = "Waiting for the runtime: starts as soon as it is ready"

    def start(self, job: str, now: float | None = None, *, keep_output: bool = False) -> None:
        """`keep_output`: the run's first lines came before the news that it started (they travel apart)."""
        self.waiting = self.stopping = False
        self.started_at = time.monotonic() if now is None else now
        self.elapsed_s = None
        self.progress = None
        self.status = f"Running {job}…"
        self.live_losses = []
        if not keep_output:
            self.output.clear()
            self.live_line = ""

    def add_output(self, text: str, partial: bool = False) -> bool:
        """One line of the job's own output; `partial`: the line redrawn so far. True when a line was added."""
        if partial:
            self.live_line = text
            return False
        self.live_line = ""
        self.output.append(text)
        return True

    def report(self, done: float, total: float, message: str) -> None:
        if total > 0 and done > 0:
            self.progress = min(done / total, 1.0)
        # Nothing done yet (a script's "running train.py", 0 of 1): the bar stays busy, moving, rather than reading
        # 0 % until the end.
        if message and not self.stopping:
            self.status = message

    def stop_requested(self, grace_s: float) -> None:
        self.stopping = True
        self.status = f"Stopping… (a job that has not stopped in {grace_s:g} s has its runtime restarted)"

    def finish(self, outcome: JobOutcome, now: float | None = None) -> None:
        if outcome.duration_s:
            self.elapsed_s = outcome.duration_s
        elif self.started_at is not None:
            self.elapsed_s = (time.monotonic() if now is None else now) - self.started_at
        self.started_at = None
        self.stopping = self.waiting = False
        self.outcome = outcome
        if outcome.status == "ok":
            self.progress = 1.0
        elif self.progress is None:
            self.progress = 0.0
        word = STATUS_WORDS.get(outcome.status, outcome.status.capitalize())
        # The outcome's message is shown whole once, in the result area: the status line only says how it ended.
        self.status = f"{word} in {outcome.duration_s:.2f} s" if outcome.duration_s else word


def error_summary(outcome: JobOutcome) -> str:
    """The failure's message as a person reads it: TensorFlow's or Python's class name kept (it is what they
    would search for), the panel's own class names (JobError, ScriptExit…) left to the details."""
    kind = outcome.error.type if outcome.error is not None else ""
    message = outcome.error.message.strip() if outcome.error is not None else ""
    if kind in INTERNAL_ERROR_TYPES or not kind:
        return message or kind
    if not message or message.lower().rstrip(".") == kind.lower():
        return kind
    return f"{kind}: {message}"
