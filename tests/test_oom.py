"""An OOM explained: TensorFlow's BFC allocator dump and ResourceExhaustedError, parsed (core.oom) from REAL dumps
recorded on this machine (scripts/record_oom_dumps.py: the CPU's allocator made BFC and capped at 64 MiB), and
end to end: a run under cpu_memory_limit_mib 64 that allocates until it fails is explained in the record, the
command line and --json; the window draws the allocator's memory as a bar."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli
from tf_device_panel.core.oom import MAX_BAR_SEGMENTS, MIB, DumpCollector, explain, oom_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MESSAGES = json.loads((FIXTURES / "oom_cpu_bfc_messages.json").read_text())
SHORTAGE = "oom_cpu_bfc_64mib.stderr.txt"
FRAGMENTED = "oom_cpu_bfc_64mib_fragmented.stderr.txt"


def recorded(name: str, **options: object) -> dict:
    collector = DumpCollector()
    collector.feed((FIXTURES / name).read_text())
    oom = explain(collector.lines, MESSAGES[name], **options)  # type: ignore[arg-type]
    assert oom is not None
    return oom


def test_a_real_shortage_under_a_64_mib_cap() -> None:
    oom = recorded(SHORTAGE)
    assert oom["short_device"] == "/CPU:0"
    assert oom["allocator"] == "bfc_cpu_allocator_for_gpu"
    assert (oom["request_bytes"], oom["shape"], oom["dtype"], oom["op"]) == (4 * MIB, [1024, 1024], "float", "AddV2")
    assert oom["limit_bytes"] == 64 * MIB
    assert oom["in_use_bytes"] == 60 * MIB
    # The dump's own "LargestFreeBlock: 0B" is stale: the chunks hold a free one of 2 MiB less 256 B, and the
    # allocator could still take 2 MiB from the device.
    assert oom["largest_free_chunk_bytes"] == 2 * MIB - 256
    assert oom["largest_free_bytes"] == 2 * MIB
    assert oom["free_bytes"] == 4 * MIB - 256
    assert oom["verdict"] == "shortage"
    assert "256 B short" in oom["explanation"]
    assert oom["largest_live"][0] == {"bytes": 4 * MIB, "count": 15, "op": None}
    # The bar is the whole limit: what is in use, the free chunk, what the allocator had not taken yet.
    assert oom["bar"] == [["in_use", 60 * MIB + 256], ["free", 2 * MIB - 256], ["unallocated", 2 * MIB]]
    assert sum(size for _, size in oom["bar"]) == oom["limit_bytes"]
    # What to try, from the figures: what this step needed (one more free 4 MiB block), said as no more than that.
    assert "this step alone needed 66.00 MiB of the 64.00 MiB cap (cpu_memory_limit_mib), and later steps may need " \
        "more" in " ".join(oom["advice"])
    assert not any("cuda_malloc_async" in tip for tip in oom["advice"])  # not on a CPU


def test_no_batch_is_worked_out_from_one_steps_shortfall() -> None:
    # "a batch of at most 55 (64 × 64/66 × 0.9)" was the advice: followed, such a batch ran out in turn (the next
    # steps need more, and a pool near its limit fragments). A batch the panel set is named as this run's only.
    oom = recorded(SHORTAGE, batch_size=64)
    (tip,) = [t for t in oom["advice"] if "batch" in t]
    assert tip == "a smaller batch than this run's 64, if its memory grows with the batch"
    assert not any("%" in t or "at most" in t for t in oom["advice"])
    assert not any("batch" in t for t in recorded(SHORTAGE)["advice"])  # no batch known: none advised


def test_fragmentation_is_told_from_a_shortage() -> None:
    oom = recorded(FRAGMENTED)
    assert oom["request_bytes"] == 4 * MIB and oom["op"] == "Fill"
    assert oom["free_bytes"] >= 32 * MIB > oom["request_bytes"] > oom["largest_free_bytes"]
    assert oom["verdict"] == "fragmentation"
    assert "the largest free block is 2.00 MiB" in oom["explanation"]
    assert any("regions" in tip for tip in oom["advice"])
    assert not any(tip.startswith("a smaller batch") for tip in oom["advice"])
    states = [state for state, _ in oom["bar"]]
    assert states.count("free") >= 20  # the holes, each drawn
    # Free chunks of two regions are never one block: the largest free block is a segment of its own.
    assert ["free", oom["largest_free_bytes"]] in oom["bar"]


def test_on_a_gpu_the_advice_names_the_gpus_remedies() -> None:
    lines = [line.replace("bfc_cpu_allocator_for_gpu", "GPU_0_bfc")
             for line in (FIXTURES / FRAGMENTED).read_text().splitlines()]
    message = MESSAGES[FRAGMENTED].replace("device:CPU:0", "device:GPU:0").replace(
        "bfc_cpu_allocator_for_gpu", "GPU_0_bfc")
    collector = DumpCollector()
    collector.feed("\n".join(lines))
    oom = explain(collector.lines, message, growth=True)
    assert oom is not None and oom["on_gpu"] and oom["short_device"] == "/GPU:0"
    assert any("cuda_malloc_async" in tip for tip in oom["advice"])
    assert any("turn memory growth off" in tip for tip in oom["advice"])
    short = explain([], MESSAGES[SHORTAGE].replace("device:CPU:0", "device:GPU:0"), on_gpu=True)
    assert short is not None  # no dump: the request from the message, nothing guessed
    assert short["request_bytes"] == 4 * MIB and short["verdict"] == "unknown" and "limit_bytes" not in short


def test_an_error_that_is_no_oom_is_not_explained() -> None:
    assert explain([], "InvalidArgumentError: Matrix size-incompatible") is None
    assert explain(["I0000 placer.cc:162] MatMul: (MatMul): /device:CPU:0"], None) is None


def test_the_collector_keeps_only_the_last_dump() -> None:
    text = (FIXTURES / FRAGMENTED).read_text()  # two dumps: the fill that failed, then the 4 MiB request
    assert text.count("ran out of memory") == 2
    collector = DumpCollector()
    for line in text.splitlines():  # a line at a time, as a run's events bring them
        collector.feed(line)
    assert sum("ran out of memory" in line for line in collector.lines) == 1
    assert "trying to allocate 4.00MiB" in collector.lines[0]
    assert not any("cudart_stub" in line for line in collector.lines)


def test_a_huge_dump_keeps_a_bounded_bar() -> None:
    head, chunk = "Allocator (x) ran out of memory trying to allocate 4.00MiB (rounded to 4194304)", []
    for n in range(5000):
        state = "InUse" if n % 2 else "Free "
        chunk.append(f"I0 bfc_allocator.cc:1105] {state} at 7f{n:010x} of size {1024 * (n % 7 + 1)} "
                     f"by op Op{n % 3} action_count {n} step 0 next {n + 1}")
    oom = explain([head, *chunk], MESSAGES[SHORTAGE])
    assert oom is not None
    assert len(oom["bar"]) <= MAX_BAR_SEGMENTS
    assert sum(segment[1] for segment in oom["bar"]) == sum(1024 * (n % 7 + 1) for n in range(5000))
    mixed = [segment for segment in oom["bar"] if segment[0] == "mixed"]  # runs narrower than a pixel, merged
    assert mixed and all(0 < free < size for _, size, free in mixed)
    assert oom["largest_live"][0]["op"] in ("Op0", "Op1", "Op2")  # GPU dumps name the op that made a chunk


def test_the_text_says_request_limit_in_use_and_largest_free_block() -> None:
    text = "\n".join(oom_text(recorded(SHORTAGE)))
    assert "out of memory on /CPU:0" in text and "4.00 MiB, by op AddV2" in text
    assert "limit 64.00 MiB, in use 60.00 MiB, free in all 4.00 MiB, largest free block 2.00 MiB" in text


@pytest.fixture
def run_panel(monkeypatch: pytest.MonkeyPatch) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`tf-device-panel run ARGS` (the command line's own main(), its run forked from the worker's zygote)."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_cli(["run", *args], ROOT, monkeypatch)
        assert "Traceback" not in done.stderr, done.stderr
        return done
    return run


@pytest.fixture
def capped(tmp_path: Path) -> Path:
    profile = tmp_path / "cap64.json"
    profile.write_text('{"version": 1, "cpu_memory_limit_mib": 64}')
    return profile


def test_a_script_that_runs_out_under_a_64_mib_cap_is_explained(tmp_path: Path, capped: Path, panel_home: Path,
                                                                 run_panel: Callable[..., Any]) -> None:
    script = tmp_path / "grow.py"
    script.write_text("import tensorflow as tf\nkept = []\n"
                      "while True:\n    kept.append(tf.random.normal([1024, 1024]))\n")
    done = run_panel("script", "--config", str(capped), "-p", f"path={script}", "--json")
    assert done.returncode == 1
    outcome = json.loads(done.stdout)
    oom = outcome["oom"]
    assert oom["short_device"] == "/CPU:0"
    assert oom["request_bytes"] == 4 * MIB and oom["shape"] == [1024, 1024]
    assert oom["limit_bytes"] == 64 * MIB
    assert 48 * MIB <= oom["in_use_bytes"] <= 64 * MIB
    assert 0 < oom["largest_free_bytes"] < 4 * MIB
    assert oom["verdict"] in ("shortage", "fragmentation")
    # The run's record keeps it too.
    (record,) = panel_home.rglob(f"{outcome['run_id']}/run.json")
    assert json.loads(record.read_text())["oom"]["request_bytes"] == 4 * MIB


def test_a_job_that_runs_out_under_a_64_mib_cap_is_explained_on_the_command_line(
        capped: Path, run_panel: Callable[..., Any]) -> None:
    done = run_panel("memory", "--config", str(capped), "-p", "step_mib=4", "-p", "steps=40")
    assert done.returncode == 1
    assert "out of memory on /CPU:0 (bfc_cpu_allocator_for_gpu): tensor of shape [1048576] (float), 4.00 MiB" \
        in done.stdout
    assert "limit 64.00 MiB, in use 60.00 MiB" in done.stdout
    assert "largest free block 2.00 MiB" in done.stdout
    # The job's allocations are the panel's to know (40 × 4 MiB): the cap it names holds when followed (the
    # smallest that held here was 161–164 MiB; one step's shortfall, "at least 66", did not).
    advised = re.search(r"try: a larger cap: this run allocates 160\.00 MiB in all; cpu_memory_limit_mib of at "
                        r"least (\d+)\n", done.stdout)
    assert advised is not None, done.stdout
    capped.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": int(advised.group(1))}))
    followed = run_panel("memory", "--config", str(capped), "-p", "step_mib=4", "-p", "steps=40")
    assert followed.returncode == 0, followed.stdout


def test_the_window_draws_the_allocators_memory(qtbot) -> None:
    from tf_device_panel.core.client.records import RunError
    from tf_device_panel.core.client.run_record import JobOutcome
    from tf_device_panel.gui.views.result_view import ResultView

    view = ResultView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    oom = recorded(SHORTAGE)
    outcome = JobOutcome(job="script", params={}, config={}, status="error", oom=oom,
                         error=RunError(type="ResourceExhaustedError", message=MESSAGES[SHORTAGE]))
    view.show_outcome(outcome)
    bar = view.oom.bar
    qtbot.waitUntil(lambda: bool(bar.painted))
    assert view.oom.isVisible()
    painted = dict(bar.painted)
    assert list(painted) == ["in_use", "free", "unallocated", "largest_free", "request"]
    # To scale: 60 MiB in use against a 4 MiB request, the largest free block (2 MiB) outlined.
    assert painted["in_use"].width() == pytest.approx(15 * painted["request"].width(), rel=0.01)
    assert painted["largest_free"] == painted["unallocated"]
    assert painted["request"].width() > painted["largest_free"].width()
    assert "a real shortage" in view.oom.headline.text()
    view.show_message("next run")
    assert not view.oom.isVisible()
