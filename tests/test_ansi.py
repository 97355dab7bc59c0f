"""The job's console draws ANSI output as a terminal does (issue 33, item 1): core.protocol.ansi, and the console
widget that uses it. The Keras fixture is the stdout of a real `fit` (Keras 3.15, 2 epochs of 8 steps) written
into a pipe, as the run process gets it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tf_device_panel.core.protocol import ansi, events
from tf_device_panel.core.protocol.streams import STDOUT, StreamDemux

KERAS = (Path(__file__).parent / "fixtures" / "keras3_fit_progress.stdout.bin").read_bytes()
ESC = "\x1b"


def keras_lines() -> list[events.Log]:
    """The fixture through the panel's own stream reader, in reads of 37 bytes (lines arrive in pieces)."""
    got: list[events.Event] = []
    demux = StreamDemux(got.append, job_id=lambda: "job-1")
    for at in range(0, len(KERAS), 37):
        demux.feed(STDOUT, KERAS[at:at + 37])
    demux.close(STDOUT)
    return [event for event in got if isinstance(event, events.Log)]


def test_keras_progress_reads_as_in_a_terminal() -> None:
    assert ESC.encode() in KERAS and b"\r" in KERAS and b"\b" in KERAS  # what Keras 3 writes into a pipe
    renderer = ansi.AnsiRenderer()
    finished = [line for line in keras_lines() if not line.partial]
    shown = ["".join(s.text for s in renderer.line(line.text)) for line in finished]
    assert shown[0] == "Epoch 1/2"
    bar = shown[1]
    assert bar.startswith("8/8 " + "━" * 20 + " ") and "loss: " in bar and ESC not in bar and "\b" not in bar
    assert [line for line in shown if line.strip()][2] == "Epoch 2/2"
    segments = renderer.line(finished[1].text)
    assert segments[0] == ansi.Segment("8/8", ansi.Style(bold=True))      # Keras' bold step count
    assert segments[2].text == "━" * 20 and segments[2].style.fg == ansi.BASIC_COLORS[2]  # green: done
    # The live line while a step runs: never an escape byte either.
    partial = [line for line in keras_lines() if line.partial]
    assert partial and all(ESC not in ansi.plain(line.text) for line in partial)
    assert ansi.plain(partial[0].text).startswith("1/8 ━━")


def test_a_whole_keras_output_at_once_keeps_only_each_lines_last_drawing() -> None:
    """The raw text itself (\\r and \\b in it) drawn as a terminal: each epoch's bar once, at 8/8."""
    lines = [line for line in ansi.plain(KERAS.decode()).split("\n") if line.strip()]
    assert [line[:3] for line in lines] == ["Epo", "8/8", "Epo", "8/8"]


def test_carriage_return_and_backspace_overwrite_like_a_terminal() -> None:
    # tqdm: "\r" and a shorter redraw over a longer one; what is not overwritten stays, as on a terminal.
    assert ansi.plain("100%|####| 4/4\r 50%|##  | 2/4") == " 50%|##  | 2/4"
    assert ansi.plain("loading...\rok") == "okading..."
    assert ansi.plain("ab\bX") == "aX"
    assert ansi.plain("abc\x1b[2D\x1b[K!") == "a!"  # cursor back 2, erase to the end
    assert ansi.plain("a\tb\rX") == "X       b"  # a tab on a redrawn line: to the next multiple of 8


def test_colours_bold_and_reset() -> None:
    renderer = ansi.AnsiRenderer()
    red, rest = renderer.line("\x1b[1;31mfail\x1b[0m ok")
    assert red == ansi.Segment("fail", ansi.Style(fg=ansi.BASIC_COLORS[1], bold=True))
    assert rest == ansi.Segment(" ok", ansi.PLAIN)
    assert renderer.line("\x1b[38;5;196mA\x1b[48;2;1;2;3mB\x1b[39;49mC\x1b[92mD") == [
        ansi.Segment("A", ansi.Style(fg="#ff0000")), ansi.Segment("B", ansi.Style(fg="#ff0000", bg="#010203")),
        ansi.Segment("C", ansi.PLAIN), ansi.Segment("D", ansi.Style(fg=ansi.BASIC_COLORS[10]))]
    assert renderer.line("still green")[0].style.fg == ansi.BASIC_COLORS[10]  # a style carries to the next line
    assert renderer.line("\x1b[mplain") == [ansi.Segment("plain", ansi.PLAIN)]


@pytest.mark.parametrize("text", [
    "a\x1b]0;window title\x07b", "a\x1b]8;;http://x\x1b\\b", "a\x1b[2Jb", "a\x1b[?25lb", "a\x1b(Bb", "a\x1b[10;5Hb",
    "a\x1b=b", "ab\x1b[", "ab\x1b", "a\x00\x07b", "a\x1b[38;5mb"])
def test_other_escape_sequences_are_swallowed(text: str) -> None:
    assert ansi.plain(text) == "ab"


