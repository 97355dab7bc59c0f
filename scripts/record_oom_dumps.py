"""Record real out-of-memory dumps of TensorFlow's BFC allocator as test fixtures (tests/fixtures/oom_*.stderr.txt)
and the ResourceExhaustedError's messages beside them (oom_cpu_bfc_messages.json).

Each case runs in a fresh Python with the CPU's allocator made BFC and capped at 64 MiB
(TF_CPU_ALLOCATOR_USE_BFC=true, TF_CPU_BFC_MEM_LIMIT_IN_MB=64), and its stderr is kept whole:
- oom_cpu_bfc_64mib: 4 MiB tensors kept until one fails (a real shortage);
- oom_cpu_bfc_64mib_fragmented: 1 MiB tensors until one fails, every other one freed, then one of 4 MiB
  (33 MiB free in all, in pieces: fragmentation).

    .venv/bin/python scripts/record_oom_dumps.py [DIR]   (default: tests/fixtures)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SHORTAGE = """
import tensorflow as tf
kept = []
try:
    for _ in range(100):
        kept.append(tf.random.normal([1024, 1024]))
except tf.errors.ResourceExhaustedError as exc:
    print(str(exc))
"""

FRAGMENTED = """
import tensorflow as tf
kept = []
try:
    for _ in range(200):
        kept.append(tf.ones([256 * 1024]))
except tf.errors.ResourceExhaustedError:
    pass
del kept[::2]
try:
    big = tf.ones([1024 * 1024])
except tf.errors.ResourceExhaustedError as exc:
    print(str(exc))
"""

CASES = {"oom_cpu_bfc_64mib.stderr.txt": SHORTAGE, "oom_cpu_bfc_64mib_fragmented.stderr.txt": FRAGMENTED}


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPU_BFC_MEM_LIMIT_IN_MB": "64"}
    messages = {}
    for name, code in CASES.items():
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        if "ran out of memory" not in done.stderr or not done.stdout.strip():
            print(f"{name}: no OOM recorded (exit {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        (folder / name).write_text(done.stderr)
        messages[name] = done.stdout.rstrip("\n")
        print(f"{name}: {len(done.stderr.splitlines())} lines")
    (folder / "oom_cpu_bfc_messages.json").write_text(json.dumps(messages, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
