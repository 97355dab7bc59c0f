"""The benchmark cannot report more work than it did: linear in repeats, bounded by the CPU and NumPy."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from job_helpers import run_job
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.config import DeviceConfig, Kind
from tf_device_panel.core.runproc.jobs.benchmark import (
    MAX_TRIALS,
    NUMPY_CEILING,
    NUMPY_ROW,
    SETTLE_S,
    TF32_LABEL,
    GpuPeak,
    best_per_size,
    check_rows,
    cpu_peak,
    timed_turns,
    uses_tf32,
)

ZEN4 = "processor\t: 0\ncpu MHz\t\t: 2596.144\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16\n"
HASWELL = "cpu MHz\t\t: 2300.000\nflags\t\t: fpu sse4_2 avx avx2 fma\n"


def test_cpu_peak_is_cores_times_lanes_times_fma_times_clock() -> None:
    peak = cpu_peak(HASWELL, cores=4, max_khz=3_500_000)
    assert peak.gflops("float32") == pytest.approx(4 * 8 * 2 * 2 * 3.5)
    assert peak.gflops("float64") == pytest.approx(peak.gflops("float32") / 2)
    assert peak.gflops("bfloat16") == pytest.approx(peak.gflops("float32"))  # no native bf16 math
    assert "AVX2" in peak.basis() and "maximum clock" in peak.basis()


def test_cpu_peak_without_a_max_clock_allows_for_turbo() -> None:
    peak = cpu_peak(ZEN4, cores=2, max_khz=None)
    assert peak.lanes == 16 and peak.clock_ghz == pytest.approx(2.596144 * 1.5)
    assert peak.gflops("bfloat16") == pytest.approx(2 * peak.gflops("float32"))
    assert "reported clock 2.60 GHz" in peak.basis()


def rows(tf_gflops: float, numpy_gflops: float, dtype: str = "float32") -> list[dict]:
    return [{"device": "/CPU:1", "dtype": dtype, "size": 512, "gflops": tf_gflops, "seconds": 0.1},
            {"device": "/GPU:0", "dtype": dtype, "size": 512, "gflops": 50_000.0, "seconds": 0.1},
            {"device": NUMPY_ROW, "dtype": "float32", "size": 512, "gflops": numpy_gflops, "seconds": 0.1}]


def test_plausible_figures_pass_and_impossible_ones_are_flagged() -> None:
    peak = cpu_peak(HASWELL, cores=2, max_khz=3_000_000)  # 192 GFLOP/s float32
    ok = rows(100.0, 80.0)
    assert check_rows(ok, peak) == [] and ok[0]["check"] == "ok" and ok[0]["vs_numpy"] == pytest.approx(1.25)
    assert ok[1]["check"] == "ok"  # GPU figures are not held to the CPU's peak

    too_fast = rows(5000.0, 200.0)
    flags = check_rows(too_fast, peak)
    assert too_fast[0]["check"] == "impossible"  # one word in the table, the reasons beside it and in the flags
    assert "above the CPU's peak 192" in too_fast[0]["check_why"] and "25.0× NumPy" in too_fast[0]["check_why"]
    assert any(flag.startswith("/CPU:1 float32 512: 5000.0 GFLOP/s") for flag in flags)
    assert any(flag.startswith("NumPy 512") for flag in flags)  # NumPy above the peak: the peak is wrong

    merged_repeats = rows(100.0, 20.0)  # 5× NumPy, yet below the peak: what merged matmuls looked like
    check_rows(merged_repeats, peak)
    assert merged_repeats[0]["check"] == "unlikely" and "5.0× NumPy" in merged_repeats[0]["check_why"]


def test_best_per_size_names_the_fastest_device_and_its_ratio() -> None:
    table = rows(100.0, 80.0)
    check_rows(table, cpu_peak(HASWELL, cores=2, max_khz=3_000_000))
    (best,) = best_per_size(table)
    assert best["device"] == "/GPU:0" and best["numpy_gflops"] == 80.0 and best["vs_numpy"] == 625.0


def test_each_timed_repeat_is_one_more_matmul_on_the_product_before() -> None:
    # What the timing counts, checked without a clock: merged matmuls once made 10 repeats cost about as much as
    # one. Multiplying by 2·I doubles every element, so the sum after n repeats is 2ⁿ times a's (exactly, in
    # float32): a repeat merged, skipped or run on `a` instead of the product before gives another figure.
    # (This test once held TensorFlow's speed within 0.3–3× NumPy's: a busy machine read 3.1–4.0. A ratio of
    # speeds is the benchmark's to show, benchmarks/'s to measure, not a test's to assert.)
    import numpy as np
    import tensorflow as tf
    from tf_device_panel.core.runproc.jobs.benchmark import matmul_chain

    chain = matmul_chain(tf)
    a = np.random.default_rng(0).integers(0, 8, (64, 64)).astype(np.float32)
    doubling = 2 * np.eye(64, dtype=np.float32)
    for count in (1, 2, 10):
        assert float(chain(tf.constant(a), tf.constant(doubling), tf.constant(count))) == a.sum() * 2**count


def test_every_repeat_is_counted_in_the_figures() -> None:
    params = {"sizes": "256", "dtypes": "float32", "devices": "/CPU:0"}
    config = DeviceConfig(log_placement=False)
    for repeats in (1, 10):
        result, error, _ = run_job(config, "benchmark", {**params, "repeats": repeats})
        assert error is None, error
        assert result["repeats"] == repeats
        (row,) = [r for r in result["rows"] if r["device"] == "/CPU:0"]
        (numpy_row,) = [r for r in result["rows"] if r["device"] == NUMPY_ROW]
        for each in (row, numpy_row):  # 2·n³ flops per matmul, `repeats` of them, in the best trial's seconds
            assert each["gflops"] == pytest.approx(2 * 256**3 * repeats / each["seconds"] / 1e9)
        # Load only ever slows a run down, so no figure can pass the CPU's peak, however busy the machine.
        assert row["gflops"] <= result["peak"]["cpu_gflops"]["float32"]
        assert "impossible" not in row["check"], row
        assert result["best"][0]["size"] == 256 and any(n.startswith("CPU peak") for n in result["notes"])


# -- GPU figures measured on the H100 (tests/fixtures/h100/benchmark-rows.json, gpu.json) ------------------

FIXTURES = Path(__file__).parent / "fixtures" / "h100"


def h100() -> GpuPeak:
    spec = json.loads((FIXTURES / "gpu.json").read_text())
    gpu = spec["not_recorded_from_specification"]
    return GpuPeak(spec["nvml"]["name"], gpu["sm_count"], gpu["max_sm_clock_mhz"], spec["nvml"]["compute_capability"])


def h100_rows(tf32: bool) -> list[dict]:
    """The H100's table as the job now builds it: float32 on the GPU labelled TF32 when TF32 was on."""
    rows = []
    for row in json.loads((FIXTURES / "benchmark-rows.json").read_text())["rows"]:
        row = {k: v for k, v in row.items() if not k.endswith("_printed")}
        if row["device"] == "/GPU:0" and row["dtype"] == "float32" and uses_tf32("9.0", tf32):
            row.update(dtype=TF32_LABEL, math="tf32")
        rows.append(row)
    return rows


