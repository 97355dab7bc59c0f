"""The runtime's streams demultiplexed from raw bytes: lines, log and placement events, fences. No processes."""

from __future__ import annotations

from tf_device_panel.core import events, placement
from tf_device_panel.core.events import Event
from tf_device_panel.core.streams import EVENTS, FENCE_PREFIX, STDERR, STDOUT, StreamDemux

EAGER = ("I0000 00:00:1795270979.856597 5908 execute.cc:1775] Executing op MatMul in device "
         "/job:localhost/replica:0/task:0/device:CPU:1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(job: str | None = "j1") -> tuple[StreamDemux, list[Event], list[str], Clock]:
    delivered: list[Event] = []
    lines: list[str] = []
    clock = Clock()
    demux = StreamDemux(delivered.append, job_id=lambda: job, on_line=lines.append, clock=clock)
    return demux, delivered, lines, clock


def closing(job_id: str = "j1") -> bytes:
    return (Event(events.RESULT, {"result": {"kind": "script"}}, job_id=job_id).encode()
            + Event(events.JOB_FINISHED, {"status": "ok"}, job_id=job_id).encode())


def fence(job_id: str = "j1") -> bytes:
    return f"{FENCE_PREFIX}{job_id}\n".encode()


def test_lines_split_across_reads_become_one_event_each() -> None:
    demux, delivered, lines, _ = make()
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
    demux, delivered, _, _ = make()
    demux.feed(STDERR, EAGER.encode() + b"\n")
    (event,) = delivered
    assert event.type == events.PLACEMENT and event.data["short_device"] == "/CPU:1"
    assert event.data["op_type"] == "MatMul" and event.data["line"] == EAGER and event.data["stream"] == STDERR


def test_a_tensorflow_message_continues_on_unprefixed_stderr_lines_of_the_same_write() -> None:
    demux, delivered, _, _ = make()
    demux.feed(STDERR, b"W0000 00:00:1.0 1 cuda.cc:1] could not load libcudart\n  detail line\n")
    demux.feed(STDERR, b"plain output\n")  # a later write starts afresh
    assert [e.data["kind"] for e in delivered] == [placement.WARNING, placement.WARNING, placement.OUTPUT]


def test_events_pass_through_and_a_bad_line_is_reported_not_fatal() -> None:
    demux, delivered, _, _ = make()
    progress = Event(events.PROGRESS, {"done": 1, "total": 2, "message": "half"}, job_id="j1")
    demux.feed(EVENTS, progress.encode()[:10])
    demux.feed(EVENTS, progress.encode()[10:] + b"\n{not json\n")
    assert delivered[0].type == events.PROGRESS and delivered[0].data["message"] == "half"
    assert delivered[1].type == events.LOG and "unreadable event" in delivered[1].data["text"]


def test_a_result_waits_for_the_fence_on_both_output_streams() -> None:
    demux, delivered, lines, _ = make()
    demux.feed(EVENTS, closing())
    demux.release()
    assert delivered == [] and demux.holding
    demux.feed(STDOUT, b"last words\n" + fence())
    assert [e.type for e in delivered] == [events.LOG]  # stderr's fence is still missing
    demux.feed(STDERR, fence() + b"after\n")
    assert [e.type for e in delivered] == [events.LOG, events.RESULT, events.JOB_FINISHED, events.LOG]
    assert FENCE_PREFIX not in "".join(lines)  # fences are markers, never output


def test_later_events_keep_their_place_behind_a_held_one() -> None:
    demux, delivered, _, _ = make()
    demux.feed(EVENTS, closing() + Event(events.RUNTIME_EXITED, {"description": "exited"}).encode())
    assert delivered == []
    demux.feed(STDOUT, fence())
    demux.feed(STDERR, fence())
    assert [e.type for e in delivered] == [events.RESULT, events.JOB_FINISHED, events.RUNTIME_EXITED]


def test_a_missing_fence_is_waited_for_only_so_long() -> None:
    demux, delivered, _, clock = make()
    demux.feed(EVENTS, closing())
    clock.now += 1.0
    demux.release()
    assert delivered == []
    clock.now += 1.5
    demux.release()
    assert [e.type for e in delivered] == [events.RESULT, events.JOB_FINISHED]


def test_a_closed_stream_no_longer_owes_its_fence_and_force_releases_all() -> None:
    demux, delivered, _, _ = make()
    demux.feed(EVENTS, closing())
    demux.feed(STDOUT, fence())
    demux.close(STDERR)
    demux.release()
    assert [e.type for e in delivered] == [events.RESULT, events.JOB_FINISHED]
    demux.feed(EVENTS, closing("j2"))
    demux.release()
    assert len(delivered) == 2
    demux.release(force=True)
    assert [e.job_id for e in delivered[2:]] == ["j2", "j2"]


def test_ready_waits_for_the_ready_fence_and_lines_belong_to_the_job_running_then() -> None:
    running: list[str | None] = [None]
    delivered: list[Event] = []

    def deliver(event: Event) -> None:
        delivered.append(event)
        if event.type == events.JOB_FINISHED:
            running[0] = None

    running[0] = "j1"
    demux = StreamDemux(deliver, job_id=lambda: running[0])
    demux.feed(EVENTS, closing())
    # The fence and a following line in one read: the line comes after the job ended.
    demux.feed(STDERR, fence())
    demux.feed(STDOUT, b"job line\n" + fence() + b"idle line\n")
    assert [(e.type, e.job_id) for e in delivered] == [
        (events.LOG, "j1"), (events.RESULT, "j1"), (events.JOB_FINISHED, "j1"), (events.LOG, None)]
    demux.feed(EVENTS, Event(events.READY, {"pid": 1}).encode())
    assert delivered[-1].type == events.LOG
    demux.feed(STDOUT, f"{FENCE_PREFIX}ready\n".encode())
    demux.feed(STDERR, f"{FENCE_PREFIX}ready\n".encode())
    assert delivered[-1].type == events.READY
