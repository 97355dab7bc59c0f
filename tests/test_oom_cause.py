"""An OOM is a run's cause only when the run ended in it (issue 43, item 2): a script that caught
ResourceExhaustedError, tried a smaller batch and later raised ValueError("bad label in row 17") was reported "out
of memory … try: a smaller batch"; a script that merely printed an allocator dump and exited 1 got the same; a dump
of more than 200,000 lines was explained from its first 200,000 (in use 6.10 MiB where its own InUse said 60 MiB,
the limit left out, the cut unsaid)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.oom import MAX_DUMP_LINES, MIB, DumpCollector, explain, oom_text
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.streams import SCRIPT

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
DUMP = (FIXTURES / "oom_cpu_bfc_64mib.stderr.txt").read_text()  # a real dump: 64 MiB cap, 60 MiB in use
OOM_MESSAGE = json.loads((FIXTURES / "oom_cpu_bfc_messages.json").read_text())["oom_cpu_bfc_64mib.stderr.txt"]
JOB_ID = "job-1"


def fed(job: str, *happened: events.Event) -> JobRun:
    run = JobRun(job, {"path": "train.py", "args": "--batch 512"} if job == "script" else {"batch_per_replica": 64},
                 DeviceConfig(cpu_memory_limit_mib=64), None)
    run.attach(JOB_ID)
    for event in happened:
        run.feed(event)
    return run


def tf_stderr(text: str) -> events.Log:
    return events.Log(stream="stderr", text=text, job_id=JOB_ID)


def script_stderr(text: str) -> events.Log:
    return events.Log(stream="stderr", text=text, source=SCRIPT, job_id=JOB_ID)


def error(error_type: str, message: str) -> events.Error:
    return events.Error(error_type=error_type, message=message, job_id=JOB_ID)


def test_an_oom_the_script_ended_in_is_its_cause() -> None:
    outcome = fed("script", tf_stderr(DUMP), error("ResourceExhaustedError", OOM_MESSAGE)).outcome
    assert outcome.oom is not None and outcome.oom["in_use_bytes"] == 60 * MIB and outcome.oom_earlier is None


def test_a_recovered_oom_is_noted_as_earlier_and_the_later_error_is_the_failure() -> None:
    outcome = fed("script", tf_stderr(DUMP), script_stderr("out of memory at batch 512; trying 256"),
                  error("ValueError", "bad label in row 17")).outcome
    assert outcome.oom is None
    assert outcome.error is not None and outcome.error.type == "ValueError"
    assert outcome.oom_earlier == ("an out-of-memory error on /CPU:0 (4.00 MiB requested) came earlier in this "
                                   "run, and the run went on after it: it is not what ended the run")


@pytest.mark.parametrize("printed", [
    DUMP,  # the allocator's own words, prefix and all, printed by the script
    "\n".join(line.split("] ", 1)[-1] for line in DUMP.splitlines()),  # the words alone
], ids=["tensorflows-words", "the-words-alone"])
def test_a_dump_a_script_prints_is_never_taken_for_the_allocators(printed: str) -> None:
    outcome = fed("script", script_stderr(printed), error("ScriptExit", "train.py exited with status 1")).outcome
    assert outcome.oom is None and outcome.oom_earlier is None
    # Nor a message that reads like one, when the exception is the script's own.
    outcome = fed("script", script_stderr(printed), error("RuntimeError", OOM_MESSAGE)).outcome
    assert outcome.oom is None


def written_now(dump: str) -> str:
    """The dump as this run's TensorFlow writes it to a script's stderr: its log lines' time is now."""
    return re.sub(r"^([IWEF])0000 00:00:\d+\.\d+", lambda line: f"{line.group(1)}0000 00:00:{time.time():.6f}",
                  dump, flags=re.MULTILINE)