def test_the_h100s_peaks_from_its_sms_clock_and_architecture() -> None:
    peak = h100()
    assert peak.gflops("float32") == pytest.approx(66_908, rel=1e-3)  # the H100 SXM's FP32 (non-tensor) figure
    assert peak.gflops("tf32") == pytest.approx(535_265, rel=1e-3)
    assert peak.gflops("float16") == pytest.approx(1_070_530, rel=1e-3)
    assert "132 SMs × 2048 tf32 FLOP/clock × 1980 MHz (compute capability 9.0)" in peak.basis("tf32")
    assert not uses_tf32("7.5", True) and not uses_tf32("9.0", False) and uses_tf32("8.0", True)


def test_the_h100s_float32_figure_is_tf32_and_within_the_tf32_peak() -> None:
    rows = h100_rows(tf32=True)
    flags = check_rows(rows, cpu_peak(ZEN4, cores=16, max_khz=None), {"/GPU:0": h100()})
    gpu32 = [r for r in rows if r["device"] == "/GPU:0" and r.get("math") == "tf32"]
    assert [r["dtype"] for r in gpu32] == [TF32_LABEL] * 3
    assert max(r["gflops"] for r in gpu32) == 376_621.0  # 5.6× the FP32 peak: only TF32 explains it
    assert all(r["check"] == "ok" for r in rows if r["device"] == "/GPU:0"), [r["check"] for r in rows]
    assert not [f for f in flags if "/GPU:0" in f]


