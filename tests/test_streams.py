"""A run's streams demultiplexed from raw bytes: lines, live `\\r` lines, log and placement events. No processes."""

from __future__ import annotations

from pathlib import Path

from tf_device_panel.core.client.history import RunRecorder
from tf_device_panel.core.client.records import RunSummary
from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.protocol.streams import EVENTS, STDERR, STDOUT, StreamDemux, split_lines

EAGER = ("I0000 00:00:1795270979.856597 5908 execute.cc:1775] Executing op MatMul in device "
         "/job:localhost/replica:0/task:0/device:CPU:1")


def make(job: str | None = "j1") -> tuple[StreamDemux, list[Event], list[str]]:
    delivered: list[Event] = []
    lines: list[str] = []
    demux = StreamDemux(delivered.append, job_id=lambda: job, on_line=lines.append)
    return demux, delivered, lines


def closing(job_id: str = "j1") -> bytes:
    return (events.Result(result={"kind": "script"}, job_id=job_id).encode()
            + events.JobFinished(status="ok", job_id=job_id).encode())


def test_lines_split_across_reads_become_one_event_each() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"hel")
    assert delivered == []
    demux.feed(STDOUT, b"lo\r\nwor")
    demux.feed(STDOUT, b"ld\n")
    assert [e.text for e in delivered] == ["hello", "world"] and lines == ["hello", "world"]
    assert all(isinstance(e, events.Log) and e.job_id == "j1" and e.kind == output_lines.OUTPUT for e in delivered)
    demux.feed(STDOUT, "no newline, ünïcode".encode()[:-1])  # cut inside a character
    demux.close(STDOUT)
    assert delivered[-1].text.startswith("no newline, ünïcod")


def test_placement_lines_become_placement_events() -> None:
    demux, delivered, _ = make()
    demux.feed(STDERR, EAGER.encode() + b"\n")
    (event,) = delivered
    assert isinstance(event, events.Placement) and event.short_device == "/CPU:1"
    assert event.op_type == "MatMul" and event.line == EAGER and event.stream == STDERR


def test_a_tensorflow_message_continues_on_unprefixed_stderr_lines_of_the_same_write() -> None:
    demux, delivered, _ = make()
    demux.feed(STDERR, b"W0000 00:00:1.0 1 cuda.cc:1] could not load libcudart\n  detail line\n")
    demux.feed(STDERR, b"plain output\n")  # a later write starts afresh
    assert [e.kind for e in delivered] == [output_lines.WARNING, output_lines.WARNING, output_lines.OUTPUT]


def test_events_pass_through_and_a_bad_line_is_reported_not_fatal() -> None:
    demux, delivered, _ = make()
    progress = events.Progress(done=1, total=2, message="half", job_id="j1")
    demux.feed(EVENTS, progress.encode()[:10])
    demux.feed(EVENTS, progress.encode()[10:] + b"\n{not json\n")
    assert isinstance(delivered[0], events.Progress) and delivered[0].message == "half"
    assert isinstance(delivered[1], events.Log) and "unreadable event" in delivered[1].text


def test_closing_events_are_kept_for_the_client_and_nothing_else_is_held() -> None:
    demux, delivered, _ = make()
    demux.feed(EVENTS, closing() + events.Progress(done=1, total=1, message="").encode())
    assert [e.type for e in delivered] == [events.PROGRESS]
    assert [e.type for e in demux.closing] == [events.RESULT, events.JOB_FINISHED]


def test_a_carriage_return_fragment_is_a_live_line_replaced_by_the_finished_line() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"\r 10%")
    demux.feed(STDOUT, b"\r 50%")
    demux.feed(STDOUT, b"\r 50%")  # the same drawing again: nothing new to show
    demux.feed(STDOUT, b"\r100%\nnext")
    assert [(e.text, bool(e.partial)) for e in delivered] == [
        (" 10%", True), (" 50%", True), ("100%", False)]
    assert lines == ["100%"]
    demux.close(STDOUT)
    assert delivered[-1].text == "next" and not delivered[-1].partial


