#!/usr/bin/env bash
# The whole suite (cluster tests too) in a random order, with two CPU-burning processes beside it, the way a
# busy 2-core CI machine runs it; RUNS times in a row (default 3), stopping at the first failure.
#
#   scripts/stress-tests.sh [RUNS] [PYTEST ARGS...]      e.g. scripts/stress-tests.sh 1 tests/test_runtime.py
#
# Uses .venv (README's set-up). Prints each run's seed (to replay its order: --randomly-seed=N), its slowest
# tests and its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
[ $# -gt 0 ] && shift
python=${PYTHON:-.venv/bin/python}

burners=()
stop_burners() { [ ${#burners[@]} -eq 0 ] || kill "${burners[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for _ in 1 2; do
  ( while :; do :; done ) &
  burners+=($!)
done

for run in $(seq 1 "$runs"); do
  seed=$(( (RANDOM << 15) | RANDOM ))
  started=$SECONDS
  echo "== stress run $run/$runs (seed $seed), 2 CPU burners beside it"
  if ! QT_QPA_PLATFORM=offscreen "$python" -m pytest -q -n auto --dist worksteal -p randomly --randomly-seed="$seed" --durations=15 "$@"; then
    echo "== stress run $run/$runs FAILED after $((SECONDS - started)) s (replay the order with --randomly-seed=$seed)"
    exit 1
  fi
  echo "== stress run $run/$runs passed in $((SECONDS - started)) s"
done
echo "== all $runs stress runs passed"
