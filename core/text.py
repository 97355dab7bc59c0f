"""Quoting user input in messages: one line, and short whatever the input's size."""

from __future__ import annotations

import re
import reprlib
from typing import Any

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 6
_short.maxlevel = 3
MAX_DIGITS = 40


def quote(value: Any) -> str:
    """`repr(value)`, cut to a few dozen characters (with '...') so a 15 MB value never fills a terminal.

    Integers too long to print (Python refuses past 4300 digits) are described by their size instead.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_DIGITS * 3.33:
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        text = _short.repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} too large to show>"
    return text.replace("\n", "\\n")


def clip(text: str, limit: int = 200) -> str:
    """One line of at most `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tf_error_text(message: str | None, limit: int = 400) -> str:
    """TensorFlow's error without the Python stack it repeats: "Graph execution error: Detected at node N defined
    at (most recent call last): File … MESSAGE [[{{node N}}]] [Op:…]" becomes "at node N: MESSAGE", one line of at
    most `limit` characters. Any other text is only clipped."""
    text = str(message or "")
    node = re.search(r"Detected at node (\S+) defined at", text)
    if not node:
        return clip(text, limit)
    said = [line.strip() for line in text.splitlines()[1:] if line.strip()
            and not line.lstrip().startswith(("File ", "[[", "Detected at node"))]
    return clip(f"at node {node.group(1)}: {' '.join(said) or 'no message'}", limit)


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice (json.loads would silently keep the last value)."""

    def __init__(self, key: str):
        super().__init__(f"the key {key!r} appears twice")
        self.key = key


def object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json.loads that refuses a key given twice (raises DuplicateKey)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(key)
        result[key] = value
    return result
