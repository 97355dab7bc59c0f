"""Matmul throughput per logical device, size and dtype, with NumPy on the same CPU as a reference.

Every matmul counted is really computed: the timed matmuls form a dependent chain (each multiplies
the previous product) inside a `tf.while_loop`, so TensorFlow's graph optimizer can neither merge
repeats (it did, when they were independent copies of one matmul in an unrolled tf.function: N
repeats then "ran" N times faster) nor drop any. The whole final product is consumed and fetched,
which also waits for the device. Figures are checked against the CPU's physical peak and against
NumPy on the same CPU, and anything above either is flagged in the result.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_device_panel.core.jobs import split_devices
from tf_device_panel.core.jobs.context import JobContext
from tf_device_panel.core.jobs.devices import logical_devices, resolve_device
from tf_device_panel.core.placement import short_device_name
from tf_device_panel.core.results import TableResult

NUMPY_ROW = "NumPy (CPU)"
# Timings on a shared machine are noisy, and noise only ever slows a run down: each figure is the best
# of several trials, at least MIN_TRIALS and MIN_TIME_S when they are short, within MAX_TIME_S when long.
MIN_TRIALS, MAX_TRIALS = 3, 20
MIN_TIME_S, MAX_TIME_S = 0.25, 2.0
NUMPY_CEILING = 4.0             # no TF CPU kernel beats an optimised BLAS on the same CPU by this much
TURBO_ALLOWANCE = 1.5           # when only the nominal clock is known, the bound allows this much turbo
FMA_UNITS = 2                   # the most FMA pipes any x86/ARM core has per cycle
HALF_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class CpuPeak:
    """An upper bound on this CPU's matmul throughput: cores × SIMD lanes × FMA units × 2 flops × clock."""

    cores: int
    lanes: int              # float32 lanes of the widest vector unit
    isa: str
    clock_ghz: float
    clock_source: str
    half_factor: float      # how much faster float16/bfloat16 can be (native bf16 dot products, AMX)

    def gflops(self, dtype: str) -> float:
        base = self.cores * self.lanes * FMA_UNITS * 2 * self.clock_ghz
        if dtype == "float64":
            return base / 2
        if dtype in HALF_DTYPES:
            return base * self.half_factor
        return base

    def basis(self) -> str:
        return (f"{self.cores} cores × {self.lanes} float32 lanes ({self.isa}) × {FMA_UNITS} FMA units × 2 flops "
                f"× {self.clock_ghz:.2f} GHz ({self.clock_source})")


def cpu_peak(cpuinfo: str, cores: int, max_khz: int | None) -> CpuPeak:
    """The peak from /proc/cpuinfo's text, the CPUs this process may use and the max clock (kHz) if known."""
    flags_match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    flags = set(flags_match.group(1).split()) if flags_match else set()
    if "avx512f" in flags:
        lanes, isa = 16, "AVX-512"
    elif "avx" in flags or "avx2" in flags:
        lanes, isa = 8, "AVX2" if "avx2" in flags else "AVX"
    elif "sve" in flags:
        lanes, isa = 16, "SVE (up to 512-bit)"
    else:
        lanes, isa = 4, "SSE/NEON"
    half = 1.0
    if flags & {"amx_bf16", "amx_fp16"}:
        half = 1024 * 2 / (lanes * FMA_UNITS * 2)  # AMX: 1024 bf16 multiply-adds per cycle per core
    elif flags & {"avx512_bf16", "avx512_fp16", "bf16", "fphp"}:
        half = 2.0
    if max_khz:
        clock, source = max_khz / 1e6, "maximum clock"
    else:
        mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.MULTILINE)
        nominal = float(mhz.group(1)) / 1000 if mhz else 4.0
        what = "reported clock" if mhz else "clock unknown, 4 GHz assumed"
        clock, source = nominal * TURBO_ALLOWANCE, f"{what} {nominal:.2f} GHz × {TURBO_ALLOWANCE:g} for turbo"
    return CpuPeak(max(cores, 1), lanes, isa, clock, source, half)


def this_cpu_peak() -> CpuPeak:
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    max_khz = read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cpu_peak(read("/proc/cpuinfo"), cores, int(max_khz) if max_khz.isdigit() else None)


