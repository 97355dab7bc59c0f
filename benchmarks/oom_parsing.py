"""Parsing an out-of-memory dump of 10,000 lines (the allocator's chunks, as a large GPU's pool prints them) into
its explanation: collected from the run's stderr text and explained (core.oom). Target: under 50 ms.

The dump is the real one recorded under a 64 MiB CPU cap (tests/fixtures/oom_cpu_bfc_64mib_fragmented.stderr.txt),
its chunk lines repeated (in-use and free alternating, as a fragmented pool's are) until it is 10,000 lines long."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from figures import report
from tf_device_panel.core.oom import DumpCollector, explain

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
NAME = "oom_cpu_bfc_64mib_fragmented.stderr.txt"
LINES = 10_000
TARGET_S = 0.050


def big_dump() -> tuple[str, str]:
    lines = (FIXTURES / NAME).read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if "ran out of memory" in line)
    dump = lines[last:]
    chunks = [line for line in dump if "InUse at" in line or "Free  at" in line]
    first = dump.index(chunks[0])
    body = list(chunks)
    while len(dump) + len(body) < LINES:
        body += chunks
    grown = dump[:first] + body[: LINES - len(dump)] + dump[first:]
    message = json.loads((FIXTURES / "oom_cpu_bfc_messages.json").read_text())[NAME]
    return "\n".join(grown), message


def main() -> None:
    text, message = big_dump()
    times, cpu_times = [], []
    for _ in range(20):
        started, cpu_started = time.perf_counter(), time.process_time()
        collector = DumpCollector()
        collector.feed(text)
        oom = explain(collector.lines, message)
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - cpu_started)
    assert oom is not None and len(collector.lines) >= LINES - 10  # less what follows the dump
    # The CPU time is the parser's own cost; the wall time also counts what else the machine runs meanwhile.
    cpu = statistics.median(cpu_times)
    report(f"OOM dump parsing, {len(text.splitlines())} lines ({oom['chunks']} chunks), CPU time", cpu * 1000,
           TARGET_S * 1000, unit="ms", detail=f"median of {len(times)}; wall best {min(times) * 1000:.1f} ms, "
                                              f"median {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
