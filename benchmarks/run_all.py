"""Run every benchmark, one after another, and write one Markdown table of their figures and targets.

    python benchmarks/run_all.py [--out benchmarks/RESULTS.md] [--only NAME ...] [--quick]

Each benchmark runs in its own process (so one's imports and threads cannot slow the next) and prints its
figures through `figures.report`; this collects those lines. The table names the machine, the date and each
figure's target and verdict; a benchmark that fails is a row saying so, and the exit status is 1 when any
figure is over its target or any benchmark failed. Run it on a quiet machine: the ratios compare runs made in
the same minute, but two busy cores still move them by tens of percent.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from figures import MARKER

HERE = Path(__file__).resolve().parent

# In the order they run: the quick, in-process ones first, so a mistake shows in seconds.
BENCHMARKS = ("placement_parsing", "oom_parsing", "telemetry", "machines_grid", "exporter_scrape", "runtime_cold_start",
              "run_process_imports", "matmul_round_trip", "output_flood", "long_line", "training_overhead",
              "fit_batch_cost", "history_open")
# --quick: fewer repeats, for checking that every benchmark still runs, not for judging.
QUICK_ARGS = {"runtime_cold_start": ["--repeat", "2"], "run_process_imports": ["--repeat", "1"],
              "matmul_round_trip": ["--repeat", "1"],
              "output_flood": ["--repeat", "1"], "long_line": ["--repeat", "1", "--megabytes", "20"],
              "training_overhead": ["--repeat", "1", "--epochs", "2"],
              "fit_batch_cost": ["--repeat", "1"], "history_open": ["--runs", "50", "--minutes", "5"]}


def run_one(name: str, quick: bool) -> tuple[list[dict[str, object]], str | None, float]:
    """The benchmark's figures, its failure (None when it exited 0) and its wall time in seconds."""
    command = [sys.executable, str(HERE / f"{name}.py"), *(QUICK_ARGS.get(name, []) if quick else [])]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    done = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdin=subprocess.DEVNULL)
    figures: list[dict[str, object]] = []
    assert done.stdout is not None
    for line in done.stdout:
        if line.startswith(MARKER):
            figures.append(json.loads(line[len(MARKER):]))
        else:
            print(line, end="", flush=True)
    status = done.wait()
    failure = None if status == 0 else f"exited {status}"
    if failure is None and not figures:
        failure = "printed no figure"
    return figures, failure, time.monotonic() - started


def cell(value: float) -> str:
    return "—" if value == float("inf") else f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def table(results: dict[str, tuple[list[dict[str, object]], str | None, float]], quick: bool) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Benchmark figures{' (quick run: too few repeats to judge)' if quick else ''}", "",
             f"{when}, {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"`python benchmarks/run_all.py{' --quick' if quick else ''}`.", "",
             "| benchmark | figure | measured | target | verdict |", "|---|---|---|---|---|"]
    for name, (figures, failure, seconds) in results.items():
        if failure is not None:
            lines.append(f"| `{name}.py` | — | — | — | FAILED: {failure} ({seconds:.0f} s) |")
        for figure in figures:
            sign = "≤" if figure["at_most"] else "≥"
            unit = str(figure["unit"])
            measured = f"{cell(float(figure['value']))} {unit}"  # type: ignore[arg-type]
            target = f"{sign} {cell(float(figure['target']))} {unit}"  # type: ignore[arg-type]
            verdict = "ok" if figure["ok"] else "**misses target**"
            detail = f" ({figure['detail']})" if figure["detail"] else ""
            lines.append(f"| `{name}.py` | {figure['name']}{detail} | {measured} | {target} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="where to write the Markdown table")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repeats: check they run, don't judge")
    args = parser.parse_args()
    results = {name: run_one(name, args.quick) for name in (args.only or BENCHMARKS)}
    text = table(results, args.quick)
    args.out.write_text(text)
    print(f"\n{text}\nwritten to {args.out}")
    failed = any(failure is not None or not all(f["ok"] for f in figures)
                 for figures, failure, _ in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
