"""A job's output as a terminal shows it, Qt-free: text with ANSI escape sequences -> lines of styled segments.

Keras 3 writes colour codes even into a pipe (`\\x1b[1m8/8\\x1b[0m \\x1b[32m━━━…`), tqdm and Keras redraw a line
with `\\r` (Keras also backs up with `\\b`). `AnsiRenderer` turns such text into what a terminal would show:
SGR colours (the 16 standard ones, the 256-colour palette and 24-bit colour), bold, italic, underline, reset;
`\\r` returns to the line's start and later characters overwrite earlier ones, `\\b` steps back one column, a tab
goes to the next multiple of 8; `ESC[K` erases to the line's end. Every other escape sequence (cursor moves,
OSC titles and links, character-set selections) and other control bytes are swallowed: escape bytes are never
shown. The style carries from one line to the next, as in a terminal, until a reset.

`plain(text)` is the same without the styles: what copying the console gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

# The 16 standard colours, as xterm draws them (readable on a light and on a dark background).
BASIC_COLORS = (
    "#000000", "#cd0000", "#00a000", "#b8a000", "#2050e0", "#cd00cd", "#00a0b0", "#a0a0a0",
    "#707070", "#ff3030", "#20c020", "#d0c000", "#5c7cff", "#ff40ff", "#00c8d8", "#ffffff",
)

# CSI: ESC [ parameters intermediates final; OSC: ESC ] ... BEL or ESC \ (an unterminated one runs to the end);
# other escape sequences: ESC, optional intermediates, one final byte. The 8-bit CSI (0x9b) too.
_ESCAPE = re.compile(
    r"\x1b\[([0-?]*)[ -/]*([@-~])"          # CSI
    r"|\x9b([0-?]*)[ -/]*([@-~])"           # 8-bit CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)"  # OSC
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\|$)"       # DCS, PM, APC, SOS strings
    r"|\x1b[ -/]*[0-~]"                      # other escapes (charset selection, keypad modes…)
    r"|\x1b\[[0-?]*[ -/]*$|\x1b$"            # a sequence cut off at the end of the text: swallowed too
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
# What moves the cursor back or erases: a line with none of these is drawn left to right, without cells.
_REDRAWS = re.compile(r"[\r\b]|\x1b\[[0-?]*[ -/]*[KGDC]|\x9b")


def color_256(index: int) -> str:
    """The xterm 256-colour palette: 16 standard, a 6×6×6 cube, 24 greys."""
    if index < 16:
        return BASIC_COLORS[index]
    if index < 232:
        index -= 16
        levels = [0 if v == 0 else 55 + 40 * v for v in (index // 36, index // 6 % 6, index % 6)]
        return "#{:02x}{:02x}{:02x}".format(*levels)
    grey = 8 + 10 * (index - 232)
    return f"#{grey:02x}{grey:02x}{grey:02x}"


@dataclass(frozen=True)
class Style:
    """How a run of characters is drawn; colours as '#rrggbb', None for the console's own."""

    fg: str | None = None
    bg: str | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    inverse: bool = False
    strike: bool = False

    @property
    def plain(self) -> bool:
        return self == PLAIN


PLAIN = Style()


class Segment(NamedTuple):
    text: str
    style: Style


def _extended_color(params: list[int], at: int) -> tuple[str | None, int]:
    """The colour of `38;5;n` / `38;2;r;g;b` starting at params[at] (the 5 or 2), and how many it used."""
    if at < len(params) and params[at] == 5 and at + 1 < len(params):
        return color_256(max(0, min(255, params[at + 1]))), 2
    if at < len(params) and params[at] == 2 and at + 3 < len(params):
        r, g, b = (max(0, min(255, v)) for v in params[at + 1:at + 4])
        return f"#{r:02x}{g:02x}{b:02x}", 4
    return None, len(params) - at  # malformed: the rest is ignored, as terminals do


# SGR codes that switch one attribute on or off (1 bold … 9 strike; 22–29 turn them off again).
_SGR_ATTRIBUTES: dict[int, Callable[[Style], Style]] = {
    1: lambda s: replace(s, bold=True), 2: lambda s: replace(s, dim=True), 3: lambda s: replace(s, italic=True),
    4: lambda s: replace(s, underline=True), 7: lambda s: replace(s, inverse=True),
    9: lambda s: replace(s, strike=True), 22: lambda s: replace(s, bold=False, dim=False),
    23: lambda s: replace(s, italic=False), 24: lambda s: replace(s, underline=False),
    27: lambda s: replace(s, inverse=False), 29: lambda s: replace(s, strike=False),
}


