"""What `fit-batch` spends on its probes against one verified run: `run fit-batch -p model=cnn -p budget_mib=256`
through the command line, its result's probe_s ÷ verify_s (target ≤ 3×), and the batch it predicted."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from figures import report, spread


def one_run(home: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit-batch", "-p", "model=cnn",
                           "-p", "budget_mib=256", "--json"], capture_output=True, text=True,
                          env={**os.environ, "TF_DEVICE_PANEL_HOME": home}, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"fit-batch failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout)["result"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ratios, batches = [], []
    with tempfile.TemporaryDirectory(prefix="tfdp-bench-") as home:
        for _ in range(args.repeat):
            result = one_run(home)
            ratios.append(float(result["probe_s"]) / float(result["verify_s"]))  # type: ignore[arg-type]
            batches.append(result["predicted_max_batch"])
    print(f"fit-batch, cnn, 256 MiB: probes ÷ verified run {spread(ratios, 2)}; predicted batches {batches}")
    report("fit-batch: its probes ÷ one verified run (cnn, 256 MiB)", statistics.median(ratios), 3.0,
           detail=f"n={args.repeat}, predicted {batches}")


if __name__ == "__main__":
    main()
