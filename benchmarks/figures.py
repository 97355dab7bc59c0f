"""One way for every benchmark to state a figure: its value, its target and whether it meets it.

Each benchmark prints its own human-readable lines and, through `report`, one machine-readable line per
figure (`FIGURE {json}`), which `run_all.py` collects into one Markdown table. A benchmark run alone still
prints the verdict beside the figure, so nobody has to remember the targets.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

MARKER = "FIGURE "


def spread(values: Sequence[float], digits: int = 3) -> str:
    """'median (min–max, n=N)': the spread a reader needs to judge whether a ratio is noise."""
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f}, "
            f"n={len(values)})")


def report(name: str, value: float, target: float, *, unit: str = "×", at_most: bool = True,
           detail: str = "") -> bool:
    """Print the figure with its target and verdict, and its machine-readable line; True when it meets it.

    `at_most`: the figure must be ≤ target (a cost); False when it must be ≥ target (a rate)."""
    ok = value <= target if at_most else value >= target
    sign = "≤" if at_most else "≥"
    verdict = "OK" if ok else ("OVER TARGET" if at_most else "UNDER TARGET")
    print(f"{name}: {value:.3f} {unit} (target {sign} {target:g} {unit}) {verdict}"
          + (f" — {detail}" if detail else ""))
    print(MARKER + json.dumps({"name": name, "value": value, "target": target, "unit": unit,
                               "at_most": at_most, "ok": ok, "detail": detail}), flush=True)
    return ok
