"""Matmul throughput per logical device, size and dtype, with NumPy on the same CPU as a reference.

Every matmul counted is really computed: the timed matmuls form a dependent chain (each multiplies
the previous product) inside a `tf.while_loop`, so TensorFlow's graph optimizer can neither merge
repeats (it did, when they were independent copies of one matmul in an unrolled tf.function: N
repeats then "ran" N times faster) nor drop any. The whole final product is consumed and fetched,
which also waits for the device. Figures are checked against each device's physical peak (the CPU's from
/proc/cpuinfo, a GPU's from NVML: SMs × maximum SM clock × what its architecture does per SM and clock) and,
on CPUs, against NumPy timed in turns with it on the same CPU; anything above is flagged in the result.

float32 on a GPU of compute capability 8.0 or later runs on TensorFloat-32 tensor cores by TensorFlow's
default (10-bit mantissa products): such rows read `float32 (TF32)` and are held to the TF32 peak; the
`tf32` parameter turns it off to measure true float32.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from tf_device_panel.core.catalogue import split_devices
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.runproc.jobs.context import JobContext
from tf_device_panel.core.runproc.jobs.devices import logical_devices, resolve_device

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import Row, TableResult

NUMPY_ROW = "NumPy (CPU)"
# Timings on a shared machine are noisy, and noise only ever slows a run down: each figure is the best
# of several trials, at least MIN_TRIALS and MIN_TIME_S when they are short, within MAX_TIME_S when long.
MIN_TRIALS, MAX_TRIALS = 3, 20
MIN_TIME_S, MAX_TIME_S = 0.25, 2.0
# Between turns, a pause: TensorFlow's CPU thread pool (and OpenBLAS's) keeps spinning for a moment after its
# work, and NumPy timed straight after TF's matmuls shared the cores with it (0.9 against 65 GFLOP/s alone).
SETTLE_S = 0.02
NUMPY_CEILING = 4.0             # no TF CPU kernel beats an optimised BLAS on the same CPU by this much
TURBO_ALLOWANCE = 1.5           # when only the nominal clock is known, the bound allows this much turbo
FMA_UNITS = 2                   # the most FMA pipes any x86/ARM core has per cycle
HALF_DTYPES = ("float16", "bfloat16")
TF32 = "tf32"
TF32_LABEL = "float32 (TF32)"

# Dense matmul FLOP per SM per clock (a multiply-add is 2), by compute capability and math, for the GPUs
# TensorFlow 2.21's CUDA build runs on (6.0 to 9.0 natively, newer ones through its PTX). An upper bound:
# where a generation's parts differ, the fastest (tensor cores with half-precision accumulation).
# float32 is the CUDA cores' FMA rate; tf32/float16/bfloat16 the tensor cores' where the GPU has them
# (bfloat16 before 8.0 has no hardware: TensorFlow computes it at float32 rate); float64 the FP64 units.
FLOP_PER_SM_CLOCK: dict[str, dict[str, int]] = {
    "6.0": {"float32": 128, "float16": 256, "bfloat16": 128, "float64": 64},                  # P100
    "6.1": {"float32": 256, "float16": 256, "bfloat16": 256, "float64": 8},                   # P40, GTX 10
    "7.0": {"float32": 128, "float16": 1024, "bfloat16": 128, "float64": 64},                 # V100
    "7.5": {"float32": 128, "float16": 1024, "bfloat16": 128, "float64": 4},                  # T4, RTX 20
    "8.0": {"float32": 128, TF32: 1024, "float16": 2048, "bfloat16": 2048, "float64": 128},   # A100
    "8.6": {"float32": 256, TF32: 512, "float16": 1024, "bfloat16": 1024, "float64": 4},      # A10, RTX 30
    "8.7": {"float32": 256, TF32: 1024, "float16": 2048, "bfloat16": 2048, "float64": 4},     # Jetson Orin
    "8.9": {"float32": 256, TF32: 512, "float16": 1024, "bfloat16": 1024, "float64": 4},      # L4, L40, RTX 40
    "9.0": {"float32": 256, TF32: 2048, "float16": 4096, "bfloat16": 4096, "float64": 256},   # H100, H200
    "10.0": {"float32": 256, TF32: 4096, "float16": 8192, "bfloat16": 8192, "float64": 256},  # B200
    "12.0": {"float32": 256, TF32: 1024, "float16": 2048, "bfloat16": 2048, "float64": 4},    # RTX 50
}


def uses_tf32(capability: str | None, tf32_enabled: bool) -> bool:
    """Whether TensorFlow runs float32 matmuls on TF32 tensor cores: compute capability ≥ 8.0, and TF32 on."""
    if not tf32_enabled or not capability:
        return False
    try:
        return int(capability.split(".")[0]) >= 8
    except ValueError:
        return False


@dataclass(frozen=True)
class GpuPeak:
    """An upper bound on one GPU's matmul throughput: SMs × maximum SM clock × FLOP per SM and clock."""

    name: str
    sm_count: int
    clock_mhz: int
    capability: str

    def gflops(self, math: str) -> float | None:
        per_clock = FLOP_PER_SM_CLOCK.get(self.capability, {}).get(math)
        return None if per_clock is None else self.sm_count * self.clock_mhz * per_clock / 1000

    def basis(self, math: str = "float32") -> str:
        per_clock = FLOP_PER_SM_CLOCK.get(self.capability, {}).get(math)
        return (f"{self.name}: {self.sm_count} SMs × {per_clock} {math} FLOP/clock × {self.clock_mhz} MHz "
                f"(compute capability {self.capability})")


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