def test_tensorflows_dump_on_a_scripts_stderr_is_read() -> None:
    # In a script's run TensorFlow's C++ log goes to the script's own stderr: its dump comes as the script's lines.
    run = fed("script")
    for event in (script_stderr(written_now(DUMP)), error("ResourceExhaustedError", OOM_MESSAGE)):
        run.feed(event)
    oom = run.outcome.oom
    assert oom is not None and oom["in_use_bytes"] == 60 * MIB and oom["verdict"] != "unknown"
    run = fed("script")
    for event in (script_stderr(written_now(DUMP)), events.Progress(done=1, total=2, job_id=JOB_ID),
                  events.Progress(done=2, total=2, job_id=JOB_ID), error("ValueError", "bad label in row 17")):
        run.feed(event)
    assert run.outcome.oom is None and run.outcome.oom_earlier is not None


def test_dump_words_on_stderr_without_tensorflows_log_prefix_open_no_dump() -> None:
    collector = DumpCollector()
    collector.feed("Allocator (x) ran out of memory trying to allocate 4.00MiB (rounded to 4194304)\nLimit: 1B")
    assert collector.lines == [] and collector.dumps == 0
    collector.feed(DUMP)
    assert collector.dumps == 1 and collector.lines[0].startswith("W0000")


def test_a_run_that_died_in_or_right_after_the_dump_died_of_it() -> None:
    died = events.RuntimeExited(returncode=-11, description="crashed: SIGSEGV", job_id=JOB_ID)
    head = DUMP.split("Limit:")[0]  # the process died while printing its dump
    outcome = fed("fit", tf_stderr(head), died).outcome
    assert outcome.oom is not None and outcome.status == "crashed"
    outcome = fed("fit", tf_stderr(DUMP), tf_stderr("W0000 op_kernel.cc:1858] OP_REQUIRES failed"), died).outcome
    assert outcome.oom is not None  # TensorFlow's own lines after it: still right after the dump
    # As the run manager tells a death: its error first (type RuntimeExited), then the job's end, then the exit.
    told = (error("RuntimeExited", "the runtime killed by SIGSEGV while the job was running"),
            events.JobFinished(job="fit", status="crashed", returncode=-11, job_id=JOB_ID), died)
    outcome = fed("fit", tf_stderr(DUMP), *told).outcome
    assert outcome.oom is not None and outcome.oom_earlier is None and outcome.status == "crashed"
    # The job went on after the dump (its progress, its output): the crash is something else.
    progress = [events.Progress(done=step, total=10, job_id=JOB_ID) for step in (3, 4)]
    outcome = fed("fit", tf_stderr(DUMP), *progress, died).outcome
    assert outcome.oom is None and outcome.oom_earlier is not None
    # Its output, and one report, may be from before the dump read after it (stdout is written by blocks).
    stdout = events.Log(stream="stdout", text="1/1 ━━━━ loss: 0.69", job_id=JOB_ID)
    outcome = fed("fit", tf_stderr(DUMP), stdout, progress[0], died).outcome
    assert outcome.oom is not None


def huge_dump(chunks: int) -> str:
    """The real dump with `chunks` more chunk lines (1 KiB in use each) before its totals."""
    head, totals = DUMP.split("Summary of in-use Chunks by size")
    head_lines = head.splitlines()
    summary_line = head_lines.pop()
    extra = [f"I0000 00:00:1795659719.714948   14562 bfc_allocator.cc:1105] InUse at {n:x} of size 1024 next {n + 1}"
             for n in range(chunks)]
    return "\n".join([*head_lines, *extra, summary_line + "Summary of in-use Chunks by size" + totals])


