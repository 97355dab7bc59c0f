"""The benchmark cannot report more work than it did: linear in repeats, bounded by the CPU and NumPy."""

from __future__ import annotations

import pytest
from job_helpers import run_job
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.jobs.benchmark import NUMPY_ROW, best_per_size, check_rows, cpu_peak

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
    assert "above the CPU's peak 192" in too_fast[0]["check"] and "25.0× NumPy" in too_fast[0]["check"]
    assert any(flag.startswith("/CPU:1 float32 512: 5000.0 GFLOP/s") for flag in flags)
    assert any(flag.startswith("NumPy 512") for flag in flags)  # NumPy above the peak: the peak is wrong

    merged_repeats = rows(100.0, 20.0)  # 5× NumPy, yet below the peak: what merged matmuls looked like
    check_rows(merged_repeats, peak)
    assert "5.0× NumPy" in merged_repeats[0]["check"]


def test_best_per_size_names_the_fastest_device_and_its_ratio() -> None:
    table = rows(100.0, 80.0)
    check_rows(table, cpu_peak(HASWELL, cores=2, max_khz=3_000_000))
    (best,) = best_per_size(table)
    assert best["device"] == "/GPU:0" and best["numpy_gflops"] == 80.0 and best["vs_numpy"] == 625.0


def test_time_grows_with_repeats_and_figures_are_plausible() -> None:
    # 1024: large enough that the fixed cost of a call (launch, fetch, thread wake-up) is small beside one matmul
    params = {"sizes": "1024", "dtypes": "float32", "devices": "/CPU:0"}
    config = DeviceConfig(log_placement=False)
    one, error, _ = run_job(config, "benchmark", {**params, "repeats": 1})
    assert error is None, error
    ten, error, _ = run_job(config, "benchmark", {**params, "repeats": 10})
    assert error is None, error

    def tf_row(result: dict) -> dict:
        (row,) = [r for r in result["rows"] if r["device"] == "/CPU:0"]
        return row

    # merged matmuls made 10 repeats cost about as much as one (ratio ≈ 1); each really runs now. Not 10×:
    # beside other work (a second test worker, a busy CI machine) a short run's best time is the most inflated.
    assert tf_row(ten)["seconds"] >= 3 * tf_row(one)["seconds"], (tf_row(one), tf_row(ten))
    row = tf_row(ten)
    assert row["gflops"] <= ten["peak"]["cpu_gflops"]["float32"]
    assert 0.3 <= row["vs_numpy"] <= 3.0, ten["rows"]
    assert row["check"] == "ok" and ten["flags"] == []
    assert ten["best"][0]["size"] == 1024 and any(n.startswith("CPU peak") for n in ten["notes"])
