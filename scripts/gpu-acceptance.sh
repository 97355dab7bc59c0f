#!/usr/bin/env bash
# The panel on a real GPU, checked and written up: see scripts/gpu_acceptance.py (its docstring says how to
# prepare the host). Arguments pass through, e.g. --report gpu-acceptance.md --json figures.json --quick.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/gpu_acceptance.py" "$@"