def test_a_dump_longer_than_the_limit_says_it_was_cut_and_uses_its_own_totals() -> None:
    collector = DumpCollector()
    collector.feed(huge_dump(MAX_DUMP_LINES + 50_000))
    assert len(collector.lines) < MAX_DUMP_LINES + 100 and collector.cut > 50_000
    oom = explain(collector.lines, OOM_MESSAGE, cut_lines=collector.cut)
    assert oom is not None
    assert oom["in_use_bytes"] == 60 * MIB and oom["limit_bytes"] == 64 * MIB  # the dump's InUse: and Limit:
    assert oom["free_bytes"] == 4 * MIB and oom["dump_cut_lines"] == collector.cut
    assert oom["verdict"] in ("shortage", "unknown") and "were read, and the figures are its own totals" in \
        oom["explanation"]
    assert sum(size for _, size in oom["bar"]) == 64 * MIB
    text = "\n".join(oom_text(oom))
    assert "limit 64.00 MiB, in use 60.00 MiB" in text
    assert f"the allocator's dump was cut after {MAX_DUMP_LINES:,} lines ({collector.cut:,} more not read)" in text


def test_the_run_record_reads_a_cut_dump_by_its_totals() -> None:
    dump = tf_stderr(huge_dump(MAX_DUMP_LINES + 10))
    outcome = fed("fit", dump, error("ResourceExhaustedError", OOM_MESSAGE)).outcome
    assert outcome.oom is not None and outcome.oom["in_use_bytes"] == 60 * MIB and outcome.oom["dump_cut_lines"]


# -- end to end: the scripts through `run script` under a 64 MiB cap ---------------------------------------

RECOVERS = """
import tensorflow as tf

def train(batch):
    kept = [tf.random.normal([batch, 1024]) for _ in range(64)]
    return sum(float(tf.reduce_sum(k)) for k in kept)

try:
    train(1024)
except tf.errors.ResourceExhaustedError:
    print("batch 1024 ran out of memory; trying 32")
train(32)
raise ValueError("bad label in row 17")
"""


def run_script(tmp_path: Path, code: str, monkeypatch: pytest.MonkeyPatch) -> tuple[
        subprocess.CompletedProcess[str], dict]:
    """`tf-device-panel run script --json` on `code` under a 64 MiB CPU cap (the command line's own main(), its
    run forked from the worker's zygote)."""
    script = tmp_path / "train.py"
    script.write_text(code)
    profile = tmp_path / "cap64.json"
    profile.write_text('{"version": 1, "cpu_memory_limit_mib": 64}')
    done = run_cli(["run", "script", "--config", str(profile), "-p", f"path={script}", "--json"], ROOT, monkeypatch)
    return done, json.loads(done.stdout)


def test_a_script_that_recovered_from_an_oom_fails_of_its_own_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    done, outcome = run_script(tmp_path, RECOVERS, monkeypatch)
    assert done.returncode == 1, done.stderr
    assert outcome["error"]["type"] == "ValueError" and outcome["oom"] is None
    assert outcome["oom_earlier"].startswith("an out-of-memory error on /CPU:0"), outcome  # TF's dump was seen
    (record,) = Path(os.environ["TF_DEVICE_PANEL_HOME"]).rglob(f"{outcome['run_id']}/run.json")
    assert json.loads(record.read_text())["oom"] is None
    kept = (record.parent / "events.jsonl").read_text()
    assert "came earlier in this run, and the run went on after it" in kept  # the record keeps the note


def test_a_script_that_prints_a_dump_and_exits_1_is_no_oom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import os, sys\n"
            f"sys.stderr.write({DUMP!r})\n"
            f"os.write(2, {DUMP.encode()!r})\n"
            "sys.exit(1)\n")
    done, outcome = run_script(tmp_path, code, monkeypatch)
    assert done.returncode == 1, done.stderr
    assert outcome["oom"] is None and outcome["oom_earlier"] is None, outcome


# -- advice that holds (issue 40, item 4) ---------------------------------------------------------------------------