def test_the_console_draws_colours_and_copies_plain_text(qtbot) -> None:
    from PySide6.QtGui import QTextCursor
    from tf_device_panel.gui.views.console_view import ConsoleView
    from tf_device_panel.gui.views.job_state import JobState

    console = ConsoleView()
    qtbot.addWidget(console)
    state = JobState()
    state.start("fit")
    console.show_state(state)
    added = []
    for line in keras_lines():
        if state.add_output(line.text, line.partial):
            added.append(line.text)
        console.append(added[-1:] if not line.partial and added else [])
        assert ESC not in console.text() and "\b" not in console.text()
    text = console.view.toPlainText()
    assert "Epoch 2/2" in text and "8/8 ━━" in text and ESC not in text
    # The colour is drawn: the bar's characters are green in the document, "8/8" bold.
    document = console.view.document()
    bar_at = text.index("━")
    cursor = QTextCursor(document)
    cursor.setPosition(bar_at + 1)
    assert cursor.charFormat().foreground().color().name() == ansi.BASIC_COLORS[2]
    cursor.setPosition(text.index("8/8") + 1)
    assert cursor.charFormat().font().bold()
    # Copying gives plain text only.
    console.view.selectAll()
    mime = console.view.createMimeDataFromSelection()
    assert mime.formats() == ["text/plain"] and mime.text() == text
    # The live line: drawn, never its escape bytes.
    state.add_output("\x1b[1m3/8\x1b[0m \x1b[32m━━\x1b[0m", partial=True)
    console.append([])
    assert console.live_plain == "3/8 ━━" and ESC not in console.live_line.text()
    # Shown afresh (another job selected and back): the same.
    console.show_state(state)
    assert console.view.toPlainText() == text
    # Empty lines count, the first one too.
    empty = JobState()
    empty.start("script")
    console.show_state(empty)
    for line in ["", "\x1b[0m", "after two empty lines"]:
        empty.add_output(line)
        console.append([line])
    assert console.view.toPlainText() == "\n\nafter two empty lines"


@pytest.mark.parametrize("text", [
    "\x1b[1m8/8\x1b[0m \x1b[32m━━\x1b[0m\x1b[37m\x1b[0m 0s", "a\x1b]0;t\x07b\x1b[31mc", "\x1b[7;44mx\x1b[27my",
    "plain"])
def test_a_line_drawn_left_to_right_is_the_same_as_drawn_cell_by_cell(text: str) -> None:
    """Colour-only lines take a quick path; a cursor move to column 1 at the end (no change to what is drawn)
    sends the same line through the terminal's cells."""
    assert ansi.AnsiRenderer().line(text) == ansi.AnsiRenderer().line(text + "\x1b[1G")


def test_bytes_that_are_not_utf8_are_replacement_characters_in_the_console_only(qtbot) -> None:
    from tf_device_panel.gui.views.console_view import ConsoleView
    from tf_device_panel.gui.views.job_state import JobState

    got: list[events.Event] = []
    demux = StreamDemux(got.append, job_id=lambda: "job-1")
    printed = b"\x1b[33mcaf\xe9 \xff\x1b[0m ok\n"
    demux.feed(STDOUT, printed)
    (line,) = [e for e in got if isinstance(e, events.Log)]
    assert line.raw == printed[:-1]  # the record keeps the bytes as printed
    state = JobState()
    state.start("script")
    state.add_output(line.text)
    console = ConsoleView()
    qtbot.addWidget(console)
    console.show_state(state)
    assert console.view.toPlainText() == "caf\ufffd \ufffd ok"


def test_a_real_keras_fit_in_a_script_job_reads_as_in_a_terminal(qtbot, start_runtime, tmp_path: Path) -> None:
    """End to end: a script's Keras 3 fit (verbose=1, into a pipe) in a real run process, through the run state
    the window keeps, into the console."""
    from helpers import collect_job
    from tf_device_panel.core.client.run_state import RunState
    from tf_device_panel.gui.views.console_view import ConsoleView
    from tf_device_panel.gui.views.job_state import JobState

    script = tmp_path / "fit.py"
    script.write_text(
        "import numpy as np, keras\n"
        "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "m.compile('sgd', 'mse')\n"
        "m.fit(np.zeros((64, 4)), np.zeros((64, 1)), epochs=2, batch_size=8)\n")
    runtime = start_runtime()
    runtime.wait_ready()
    seen = collect_job(runtime, runtime.submit("script", {"path": str(script)}))
    run, state, console = RunState(), JobState(), ConsoleView()
    qtbot.addWidget(console)
    state.start("script")
    console.show_state(state)
    for text, partial in run.apply_all(seen).output:
        console.append([text] if state.add_output(text, partial) else [])
    shown = console.text()
    assert ESC in "".join(e.text for e in seen if isinstance(e, events.Log))  # Keras wrote its colours
    assert "Epoch 2/2" in shown and "8/8 ━━━━" in shown and ESC not in shown and "\b" not in shown
    assert "W0000" not in shown and "absl::InitializeLog" not in shown
