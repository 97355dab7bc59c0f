"""The largest batch that fits a memory budget, found at the boundary and verified.

Every run is the work itself (the fit job's model, the user's script with `{batch}` filled in, or a saved Keras
model trained a few steps) run by the panel's own command line in a fresh process, under the user's profile with
its device capped at the budget (core.panel_runs.runs): what the user runs when they take the answer. The search
itself runs in the panel's process (a client job, core.client.client_job): it needs no TensorFlow of its own.

1. Probes: a few runs at small, growing batches; their allocator peaks against the batch give a line, and the
   line predicts the batch whose peak is PREDICT_SHARE of the budget.
2. Search: the boundary is the largest batch that held (in all its runs) and the smallest that ran out. The
   first try is the prediction; while nothing has run out the search goes up, then it halves the gap until the
   two are within WIDE of each other. The allocator's peak does not warn of a run's end: near the limit runs
   die of fragmentation (one large block asked for, with the pool far from full) while others at the same batch
   peak well under it, and peaks at one batch spread by a third from run to run. So only runs decide.
3. Answer: the largest batch that held and lies at least MARGIN below the smallest that ran out. Near the limit
   runs run out at random (the cnn under 256 MiB: every run up to 432 held, from 434 to 480 one run in three or
   four ran out), so a batch just under one that ran out may hold in its repeats by chance and run out in the
   user's run; a step below the first failure is where runs stop running out. The answer is run until it has
   held REPEATS times (MORE_REPEATS when its peaks spread by more than SPREAD_FOR_MORE or a run held above one
   that ran out); a run out of memory among them makes it the new "ran out" and the search goes on below it.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Literal

from tf_device_panel.core.catalogue.fit_work import Work
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.client.client_job import ClientJobContext
from tf_device_panel.core.config import save_profile
from tf_device_panel.core.panel_runs.runs import (
    PanelRun,
    capped_profile,
    read_run,
    start_run,
    stop_run,
    wait_runs,
)
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.results import FitBatchResult, FitProbe
from tf_device_panel.core.text import tf_error_text
from tf_device_panel.core.units import MIB, mib_text

PROBES = 3
PROBE_GROWTH = 4           # each probe's batch is this times the last
PREDICT_SHARE = 0.85       # the first guess: the batch whose predicted peak is this share of the budget
WIDE = 0.10                # the search ends when the smallest batch that ran out is within this of the largest held
MARGIN = 0.10              # the answer stays at least this far below the smallest batch that ran out
UP_MOST = 2.0              # going up, one step at most doubles the batch
REPEATS = 4
MORE_REPEATS = 6           # when runs ran out by chance (see SearchState.by_chance) or the answer's peaks spread
SPREAD_FOR_MORE = 0.10     # peaks at the answer spread wider than this (of the largest): MORE_REPEATS
NEAR = 1.25                # failures up to this times the answer count as "near" it
MAX_BATCH = 1_000_000      # the fit job's own limit
MAX_RUNS = 48
SIDE_BY_SIDE = 2           # on the CPU, the runs of one try start together (see the search)
RUN_TIMEOUT_S = 900.0


def fit_line(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(fixed bytes, bytes per sample): least squares through (batch, peak) points."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def predict(fixed: float, per_sample: float, budget_bytes: float) -> int:
    """The largest batch whose predicted peak stays under `budget_bytes` (MAX_BATCH when the peak does not grow)."""
    if per_sample <= 0:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, math.floor((budget_bytes - fixed) / per_sample)))


def below_failure(ran_out: int) -> int:
    """The largest batch at least MARGIN below `ran_out` (the batch just under it where batches are small)."""
    return max(1, min(ran_out - 1, math.floor(ran_out / (1 + MARGIN) + 1e-9)))  # 1e-9: 110 / 1.1 is 99.99…


def repeats_needed(peaks: list[int], by_chance: bool = False) -> int:
    """How many times the answer must hold: REPEATS, or MORE_REPEATS when its peaks spread widely or runs near
    the limit ran out by chance."""
    if by_chance or (len(peaks) >= 2 and (max(peaks) - min(peaks)) / max(peaks) > SPREAD_FOR_MORE):
        return MORE_REPEATS
    return REPEATS


class SearchState:
    """Every run so far, and what they say about the boundary."""

    def __init__(self) -> None:
        self.rows: list[FitProbe] = []

    def ran_out(self) -> int | None:
        """The smallest batch that ran out of memory in any of its runs."""
        return min((r["batch"] for r in self.rows if not r["fits"]), default=None)

    def held(self) -> int | None:
        """The largest batch below every one that ran out whose every run held."""
        out = self.ran_out()
        held = {r["batch"] for r in self.rows if r["fits"]} - {r["batch"] for r in self.rows if not r["fits"]}
        return max((b for b in held if out is None or b < out), default=None)

    def by_chance(self) -> bool:
        """Whether a run held at or above a batch that ran out: near the limit, runs run out at random."""
        out = self.ran_out()
        return out is not None and any(r["fits"] and r["batch"] >= out for r in self.rows)

    def peaks_at(self, batch: int) -> list[int]:
        return [r["peak_bytes"] for r in self.rows if r["batch"] == batch and r["fits"] and r["peak_bytes"]]

    def line(self) -> tuple[float, float] | None:
        """(fixed, per sample) through the peaks that held, one point a batch (its largest peak)."""
        points: dict[int, int] = {}
        for row in self.rows:
            if row["fits"] and row["peak_bytes"]:
                points[row["batch"]] = max(points.get(row["batch"], 0), row["peak_bytes"])
        if len(points) < 2:
            if len(points) == 1:  # one point: assume the peak grows in proportion to the batch
                ((batch, peak),) = points.items()
                return 0.0, peak / batch
            return None
        return fit_line(sorted(points.items()))


Step = Literal["search", "repeat", "answer", "nothing fits"]


def next_step(found: SearchState, prediction: int | None, budget: int) -> tuple[Step, int]:
    """What to run next, from every run so far: a search's try, a repeat of the answer, or the answer itself.

    `prediction` is the probes' first guess, given only before the search's first try.
    """
    held, out = found.held(), found.ran_out()
    if held is None:
        assert out is not None, "the search starts after at least one run"
        return ("nothing fits", 1) if out == 1 else ("search", max(1, out // 2))
    if out is None and held < MAX_BATCH:
        if prediction:  # the probes' prediction, however far above them
            return "search", min(MAX_BATCH, max(held + 1, prediction))
        # the line through everything that held, at the whole budget, stepping at least WIDE, at most doubling
        line = found.line()
        guess = predict(*line, budget) if line else held * 2
        return "search", min(MAX_BATCH, max(held + 1, math.ceil(held * (1 + WIDE)), min(guess, int(held * UP_MOST))))
    if out is not None and out - held > max(1, held * WIDE):
        return "search", (held + out) // 2
    # Within WIDE (or the budget holds the largest batch there is): the answer, once it has held its repeats.
    answer = held if out is None else min(held, below_failure(out))
    peaks = found.peaks_at(answer)
    return ("answer", answer) if len(peaks) >= repeats_needed(peaks, found.by_chance()) else ("repeat", answer)


def fit_batch(ctx: ClientJobContext, model: str = "cnn", script: str = "", args: str = "", budget_mib: int = 256,
              image_size: int = 32, device: str = "") -> FitBatchResult:
    work = Work(model, script.strip(), args, image_size)
    short = short_device_name(device) if device.strip() else "/CPU:0"
    if not short.startswith(("/CPU:", "/GPU:")):
        raise JobError(f"device: {device!r} is neither a CPU nor a GPU; use /CPU:0 or /GPU:N")
    budget = budget_mib * MIB
    with tempfile.TemporaryDirectory(prefix="tf-fit-batch-") as folder:
        profile = Path(folder) / "budget.json"
        save_profile(capped_profile(ctx.device_config, short, budget_mib), profile)
        return _search(ctx, work, short, budget_mib, budget, profile, Path(folder))


def _search(ctx: ClientJobContext, work: Work, short: str, budget_mib: int, budget: int, profile: Path,
            folder: Path) -> FitBatchResult:
    found = SearchState()
    rows = found.rows

    def run(batch: int, role: str, side_by_side: int = 1) -> bool:
        """Runs at this batch (`side_by_side` of them at once); whether every one held."""
        ctx.check_cancelled()
        if len(rows) >= MAX_RUNS:
            raise JobError(f"no boundary found in {MAX_RUNS} runs (largest held: {found.held()}, smallest that ran "
                           f"out: {found.ran_out()}); the work's memory may not depend on its batch")
        ctx.progress(len(rows), len(rows) + 4, f"{role}: batch {batch} under {budget_mib} MiB")
        started: list[PanelRun] = []
        try:
            for _ in range(side_by_side):
                run_folder = folder / f"run-{len(rows) + len(started) + 1}"
                run_folder.mkdir()
                started.append(start_run(work, batch, profile, run_folder, short))
        except BaseException:
            for one in started:
                stop_run(one)
            raise
        if not wait_runs(started, RUN_TIMEOUT_S, ctx.cancel_requested, on_gpu=short.startswith("/GPU:")):
            ctx.check_cancelled()
            raise JobError(f"the run at batch {batch} took over {RUN_TIMEOUT_S:.0f} s; stopped")
        for one in started:
            row = read_run(one)
            if not row["fits"] and "oom" not in row:
                raise JobError(f"the run at batch {batch} failed, not for lack of memory: "
                               f"{tf_error_text(row['error'])}")
            row["role"] = role
            row["side_by_side"] = side_by_side
            rows.append(row)
            verdict = f"held, peak {mib_text(row['peak_bytes'] / MIB)}" if row["fits"] and row["peak_bytes"] else \
                f"out of memory ({(row.get('oom') or {}).get('verdict') or 'unknown'})"
            ctx.say(f"{role} batch {batch}: {verdict} ({row['seconds']:.1f} s)")
        return all(row["fits"] for row in rows[-side_by_side:])

    # 1. Probes, stopped early by one that runs out or once the line says the next would not fit.
    batch = work.first_batch
    for _ in range(PROBES):
        if not run(batch, "probe"):
            break
        line = found.line()
        next_batch = batch * PROBE_GROWTH
        if line is not None and len(found.rows) >= 2 and predict(*line, budget * PREDICT_SHARE) < next_batch:
            break
        batch = next_batch
    held_peaks = [r["peak_bytes"] for r in rows if r["fits"] and r["peak_bytes"]]
    if work.script and len(held_peaks) >= 2 and max(held_peaks) - min(held_peaks) < 0.01 * min(held_peaks):
        raise JobError(f"the script's memory does not grow with its batch: peaks "
                       f"{', '.join(f'{p / MIB:.1f}' for p in held_peaks)} MiB at batches "
                       f"{', '.join(str(r['batch']) for r in rows)}; check that it uses the batch its arguments "
                       "give it")
    line = found.line()
    prediction = predict(*line, budget * PREDICT_SHARE) if line else None

    # 2. The search, then 3. the answer's repeats: on the CPU two runs at once, each beside the other, as on a
    # busy machine. Peaks depend on how the runtime's threads interleave the step's ops: with the cnn under
    # 256 MiB, batch 512 held 4 of 4 runs alone on an idle machine and 1 of 6 with the machine busy (ending in
    # fragmentation), where 420 held 5 of 5. The answer must hold on the busy machine too.
    together = 1 if short.startswith("/GPU:") else SIDE_BY_SIDE
    first_guess = True
    while True:
        step, batch = next_step(found, prediction if first_guess else None, budget)
        first_guess = False
        if step == "nothing fits":
            raise JobError(f"even a batch of 1 ran out of memory under {budget_mib} MiB on {short} "
                           f"({rows[-1].get('error') or 'out of memory'}); give it a larger budget_mib")
        if step == "answer":
            break
        run(batch, step, together)
    answer = batch

    out = found.ran_out()
    peaks = found.peaks_at(answer)
    near = [r for r in rows if not r["fits"] and r["batch"] <= answer * NEAR]
    verdicts = Counter(str((r.get("oom") or {}).get("verdict") or "unknown") for r in near)
    flags: list[str] = []
    if out is None:
        flags.append(f"capped at {MAX_BATCH:,}, the largest batch a run takes: the budget holds more")
    rss = [r.get("rss_peak_bytes") or 0 for r in rows if r["batch"] == answer]
    gpu_process = [r.get("gpu_process_peak_bytes") or 0 for r in rows if r["batch"] == answer]
    line = found.line() or (0.0, 0.0)
    for row in rows:
        row.pop("peaks", None)
        row["predicted_peak_bytes"] = int(line[0] + line[1] * row["batch"])
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "fit_batch",
        "model": work.name,
        "work": {"model": work.model, "script": work.script, "args": work.args},
        "device": short,
        "budget_mib": budget_mib,
        "predicted_max_batch": answer,
        "prediction": prediction or answer,
        "verified": True,
        "boundary": {"held": answer, "ran_out": out, "largest_held": found.held() or answer},
        "repeats": len(peaks),
        "answer_peaks": {"min_bytes": min(peaks), "max_bytes": max(peaks),
                         "spread": (max(peaks) - min(peaks)) / max(peaks)},
        "process_peak_bytes": max(rss) or None,
        "gpu_process_peak_bytes": max(gpu_process) or None,
        "failures_near": dict(verdicts),
        "fit": {"fixed_bytes": int(line[0]), "bytes_per_sample": line[1], "margin": PREDICT_SHARE},
        "probes": rows,
        "runs": len(rows),
        "run_s": sum(r["seconds"] for r in rows),
        "flags": flags,
    }