def gflops(size: int, repeats: int, seconds: float) -> float:
    return 2.0 * size**3 * repeats / seconds / 1e9


def check_rows(rows: list[dict[str, Any]], peak: CpuPeak) -> list[str]:
    """Fill each TF row's `vs_numpy` and `check`; return the flags raised, one line each."""
    numpy_by_size = {r["size"]: r["gflops"] for r in rows if r["device"] == NUMPY_ROW and r.get("gflops")}
    flags: list[str] = []
    for row in rows:
        if row["device"] == NUMPY_ROW:
            row.setdefault("vs_numpy", 1.0)
            row.setdefault("check", "ok" if row["gflops"] <= peak.gflops("float32") else "above CPU peak")
            if row["check"] != "ok":
                flags.append(f"NumPy {row['size']}: {row['gflops']:.1f} GFLOP/s is above the CPU's peak "
                             f"{peak.gflops('float32'):.0f}")
            continue
        value, reference = row.get("gflops"), numpy_by_size.get(row["size"])
        row["vs_numpy"] = value / reference if value is not None and reference else None
        if value is None:
            row["check"] = "unsupported"
            continue
        problems = []
        if "CPU:" in row["device"]:  # logical CPUs all share the one physical CPU and its peak
            limit = peak.gflops(row["dtype"])
            if value > limit:
                problems.append(f"above the CPU's peak {limit:.0f} GFLOP/s")
            if row["dtype"] in ("float32", "float64") and row["vs_numpy"] and row["vs_numpy"] > NUMPY_CEILING:
                problems.append(f"{row['vs_numpy']:.1f}× NumPy, above the {NUMPY_CEILING:g}× plausible")
        row["check"] = "; ".join(problems) or "ok"
        if problems:
            flags.append(f"{row['device']} {row['dtype']} {row['size']}: {value:.1f} GFLOP/s is "
                         + " and ".join(problems) + " — this figure cannot be right; please report it")
    return flags