def test_a_scripts_oom_says_how_to_find_the_batch_that_fits_and_invents_none() -> None:
    outcome = fed("script", tf_stderr(DUMP), error("ResourceExhaustedError", OOM_MESSAGE)).outcome
    assert outcome.oom is not None
    advice = outcome.oom["advice"]
    assert not any("%" in tip or "at most" in tip for tip in advice), advice  # "77 % of this one" was invented
    assert advice[0] == ("find the batch that fits: the Batch that fits job (fit-batch) runs this script ({batch} in "
                         "its arguments where it takes its batch) at batch after batch under 64 MiB and verifies the "
                         "largest that held")
    printed = "\n".join(oom_text(outcome.oom, command_line=True))
    assert ("try: find the batch that fits: tf-device-panel run fit-batch -p script=train.py -p 'args=--batch 512 … "
            "{batch} …' -p budget_mib=64") in printed
    assert "tf-device-panel" not in "\n".join(oom_text(outcome.oom))  # the window's words name no command


def test_the_fit_jobs_oom_names_fit_batch_with_its_model_and_the_gpu_that_ran_out() -> None:
    run = JobRun("fit", {"model": "cnn", "image_size": 32, "batch_per_replica": 600}, DeviceConfig(), None)
    run.attach(JOB_ID)
    run.feed(tf_stderr(DUMP.replace("bfc_cpu_allocator_for_gpu", "GPU_1_bfc")))
    run.feed(error("ResourceExhaustedError", OOM_MESSAGE.replace("CPU:0", "GPU:1")))
    oom = run.outcome.oom
    assert oom is not None and oom["find_batch"] == {"model": "cnn", "image_size": 32, "budget_mib": 64,
                                                     "device": "/GPU:1"}
    assert "(this run's was 600)" in oom["advice"][0]
    assert ("tf-device-panel run fit-batch -p model=cnn -p image_size=32 -p budget_mib=64 -p device=/GPU:1"
            in "\n".join(oom_text(oom, command_line=True)))


# -- explained once, in the panel's client (issue 39, item 4) -------------------------------------------------------

def _explaining_modules() -> set[str]:
    """The modules of core/ and gui/ that call the OOM parser's `explain`, by any name they gave it."""
    import ast

    found = set()
    for path in [*(ROOT / "core").rglob("*.py"), *(ROOT / "gui").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "explain"
                                               or getattr(node.func, "attr", None) == "explain"):
                found.add(str(path.relative_to(ROOT)))
    return found


def test_an_oom_is_explained_by_the_run_record_and_by_the_notebook_alone() -> None:
    # The run record explains a run's dump once, in the panel's client; everything else reads its outcome. The
    # notebook explains its own: its cell runs in the kernel, with no run record.
    assert _explaining_modules() == {"core/client/run_record.py", "core/notebook/cell_run.py"}


def test_a_panel_runs_oom_is_read_from_the_outcome_its_command_line_printed(tmp_path: Path, monkeypatch) -> None:
    # fit-batch's verdict per batch and share's seat status come from `run --json`'s outcome, which holds the run
    # record's explanation: reading a run explains nothing again.
    from tf_device_panel.core import oom as oom_parser
    from tf_device_panel.core.panel_runs.runs import PanelRun, read_run

    outcome = fed("fit", tf_stderr(DUMP), error("ResourceExhaustedError", OOM_MESSAGE),
                  events.JobFinished(job="fit", status="error", returncode=1, job_id=JOB_ID)).outcome
    assert outcome.oom is not None
    (tmp_path / "outcome.json").write_text(json.dumps(outcome.to_json(), default=str))
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()

    def explained_again(*args: object, **options: object) -> None:
        raise AssertionError("the run's dump was explained a second time")

    monkeypatch.setattr(oom_parser, "explain", explained_again)
    row = read_run(PanelRun(ended, tmp_path, 64, seconds=1.0))
    assert not row["fits"] and row["error"] == OOM_MESSAGE
    assert row["oom"] == {key: outcome.oom.get(key) for key in ("request_bytes", "limit_bytes", "in_use_bytes",
                                                                "largest_free_bytes", "verdict")}
    assert row["oom"]["verdict"] == "shortage"