class BenchmarkRow(TypedDict, total=False):
    """One figure of the benchmark's table: a device, dtype and size, and how fast it went."""

    device: str
    dtype: str                        # as the table labels it: "float32 (TF32)" on TF32 tensor cores
    size: int
    math: str                         # TF32 where the matmuls ran on TF32 tensor cores
    seconds: float | None
    gflops: float | None              # None: the device has no kernel for the dtype
    trials: int
    unsupported: str                  # why the figures are missing
    vs_numpy: float | None
    check: str                        # "ok", "impossible" or "unlikely": one word, whole in a projected table
    check_why: str                    # only when flagged: why (the caption's flags say it too)


class BestRow(TypedDict):
    size: int
    device: str
    dtype: str
    gflops: float | None
    numpy_gflops: float | None
    vs_numpy: float | None


def row_math(row: BenchmarkRow) -> str:
    """What the row's matmuls really computed in: its dtype, or tf32 for float32 on TF32 tensor cores."""
    return str(row.get("math") or row["dtype"])


def check_rows(rows: list[BenchmarkRow], peak: CpuPeak,
               gpu_peaks: dict[str, GpuPeak] | None = None) -> list[str]:
    """Fill each TF row's `vs_numpy` and `check`; return the flags raised, one line each.

    Above a device's peak is impossible (work was skipped or the clock is wrong); far above NumPy timed beside
    it on the same CPU is unlikely but possible (NumPy slowed by other work), and worded so."""
    numpy_by_size = {r["size"]: r["gflops"] for r in rows if r["device"] == NUMPY_ROW and r.get("gflops")}
    flags: list[str] = []
    for row in rows:
        if row["device"] == NUMPY_ROW:
            row.setdefault("vs_numpy", 1.0)
            limit = peak.gflops("float32")
            numpy_figure = row.get("gflops") or 0.0  # NumPy has every dtype it is timed in: never missing
            if numpy_figure > limit:
                row.setdefault("check_why", f"above the CPU's peak {limit:.0f} GFLOP/s")
            row.setdefault("check", "impossible" if "check_why" in row else "ok")
            if row["check"] != "ok":
                flags.append(f"NumPy {row['size']}: {numpy_figure:.1f} GFLOP/s is above the CPU's peak "
                             f"{limit:.0f} GFLOP/s: the CPU peak estimate is too low (its clock or core count)")
            continue
        value = row.get("gflops")
        reference = numpy_by_size.get(row["size"])  # the NumPy row's own figure: one figure for table and ratio
        row["vs_numpy"] = value / reference if value is not None and reference else None
        if value is None:
            row["check"] = "unsupported"
            continue
        impossible, unlikely = [], []
        if "CPU:" in row["device"]:  # logical CPUs all share the one physical CPU and its peak
            limit = peak.gflops(row["dtype"])
            if value > limit:
                impossible.append(f"above the CPU's peak {limit:.0f} GFLOP/s")
            if row["dtype"] in ("float32", "float64") and row["vs_numpy"] and row["vs_numpy"] > NUMPY_CEILING:
                unlikely.append(f"{row['vs_numpy']:.1f}× NumPy timed beside it (over {NUMPY_CEILING:g}×)")
        elif gpu_peaks and row["device"] in gpu_peaks:
            gpu_limit = gpu_peaks[row["device"]].gflops(row_math(row))
            if gpu_limit is not None and value > gpu_limit:
                impossible.append(f"above the GPU's {row_math(row)} peak {gpu_limit:.0f} GFLOP/s")
        # The table's cell says one word, so it stays whole on a projector; the reason is in `check_why` and in
        # the flags the result's caption lists.
        row["check"] = "impossible" if impossible else "unlikely" if unlikely else "ok"
        if impossible or unlikely:
            row["check_why"] = " and ".join(impossible + unlikely)
        where = f"{row['device']} {row['dtype']} {row['size']}: {value:.1f} GFLOP/s"
        if impossible:
            flags.append(f"{where} is {' and '.join(impossible)}: no device computes faster than its peak, so this "
                         "timing missed work — please report it")
        if unlikely:
            # Short, so a class reads it whole in the caption (the docs say why 4×: no TensorFlow CPU kernel beats
            # an optimised BLAS on the same CPU by that much).
            flags.append(f"{where} is {' and '.join(unlikely)}: unlikely rather than impossible (NumPy may have "
                         "been slowed by other work); rerun on an idle machine")
    return flags


