"""scripts/gpu_acceptance.py judges what it measures on a GPU host: here against the H100's recorded figures
(tests/fixtures/h100), so CI checks the judging without a GPU; the whole run itself is a `gpu` test."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "h100"
GPU = json.loads((FIXTURES / "gpu.json").read_text())
NVML_TOTAL, CUDA_TOTAL = GPU["nvml"]["memory_total_mib"], GPU["cuda_total_mib"]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "scripts" / "gpu_acceptance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module
    spec.loader.exec_module(module)
    return module


acceptance = load_script()


def recorded_devices() -> dict[str, str]:
    text = (FIXTURES / "devices-six-profiles.txt").read_text()
    parts = re.split(r"^=== devices --config (\w+)\n", text, flags=re.MULTILINE)
    recorded_as = {"virtual": "split"}  # the H100 run called the 2048+4096 profile "virtual"
    return {recorded_as.get(name, name): body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_profile_gave_the_devices_and_limits_it_implies_on_the_h100() -> None:
    shown = recorded_devices()
    assert set(shown) == set(acceptance.PROFILES)
    for profile, text in shown.items():
        result = acceptance.check_devices(profile, text, gpu_count=1, cuda_total_mib=CUDA_TOTAL)
        assert result.passed, (profile, result.detail)
    assert acceptance.check_devices("fraction", shown["fraction"], 1, CUDA_TOTAL).figures == \
        "/CPU:0, /GPU:0 20269 MiB"


def test_a_device_list_that_misses_a_limit_fails() -> None:
    wrong = recorded_devices()["split"].replace("limit 4096 MiB", "")
    result = acceptance.check_devices("split", wrong, gpu_count=1, cuda_total_mib=CUDA_TOTAL)
    assert result.passed is False and "('/GPU:1', 4096)" in result.detail[0]


@pytest.mark.parametrize("profile", ["default", "growth", "split", "fraction"])
def test_the_memory_each_profile_held_on_the_h100_is_what_it_implies(profile: str) -> None:
    recorded = GPU["process_memory_after_first_op_mib"]
    held = {"default": recorded["default"], "growth": recorded["memory_growth"],
            "split": recorded["split_2048_4096"], "fraction": recorded["memory_fraction_0_25"]}[profile]
    result = acceptance.judge_memory(profile, held, NVML_TOTAL, CUDA_TOTAL)
    assert result.passed, result.figures


def test_memory_that_contradicts_the_profile_fails() -> None:
    assert not acceptance.judge_memory("growth", 79274, NVML_TOTAL, CUDA_TOTAL).passed  # growth ignored
    assert not acceptance.judge_memory("default", 522, NVML_TOTAL, CUDA_TOTAL).passed
    assert not acceptance.judge_memory("fraction", 79274, NVML_TOTAL, CUDA_TOTAL).passed  # limit not applied
    assert not acceptance.judge_memory("split", None, NVML_TOTAL, CUDA_TOTAL).passed
    assert acceptance.judge_memory("hidden", 4, NVML_TOTAL, CUDA_TOTAL).passed


def h100_benchmark(tf32_labelled: bool) -> dict:
    from tf_device_panel.core.runproc.jobs.benchmark import TF32_LABEL, GpuPeak, check_rows, cpu_peak

    spec = GPU["not_recorded_from_specification"]
    peak = GpuPeak(GPU["nvml"]["name"], spec["sm_count"], spec["max_sm_clock_mhz"], "9.0")
    rows = []
    for row in json.loads((FIXTURES / "benchmark-rows.json").read_text())["rows"]:
        row = {k: v for k, v in row.items() if not k.endswith("_printed")}
        if tf32_labelled and row["device"] == "/GPU:0" and row["dtype"] == "float32":
            row.update(dtype=TF32_LABEL, math="tf32")
        rows.append(row)
    check_rows(rows, cpu_peak("flags\t: avx512f\n", 16, 3_150_000), {"/GPU:0": peak})
    return {"rows": rows, "peak": {"gpu_gflops": {"/GPU:0": {m: peak.gflops(m) for m in ("float32", "tf32",
                                                                                          "float16", "bfloat16")}}},
            "notes": []}


def test_the_h100_benchmark_passes_when_tf32_is_said() -> None:
    result = acceptance.judge_benchmark(h100_benchmark(tf32_labelled=True), "9.0", tf32=True)
    assert result.passed, result.detail
    assert "float32 (TF32) 8192: 376,621 GFLOP/s (70% of peak 535,265)" in result.figures
    assert "float16 8192: 652,586 GFLOP/s (61% of peak 1,070,531)" in result.figures


def test_the_h100_benchmark_as_it_was_recorded_fails() -> None:
    result = acceptance.judge_benchmark(h100_benchmark(tf32_labelled=False), "9.0", tf32=True)
    assert result.passed is False
    assert "float32 rows read ['float32'], expected 'float32 (TF32)'" in result.detail
    assert any("impossible: above the GPU's float32 peak 66908" in d for d in result.detail)


def test_the_exporters_page_during_the_h100_run_has_the_allocator_figures() -> None:
    lines = []
    for line in (FIXTURES / "exporter-during-run.txt").read_text().splitlines():
        match = re.match(r"^(tfdp_\w+) (\{.*\}) (\S+)$", line)
        if match:  # the recorded scrape printed (name, labels dict, value): back to Prometheus' text
            labels = ast.literal_eval(match.group(2))
            lines.append(match.group(1) + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "} "
                         + match.group(3))
    result = acceptance.judge_exporter("\n".join(lines))
    assert result.passed and result.figures == "/GPU:0 allocator current 134,219,520 bytes"
    assert not acceptance.judge_exporter("\n".join(lines[:1])).passed


def test_jobs_are_judged_by_status_gpu_placements_and_result() -> None:
    # the mirrored fit over the H100's split, as recorded: placements 2053 (/CPU:0 546, /GPU:0 937, /GPU:1 570)
    placements = [{"short_device": device} for device, n in (("/CPU:0", 546), ("/GPU:0", 937), ("/GPU:1", 570))
                  for _ in range(n)]
    fit = {"status": "ok", "duration_s": 4.32, "placements": placements,
           "result": {"replicas_in_sync": 2, "cross_device_ops": "HierarchicalCopyAllReduce"}}
    result = acceptance.judge_job("fit", fit, acceptance.fit_expect(2, "HierarchicalCopyAllReduce"))
    assert result.passed and result.figures == "ok in 4.32 s; ops: /CPU:0 546, /GPU:0 937, /GPU:1 570"
    nccl = {"status": "error", "placements": placements,
            "error": {"type": "InternalError", "message": "NCCL: invalid usage"}}  # the default, before auto
    assert not acceptance.judge_job("fit", nccl).passed
    on_cpu = {**fit, "placements": [{"short_device": "/CPU:0"}]}
    assert acceptance.judge_job("fit", on_cpu).detail == ["no op was placed on a GPU"]


def test_cudas_total_is_checked_against_nvmls_less_its_reserve() -> None:
    h100 = {"nvml_total_mib": NVML_TOTAL, "reserved_mib": 480, "cuda_total_mib": CUDA_TOTAL}
    result = acceptance.judge_totals(h100)
    assert result.passed and result.figures == "NVML 81559 - reserve 480 = 81079 MiB; CUDA says 81079 MiB"
    assert acceptance.judge_totals({**h100, "reserved_mib": 0}).passed is False
    assert acceptance.judge_totals({**h100, "reserved_mib": None}).passed is None


def test_the_doctor_and_the_report() -> None:
    recorded = json.loads((FIXTURES / "doctor-without-tensorflow.json").read_text())
    doctor = acceptance.judge_doctor(recorded)
    assert doctor.passed is False and doctor.figures == "6 pass, 1 warn, 2 fail, 4 skipped"
    facts = {"gpu": GPU["nvml"]["name"], "driver": "580.159.04", "nvml_total_mib": NVML_TOTAL,
             "cuda_total_mib": CUDA_TOTAL, "reserved_mib": 480, "compute_capability": "9.0", "sm_count": 132,
             "max_sm_clock_mhz": 1980, "tf_version": "2.21.0", "python": "3.12.3"}
    memory = acceptance.judge_memory("growth", 522, NVML_TOTAL, CUDA_TOTAL)
    report = acceptance.to_markdown([memory, doctor], facts, "2026-11-24 07:00 UTC")
    assert report.startswith("# GPU acceptance — NVIDIA H100 80GB HBM3\n")
    assert "- Memory: NVML 81559 MiB, CUDA 81079 MiB (the driver keeps 480 MiB); 132 SMs at up to 1980 MHz" in report
    assert "| ✔ | growth | 522 MiB held (expected 1–2,048) |" in report
    assert "- Result: 1 passed, 1 failed, 0 skipped" in report and "- doctor: TensorFlow imports" in report


@pytest.mark.gpu
def test_the_whole_acceptance_run_on_this_gpu(tmp_path: Path) -> None:
    from tf_device_panel.core.devices.nvml import Nvml

    nvml = Nvml()
    if not nvml.init() or not nvml.gpus():
        pytest.skip(f"needs an NVIDIA GPU with TensorFlow set up (shared/gpu-host): {nvml.message or 'no GPU'}")
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed here (see shared/gpu-host/README.md)")
    report = tmp_path / "gpu-acceptance.md"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_acceptance.py"), "--quick", "--report",
                           str(report)], capture_output=True, text=True, timeout=1800)
    print(report.read_text())
    assert done.returncode == 0, done.stdout[-3000:]


# -- why HierarchicalCopyAllReduce, the cluster and script jobs, CUDA's order, the recorded fixtures ----------

NCCL = ("2.27.7", "/tmp/cudalib/libnccl.so.2 (LD_LIBRARY_PATH)")  # real NCCL on the H100 host (prepare.sh --nccl)


def split_fit(note: str) -> dict:
    placements = [{"short_device": device} for device in ("/GPU:0", "/GPU:1")]
    return {"status": "ok", "duration_s": 4.32, "placements": placements,
            "result": {"replicas_in_sync": 2, "cross_device_ops": "HierarchicalCopyAllReduce", "note": note}}


def test_the_split_check_verifies_why_hierarchical_copy_was_chosen_and_reports_nccls_version() -> None:
    from tf_device_panel.core.runproc.jobs.training import choose_cross_device_ops

    names = ["/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1"]
    ops, note = choose_cross_device_ops("auto", names, {"/GPU:0": 0, "/GPU:1": 0}, lambda: NCCL)
    assert ops == "HierarchicalCopyAllReduce"
    result = acceptance.judge_split_choice("fit over a split", split_fit(note), NCCL)
    assert result.passed, result.detail
    assert "NCCL 2.27.7 loads (/tmp/cudalib/libnccl.so.2 (LD_LIBRARY_PATH))" in result.figures
    assert "split from one physical GPU (GPU 0)" in result.figures

    no_nccl = acceptance.judge_split_choice("fit over a split", split_fit(note), (None, "libnccl.so.2 not found"))
    assert no_nccl.passed is False and "prepare.sh --nccl" in no_nccl.detail[0]
    _, other_reason = choose_cross_device_ops("auto", names, {"/GPU:0": 0, "/GPU:1": 1},
                                              lambda: (None, "libnccl.so.2 not found"))
    wrong = acceptance.judge_split_choice("fit over a split", split_fit(other_reason), NCCL)
    assert wrong.passed is False and "another reason than the shared GPU" in wrong.detail[0]


def test_cluster_runs_are_judged_by_their_workers_losses_and_gpus() -> None:
    result = {"strategy": "MultiWorkerMirroredStrategy", "workers": 2, "losses_agree": True,
              "losses": {"worker:0": [0.5], "worker:1": [0.5]},
              "task_devices": {"worker:0": ["/job:worker/replica:0/task:0/device:GPU:0"], "worker:1": []}}
    ok = acceptance.judge_cluster("multi-worker", {"status": "ok", "duration_s": 9.0, "result": result}, 2)
    assert ok.passed and "task GPUs /job:worker/replica:0/task:0/device:GPU:0" in ok.figures
    disagree = {**result, "losses_agree": False}
    assert not acceptance.judge_cluster("multi-worker", {"status": "ok", "result": disagree}, 2).passed
    on_cpu = {**result, "task_devices": {"worker:0": ["/job:worker/replica:0/task:0/device:CPU:0"]}}
    assert acceptance.judge_cluster("multi-worker", {"status": "ok", "result": on_cpu}, 2).detail == [
        "no op was placed on a GPU and no task listed one"]


def test_the_run_covers_the_cluster_and_script_jobs_and_why_nccl_was_avoided(monkeypatch, tmp_path) -> None:
    from tf_device_panel.core.devices import cudalibs

    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_run_json(job: str, profile: Path, *params: str, timeout: float = 600) -> dict:
        calls.append((job, params))
        return {"status": "ok", "result": {}, "placements": []}

    facts = {"gpu": "NVIDIA H100 80GB HBM3", "nvml_total_mib": NVML_TOTAL, "cuda_total_mib": CUDA_TOTAL,
             "reserved_mib": 480, "sm_count": 132, "max_sm_clock_mhz": 1980, "compute_capability": "9.0",
             "gpu_count": 1}
    monkeypatch.setattr(acceptance, "gpu_facts", lambda: dict(facts))
    monkeypatch.setattr(acceptance, "run_json", fake_run_json)
    monkeypatch.setattr(acceptance, "panel", lambda *a, **k: subprocess.CompletedProcess(a, 0, "{}", ""))
    monkeypatch.setattr(acceptance, "held_by_run", lambda *a, **k: (522, ""))
    monkeypatch.setattr(acceptance, "exporter_during_run", lambda profile: acceptance.Result("exporter", "x", True, ""))
    monkeypatch.setattr(cudalibs, "nccl_version", lambda: NCCL)
    monkeypatch.setattr(acceptance, "cancel_check", lambda: acceptance.Result("answers", "cancel", True, ""))
    reported: list[int] = []
    results, seen = acceptance.run_all(quick=True, report=lambda results, facts: reported.append(len(results)))
    jobs = [job for job, _ in calls]
    assert {"multi-worker", "parameter-server", "script", "fit-batch", "fit"} <= set(jobs), jobs
    assert len(reported) == len(acceptance.SECTIONS) and reported == sorted(reported), reported
    assert seen["nccl"] == "2.27.7"
    split_checks = [r for r in results if "over a split (auto" in r.name]
    assert len(split_checks) == 2 and all("NCCL 2.27.7 loads" in r.figures for r in split_checks)


def test_gpu_zero_is_read_in_pci_order(monkeypatch) -> None:
    from fake_nvml import FakeGpus
    from tf_device_panel.core.devices import gpu_facts

    FakeGpus(count=2).install(monkeypatch)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    order_when_read: list[str | None] = []
    monkeypatch.setattr(gpu_facts, "gpu_total_mib", lambda index: order_when_read.append(
        __import__("os").environ.get("CUDA_DEVICE_ORDER")) or 81079)
    facts = acceptance.gpu_facts()
    assert order_when_read == ["PCI_BUS_ID"] and facts["cuda_total_mib"] == 81079  # CUDA's GPU 0 is NVML's


def test_record_writes_fixtures_in_the_shape_the_tests_read(tmp_path) -> None:
    facts = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "tf_version": "2.21.0",
             "nvml_total_mib": NVML_TOTAL, "reserved_mib": 480, "cuda_total_mib": CUDA_TOTAL,
             "compute_capability": "9.0", "sm_count": 132, "max_sm_clock_mhz": 1980, "nccl": "2.27.7",
             "benchmark_rows": [{"device": "/GPU:0", "dtype": "float32 (TF32)", "size": 8192, "gflops": 376621.0}]}
    results = [acceptance.judge_memory("growth", 522, NVML_TOTAL, CUDA_TOTAL),
               acceptance.judge_memory("split", 2570, NVML_TOTAL, CUDA_TOTAL)]
    files = acceptance.fixture_files(facts, results, "2026-11-24 07:00 UTC")
    gpu = files["gpu.json"]
    assert gpu["sm_count"] == 132 and gpu["max_sm_clock_mhz"] == 1980 and gpu["cuda_total_mib"] == CUDA_TOTAL
    assert gpu["process_memory_after_first_op_mib"] == {"growth": 522, "split": 2570}
    assert gpu["source"].startswith("scripts/gpu_acceptance.py --record on 2026-11-24 07:00 UTC")
    assert files["benchmark-rows.json"]["rows"][0]["gflops"] == 376621.0


def test_a_forked_run_is_judged_by_what_its_late_variable_implies() -> None:
    judge = acceptance.judge_zygote_run
    assert judge("hidden", True, 0, None, [], want_gpus=0).passed
    assert not judge("hidden", True, 1, 530, [], want_gpus=0).passed
    assert not judge("by hand", False, 1, 530, [], want_gpus=1).passed
    assert judge("growth", True, 1, 600, [], want_gpus=1, max_held_mib=2048).passed
    assert not judge("growth", True, 1, 79_000, [], want_gpus=1, max_held_mib=2048).passed
    line = "I0000 gpu_cudamallocasync_allocator.cc:123] Using CUDA malloc Async allocator for GPU: 0"
    assert judge("async", True, 1, 600, [line], want_gpus=1, want_line="CUDA malloc Async").passed
    assert not judge("async", True, 1, 600, ["BFC"], want_gpus=1, want_line="CUDA malloc Async").passed
    assert not judge("silent", True, None, None, []).passed


def test_fit_batch_is_judged_by_its_runs_from_outside() -> None:
    assert acceptance.judge_fit_batch(439, ["held"] * 3, ["ran out", "held", "ran out"], "").passed
    assert not acceptance.judge_fit_batch(439, ["held", "ran out", "held"], ["ran out"] * 3, "").passed
    too_low = acceptance.judge_fit_batch(439, ["held"] * 3, ["held"] * 3, "")
    assert not too_low.passed and "over 20% under" in too_low.detail[0]
    assert not acceptance.judge_fit_batch(None, [], [], "").passed
    crashed = acceptance.outside_outcome({"status": "crashed", "error": {"message": "SIGSEGV"}})
    assert not acceptance.judge_fit_batch(439, ["held"] * 3, ["ran out", crashed, "ran out"], "").passed
    assert acceptance.outside_outcome({"status": "error", "error": {"message": "OOM when allocating tensor"}}) \
        == "ran out"
    assert acceptance.outside_outcome({"status": "crashed", "error": {"message": "SIGSEGV"}}).startswith("failed")
    assert acceptance.outside_outcome({"status": "crashed", "oom": {"request_bytes": 1}}) == "ran out"


def test_share_is_judged_by_its_seats_side_by_side() -> None:
    seats = [{"seat": i, "status": "held", "peak_bytes": 900 * 2**20} for i in (1, 2)]
    report = {"verified": True, "seats": seats, "seat_mib": 1000, "reserved_mib": 536, "batch": 32,
              "most": {"work_peak_mib": 880, "process_mib": 522, "above": "3 seats: seat 3 ran out"}}
    assert acceptance.judge_share(report, 0).passed
    broken = {**report, "seats": [*seats, {"seat": 3, "status": "ran out", "peak_bytes": None}]}
    assert not acceptance.judge_share(broken, 0).passed
    assert not acceptance.judge_share({"error": {"message": "no GPU"}}, 2).passed


H200 = json.loads((ROOT / "tests" / "fixtures" / "h200" / "gpu.json").read_text())


@pytest.mark.parametrize("profile", ["default", "growth", "split", "fraction", "hidden"])
def test_the_h200s_readings_written_by_record_are_judged_as_they_were_there(profile: str) -> None:
    # Written by this script's --record on an H200 (2026-11-28): the shape fixture_files gives, read back.
    held = H200["process_memory_after_first_op_mib"][profile]
    result = acceptance.judge_memory(profile, held, H200["nvml"]["memory_total_mib"], H200["cuda_total_mib"])
    assert result.passed, result
    # the same CUDA context as on the H100: memory growth after one op held 522 MiB on both
    assert H200["process_memory_after_first_op_mib"]["growth"] == 522
    assert acceptance.judge_totals({"nvml_total_mib": H200["nvml"]["memory_total_mib"],
                                    "reserved_mib": H200["nvml"]["reserved_mib"],
                                    "cuda_total_mib": H200["cuda_total_mib"]}).passed