def test_plain_output_comes_as_one_block_and_tensorflow_lines_one_by_one() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"".join(f"line {i}\n".encode() for i in range(100)))
    (block,) = delivered
    assert block.kind == output_lines.OUTPUT
    assert block.text.split("\n") == [f"line {i}" for i in range(100)]
    assert split_lines(block)[7].text == "line 7" and len(split_lines(block)) == 100
    assert lines == [f"line {i}" for i in range(60, 100)]  # the client keeps only the last lines anyway
    demux.feed(STDERR, b"plain\n" + EAGER.encode() + b"\n")
    assert [e.type for e in delivered[1:]] == [events.LOG, events.PLACEMENT]


def test_a_line_without_newline_is_held_bounded_and_kept_as_head_and_tail() -> None:
    delivered: list[Event] = []
    cap = 64 * 1024
    demux = StreamDemux(delivered.append, line_cap=cap)
    demux.feed(STDOUT, b"H" * 40_000)
    chunk = b"m" * 4096
    for _ in range(2_000):  # 8 MB in one line: only cap bytes are ever held
        demux.feed(STDOUT, chunk)
        assert demux.buffered_bytes(STDOUT) <= cap
    demux.feed(STDOUT, b"T" * 1000 + b"\nnext\n")
    (line, after) = [one.text for event in delivered for one in split_lines(event)]
    dropped = 40_000 + 2_000 * 4096 + 1000 - cap
    assert line.startswith("H" * 32_768) and line.endswith("m" * (32_768 - 1000) + "T" * 1000)
    assert f"[{dropped} bytes of this line not kept" in line and after == "next"
    assert demux.buffered_bytes(STDOUT) == 0


def test_a_progress_bar_without_newline_stays_bounded_and_live() -> None:
    delivered: list[Event] = []
    demux = StreamDemux(delivered.append, line_cap=16 * 1024)
    for step in range(20_000):
        demux.feed(STDERR, f"\rstep {step:05d}".encode())
        assert demux.buffered_bytes(STDERR) <= 16 * 1024
    assert delivered[-1].payload() == {"stream": STDERR, "kind": "output", "text": "step 19999", "partial": True}
    demux.close(STDERR)
    assert delivered[-1].text == "step 19999" and not delivered[-1].partial


def test_the_record_keeps_a_line_longer_than_its_cap_as_head_and_tail(tmp_path: Path) -> None:
    cap = 1024 * 1024
    recorder = RunRecorder(tmp_path / "run", RunSummary(run_id="run", job="script", status="running", started=1.0),
                           cap_bytes=cap)
    recorder.append(events.Log(stream=STDOUT, kind="output", text="x" * (3 * cap)))
    recorder.finish(status="ok")
    kept = sum(path.stat().st_size for path in (tmp_path / "run").glob("output*"))
    assert kept <= cap // 2 + 1024, kept


