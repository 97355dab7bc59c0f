"""What `fit-batch` costs against the search a Lightning user gets, on the same model in the same run.

Lightning's BatchSizeFinder (mode "binsearch"): from batch 2, double while a trial holds; after the first that runs
out, bisect between the last that held and the first that ran out until they are 1 apart; a trial is 3 training
steps, here 3 runs of the same work, and it fails at its first run out of memory (at most 25 trials). Every run is
the panel's own `run fit` (or the work's run) under a profile capping the CPU at the budget: the runs fit-batch
makes, one at a time as Lightning's steps are.

Reported: fit-batch's runs ÷ Lightning's (target ≤ 0.5), its answer ÷ Lightning's (target ≥ 1), and both wall
times. An answer that held in fewer repeats, or alone on a quiet machine, is not as safe as one that held in more,
side by side: the two answers are printed for that reason too.

    python benchmarks/fit_batch_cost.py [--model cnn] [--budget-mib 256] [--repeat 1]
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


def fit_batch(model: str, budget_mib: int, home: str) -> tuple[dict[str, object], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit-batch", "-p", f"model={model}",
                           "-p", f"budget_mib={budget_mib}", "--json"], capture_output=True, text=True,
                          env={**os.environ, "TF_DEVICE_PANEL_HOME": home}, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"fit-batch failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout)["result"]
    return result, time.monotonic() - started


def lightning(model: str, budget_mib: int) -> tuple[int, int, int, float]:
    """(its answer, runs, trials, seconds): doubling, then bisection, 3 runs a trial."""
    started = time.monotonic()
    runs = 0
    with tempfile.TemporaryDirectory(prefix="tfdp-lightning-") as folder:
        profile = Path(folder) / "cap.json"
        save_profile(DeviceConfig(cpu_memory_limit_mib=budget_mib, log_placement=False), profile)

        def trial(batch: int) -> bool:
            nonlocal runs
            for _ in range(LIGHTNING_STEPS):
                runs += 1
                run_folder = Path(folder) / f"run-{runs}"
                run_folder.mkdir()
                run = start_run(Work(model), batch, profile, run_folder)
                wait_runs([run], 900)
                if not read_run(run)["fits"]:
                    return False
            return True

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
    return low, runs, trials, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--budget-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for number in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="tfdp-bench-") as home:
            result, ours_s = fit_batch(args.model, args.budget_mib, home)
        theirs, their_runs, trials, theirs_s = lightning(args.model, args.budget_mib)
        ours, our_runs = int(result["predicted_max_batch"]), int(result["runs"])  # type: ignore[call-overload]
        print(f"[{number + 1}] {args.model} under {args.budget_mib} MiB: fit-batch {ours} (held "
              f"{result['repeats']} of {result['repeats']}, two at a time) in {our_runs} runs, {ours_s:.0f} s; "
              f"Lightning's search {theirs} in {their_runs} runs ({trials} trials), {theirs_s:.0f} s")
        report(f"fit-batch: its runs ÷ Lightning's search's ({args.model}, {args.budget_mib} MiB)",
               our_runs / their_runs, 0.5, detail=f"{our_runs} vs {their_runs} runs; wall {ours_s:.0f} s vs "
                                                  f"{theirs_s:.0f} s")
        report(f"fit-batch: its answer ÷ Lightning's ({args.model}, {args.budget_mib} MiB)", ours / theirs, 1.0,
               at_most=False, detail=f"{ours} vs {theirs}")


if __name__ == "__main__":
    main()