def test_the_same_figure_as_plain_float32_is_flagged_impossible() -> None:
    rows = h100_rows(tf32=False)  # had TF32 been off, 376,621 GFLOP/s could not have been float32
    flags = check_rows(rows, cpu_peak(ZEN4, cores=16, max_khz=None), {"/GPU:0": h100()})
    (row,) = [r for r in rows if r["device"] == "/GPU:0" and r["dtype"] == "float32" and r["size"] == 8192]
    assert row["check"] == "impossible" and row["check_why"] == "above the GPU's float32 peak 66908 GFLOP/s"
    assert any(f.startswith("/GPU:0 float32 8192: 376621.0 GFLOP/s is above the GPU's float32 peak") and
               "no device computes faster than its peak" in f for f in flags)


def test_a_high_ratio_to_numpy_is_worded_as_unlikely_not_impossible() -> None:
    peak = cpu_peak(HASWELL, cores=2, max_khz=3_000_000)  # 192 GFLOP/s float32
    table = rows(100.0, 20.0)  # NumPy read low (a busy machine)
    (flag,) = check_rows(table, peak)
    assert table[0]["check"] == "unlikely" and table[0]["check_why"] == "5.0× NumPy timed beside it (over 4×)"
    assert "unlikely rather than impossible" in flag and "cannot be right" not in flag


def test_the_ratio_and_the_best_line_divide_by_the_numpy_rows_own_figure() -> None:
    # Once each CPU row divided by the NumPy trials beside it while the NumPy row showed the best of all turns:
    # "100.37× NumPy (65.5)" where 83.6 / 65.5 = 1.28. One NumPy figure now serves the row, the ratio and the line.
    table = [{"device": "/CPU:0", "dtype": "float32", "size": 512, "gflops": 83.6, "seconds": 0.1,
              "numpy_gflops": 0.833},  # what a run before this fix stored: NumPy's trials beside this row
             {"device": NUMPY_ROW, "dtype": "float32", "size": 512, "gflops": 65.5, "seconds": 0.1}]
    check_rows(table, cpu_peak(HASWELL, cores=2, max_khz=3_000_000))
    assert table[0]["vs_numpy"] == pytest.approx(83.6 / 65.5) and table[0]["check"] == "ok"
    (best,) = best_per_size(table)
    assert best["vs_numpy"] * best["numpy_gflops"] == pytest.approx(best["gflops"])


def test_each_turn_waits_for_the_threads_of_the_turn_before_to_go_idle() -> None:
    events: list[str] = []
    ctx = SimpleNamespace(check_cancelled=lambda: None)
    timed_turns(ctx, [lambda: events.append("tf"), lambda: events.append("numpy")],
                settle=lambda seconds: events.append(f"pause {seconds}"))
    assert events[:4] == [f"pause {SETTLE_S}", "tf", f"pause {SETTLE_S}", "numpy"]
    assert events.count("numpy") == events.count("tf") == events.count(f"pause {SETTLE_S}") / 2
    alone: list[str] = []
    timed_turns(ctx, [lambda: alone.append("gpu")], settle=lambda seconds: alone.append("pause"))
    assert "pause" not in alone  # a run on its own has no one to wait for