def best_per_size(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each size, the fastest TF figure and how it compares with NumPy's."""
    best: list[dict[str, Any]] = []
    for size in sorted({r["size"] for r in rows}):
        tf_rows = [r for r in rows if r["size"] == size and r["device"] != NUMPY_ROW and r.get("gflops")]
        numpy_rows = [r for r in rows if r["size"] == size and r["device"] == NUMPY_ROW]
        if not tf_rows:
            continue
        top = max(tf_rows, key=lambda r: r["gflops"])
        best.append({"size": size, "device": top["device"], "dtype": top["dtype"], "gflops": top["gflops"],
                     "numpy_gflops": numpy_rows[0]["gflops"] if numpy_rows else None,
                     "vs_numpy": top.get("vs_numpy")})
    return best


def benchmark(ctx: JobContext, sizes: str = "256,512,1024", dtypes: str = "float32,float16,bfloat16",
              repeats: int = 5, devices: str = "") -> TableResult:
    import numpy as np
    import tensorflow as tf

    size_list = [int(s) for s in split_devices(sizes)]
    dtype_list = split_devices(dtypes)
    targets = [resolve_device(d) for d in split_devices(devices)] or list(logical_devices().values())
    total = len(targets) * len(size_list) * len(dtype_list) + len(size_list)
    rows: list[dict[str, Any]] = []
    done = 0

    @tf.function
    def chain(a: Any, b: Any, count: Any) -> Any:
        # Each matmul takes the previous product: none can be merged, skipped or run in parallel.
        _, product = tf.while_loop(lambda i, c: i < count, lambda i, c: (i + 1, tf.matmul(c, b)),
                                   (tf.constant(0), a))
        return tf.reduce_sum(tf.cast(product, tf.float32))  # consumes every element of the last product

    def timed(run: Any) -> tuple[float, int]:
        """The best timing of `run()` and how many trials it took; checks for cancellation between trials."""
        best, trials, spent = float("inf"), 0, 0.0
        while trials == 0 or (trials < MAX_TRIALS and spent < MAX_TIME_S
                              and (trials < MIN_TRIALS or spent < MIN_TIME_S)):
            ctx.check_cancelled()
            started = time.perf_counter()
            run()
            seconds = time.perf_counter() - started
            best, trials, spent = min(best, seconds), trials + 1, spent + seconds
        return best, trials

    count = tf.constant(repeats)
    for device in targets:
        short = short_device_name(device)
        for dtype_name in dtype_list:
            dtype = tf.as_dtype(dtype_name)
            for size in size_list:
                ctx.check_cancelled()
                ctx.progress(done, total, f"{short} {dtype_name} {size}×{size}")
                row: dict[str, Any] = {"device": short, "dtype": dtype_name, "size": size}
                try:
                    with tf.device(device):
                        a = tf.cast(tf.random.uniform((size, size)), dtype)
                        # entries average 1/size, so products stay near 0.5 however long the chain
                        b = tf.cast(tf.random.uniform((size, size), maxval=2.0 / size), dtype)
                        chain(a, b, tf.constant(1)).numpy()  # warm-up: tracing, kernel choice, allocation
                        # .numpy() copies the result to the host, so the clock stops when the device is done
                        seconds, trials = timed(lambda a=a, b=b: chain(a, b, count).numpy())
                    row.update(seconds=seconds, gflops=gflops(size, repeats, seconds), trials=trials)
                except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
                        tf.errors.UnimplementedError) as exc:
                    row.update(seconds=None, gflops=None,
                               unsupported=str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "")
                rows.append(row)
                text = f"{row['gflops']:.1f} GFLOP/s" if row["gflops"] is not None else "unsupported"
                print(f"{short:<8} {dtype_name:<9} {size:>5}: {text}", flush=True)
                ctx.metric("gflops", row["gflops"] or 0.0, device=short, dtype=dtype_name, size=size)
                done += 1

    rng = np.random.default_rng(0)
    for size in size_list:
        ctx.check_cancelled()
        ctx.progress(done, total, f"NumPy float32 {size}×{size}")
        a = rng.random((size, size), dtype=np.float32)
        b = rng.random((size, size), dtype=np.float32) * np.float32(2.0 / size)

        def numpy_chain(a: Any = a, b: Any = b) -> float:
            c = a
            for _ in range(repeats):
                c = c @ b
            return float(c.sum())

        numpy_chain()
        seconds, trials = timed(numpy_chain)
        rows.append({"device": NUMPY_ROW, "dtype": "float32", "size": size, "seconds": seconds,
                     "gflops": gflops(size, repeats, seconds), "trials": trials})
        print(f"{'NumPy':<8} {'float32':<9} {size:>5}: {rows[-1]['gflops']:.1f} GFLOP/s", flush=True)
        done += 1

    peak = this_cpu_peak()
    flags = check_rows(rows, peak)
    best = best_per_size(rows)
    notes = [f"CPU peak (upper bound): {peak.gflops('float32'):.0f} GFLOP/s float32 = {peak.basis()}; "
             "GPU peaks are not estimated",
             f"each figure: {repeats} dependent matmul(s), each multiplying the previous product, timed until "
             "the result is fetched (so the device has finished); the best of several trials"]
    for entry in best:
        ratio = f", {entry['vs_numpy']:.2f}× NumPy ({entry['numpy_gflops']:.1f})" if entry["vs_numpy"] else ""
        notes.append(f"best at {entry['size']}: {entry['gflops']:.1f} GFLOP/s on {entry['device']} "
                     f"{entry['dtype']}{ratio}")
    notes += [f"FLAGGED {flag}" for flag in flags]
    for line in notes:
        print(line, flush=True)
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "table",
        "title": "Matmul throughput (GFLOP/s)",
        "columns": ["device", "dtype", "size", "gflops", "seconds", "vs_numpy", "check"],
        "column_titles": {"device": "Device", "dtype": "Dtype", "size": "Size", "gflops": "GFLOP/s",
                          "seconds": "Seconds", "vs_numpy": "TF ÷ NumPy", "check": "Check"},
        "rows": rows,
        "repeats": repeats,
        "peak": {"cpu_gflops": {d: peak.gflops(d) for d in ("float32", "float64", *HALF_DTYPES)},
                 "basis": peak.basis()},
        "best": best,
        "flags": flags,
        "notes": notes,
        "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
    }
