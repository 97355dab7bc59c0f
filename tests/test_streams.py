"""A run's streams demultiplexed from raw bytes: lines, live `\\r` lines, log and placement events. No processes."""

from __future__ import annotations

from tf_device_panel.core import events, placement
from tf_device_panel.core.events import Event
from tf_device_panel.core.streams import EVENTS, STDERR, STDOUT, StreamDemux, split_lines

EAGER = ("I0000 00:00:1795270979.856597 5908 execute.cc:1775] Executing op MatMul in device "
         "/job:localhost/replica:0/task:0/device:CPU:1")


def make(job: str | None = "j1") -> tuple[StreamDemux, list[Event], list[str]]:
    delivered: list[Event] = []
    lines: list[str] = []
    demux = StreamDemux(delivered.append, job_id=lambda: job, on_line=lines.append)
    return demux, delivered, lines


def closing(job_id: str = "j1") -> bytes:
    return (Event(events.RESULT, {"result": {"kind": "script"}}, job_id=job_id).encode()
            + Event(events.JOB_FINISHED, {"status": "ok"}, job_id=job_id).encode())


def test_lines_split_across_reads_become_one_event_each() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"hel")
    assert delivered == []
    demux.feed(STDOUT, b"lo\r\nwor")
    demux.feed(STDOUT, b"ld\n")
    assert [e.data["text"] for e in delivered] == ["hello", "world"] and lines == ["hello", "world"]
    assert all(e.type == events.LOG and e.job_id == "j1" and e.data["kind"] == placement.OUTPUT for e in delivered)
    demux.feed(STDOUT, "no newline, ünïcode".encode()[:-1])  # cut inside a character
    demux.close(STDOUT)
    assert delivered[-1].data["text"].startswith("no newline, ünïcod")


def test_placement_lines_become_placement_events() -> None:
    demux, delivered, _ = make()
    demux.feed(STDERR, EAGER.encode() + b"\n")
    (event,) = delivered
    assert event.type == events.PLACEMENT and event.data["short_device"] == "/CPU:1"
    assert event.data["op_type"] == "MatMul" and event.data["line"] == EAGER and event.data["stream"] == STDERR


def test_a_tensorflow_message_continues_on_unprefixed_stderr_lines_of_the_same_write() -> None:
    demux, delivered, _ = make()
    demux.feed(STDERR, b"W0000 00:00:1.0 1 cuda.cc:1] could not load libcudart\n  detail line\n")
    demux.feed(STDERR, b"plain output\n")  # a later write starts afresh
    assert [e.data["kind"] for e in delivered] == [placement.WARNING, placement.WARNING, placement.OUTPUT]


def test_events_pass_through_and_a_bad_line_is_reported_not_fatal() -> None:
    demux, delivered, _ = make()
    progress = Event(events.PROGRESS, {"done": 1, "total": 2, "message": "half"}, job_id="j1")
    demux.feed(EVENTS, progress.encode()[:10])
    demux.feed(EVENTS, progress.encode()[10:] + b"\n{not json\n")
    assert delivered[0].type == events.PROGRESS and delivered[0].data["message"] == "half"
    assert delivered[1].type == events.LOG and "unreadable event" in delivered[1].data["text"]


def test_closing_events_are_kept_for_the_client_and_nothing_else_is_held() -> None:
    demux, delivered, _ = make()
    demux.feed(EVENTS, closing() + Event(events.PROGRESS, {"done": 1, "total": 1, "message": ""}).encode())
    assert [e.type for e in delivered] == [events.PROGRESS]
    assert [e.type for e in demux.closing] == [events.RESULT, events.JOB_FINISHED]


def test_a_carriage_return_fragment_is_a_live_line_replaced_by_the_finished_line() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"\r 10%")
    demux.feed(STDOUT, b"\r 50%")
    demux.feed(STDOUT, b"\r 50%")  # the same drawing again: nothing new to show
    demux.feed(STDOUT, b"\r100%\nnext")
    assert [(e.data["text"], bool(e.data.get("partial"))) for e in delivered] == [
        (" 10%", True), (" 50%", True), ("100%", False)]
    assert lines == ["100%"]
    demux.close(STDOUT)
    assert delivered[-1].data["text"] == "next" and not delivered[-1].data.get("partial")


def test_plain_output_comes_as_one_block_and_tensorflow_lines_one_by_one() -> None:
    demux, delivered, lines = make()
    demux.feed(STDOUT, b"".join(f"line {i}\n".encode() for i in range(100)))
    (block,) = delivered
    assert block.data["kind"] == placement.OUTPUT
    assert block.data["text"].split("\n") == [f"line {i}" for i in range(100)]
    assert split_lines(block)[7].data["text"] == "line 7" and len(split_lines(block)) == 100
    assert lines == [f"line {i}" for i in range(60, 100)]  # the client keeps only the last lines anyway
    demux.feed(STDERR, b"plain\n" + EAGER.encode() + b"\n")
    assert [e.type for e in delivered[1:]] == [events.LOG, events.PLACEMENT]


def test_a_scripts_own_lines_are_never_classified_and_keep_their_order() -> None:
    from tf_device_panel.core.streams import SCRIPT, SCRIPT_STDERR_TAG, SCRIPT_STDOUT_TAG, frame

    demux, delivered, _ = make()
    channel = (frame(SCRIPT_STDOUT_TAG, EAGER.encode() + b"\n") + frame(SCRIPT_STDERR_TAG, b"Traceback (most")
               + frame(SCRIPT_STDERR_TAG, b" recent call last):\n") + frame(SCRIPT_STDOUT_TAG, b"after\n"))
    demux.feed(SCRIPT, channel[:7])  # a frame cut anywhere waits for the rest
    assert delivered == []
    demux.feed(SCRIPT, channel[7:] + frame(SCRIPT_STDOUT_TAG, b"no newline"))
    demux.close(SCRIPT)
    assert [(e.type, e.data["stream"], e.data["kind"], e.data["text"]) for e in delivered] == [
        (events.LOG, STDOUT, placement.OUTPUT, EAGER),
        (events.LOG, STDERR, placement.OUTPUT, "Traceback (most recent call last):"),
        (events.LOG, STDOUT, placement.OUTPUT, "after"), (events.LOG, STDOUT, placement.OUTPUT, "no newline")]
    assert all(e.data["source"] == "script" for e in delivered)