@pytest.mark.parametrize("size", [256, 512])
def test_small_sizes_are_compared_with_the_numpy_row_shown(size: int) -> None:
    # Small matmuls are where NumPy straight after TF's matmuls read lowest (TF's thread pool still spinning).
    # Whether a figure gets flagged is a matter of speed, so of the machine's load (beside two CPU burners
    # NumPy's BLAS threads read 60× slow): that is the benchmark's to show, not a test's to assert. What a
    # test can hold is that the ratio is the one the table shows and both had as many turns.
    result, error, _ = run_job(DeviceConfig(log_placement=False), "benchmark",
                               {"sizes": str(size), "dtypes": "float32", "devices": "/CPU:0", "repeats": 5})
    assert error is None, error
    (tf_row,) = [r for r in result["rows"] if r["device"] == "/CPU:0"]
    (numpy_row,) = [r for r in result["rows"] if r["device"] == NUMPY_ROW]
    assert tf_row["vs_numpy"] == pytest.approx(tf_row["gflops"] / numpy_row["gflops"])
    assert tf_row["trials"] == numpy_row["trials"]  # as many trials each, in turns
    if tf_row["vs_numpy"] > NUMPY_CEILING:  # a loaded machine: then the row says so, as the flags do
        assert tf_row["check"] != "ok" and any("NumPy" in flag for flag in result["flags"]), result


def test_tf_and_numpy_trials_take_turns_and_are_as_many() -> None:
    order: list[str] = []
    ctx = SimpleNamespace(check_cancelled=lambda: None)
    (tf_best, numpy_best), trials = timed_turns(ctx, [lambda: order.append("tf"), lambda: order.append("numpy")])
    assert order == ["tf", "numpy"] * trials and trials == MAX_TRIALS  # instant runs: the most trials
    assert tf_best >= 0 and numpy_best >= 0


def test_the_benchmark_declares_tf32_on_by_default() -> None:
    (param,) = [p for p in JOBS["benchmark"].params if p.name == "tf32"]
    assert param.default is True and param.kind is Kind.TOGGLE


def test_nvml_gives_the_sm_count_and_maximum_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_nvml import FakeGpus
    from tf_device_panel.core.devices.nvml import ComputeUnits, Nvml

    FakeGpus(count=1).install(monkeypatch)  # an L4: 7424 CUDA cores, 2040 MHz, compute capability 8.9
    units, why = Nvml().compute_units(0)
    assert units == ComputeUnits(58, 2040, "8.9") and why == ""
    l4 = GpuPeak("L4", units.sm_count, units.max_sm_clock_mhz, units.compute_capability)
    assert l4.gflops("float16") == pytest.approx(121_160, rel=1e-3)  # NVIDIA's L4 dense FP16 figure: 121 TFLOP/s


def test_a_gpu_is_matched_to_nvml_by_the_pci_bus_id_cuda_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    from tf_device_panel.core.runproc.jobs.benchmark import nvml_index_of

    nvml_gpus = [{"index": 0, "pci_bus_id": "00000000:00:06.0"}, {"index": 1, "pci_bus_id": "00000000:00:07.0"}]

    class Driver:
        def cuInit(self, flags: int) -> int:
            return 0

        def cuDeviceGet(self, device: object, index: int) -> int:
            device._obj.value = index  # type: ignore[attr-defined]
            return 0

        def cuDeviceGetPCIBusId(self, bus: ctypes.Array, size: int, device: ctypes.c_int) -> int:
            bus.value = [b"0000:00:07.0", b"0000:00:06.0"][device.value]  # CUDA's order is not NVML's here
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Driver())
    assert [nvml_index_of(i, nvml_gpus, [0, 1]) for i in (0, 1)] == [1, 0]

    def no_driver(name: str) -> None:
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    assert nvml_index_of(0, nvml_gpus, [1, 0]) == 1  # then CUDA_VISIBLE_DEVICES' mapping