def best_per_size(rows: list[BenchmarkRow]) -> list[BestRow]:
    """For each size, the fastest TF figure and how it compares with NumPy's."""
    best: list[BestRow] = []
    for size in sorted({r["size"] for r in rows}):
        tf_rows = [r for r in rows if r["size"] == size and r["device"] != NUMPY_ROW and r.get("gflops")]
        numpy_rows = [r for r in rows if r["size"] == size and r["device"] == NUMPY_ROW]
        if not tf_rows:
            continue
        top = max(tf_rows, key=lambda r: r.get("gflops") or 0.0)
        best.append({"size": size, "device": top["device"], "dtype": top["dtype"], "gflops": top["gflops"],
                     "numpy_gflops": numpy_rows[0]["gflops"] if numpy_rows else None,
                     "vs_numpy": top.get("vs_numpy")})
    return best


def timed_turns(ctx: JobContext, runs: list[Callable[[], Any]],
                settle: Callable[[float], None] = time.sleep) -> tuple[list[float], int]:
    """The best time of each of `runs`, taken in turns (a, b, a, b, …) so both see the same machine, with the
    same number of trials each: at least MIN_TRIALS and MIN_TIME_S when short, at most MAX_TRIALS or
    MAX_TIME_S (of the first run's time). With several runs, each turn starts after `settle(SETTLE_S)`, so
    the threads of the turn before have gone idle. Checks for cancellation between trials."""
    best = [float("inf")] * len(runs)
    trials, spent = 0, 0.0
    while trials == 0 or (trials < MAX_TRIALS and spent < MAX_TIME_S
                          and (trials < MIN_TRIALS or spent < MIN_TIME_S)):
        for position, run in enumerate(runs):
            ctx.check_cancelled()
            if len(runs) > 1:
                settle(SETTLE_S)
            started = time.perf_counter()
            run()
            seconds = time.perf_counter() - started
            best[position] = min(best[position], seconds)
            if position == 0:
                spent += seconds
        trials += 1
    return best, trials


