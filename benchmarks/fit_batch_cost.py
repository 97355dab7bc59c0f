"""What `fit-batch` costs against the search a Lightning user gets, on the same model in the same run.

Lightning's BatchSizeFinder (mode "binsearch"): from batch 2, double while a trial holds; after the first that runs
out, bisect between the last that held and the first that ran out until they are 1 apart; a trial is 3 training
steps, here 3 runs of the same work, and it fails at its first run out of memory (at most 25 trials). Every run is
the panel's own `run fit` (or the work's run) under a profile capping the CPU at the budget: the runs fit-batch
makes, one at a time as Lightning's steps are.

Reported: fit-batch's runs ÷ Lightning's (target ≤ 0.5), its answer ÷ Lightning's (target ≥ 1), and both wall
times. Near the limit whether a run holds is a matter of chance (fragmentation, depending on how busy the machine
is), so each answer is then run again VERIFY_RUNS times, the two answers' runs taking turns so that both meet the
same load: an answer that does not hold in those runs is not one to compare sizes by. The two searches take
turns going first from one repeat to the next.

    python benchmarks/fit_batch_cost.py [--model cnn | --script PATH --args '… {batch} …'] [--budget-mib 256]
                                        [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import report
from tf_device_panel.core.catalogue.fit_work import Work
from tf_device_panel.core.config import DeviceConfig, save_profile
from tf_device_panel.core.panel_runs.runs import read_run, start_run, wait_runs

LIGHTNING_STEPS = 3
LIGHTNING_MAX_TRIALS = 25
LIGHTNING_FIRST = 2
VERIFY_RUNS = 5


def fit_batch(work: Work, budget_mib: int, home: str) -> tuple[dict[str, object], float]:
    started = time.monotonic()
    params = (["-p", f"script={work.script}", "-p", f"args={work.args}"] if work.script else
              ["-p", f"model={work.model}"])
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit-batch", *params,
                           "-p", f"budget_mib={budget_mib}", "--json"], capture_output=True, text=True,
                          env={**os.environ, "TF_DEVICE_PANEL_HOME": home}, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"fit-batch failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout)["result"]
    return result, time.monotonic() - started


class CappedRuns:
    """Runs of the work one at a time under a profile capping the CPU at the budget, as fit-batch's are."""

    def __init__(self, work: Work, budget_mib: int, folder: Path):
        self.work, self.folder, self.count = work, folder, 0
        self.profile = folder / "cap.json"
        save_profile(DeviceConfig(cpu_memory_limit_mib=budget_mib, log_placement=False), self.profile)

    def holds(self, batch: int) -> bool:
        self.count += 1
        run_folder = self.folder / f"run-{self.count}"
        run_folder.mkdir()
        run = start_run(self.work, batch, self.profile, run_folder)
        wait_runs([run], 900)
        return read_run(run)["fits"]


def lightning(work: Work, budget_mib: int) -> tuple[int, int, int, float]:
    """(its answer, runs, trials, seconds): doubling, then bisection, 3 runs a trial."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfdp-lightning-") as folder:
        runs = CappedRuns(work, budget_mib, Path(folder))

        def trial(batch: int) -> bool:
            return all(runs.holds(batch) for _ in range(LIGHTNING_STEPS))  # stops at the first run out of memory

        size, low, high, trials = LIGHTNING_FIRST, 1, None, 0
        while trials < LIGHTNING_MAX_TRIALS:
            trials += 1
            held = trial(size)
            print(f"lightning trial {trials}: batch {size} {'held' if held else 'ran out'}", flush=True)
            if held:
                low = size
                if high is None:
                    size *= 2
                    continue
            else:
                high = size
            if high - low <= 1:
                break
            size = (low + high) // 2
        return low, runs.count, trials, time.monotonic() - started


def verify(work: Work, budget_mib: int, answers: dict[str, int]) -> dict[str, int]:
    """How many of VERIFY_RUNS runs held at each answer, the answers' runs taking turns."""
    held = dict.fromkeys(answers, 0)
    with tempfile.TemporaryDirectory(prefix="tfdp-verify-") as folder:
        runs = CappedRuns(work, budget_mib, Path(folder))
        for _ in range(VERIFY_RUNS):
            for name, batch in answers.items():
                held[name] += runs.holds(batch)
    return held


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="cnn", help="dense, cnn or a saved Keras model (PATH.keras)")
    parser.add_argument("--script", default="", help="a script whose arguments (--args) carry {batch}")
    parser.add_argument("--args", default="")
    parser.add_argument("--budget-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    work = Work(args.model, args.script, args.args)
    for number in range(args.repeat):
        if number % 2 == 0:
            with tempfile.TemporaryDirectory(prefix="tfdp-bench-") as home:
                result, ours_s = fit_batch(work, args.budget_mib, home)
            theirs, their_runs, trials, theirs_s = lightning(work, args.budget_mib)
        else:
            theirs, their_runs, trials, theirs_s = lightning(work, args.budget_mib)
            with tempfile.TemporaryDirectory(prefix="tfdp-bench-") as home:
                result, ours_s = fit_batch(work, args.budget_mib, home)
        ours, our_runs = int(result["predicted_max_batch"]), int(result["runs"])  # type: ignore[call-overload]
        held = verify(work, args.budget_mib, {"fit-batch": ours, "Lightning": theirs})
        print(f"[{number + 1}] {work.name} under {args.budget_mib} MiB: fit-batch {ours} (held "
              f"{result['repeats']} of {result['repeats']}; boundary {result['boundary']}) in {our_runs} runs, "
              f"{ours_s:.0f} s; Lightning's search {theirs} in {their_runs} runs ({trials} trials), {theirs_s:.0f} s; "
              f"then, taking turns, {ours} held {held['fit-batch']} of {VERIFY_RUNS} runs and {theirs} held "
              f"{held['Lightning']} of {VERIFY_RUNS}", flush=True)
        report(f"fit-batch: its runs ÷ Lightning's search's ({work.name}, {args.budget_mib} MiB)",
               our_runs / their_runs, 0.5, detail=f"{our_runs} vs {their_runs} runs; wall {ours_s:.0f} s vs "
                                                  f"{theirs_s:.0f} s")
        report(f"fit-batch: its answer ÷ Lightning's ({work.name}, {args.budget_mib} MiB)", ours / theirs, 1.0,
               at_most=False, detail=f"{ours} vs {theirs}; held {held['fit-batch']} and {held['Lightning']} of "
                                     f"{VERIFY_RUNS} runs after")


if __name__ == "__main__":
    main()
