"""Each result kind described once (core.results) and printed by the command line (core.cli.output)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tf_device_panel.core import cli
from tf_device_panel.core.cli.output import format_result, one_line, run_line, table_text
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_record import JobOutcome, JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.results import Column, Plot, Presentation, Series, Table, format_cell, present

FULL_CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"
BENCHMARK: dict[str, Any] = {
    "kind": "table", "title": "Matmul throughput (GFLOP/s)", "repeats": 2,
    "columns": ["device", "dtype", "size", "gflops", "seconds"],
    "column_titles": {"device": "Device", "size": "Size", "gflops": "GFLOP/s", "seconds": "Seconds"},
    "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
    "rows": [{"device": "/CPU:0", "dtype": "float32", "size": 64, "gflops": 3.5, "seconds": 0.01},
             {"device": "/CPU:0", "dtype": "float32", "size": 128, "gflops": 12.25, "seconds": 0.02},
             {"device": "/CPU:0", "dtype": "float16", "size": 64, "gflops": None, "seconds": None, "unsupported": "x"},
             {"device": "NumPy (CPU)", "dtype": "float32", "size": 64, "gflops": 4.0, "seconds": 0.01}]}


def text(result: Any) -> str:
    return "\n".join(format_result(JobOutcome("job", {}, {}, status="ok", result=result)))


def test_matrix_results_print_the_product_where_it_ran_and_any_fallback() -> None:
    out = text({"kind": "matrix", "matrix": [[22.0, 28.0], [49.0, 64.0]], "device": FULL_CPU1,
                "requested_device": "/GPU:2", "fallback": True})
    assert "[22 28]\n  [49 64]" in out
    assert f"on {FULL_CPU1}" in out and "soft-placement fallback: asked for /GPU:2" in out
    # replicate, as recorded before matrix results carried their kind
    out = text({"matrix": [[44.0, 56.0], [98.0, 128.0]], "device": FULL_CPU1,
                "replicas": {"/job:localhost/replica:0/task:0/device:CPU:0": FULL_CPU1}})
    assert "[ 44  56]" in out
    assert "replica MatMul on /job:localhost/replica:0/task:0/device:CPU:0 → ran on /CPU:1" in out


def test_training_results_list_the_loss_of_every_epoch_or_step() -> None:
    fit = {"kind": "training", "model": "cnn", "parameters": 12345, "devices": ["/CPU:0", "/CPU:1"],
           "replicas_in_sync": 2, "global_batch_size": 10, "batch_per_replica": 5, "loss": [0.5, 0.25]}
    out = text(fit)
    assert "result: 2 replicas in sync over /CPU:0, /CPU:1 (cnn model, 12,345 parameters)" in out
    assert "global batch 10 (5 per replica)" in out
    assert out.splitlines()[1:4] == ["  epoch      loss", "      1  0.500000", "      2  0.250000"]
    plot = present(fit).plots[0]
    assert (plot.x_label, plot.series[0].x, plot.series[0].y) == ("epoch", (1.0, 2.0), (0.5, 0.25))
    custom = {**fit, "loop": "custom", "model": "dense"}
    del custom["parameters"]
    assert "  step      loss" in text(custom) and "parameters" not in text(custom)


def test_memory_results_show_the_figures_of_their_device() -> None:
    row = {"current_mib": None, "peak_mib": None}
    cpu = {"kind": "memory", "short_device": "/CPU:1", "step_mib": 8, "notes": ["freed pages may stay"], "rows": [
        {"step": 0, "label": "before", "allocated_mib": 0, **row, "rss_mib": 500.4},
        {"step": 1, "label": "allocated", "allocated_mib": 8, **row, "rss_mib": 508.6}]}
    out = text(cpu).splitlines()
    assert out[0] == "result: memory on /CPU:1, 8 MiB per step"
    assert out[1].split() == ["Step", "What", "Held", "(MiB)", "Process", "RSS", "(MiB)"]
    assert out[3].split() == ["1", "allocated", "8", "509"] and out[-1] == "  note: freed pages may stay"
    gpu = {**cpu, "short_device": "/GPU:0", "rows": [
        {"step": 1, "label": "allocated", "allocated_mib": 8, "current_mib": 8.0, "peak_mib": 16.0, "rss_mib": None}]}
    presentation = present(gpu)
    assert [c.title for c in presentation.tables[0].columns][-2:] == ["TF current (MiB)", "TF peak (MiB)"]
    assert [s.name for s in presentation.plots[0].series] == ["held by the job", "TF current", "TF peak"]


def test_a_table_result_keeps_its_columns_marks_missing_figures_and_plots_its_series() -> None:
    out = text(BENCHMARK).splitlines()
    assert out[0] == "result: Matmul throughput (GFLOP/s)"
    assert out[1].split() == ["Device", "dtype", "Size", "GFLOP/s", "Seconds"]
    assert out[3].split() == ["/CPU:0", "float32", "128", "12.2", "0.02"]
    assert out[4].split() == ["/CPU:0", "float16", "64", "—", "—"]
    assert "2 matmuls per figure" in out[6] and "unsupported" in out[7]
    (plot,) = present(BENCHMARK).plots
    assert (plot.x_label, plot.y_label) == ("Size", "GFLOP/s")
    assert [(s.name, s.x) for s in plot.series] == [("/CPU:0 float32", (64.0, 128.0)), ("NumPy (CPU) float32", (64.0,))]
    # each curve names the table rows it draws (the window marks them with its swatch): not the unsupported one
    assert [s.rows for s in plot.series] == [(0, 1), (3,)]
    # an old record: no titles, no plot
    old = {k: v for k, v in BENCHMARK.items() if k not in ("column_titles", "plot", "repeats")}
    assert text(old).splitlines()[1].split() == ["device", "dtype", "size", "gflops", "seconds"]
    assert present(old).plots == ()


def test_cluster_results_show_where_variables_live_and_whether_workers_agree() -> None:
    ps = {"kind": "cluster", "strategy": "ParameterServerStrategy", "workers": 2,
          "addresses": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
          "variables": {"weight:0": "/job:ps/replica:0/task:0/device:CPU:0"}, "values": {"weight:0": 0.6},
          "loss": [0.5, 0.4], "steps": 2, "steps_per_s": 9.0, "isolation": "private network namespace",
          "timings": {"coordinator": {"connect_s": 0.1, "train_s": 1.25}},
          "task_devices": {"worker:0": ["/job:worker/replica:0/task:0/device:CPU:0"]}}
    out = text(ps)
    assert out.startswith("result: ParameterServerStrategy with 2 workers on ps 127.0.0.1:1; worker 127.0.0.1:2")
    assert "variable weight:0  /job:ps/replica:0/task:0/device:CPU:0" in out
    assert "worker:0 devices   /CPU:0" in out and "connected in 0.10 s" in out
    assert "2 steps, 9.0 steps/s" in out and "loss: 0.500000 → 0.400000 over 2 steps" in out
    mwms = {"kind": "cluster", "strategy": "MultiWorkerMirroredStrategy", "workers": 2,
            "addresses": {"worker": ["127.0.0.1:2"]}, "losses": {"worker:0": [0.5], "worker:1": [0.6]},
            "loss": [0.5], "losses_agree": False}
    assert present(mwms).warnings and "DISAGREE" in text(mwms)
    assert [s.name for s in present(mwms).plots[0].series] == ["worker:0", "worker:1"]


def test_script_unknown_and_missing_results() -> None:
    assert text({"kind": "script", "path": "/t/a.py", "argv": ["/t/a.py", "-x"], "exit_code": 0}) == \
        "result: /t/a.py -x finished (exit code 0)"
    unknown = text({"kind": "from-the-future", "answer": 42})
    assert unknown.startswith("result:") and '"answer": 42' in unknown
    assert text(7) == "result: 7"
    broken = text({"kind": "training", "devices": ["/CPU:0"], "replicas_in_sync": 1})  # no batch, no loss
    assert broken.startswith("result: a training result this version cannot lay out (KeyError") and \
        '"replicas_in_sync": 1' in broken
    assert text(None) == ""


def test_a_view_result_round_trips_through_json() -> None:
    presentation = Presentation(
        "custom", ("a line",), ("careful",),
        (Table((Column("name"), Column("value", "right", "number")), (("x", 0.125), ("y", None))),),
        (Plot("t", "v", (Series("s", (1.0, 2.0), (3.0, 4.0)),)),))
    assert present(json.loads(json.dumps(presentation.to_result()))) == presentation


def test_cells_and_tables_format_the_same_way_everywhere() -> None:
    assert [format_cell(v, "number") for v in (0.012345, 35.123, 7, None, "/CPU:0", True)] == \
        ["0.01235", "35.1", "7", "—", "/CPU:0", "True"]
    assert [format_cell(v, "g") for v in (22.0, 0.5)] == ["22", "0.5"]
    table = Table((Column("a"), Column("bb", "right")), (("xyz", 1), ("q", 100)))
    assert table_text(table) == ["a     bb", "xyz    1", "q    100"]


def test_every_event_type_declares_its_payload() -> None:
    types = {value for name, value in vars(events).items() if name.isupper() and isinstance(value, str)}
    assert types == set(events.KINDS)


def test_runs_listing_prints_a_multi_line_error_as_one_row(panel_home: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert one_line("short") == "short" and one_line("first\nsecond") == "first …"
    assert one_line("x" * 100) == "x" * 59 + "…"
    message = "InvalidArgumentError: Could not satisfy device specification\n" + "\n".join(
        f"  frame {n}" for n in range(20))
    for number, error in enumerate(({"message": message}, None)):
        folder = panel_home / "runs" / f"2026010{number + 1}-000000-matmul-abcdef"
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({
            "run_id": folder.name, "job": "matmul", "status": "error" if error else "ok", "error": error,
            "started": time.time(), "client_pid": 1, "duration_s": 1.5}))
    lines = [run_line(run) for run in RunHistory().summaries()]
    assert len(lines) == 2 and lines[1].endswith("  InvalidArgumentError: Could not satisfy device specificatio…")
    assert cli.main(["runs"]) == 0 and len(capsys.readouterr().out.splitlines()) == 2
    assert cli.main(["runs", "--limit", "1"]) == 0 and len(capsys.readouterr().out.splitlines()) == 1
    assert cli.main(["runs", "--limit", "0"]) == 0 and capsys.readouterr().out == ""
    assert cli.main(["runs", "--limit", "0", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []
    assert cli.main(["runs", "--limit", "-1"]) == 2 and "expected 0 or more" in capsys.readouterr().err
    with pytest.raises(ValueError):
        RunHistory().summaries(limit=-1)


def test_a_run_recorded_before_the_typed_protocol_still_opens(panel_home: Path) -> None:
    folder = panel_home / "runs" / "20260101-000000-benchmark-abcdef"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run_id": folder.name, "job": "benchmark", "status": "ok",
                                                 "job_id": "1-1-1", "started": 1.0, "client_pid": 1}))
    old_result = {k: v for k, v in BENCHMARK.items() if k != "column_titles"}  # as the benchmark job wrote it
    lines = [{"type": "job_started", "job_id": "1-1-1", "time": 1.0, "data": {"job": "benchmark", "params": {}}},
             {"type": "result", "job_id": "1-1-1", "time": 2.0, "data": {"result": old_result}},
             {"type": "job_finished", "job_id": "1-1-1", "time": 3.0, "data": {"status": "ok", "duration_s": 2.0}}]
    (folder / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = RunHistory()
    replay = JobRun("benchmark", {}, DeviceConfig(), None)
    replay.attach(history.get(folder.name).job_id or "")
    for event in history.events(folder.name):
        replay.feed(event)
    assert replay.outcome.status == "ok"
    out = format_result(replay.outcome)
    assert out[1].split() == ["device", "dtype", "size", "gflops", "seconds"] and len(out) == 8