def gpu_peaks_for(devices: list[str], config: DeviceConfig) -> tuple[dict[str, GpuPeak], list[str]]:
    """Each logical GPU's physical peak, from NVML (found by CUDA_VISIBLE_DEVICES and PCI order, as
    TensorFlow numbers GPUs); and why a GPU's peak is not estimated, one line each."""
    import tensorflow as tf
    from tf_device_panel.core.config.plan import logical_gpu_owners
    from tf_device_panel.core.devices.gpus import cuda_visible_nvml_indices
    from tf_device_panel.core.devices.nvml import shared

    gpus = [short_device_name(d) for d in devices if "GPU:" in d]
    if not gpus:
        return {}, []
    nvml = shared()
    if not nvml.init():
        return {}, [f"GPU peaks are not estimated: {nvml.message}"]
    physical = tf.config.list_physical_devices("GPU")
    visible = [physical.index(g) for g in tf.config.get_visible_devices("GPU") if g in physical]
    owners = logical_gpu_owners(config, visible)
    nvml_gpus = nvml.gpus()
    nvml_of_tf = cuda_visible_nvml_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), nvml_gpus)
    peaks: dict[str, GpuPeak] = {}
    missing: list[str] = []
    for short in gpus:
        logical = int(short.rsplit(":", 1)[1])
        if logical >= len(owners):
            missing.append(f"{short}: GPU peak not estimated (its physical GPU is not matched to NVML's)")
            continue
        nvml_index = nvml_index_of(owners[logical], nvml_gpus, nvml_of_tf)
        units, why = nvml.compute_units(nvml_index)
        name = next((g.name for g in nvml_gpus if g.index == nvml_index), None) or f"GPU {nvml_index}"
        if units is None or units.compute_capability not in FLOP_PER_SM_CLOCK:
            reason = why or f"compute capability {units.compute_capability if units else '?'} is not in the table"
            missing.append(f"{short}: GPU peak not estimated ({reason})")
            continue
        peaks[short] = GpuPeak(name, units.sm_count, units.max_sm_clock_mhz, units.compute_capability)
    return peaks, missing


def nvml_index_of(physical: int, nvml_gpus: list[Any], by_visible: list[int | None]) -> int:
    """NVML's index of TensorFlow's physical GPU: by the PCI bus id CUDA gives it, else by CUDA_VISIBLE_DEVICES."""
    from tf_device_panel.core.devices.gpu_facts import gpu_pci_bus_id
    from tf_device_panel.core.devices.gpus import nvml_index_for

    try:
        found = nvml_index_for(gpu_pci_bus_id(physical), nvml_gpus)
    except (OSError, RuntimeError, AttributeError):
        found = None
    if found is not None:
        return found
    visible = by_visible[physical] if physical < len(by_visible) else None  # None: a MIG instance
    return visible if visible is not None else physical


def matmul_chain(tf: Any) -> Callable[[Any, Any, Any], Any]:
    """The timed work: `count` matmuls, each multiplying the previous product by `b`, and the sum of every
    element of the last product (so the whole of it is computed and consumed)."""

    @tf.function
    def chain(a: Any, b: Any, count: Any) -> Any:
        # Each matmul takes the previous product: none can be merged, skipped or run in parallel.
        _, product = tf.while_loop(lambda i, c: i < count, lambda i, c: (i + 1, tf.matmul(c, b)),
                                   (tf.constant(0), a))
        return tf.reduce_sum(tf.cast(product, tf.float32))

    return chain