def test_a_scripts_own_lines_are_never_classified_and_keep_their_bytes_exactly() -> None:
    """A script's fds 1 and 2 come on streams of their own: their lines are never taken for TensorFlow's, and
    each event's `raw` is the bytes as written, line ends included: `\r` redraws, CRLF, bytes that are not
    UTF-8 and a last piece without a newline all kept; `text` is what a terminal shows."""
    from tf_device_panel.core.protocol.streams import SCRIPT_STDERR, SCRIPT_STDOUT

    demux, delivered, _ = make()
    written = {SCRIPT_STDOUT: [EAGER.encode() + b"\n", b"1/3\r2/3", b"\r3/3\r\n", b"crlf\r\nnot utf-8: \xff\n",
                               b"no newline"],
               SCRIPT_STDERR: [b"Traceback (most", b" recent call last):\n", b"\x1b[31mred\x1b[0m\n"]}
    for stdout_piece, stderr_piece in zip(written[SCRIPT_STDOUT], written[SCRIPT_STDERR], strict=False):
        demux.feed(SCRIPT_STDOUT, stdout_piece)
        demux.feed(SCRIPT_STDERR, stderr_piece)
    for piece in written[SCRIPT_STDOUT][len(written[SCRIPT_STDERR]):]:
        demux.feed(SCRIPT_STDOUT, piece)
    demux.close(SCRIPT_STDOUT)
    demux.close(SCRIPT_STDERR)
    whole = [e for e in delivered if isinstance(e, events.Log) and not e.partial]
    assert all(e.source == "script" and e.kind == output_lines.OUTPUT for e in whole)
    for stream, key in ((STDOUT, SCRIPT_STDOUT), (STDERR, SCRIPT_STDERR)):
        assert b"".join(e.raw for e in whole if e.stream == stream) == b"".join(written[key])
    shown = [line.text for e in whole if e.stream == STDOUT for line in split_lines(e)]
    assert shown == [EAGER, "3/3", "crlf", "not utf-8: \ufffd", "no newline"]
    assert [e.text for e in delivered if isinstance(e, events.Log) and e.partial] == ["2/3"]  # the live state


def test_a_scripts_line_without_newline_is_bounded_and_its_bytes_kept() -> None:
    """The script's own streams hold an open line like stdout does: bounded by the cap, linear in the bytes
    read; a line that is not UTF-8 keeps its printed bytes for the record."""
    from tf_device_panel.core.protocol.streams import SCRIPT_STDOUT

    delivered: list[Event] = []
    cap = 64 * 1024
    demux = StreamDemux(delivered.append, line_cap=cap)
    payload = b"s" * 4000
    for _ in range(2_000):  # 8 MB in one line of the script's stdout
        demux.feed(SCRIPT_STDOUT, payload)
        assert demux.buffered_bytes(SCRIPT_STDOUT) <= cap
    demux.feed(SCRIPT_STDOUT, b"\nnot utf-8: \xff\xfe\n")
    demux.close(SCRIPT_STDOUT)
    long_line, odd_line = [one for event in delivered for one in split_lines(event)]
    assert "bytes of this line not kept" in long_line.text and len(long_line.text) < 2 * cap
    assert odd_line.text == "not utf-8: \ufffd\ufffd" and odd_line.raw == b"not utf-8: \xff\xfe\n"
    assert {line.source for line in (long_line, odd_line)} == {"script"}


def test_the_record_gives_back_a_scripts_bytes_exactly(tmp_path: Path) -> None:
    """Recorded and read back, a script's streams are the bytes it wrote: no line end added after a last piece
    (even when the other stream follows it in the record), `\r` and bytes that are not UTF-8 kept."""
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.core.protocol.streams import SCRIPT_STDERR, SCRIPT_STDOUT

    history = RunHistory(tmp_path / "home")
    recorder = history.new_run("script", {}, {}, None)
    demux = StreamDemux(recorder.append, job_id=lambda: None)
    demux.feed(SCRIPT_STDOUT, b"1/2\r2/2\r\nbad \xff\r\nend")
    demux.feed(SCRIPT_STDERR, b"warning\n")
    demux.feed(STDERR, b"I0000 00:00:1.0 1 placer.cc:162] a: (_Arg): /job:localhost/replica:0/task:0/device:CPU:0\n")
    demux.close(SCRIPT_STDOUT)
    demux.feed(SCRIPT_STDERR, b"last without newline")
    demux.close(SCRIPT_STDERR)
    recorder.finish(status="ok")
    replayed = [e for e in history.events(recorder.run_id) if isinstance(e, events.Log) and e.source == "script"]
    assert b"".join(e.raw for e in replayed if e.stream == STDOUT) == b"1/2\r2/2\r\nbad \xff\r\nend"
    assert b"".join(e.raw for e in replayed if e.stream == STDERR) == b"warning\nlast without newline"