@lru_cache(maxsize=1024)
def apply_sgr(style: Style, parameters: str) -> Style:
    """The style after `ESC[<parameters>m`."""
    try:
        params = [int(p) if p else 0 for p in re.split(r"[;:]", parameters)] if parameters else [0]
    except ValueError:
        return style
    i = 0
    while i < len(params):
        code = params[i]
        i += 1
        if code == 0:
            style = PLAIN
        elif code in _SGR_ATTRIBUTES:
            style = _SGR_ATTRIBUTES[code](style)
        elif 30 <= code <= 37:
            style = replace(style, fg=BASIC_COLORS[code - 30])
        elif 90 <= code <= 97:
            style = replace(style, fg=BASIC_COLORS[code - 90 + 8])
        elif 40 <= code <= 47:
            style = replace(style, bg=BASIC_COLORS[code - 40])
        elif 100 <= code <= 107:
            style = replace(style, bg=BASIC_COLORS[code - 100 + 8])
        elif code == 39:
            style = replace(style, fg=None)
        elif code == 49:
            style = replace(style, bg=None)
        elif code in (38, 48):
            color, used = _extended_color(params, i)
            i += used
            if color is not None:
                style = replace(style, fg=color) if code == 38 else replace(style, bg=color)
    return style


class _Line:
    """The cells of the line being drawn and the cursor's column."""

    def __init__(self) -> None:
        self.cells: list[tuple[str, Style]] = []
        self.column = 0

    def put(self, chars: str, style: Style) -> None:
        cells = self.cells
        if self.column > len(cells):
            cells.extend([(" ", PLAIN)] * (self.column - len(cells)))
        for char in chars:
            if self.column < len(cells):
                cells[self.column] = (char, style)
            else:
                cells.append((char, style))
            self.column += 1

    def draw(self, text: str, style: Style) -> None:
        """`text` (no escapes in it) from the cursor on: \\r, \\b and tabs move it, other controls are dropped."""
        start = 0
        for index, char in enumerate(text):
            if char in "\r\b\t" or _CONTROLS.match(char):
                if index > start:
                    self.put(text[start:index], style)
                start = index + 1
                if char == "\r":
                    self.column = 0
                elif char == "\b":
                    self.column = max(0, self.column - 1)
                elif char == "\t":
                    self.put(" " * (8 - self.column % 8), style)
        if start < len(text):
            self.put(text[start:], style)

    def control(self, final: str, params: str) -> None:
        """A CSI sequence other than SGR: erase in line and cursor moves along the line; the rest is ignored."""
        try:
            number = int(params.lstrip("?") or "0")
        except ValueError:
            return
        if final == "K":
            if number == 0:
                del self.cells[self.column:]
            elif number == 1:
                width = min(self.column + 1, len(self.cells))
                self.cells[:width] = [(" ", PLAIN)] * width
            elif number == 2:
                self.cells.clear()
        elif final == "G":  # cursor to a column (1-based)
            self.column = max(0, number - 1)
        elif final == "D":
            self.column = max(0, self.column - max(1, number))
        elif final == "C":
            self.column += max(1, number)

    def segments(self) -> list[Segment]:
        segments: list[Segment] = []
        for char, style in self.cells:
            if segments and segments[-1].style == style:
                segments[-1] = Segment(segments[-1].text + char, style)
            else:
                segments.append(Segment(char, style))
        return segments


class AnsiRenderer:
    """Feed it a job's lines in order; each comes back as styled segments. The style carries over lines."""

    def __init__(self) -> None:
        self.style = PLAIN

    def line(self, text: str) -> list[Segment]:
        """One line (no line end in it) as a terminal draws it."""
        if not needs_rendering(text):
            return [Segment(text, self.style)] if text else []
        if _REDRAWS.search(text) is None:
            return self._left_to_right(text)
        drawn = _Line()
        position = 0
        for match in _ESCAPE.finditer(text):
            drawn.draw(text[position:match.start()], self.style)
            position = match.end()
            final = match.group(2) or match.group(4)
            params = (match.group(1) if match.group(2) else match.group(3)) or ""
            if final == "m":
                self.style = apply_sgr(self.style, params)
            elif final:
                drawn.control(final, params)
        drawn.draw(text[position:], self.style)
        return drawn.segments()

    def _left_to_right(self, text: str) -> list[Segment]:
        """A line drawn without going back (colour codes only, the common case): its pieces as they come."""
        segments: list[Segment] = []
        position = 0
        for match in _ESCAPE.finditer(text):
            self._piece(segments, text[position:match.start()])
            position = match.end()
            if match.group(2) == "m":
                self.style = apply_sgr(self.style, match.group(1) or "")
        self._piece(segments, text[position:])
        return segments

    def _piece(self, segments: list[Segment], piece: str) -> None:
        piece = _CONTROLS.sub("", piece)  # control bytes are drawn as nothing (a tab stays a tab)
        if not piece:
            return
        if segments and segments[-1].style == self.style:
            segments[-1] = Segment(segments[-1].text + piece, self.style)
        else:
            segments.append(Segment(piece, self.style))

    def text(self, text: str) -> list[list[Segment]]:
        """Several lines (split at "\\n"), each as segments."""
        return [self.line(line) for line in text.split("\n")]


def needs_rendering(text: str) -> bool:
    """True when `text` has anything a terminal would not draw as it is (escapes, \\r, \\b, control bytes)."""
    return _CONTROLS.search(text) is not None or "\r" in text


def plain(text: str) -> str:
    """What a terminal shows of `text`, without its styles (line ends kept)."""
    if not needs_rendering(text):
        return text
    renderer = AnsiRenderer()
    return "\n".join("".join(s.text for s in line) for line in renderer.text(text))