def benchmark(ctx: JobContext, sizes: str = "256,512,1024", dtypes: str = "float32,float16,bfloat16",
              repeats: int = 5, devices: str = "", tf32: bool = True) -> TableResult:
    import numpy as np
    import tensorflow as tf

    # TensorFlow's default is on; set either way so the figure says what was measured.
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    size_list = [int(s) for s in split_devices(sizes)]
    dtype_list = split_devices(dtypes)
    targets = [resolve_device(d) for d in split_devices(devices)] or list(logical_devices().values())
    gpu_peaks, peak_gaps = gpu_peaks_for(targets, ctx.device_config)
    capability = {short: p.capability for short, p in gpu_peaks.items()}
    capability.update(gpu_capabilities(targets, ctx.device_config))
    total = len(targets) * len(size_list) * len(dtype_list) + len(size_list)
    rows: list[BenchmarkRow] = []
    done = 0

    chain = matmul_chain(tf)
    rng = np.random.default_rng(0)
    numpy_inputs = {size: (rng.random((size, size), dtype=np.float32),
                           rng.random((size, size), dtype=np.float32) * np.float32(2.0 / size)) for size in size_list}
    numpy_best: dict[int, tuple[float, int]] = {}  # size → (best seconds, trials), over every turn it took

    def numpy_chain(size: int) -> Callable[[], float]:
        a, b = numpy_inputs[size]

        def run() -> float:
            c = a
            for _ in range(repeats):
                c = c @ b
            return float(c.sum())
        return run

    def note_numpy(size: int, seconds: float, trials: int) -> None:
        best, count = numpy_best.get(size, (float("inf"), 0))
        numpy_best[size] = (min(best, seconds), count + trials)

    count = tf.constant(repeats)
    for device in targets:
        short = short_device_name(device)
        on_cpu = "CPU:" in short
        for dtype_name in dtype_list:
            dtype = tf.as_dtype(dtype_name)
            label = dtype_name
            if dtype_name == "float32" and not on_cpu and uses_tf32(capability.get(short), tf32):
                label = TF32_LABEL
            for size in size_list:
                ctx.check_cancelled()
                ctx.progress(done, total, f"{short} {label} {size}×{size}")
                row: BenchmarkRow = {"device": short, "dtype": label, "size": size}
                if label == TF32_LABEL:
                    row["math"] = TF32
                try:
                    with tf.device(device):
                        a = tf.cast(tf.random.uniform((size, size)), dtype)
                        # entries average 1/size, so products stay near 0.5 however long the chain
                        b = tf.cast(tf.random.uniform((size, size), maxval=2.0 / size), dtype)
                        chain(a, b, tf.constant(1)).numpy()  # warm-up: tracing, kernel choice, allocation

                        # .numpy() copies the result to the host, so the clock stops when the device is done
                        def run_tf(a: Any = a, b: Any = b) -> Any:
                            return chain(a, b, count).numpy()

                        if on_cpu:  # NumPy in turns with it, on the same CPU, as many times
                            numpy_chain(size)()
                            (seconds, numpy_seconds), trials = timed_turns(ctx, [run_tf, numpy_chain(size)])
                            note_numpy(size, numpy_seconds, trials)
                        else:
                            (seconds,), trials = timed_turns(ctx, [run_tf])
                    row["seconds"], row["gflops"], row["trials"] = seconds, gflops(size, repeats, seconds), trials
                except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
                        tf.errors.UnimplementedError) as exc:
                    row["seconds"], row["gflops"] = None, None
                    row["unsupported"] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                rows.append(row)
                text = f"{row['gflops']:.1f} GFLOP/s" if row["gflops"] is not None else "unsupported"
                print(f"{short:<8} {label:<14} {size:>5}: {text}", flush=True)
                ctx.metric("gflops", row["gflops"] or 0.0, device=short, dtype=label, size=size)
                done += 1

    for size in size_list:
        ctx.check_cancelled()
        ctx.progress(done, total, f"NumPy float32 {size}×{size}")
        if size not in numpy_best:  # no CPU row took turns with it: timed on its own, by the same rule
            numpy_chain(size)()
            (seconds,), trials = timed_turns(ctx, [numpy_chain(size)])
            note_numpy(size, seconds, trials)
        seconds, trials = numpy_best[size]
        rows.append({"device": NUMPY_ROW, "dtype": "float32", "size": size, "seconds": seconds,
                     "gflops": gflops(size, repeats, seconds), "trials": trials})
        print(f"{'NumPy':<8} {'float32':<14} {size:>5}: {rows[-1]['gflops']:.1f} GFLOP/s", flush=True)
        done += 1

    peak = this_cpu_peak()
    flags = check_rows(rows, peak, gpu_peaks)
    best = best_per_size(rows)
    notes = [f"CPU peak (upper bound): {peak.gflops('float32'):.0f} GFLOP/s float32 = {peak.basis()}"]
    for short, gpu in sorted(gpu_peaks.items()):
        maths = [m for m in ("float32", TF32, "float16", "bfloat16", "float64") if gpu.gflops(m) is not None]
        figures = ", ".join(f"{m} {gpu.gflops(m):.0f}" for m in maths)
        notes.append(f"GPU peak (upper bound) of {short}, GFLOP/s: {figures} = {gpu.basis()}")
    notes += peak_gaps
    if any(r.get("math") == TF32 for r in rows):
        notes.append("float32 (TF32): TensorFlow ran float32 matmuls on TensorFloat-32 tensor cores (its default "
                     "on compute capability 8.0 and later: 10-bit mantissa products); run with tf32=off for "
                     "float32 proper")
    notes.append(f"each figure: {repeats} dependent matmul(s), each multiplying the previous product, timed until "
                 "the result is fetched (so the device has finished); the best of several trials, NumPy's taken "
                 f"in turns with each CPU row's, as many times, after a {SETTLE_S * 1000:.0f} ms pause each; NumPy's "
                 "row is its best over all those turns, and every TF ÷ NumPy ratio divides by that one figure")
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
        "rows": cast("list[Row]", rows),  # a table result's rows: each BenchmarkRow's figures and texts
        "repeats": repeats,
        "tf32": tf32,
        "peak": {"cpu_gflops": {d: peak.gflops(d) for d in ("float32", "float64", *HALF_DTYPES)},
                 "basis": peak.basis(),
                 "gpu_gflops": {short: {m: gpu.gflops(m) for m in FLOP_PER_SM_CLOCK[gpu.capability]}
                                for short, gpu in gpu_peaks.items()},
                 "gpu_basis": {short: gpu.basis() for short, gpu in gpu_peaks.items()}},
        "best": cast("list[Row]", best),
        "flags": flags,
        "notes": notes,
        "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
    }


def gpu_capabilities(devices: list[str], config: DeviceConfig) -> dict[str, str]:
    """Each logical GPU's compute capability, from TensorFlow (so TF32 is labelled even without NVML)."""
    import tensorflow as tf
    from tf_device_panel.core.config.plan import logical_gpu_owners

    physical = tf.config.list_physical_devices("GPU")
    visible = [physical.index(g) for g in tf.config.get_visible_devices("GPU") if g in physical]
    owners = logical_gpu_owners(config, visible)
    found: dict[str, str] = {}
    for short in (short_device_name(d) for d in devices if "GPU:" in d):
        logical = int(short.rsplit(":", 1)[1])
        if logical < len(owners):
            try:
                details = tf.config.experimental.get_device_details(physical[owners[logical]])
            except Exception:  # details are a nicety: without them the row is simply not labelled
                continue
            if details.get("compute_capability"):
                found[short] = ".".join(map(str, details["compute_capability"]))
    return found
