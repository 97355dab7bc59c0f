"""The output pipeline under a flood: lossless on Ctrl+C and SIGTERM, the record always finalized, the CLI's
memory bounded; and the run record's compact layout, cap and compatibility with old records."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import ROOT, wait_until
from tf_device_panel.core.cli.output import RunPrinter
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.protocol.streams import LINE_CAP_BYTES

FLOOD = """
    import itertools, sys
    count = itertools.count() if "--endless" in sys.argv else range(1_000_000)
    for i in count:
        print(f"line {i}")
"""


def start_flood(tmp_path: Path, sink: Path | None, *extra: str) -> subprocess.Popen[bytes]:
    script = tmp_path / "flood.py"
    script.write_text(textwrap.dedent(FLOOD))
    out = sink.open("wb") if sink is not None else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}", *extra],
                            cwd=ROOT, stdout=out, stderr=subprocess.PIPE, env=os.environ.copy())


def recorded_output(panel_home: Path) -> Path | None:
    runs = sorted((panel_home / "runs").glob("*/output.txt")) if (panel_home / "runs").is_dir() else []
    return runs[-1] if runs else None


def output_bytes(panel_home: Path) -> int:
    output = recorded_output(panel_home)
    return output.stat().st_size if output is not None else 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_flood_loses_nothing_and_finalizes_the_record(tmp_path: Path, panel_home: Path,
                                                                        stop: signal.Signals) -> None:
    printed = tmp_path / "printed.txt"
    process = start_flood(tmp_path, printed)
    try:
        wait_until(lambda: output_bytes(panel_home) > 200_000, timeout=120, message="the flood never started")
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert b"Traceback" not in err, err
    assert process.returncode == 128 + stop  # 130, 143, 129: the signal the CLI got, as shells report it (issue 32)
    (summary,) = RunHistory().summaries()
    assert summary.status == "cancelled"
    lines = RunHistory().events(summary.run_id)
    texts = [e.text for e in lines if isinstance(e, events.Log) and e.stream == "stdout"]
    assert 20_000 < len(texts) < 1_000_000, "the signal did not land during the flood"
    assert texts == [f"line {i}" for i in range(len(texts))]  # every line, in order, none lost
    shown = printed.read_text().splitlines()  # the script's stdout, as it printed it; the panel's lines on stderr
    assert shown == [f"line {i}" for i in range(len(texts))]  # the terminal saw exactly the same lines


def test_an_endless_flood_keeps_the_cli_small(tmp_path: Path, panel_home: Path) -> None:
    process = start_flood(tmp_path, None, "-p", "args=--endless")
    peak = [0]

    def flooded_far() -> bool:
        peak[0] = max(peak[0], psutil.Process(process.pid).memory_info().rss)
        return output_bytes(panel_home) > 20_000_000  # over 1.5M lines: an unbounded queue would be far past 150 MB

    try:
        wait_until(flooded_far, timeout=240, interval=0.1, message="the flood did not get far")
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert peak[0] < 150 * 1024 * 1024, f"the CLI grew to {peak[0] / 2**20:.0f} MB"
    assert RunHistory().summaries()[0].status == "cancelled"


def test_200_mb_without_a_newline_keeps_the_cli_small_and_the_record_in_its_cap(tmp_path: Path,
                                                                                panel_home: Path) -> None:
    script = tmp_path / "one_line.py"
    script.write_text("import sys\nfor _ in range(3200):\n    sys.stdout.write('x' * 65536)\nsys.exit(4)\n")
    process = subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    watched = psutil.Process(process.pid)
    peak = [0]

    def ended() -> bool:
        with contextlib.suppress(psutil.NoSuchProcess):
            peak[0] = max(peak[0], watched.memory_info().rss)
        return process.poll() is not None

    try:
        wait_until(ended, timeout=240, interval=0.05, message="the CLI did not finish the 200 MB line")
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate()
    assert b"Traceback" not in err, err
    assert process.returncode == 4 and peak[0] < 150 * 1024 * 1024, f"the CLI grew to {peak[0] / 2**20:.0f} MB"
    (summary,) = RunHistory().summaries()
    assert summary.output.bytes < 10 * 1024 * 1024  # the line's head and tail, not 200 MB in one piece
    (line,) = [e.text for e in RunHistory().events(summary.run_id)
               if isinstance(e, events.Log) and e.text.startswith("xxx")]
    assert f"[{200 * 1024 * 1024 - LINE_CAP_BYTES} bytes of this line not kept" in line


def test_a_closed_stdout_cancels_the_run_and_finalizes_the_record(tmp_path: Path, panel_home: Path) -> None:
    script = tmp_path / "flood.py"
    script.write_text(textwrap.dedent(FLOOD))
    command = (f"{sys.executable} -m tf_device_panel run script -p path={script} -p args=--endless | head -n 5000"
               " > /dev/null")
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env=os.environ.copy())
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert RunHistory().summaries()[0].status == "cancelled"


def line_event(text: str, stream: str = "stdout") -> Event:
    return events.Log(stream=stream, kind="output", text=text, job_id="job-1")


def test_the_record_is_raw_text_past_the_cap_head_and_tail_with_the_count_dropped(panel_home: Path) -> None:
    run = JobRun("script", {}, DeviceConfig(), None, RunHistory(cap_bytes=80_000))
    run.attach("job-1")
    run.feed(events.JobStarted(job="script", job_id="job-1"))
    for block in range(100):
        run.feed(line_event("\n".join(f"line {block * 100 + i}" for i in range(100))))
    run.feed(line_event("a warning", "stderr"))
    run.feed(events.JobFinished(status="ok", job_id="job-1"))
    assert run.recorder is not None
    folder = run.recorder.folder
    summary = json.loads((folder / "run.json").read_text())
    kept = sum(path.stat().st_size for path in folder.glob("output*"))
    assert kept <= 80_000 * 1.05 and summary["output"]["lines"] == 10_001
    dropped = summary["output"]["dropped_lines"]
    assert dropped > 0
    loaded = RunHistory().events(run.recorder.run_id)
    texts = [e.text for e in loaded if isinstance(e, events.Log)]
    notice = next(i for i, text in enumerate(texts) if "lines dropped" in text)
    assert texts[:notice] == [f"line {i}" for i in range(notice)]  # the head
    assert texts[-2:] == ["line 9999", "a warning"]  # the tail, the stream switch kept
    assert len(texts) - 1 == 10_001 - dropped
    assert isinstance(loaded[0], events.JobStarted) and isinstance(loaded[-1], events.JobFinished)


def test_the_record_is_compact(panel_home: Path) -> None:
    run = JobRun("script", {}, DeviceConfig(), None, RunHistory())
    run.attach("job-1")
    raw = 0
    for block in range(100):
        text = "\n".join(f"line {block * 1000 + i}" for i in range(1000))
        raw += len(text) + 1
        run.feed(line_event(text))
    run.feed(events.JobFinished(status="ok", job_id="job-1"))
    assert run.recorder is not None
    stored = sum(path.stat().st_size for path in run.recorder.folder.iterdir() if path.name != "run.json")
    assert stored <= 1.5 * raw


def test_a_record_written_before_the_raw_output_layout_still_opens(panel_home: Path) -> None:
    folder = panel_home / "runs" / "20260101-000000-matmul-abcdef"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run_id": folder.name, "job": "matmul", "status": "ok",
                                                 "started": 1.0, "client_pid": os.getpid()}))
    old = [events.JobStarted(job="matmul", job_id="j"),
           events.Log(stream="stdout", kind="output", text="hello", job_id="j"),
           events.JobFinished(status="ok", job_id="j")]
    (folder / "events.jsonl").write_text("".join(json.dumps(e.to_json()) + "\n" for e in old))
    loaded = RunHistory().events(folder.name)
    assert [e.type for e in loaded] == [events.JOB_STARTED, events.LOG, events.JOB_FINISHED]
    assert loaded[1].text == "hello"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_a_progress_bar_is_redrawn_in_place_on_a_terminal_only(terminal: bool) -> None:
    out = Terminal() if terminal else io.StringIO()
    printer = RunPrinter(False, out)
    for text in ("1/3 [=>  ]", "2/3 [==> ]"):
        printer(events.Log(stream="stdout", kind="output", text=text, partial=True))
    printer(events.Log(stream="stdout", kind="output", text="3/3 [===]"))
    if terminal:
        assert out.getvalue() == ("\r\x1b[K  | 1/3 [=>  ]\r\x1b[K  | 2/3 [==> ]\r\x1b[K  | 3/3 [===]\n")
    else:
        assert out.getvalue() == "  | 3/3 [===]\n"


def test_the_record_keeps_the_bytes_printed_and_the_view_shows_what_a_terminal_shows(tmp_path: Path,
                                                                                     panel_home: Path) -> None:
    script = tmp_path / "raw.py"
    script.write_text(textwrap.dedent("""
        import sys
        out = sys.stdout.buffer
        for i in range(2000):
            out.write(b"bad \\xff\\xfe byte %d\\n" % i)       # not UTF-8
        for step in range(3000):
            out.write(b"\\rprogress %4d/3000" % step)       # a progress bar redrawn with \\r
        out.write(b"\\nwindows line\\r\\nlast\\n")
    """))
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, check=True).stdout
    outcome = run_job_once(DeviceConfig(), "script", {"path": str(script)}, history=RunHistory())
    assert outcome.status == "ok", outcome.error
    record = (panel_home / "runs" / str(outcome.run_id) / "output.txt").read_bytes()
    assert printed in record  # every byte as printed: nothing replaced, no redraw collapsed
    texts = [e.text for e in RunHistory().events(str(outcome.run_id))
             if isinstance(e, events.Log) and e.stream == "stdout"]
    assert texts[0] == "bad \ufffd\ufffd byte 0"
    assert texts[-3:] == ["progress 2999/3000", "windows line", "last"]
