"""The panel on a real GPU: every GPU path run and checked, written up as a Markdown report with the figures.

On a GPU host prepared with `shared/gpu-host/` (TensorFlow from `prepare.sh --cublas --nccl --cudnn`, this
project's wheel installed, `export PYTHONPATH=/tmp/site_tf LD_LIBRARY_PATH=/tmp/cudalib`):

    python scripts/gpu_acceptance.py [--report gpu-acceptance.md] [--json figures.json] [--quick]

or `scripts/gpu-acceptance.sh`, which does the same. It checks, each against what the configuration implies:
  1. the GPU as NVML and CUDA see it (totals, the driver's reserve, SMs, clock, compute capability);
  2. `devices` under six profiles (default, growth, split 2048+4096, fraction 0.25, hidden, 1024×3 + 2 CPUs):
     the logical devices and their limits;
  3. the GPU memory each profile's run holds after its first op, read from NVML's process list;
  4. every job on the GPU (matmul, replicate, session, memory, fit dense and cnn, custom-loop over a split GPU
     with the default cross-device ops and why they were chosen (two replicas on one physical GPU while NCCL
     loads, its version reported), the memory job's OOM past a logical GPU's limit, multi-worker and
     parameter-server clusters, and your own script);
  5. the benchmark (TF32 labelled, no figure above the GPU's peak, tf32=off measured too);
  6. the exporter during a run: TensorFlow's allocator metrics and the run's process memory;
  7. the doctor: no check fails;
  8. the zygote: it holds no GPU, and CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH and TF_GPU_ALLOCATOR set
     in a run forked from it take effect;
  9. the answers on the real allocator: fit-batch's batch for the cnn under a logical GPU, checked by runs from
     outside at it and 1.2 × it; `share --max` for the cnn, its seats side by side; a GPU job cancelled (Ctrl+C)
     ends "cancelled".
--sections picks and orders them (a device lent for minutes runs the newest first); the report is rewritten
after each check, so a run stopped at its time limit still leaves what it found.
With --record DIR it also writes the GPU's readings as fixture JSON (DIR/gpu.json, DIR/benchmark-rows.json), in
the shape tests/fixtures/h100/ holds, to replace figures there that came from a specification.
Exit status 0 when every check passed. Everything judged here is a pure function of the figures, tested
against the H100's recorded figures (tests/test_gpu_acceptance.py) so the judging runs in CI without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tf_device_panel.core.config import DeviceConfig, save_profile
from tf_device_panel.core.config.plan import logical_gpu_owners

CONTEXT_MAX_MIB = 1024    # a CUDA context and TensorFlow's kernels: 520 MiB measured on the H100
GROWTH_MAX_MIB = 2048     # with memory growth, one small op holds little more than the context
HIDDEN_MAX_MIB = 64       # every GPU hidden: no context; listing the GPUs took 4 MiB on the H100

PROFILES: dict[str, DeviceConfig] = {
    "default": DeviceConfig(),
    "growth": DeviceConfig(memory_growth=True),
    "split": DeviceConfig(virtual_gpus={0: (2048, 4096)}),
    "fraction": DeviceConfig(memory_fraction=0.25),
    "hidden": DeviceConfig(visible_gpus=()),
    "three": DeviceConfig(virtual_gpus={0: (1024, 1024, 1024)}, cpu_devices=2),
}


@dataclass
class Result:
    """One check: passed (True), failed (False) or skipped (None), with its figures in words."""

    section: str
    name: str
    passed: bool | None
    figures: str
    detail: list[str] = field(default_factory=list)


# -- judging (pure, tested against the H100's recorded figures) ----------------------------------------------

def expected_logical(config: DeviceConfig, gpu_count: int, cuda_total_mib: int) -> list[tuple[str, int | None]]:
    """The logical devices a profile should give on a machine with `gpu_count` GPUs of `cuda_total_mib` each,
    with each GPU's memory limit (None: the whole GPU)."""
    devices: list[tuple[str, int | None]] = [(f"/CPU:{i}", None) for i in range(config.cpu_devices)]
    visible = list(range(gpu_count)) if config.visible_gpus is None else list(config.visible_gpus)
    limits: list[int | None] = []
    for index in visible:
        if index in config.virtual_gpus:
            limits += list(config.virtual_gpus[index])
        elif config.memory_fraction is not None:
            limits.append(int(cuda_total_mib * config.memory_fraction))
        else:
            limits.append(None)
    assert len(limits) == len(logical_gpu_owners(config, visible))
    return devices + [(f"/GPU:{i}", limit) for i, limit in enumerate(limits)]


_LOGICAL = re.compile(r"^\s+(/(?:CPU|GPU):\d+)\s+/job:\S+(?:\s+limit (\d+) MiB)?\s*$")


def parse_devices_text(text: str) -> list[tuple[str, int | None]]:
    """The logical devices `tf-device-panel devices` printed, with their limits."""
    found = []
    for line in text.splitlines():
        match = _LOGICAL.match(line)
        if match:
            found.append((match.group(1), int(match.group(2)) if match.group(2) else None))
    return found


def check_devices(profile: str, text: str, gpu_count: int, cuda_total_mib: int) -> Result:
    expected = expected_logical(PROFILES[profile], gpu_count, cuda_total_mib)
    seen = parse_devices_text(text)
    words = ", ".join(f"{name}" + (f" {limit} MiB" if limit else "") for name, limit in seen) or "none"
    detail = [] if seen == expected else [f"expected {expected}", f"got {seen}"]
    return Result("devices", profile, seen == expected, words, detail)


def memory_window(profile: str, nvml_total_mib: int, cuda_total_mib: int) -> tuple[int, int]:
    """The GPU memory (MiB, NVML's per-process figure) a profile's run may hold after its first op on /GPU:0."""
    config = PROFILES[profile]
    if config.visible_gpus == ():
        return 0, HIDDEN_MAX_MIB
    if config.memory_growth:
        return 1, GROWTH_MAX_MIB
    if config.virtual_gpus:
        limits = config.virtual_gpus[0]
        # TensorFlow reserves a logical GPU's whole limit when it is first used: only /GPU:0 is, here
        return limits[0], sum(limits) + CONTEXT_MAX_MIB
    if config.memory_fraction is not None:
        limit = int(cuda_total_mib * config.memory_fraction)
        return limit, limit + CONTEXT_MAX_MIB
    return int(cuda_total_mib * 0.9), nvml_total_mib  # no limit: nearly all the GPU


def judge_memory(profile: str, held_mib: int | None, nvml_total_mib: int, cuda_total_mib: int) -> Result:
    low, high = memory_window(profile, nvml_total_mib, cuda_total_mib)
    if held_mib is None:
        return Result("memory", profile, False, "NVML showed no process for the run", [f"expected {low}–{high} MiB"])
    return Result("memory", profile, low <= held_mib <= high, f"{held_mib:,} MiB held (expected {low:,}–{high:,})")


TOTAL_SLACK_MIB = 64  # how far NVML's total less its reserve may be from CUDA's and still stand in for it


def judge_totals(facts: dict[str, Any]) -> Result:
    """Validation takes CUDA's total as NVML's total less the driver's reserve (memory v2): is it so here?"""
    nvml_total, reserved, cuda = facts.get("nvml_total_mib"), facts.get("reserved_mib"), facts.get("cuda_total_mib")
    if nvml_total is None or reserved is None or cuda is None or "cuda_total_error" in facts:
        return Result("GPU", "CUDA's total from NVML", None, f"not comparable: NVML {nvml_total}, reserve {reserved}, "
                      f"CUDA {cuda} {facts.get('cuda_total_error', '')}".strip())
    estimate = int(nvml_total) - int(reserved)
    return Result("GPU", "CUDA's total from NVML", abs(estimate - int(cuda)) <= TOTAL_SLACK_MIB,
                  f"NVML {nvml_total} - reserve {reserved} = {estimate} MiB; CUDA says {cuda} MiB")


def placements_by_device(outcome: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for placed in outcome.get("placements") or []:
        counts[placed["short_device"]] = counts.get(placed["short_device"], 0) + 1
    return counts


def judge_job(name: str, outcome: dict[str, Any], expect: Callable[[dict[str, Any]], str | None] | None = None,
              want_status: str = "ok") -> Result:
    """A job's outcome: its status, ops placed on a GPU, and what `expect` says of its result (None: fine)."""
    counts = placements_by_device(outcome)
    gpu_ops = sum(n for device, n in counts.items() if device.startswith("/GPU:"))
    problems = []
    if outcome.get("status") != want_status:
        error = outcome.get("error") or {}
        problems.append(f"status {outcome.get('status')} (wanted {want_status}): {error.get('type')}: "
                        f"{str(error.get('message'))[:300]}")
    if not gpu_ops:
        problems.append("no op was placed on a GPU")
    said = expect(outcome) if expect and not problems else None
    if said:
        problems.append(said)
    figures = (f"{outcome.get('status')} in {outcome.get('duration_s') or 0:.2f} s; ops: "
               + ", ".join(f"{device} {n}" for device, n in sorted(counts.items())))
    return Result("jobs", name, not problems, figures, problems)


SPLIT_REASON = "split from one physical GPU"


def judge_split_choice(name: str, outcome: dict[str, Any], nccl: tuple[str | None, str]) -> Result:
    """A mirrored run over two logical GPUs of one physical GPU: HierarchicalCopyAllReduce, and for the right
    reason — the replicas share a GPU (NCCL runs one rank per GPU) while NCCL itself loads (`nccl`: its version
    and where, from `cudalibs.nccl_version` in the same environment), so NCCL's absence is not what chose it."""
    result = judge_job(name, outcome, fit_expect(2, "HierarchicalCopyAllReduce"))
    note = str((outcome.get("result") or {}).get("note") or "")
    version, where = nccl
    if result.passed and SPLIT_REASON not in note:
        result.passed = False
        result.detail.append(f"chosen for another reason than the shared GPU: {note or 'no note'}")
    if version is None:
        result.passed = False
        result.detail.append(f"NCCL does not load here ({where}), so the split's reason is not what was tested; "
                             "prepare the host with prepare.sh --nccl")
    result.figures += f"; NCCL {version} loads ({where})" if version else "; NCCL does not load"
    if note:
        result.figures += f"; {note}"
    return result


def judge_cluster(name: str, outcome: dict[str, Any], workers: int) -> Result:
    """A multi-worker or parameter-server run on the GPU: finished, every worker heard from, the losses agreeing
    (multi-worker), and the GPU used: ops placed on one, or the tasks' own device lists naming one."""
    result = dict(outcome.get("result") or {})
    problems = []
    if outcome.get("status") != "ok":
        error = outcome.get("error") or {}
        problems.append(f"status {outcome.get('status')}: {error.get('type')}: {str(error.get('message'))[:300]}")
    counts = placements_by_device(outcome)
    gpu_ops = sum(n for device, n in counts.items() if "GPU:" in device)
    task_gpus = sorted({str(device) for devices in (result.get("task_devices") or {}).values()
                        for device in (devices or []) if "GPU:" in str(device)})
    if not problems:
        if result.get("workers") != workers:
            problems.append(f"{result.get('workers')} workers reported, wanted {workers}")
        if result.get("strategy") == "MultiWorkerMirroredStrategy" and not result.get("losses_agree"):
            problems.append(f"the workers' losses disagree: {result.get('losses')}")
        if not gpu_ops and not task_gpus:
            problems.append("no op was placed on a GPU and no task listed one")
    figures = (f"{outcome.get('status')} in {outcome.get('duration_s') or 0:.2f} s; {result.get('strategy')}, "
               f"{result.get('workers')} workers; GPU ops {gpu_ops}; task GPUs {', '.join(task_gpus) or 'none'}")
    return Result("jobs", name, not problems, figures, problems)


def judge_benchmark(result: dict[str, Any], capability: str, tf32: bool) -> Result:
    """GPU rows: float32 labelled TF32 where TensorFlow used it, none above the GPU's peak, a peak estimated."""
    from tf_device_panel.core.runproc.jobs.benchmark import TF32_LABEL, uses_tf32

    gpu_rows = [r for r in result.get("rows", []) if str(r.get("device", "")).startswith("/GPU:")]
    problems = []
    float32 = [r for r in gpu_rows if str(r["dtype"]).startswith("float32")]
    want = TF32_LABEL if uses_tf32(capability, tf32) else "float32"
    if any(r["dtype"] != want for r in float32):
        problems.append(f"float32 rows read {sorted({r['dtype'] for r in float32})}, expected {want!r}")
    impossible = [f"{r['device']} {r['dtype']} {r['size']}: impossible: {r.get('check_why', '')}" for r in gpu_rows
                  if r.get("check") == "impossible"]
    problems += impossible
    if not result.get("peak", {}).get("gpu_gflops"):
        problems.append("no GPU peak estimated: " + "; ".join(n for n in result.get("notes", []) if "GPU peak" in n))
    largest = max((r["size"] for r in gpu_rows), default=0)
    peaks = result.get("peak", {}).get("gpu_gflops", {})
    figures = []
    for row in (r for r in gpu_rows if r["size"] == largest and r.get("gflops")):
        math = row.get("math") or row["dtype"]
        peak = peaks.get(row["device"], {}).get(math)
        figures.append(f"{row['dtype']} {row['size']}: {row['gflops']:,.0f} GFLOP/s"
                       + (f" ({row['gflops'] / peak:.0%} of peak {peak:,.0f})" if peak else ""))
    return Result("benchmark", f"benchmark, tf32 {'on' if tf32 else 'off'}", not problems,
                  "; ".join(figures) or "no GPU row", problems)


METRICS = ("tfdp_tf_allocator_current_bytes", "tfdp_tf_allocator_peak_bytes", "tfdp_run_info",
           "tfdp_device_config_info", "tfdp_gpu_process_memory_used_bytes")


def judge_exporter(text: str) -> Result:
    """The exporter's page during a GPU run: TensorFlow's allocator figures for /GPU:0 and the run's memory."""
    missing = [name for name in METRICS if not re.search(rf"^{name}\{{", text, re.MULTILINE)]
    current = re.search(r'^tfdp_tf_allocator_current_bytes\{device="/GPU:0"\}\s+(\S+)', text, re.MULTILINE)
    figures = f"/GPU:0 allocator current {float(current.group(1)):,.0f} bytes" if current else "no /GPU:0 figure"
    return Result("exporter", "metrics during a run", not missing and current is not None, figures,
                  [f"missing: {', '.join(missing)}"] if missing else [])


def judge_doctor(report: dict[str, Any]) -> Result:
    checks = report.get("checks", [])
    failed = [f"{c['title']}: {c['summary']}" for c in checks if c["status"] == "fail"]
    counts = {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail", "skipped")}
    return Result("doctor", "doctor", not failed, ", ".join(f"{n} {s}" for s, n in counts.items()), failed)


def to_markdown(results: Sequence[Result], facts: dict[str, Any], when: str) -> str:
    passed = sum(r.passed is True for r in results)
    failed = sum(r.passed is False for r in results)
    lines = [f"# GPU acceptance — {facts.get('gpu', 'no GPU')}", "",
             f"- Date: {when}",
             f"- Device: {facts.get('gpu', '?')}, driver {facts.get('driver', '?')}, "
             f"compute capability {facts.get('compute_capability', '?')}",
             f"- Memory: NVML {facts.get('nvml_total_mib', '?')} MiB, CUDA {facts.get('cuda_total_mib', '?')} MiB "
             f"(the driver keeps {facts.get('reserved_mib', '?')} MiB); {facts.get('sm_count', '?')} SMs at up to "
             f"{facts.get('max_sm_clock_mhz', '?')} MHz",
             f"- TensorFlow {facts.get('tf_version', '?')}, Python {facts.get('python', '?')}",
             f"- Result: {passed} passed, {failed} failed, {len(results) - passed - failed} skipped", ""]
    for section in dict.fromkeys(r.section for r in results):
        lines += [f"## {section}", "", "| | check | figures |", "|---|---|---|"]
        for result in (r for r in results if r.section == section):
            mark = {True: "✔", False: "✘", None: "–"}[result.passed]
            lines.append(f"| {mark} | {result.name} | {result.figures.replace('|', '/')} |")
        details = [(r.name, d) for r in results if r.section == section for d in r.detail]
        if details:
            lines += ["", *[f"- {name}: {text}" for name, text in details]]
        lines.append("")
    return "\n".join(lines)


# -- running on the GPU host ----------------------------------------------------------------------------------

PANEL = [sys.executable, "-m", "tf_device_panel"]


def panel(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PANEL, *args], capture_output=True, text=True, timeout=timeout)


def run_json(job: str, profile: Path, *params: str, timeout: float = 600) -> dict[str, Any]:
    pairs = [part for param in params for part in ("-p", param)]
    done = panel("run", job, "--config", str(profile), "--json", *pairs, timeout=timeout)
    try:
        return dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        return {"status": "no-result", "error": {"type": f"exit {done.returncode}", "message": done.stderr[-500:]}}


def gpu_facts() -> dict[str, Any]:
    from tf_device_panel.core.devices.gpu_facts import gpu_total_mib
    from tf_device_panel.core.devices.nvml import Nvml

    # CUDA numbers GPUs fastest first unless told otherwise: read "GPU 0" in NVML's (PCI) order, as runs do.
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"

    nvml = Nvml()
    if not nvml.init() or not nvml.gpus():
        return {"error": nvml.message or "NVML sees no GPU"}
    gpu = nvml.gpus()[0]
    units, why = nvml.compute_units(0)
    facts: dict[str, Any] = {"gpu": gpu.name, "driver": nvml.driver_version(), "nvml_total_mib": gpu.memory_total_mib,
                             "reserved_mib": gpu.memory_reserved_mib, "compute_capability": gpu.compute_capability,
                             "gpu_count": len(nvml.gpus()), "python": sys.version.split()[0],
                             "sm_count": units.sm_count if units else why,
                             "max_sm_clock_mhz": units.max_sm_clock_mhz if units else why}
    try:
        facts["cuda_total_mib"] = gpu_total_mib(0)
    except (OSError, RuntimeError) as exc:
        facts["cuda_total_mib"] = gpu.cuda_total_mib or gpu.memory_total_mib
        facts["cuda_total_error"] = str(exc)
    return facts


HOLD_SCRIPT = """
import os, sys, time
import tensorflow as tf
with tf.device(sys.argv[1]):
    x = tf.ones((256, 256)) * 2.0
print("HOLDING", os.getpid(), float(tf.reduce_sum(x)), flush=True)
time.sleep(float(sys.argv[2]))
"""


def held_by_run(profile: Path, seconds: float = 4.0, device: str = "/GPU:0",
                during: Callable[[], None] | None = None) -> tuple[int | None, str]:
    """Run a script that does one op on `device` and waits; the most GPU memory NVML shows its process hold."""
    from tf_device_panel.core.devices.nvml import Nvml

    nvml = Nvml()
    nvml.init()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(HOLD_SCRIPT)
    process = subprocess.Popen([*PANEL, "run", "script", "--config", str(profile), "-p", f"path={script.name}",
                                "-p", f"args={device} {seconds}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    held: int | None = None
    output: list[str] = []
    assert process.stdout is not None
    try:
        for line in process.stdout:
            output.append(line)
            match = re.search(r"HOLDING (\d+)", line)
            if not match:
                continue
            pid, until = int(match.group(1)), time.monotonic() + seconds - 0.5
            if during is not None:
                threading.Thread(target=during, daemon=True).start()
            while time.monotonic() < until:
                for gpu in nvml.gpus():
                    for proc in nvml.processes(gpu.index) or []:
                        if proc.pid == pid and proc.used_mib is not None:
                            held = max(held or 0, proc.used_mib)
                time.sleep(0.2)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
        os.unlink(script.name)
    if held is None and device.startswith("/CPU"):
        held = 0  # a run that never touches a GPU may not be in NVML's process list at all
    return held, "".join(output[-20:])


ZYGOTE_SCRIPT = """
import os, sys, time
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    x = tf.ones((256, 256)) * 2.0
print("ZYGOTE-RUN", os.getpid(), len(gpus), flush=True)
time.sleep(3)
"""


def judge_zygote_run(name: str, forked: bool, gpus: int | None, held_mib: int | None, lines: list[str],
                     want_gpus: int | None = None, max_held_mib: int | None = None,
                     want_line: str | None = None) -> Result:
    """A run forked from the zygote, with a late variable set: it must behave as a process started with it."""
    problems = [] if forked else ["the run was started by hand, not forked from the zygote"]
    if gpus is None:
        problems.append("the script printed nothing")
    elif want_gpus is not None and (gpus == 0) != (want_gpus == 0):
        problems.append(f"{gpus} GPUs seen, {'none' if want_gpus == 0 else 'some'} expected")
    if max_held_mib is not None and (held_mib is None or held_mib > max_held_mib):
        problems.append(f"held {held_mib} MiB, at most {max_held_mib} expected")
    if want_line is not None and not any(want_line in line for line in lines):
        problems.append(f"TensorFlow never said {want_line!r}")
    return Result("zygote", name, not problems, f"GPUs {gpus}, held {held_mib} MiB", problems)


def open_files(pid: int) -> list[str]:
    """What the process has open, as /proc names it; a process or fd that went meanwhile (a zygote replaced, a
    file closed) has nothing to say."""
    paths: list[str] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(FileNotFoundError):
                paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return paths


def zygote_checks() -> list[Result]:
    """The zygote on a GPU: it holds no GPU (not in NVML's process list, no /dev/nvidia* open) and each variable
    TensorFlow reads when it initializes, set in the fork, takes effect (tests/test_zygote.py proves on a CPU
    that the fork's C library sees them; this proves TensorFlow acts on them)."""
    from tf_device_panel.core.client import zygote
    from tf_device_panel.core.client.runtime import RuntimeProcess
    from tf_device_panel.core.devices.nvml import Nvml

    nvml = Nvml()
    nvml.init()
    zygote.start_zygotes()
    first = RuntimeProcess(DeviceConfig())
    first.start()
    first.stop()
    if not zygote.wait_until_ready(300):
        return [Result("zygote", "the zygote starts", False, "not ready in 300 s")]
    pids = zygote.process_ids()
    listed = {proc.pid for gpu in nvml.gpus() for proc in nvml.processes(gpu.index) or []}
    opened = [path for pid in pids for path in open_files(pid)]
    devices = [path for path in opened if path.startswith("/dev/nvidia")]
    results = [Result("zygote", "the zygote holds no GPU", not (pids & listed) and not devices,
                      f"zygote {sorted(pids)}; in NVML's list: {sorted(pids & listed)}; devices open: {devices}")]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(ZYGOTE_SCRIPT)
    cases: list[tuple[str, DeviceConfig, dict[str, str], dict[str, Any]]] = [
        ("default", DeviceConfig(), {}, {"want_gpus": 1}),
        ("CUDA_VISIBLE_DEVICES='' (no GPU)", DeviceConfig(), {"CUDA_VISIBLE_DEVICES": ""}, {"want_gpus": 0}),
        ("TF_FORCE_GPU_ALLOW_GROWTH=true", DeviceConfig(), {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
         {"want_gpus": 1, "max_held_mib": GROWTH_MAX_MIB}),
        ("TF_GPU_ALLOCATOR=cuda_malloc_async", DeviceConfig(gpu_allocator="cuda_malloc_async"), {},
         {"want_gpus": 1, "want_line": "CUDA malloc Async"}),
    ]
    try:
        for name, config, env, expected in cases:
            runtime = RuntimeProcess(config, env=env)
            runtime.start()
            gpus: int | None = None
            held: int | None = None
            try:
                runtime.wait_ready(120)
                runtime.submit("script", {"path": script.name})
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and runtime.exited is None:
                    event = runtime.next_event(0.2)
                    match = re.search(r"ZYGOTE-RUN (\d+) (\d+)", str(getattr(event, "text", "")))
                    if match:
                        gpus = int(match.group(2))
                        for gpu in nvml.gpus():
                            for proc in nvml.processes(gpu.index) or []:
                                if proc.pid == int(match.group(1)) and proc.used_mib is not None:
                                    held = max(held or 0, proc.used_mib)
            finally:
                runtime.stop()
            results.append(judge_zygote_run(name, runtime.forked, gpus, held, runtime.recent_lines(), **expected))
    finally:
        os.unlink(script.name)
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exporter_during_run(profile: Path) -> Result:
    port = free_port()
    exporter = subprocess.Popen([*PANEL, "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page: list[str] = []

    def scrape() -> None:
        time.sleep(1.5)  # a sample or two of the run
        with contextlib.suppress(OSError):
            page.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())

    try:
        held_by_run(profile, seconds=5.0, during=scrape)
    finally:
        exporter.send_signal(signal.SIGINT)
        try:
            exporter.wait(timeout=30)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait()
    return judge_exporter(page[0] if page else "")


def session_expect(outcome: dict[str, Any]) -> str | None:
    counts = placements_by_device(outcome)
    return None if counts.get("/GPU:0") and counts.get("/GPU:1") else "MatMul did not run on both /GPU:0 and /GPU:1"


def fit_expect(replicas: int, ops: str | None) -> Callable[[dict[str, Any]], str | None]:
    def expect(outcome: dict[str, Any]) -> str | None:
        result = outcome.get("result") or {}
        if result.get("replicas_in_sync") != replicas:
            return f"{result.get('replicas_in_sync')} replicas, wanted {replicas}"
        if ops and result.get("cross_device_ops") != ops:
            return f"cross-device ops {result.get('cross_device_ops')}, wanted {ops}"
        return None
    return expect


def script_expect(outcome: dict[str, Any]) -> str | None:
    """The user's script ran to its end, as __main__, with its arguments (its one op's placement is judge_job's)."""
    result = outcome.get("result") or {}
    if result.get("exit_code") != 0:
        return f"the script ended with exit code {result.get('exit_code')}"
    if list(result.get("argv") or [])[1:] != ["/GPU:0", "0"]:
        return f"the script got argv {result.get('argv')}, wanted its path, /GPU:0 and 0"
    return None


def matrix_expect(expected: list[list[float]]) -> Callable[[dict[str, Any]], str | None]:
    def expect(outcome: dict[str, Any]) -> str | None:
        matrix = (outcome.get("result") or {}).get("matrix")
        return None if matrix == expected else f"result {matrix}, wanted {expected}"
    return expect


ANSWER_BUDGET_MIB = 1024   # fit-batch's budget: a logical GPU of this size, as an instructor's split gives
OUTSIDE_RUNS = 3           # runs from outside at the answer, and at 1.2 × it
SHARE_BATCH = 2048         # the cnn at 32 px; at 16384 it failed on an H200 in its first Relu (not for memory)
CANCELS = 3


def judge_fit_batch(answer: int | None, at_answer: Sequence[str], above: Sequence[str], figures: str) -> Result:
    """fit-batch's answer, run from outside under the same budget: it must hold every time, and 1.2 × it must run
    out at least once (else the answer is over 20% under what fits)."""
    problems = []
    if answer is None:
        problems.append("no answer")
    if any(outcome != "held" for outcome in at_answer):
        problems.append(f"the answer did not hold from outside: {', '.join(at_answer)}")
    if above and all(outcome == "held" for outcome in above):
        problems.append("1.2 × the answer held every time: the answer is over 20% under what fits")
    if any(outcome.startswith("failed") for outcome in above):
        problems.append("a run at 1.2 × the answer failed other than by running out of memory")
    return Result("answers", "fit-batch, cnn", not problems, figures, problems)


def judge_share(report: dict[str, Any], exit_code: int) -> Result:
    """`share --max`: verified seats, every one held side by side, and their limits plus reserves within CUDA's
    total."""
    seats = report.get("seats") or []
    problems = []
    if exit_code != 0 or not report.get("verified"):
        error = report.get("error")
        said = error.get("message", "") if isinstance(error, dict) else str(error or "")
        problems.append(f"exit {exit_code}, verified {report.get('verified')}: {said[:600]}")
    held = [row for row in seats if row.get("status") == "held"]
    if seats and len(held) != len(seats):
        problems.append(f"{len(seats) - len(held)} of {len(seats)} seats did not hold")
    most = report.get("most") or {}
    peaks = [row.get("peak_bytes") or 0 for row in seats]
    figures = (f"{len(seats)} seats of {report.get('seat_mib')} MiB (reserve {report.get('reserved_mib')} MiB each); "
               f"work alone peaked {most.get('work_peak_mib')} MiB, its process {most.get('process_mib')} MiB; "
               f"seat peaks {min(peaks, default=0) / 2**20:.0f}–{max(peaks, default=0) / 2**20:.0f} MiB; "
               f"{most.get('above')}")
    return Result("answers", f"share --max, cnn batch {report.get('batch')}", not problems, figures, problems)


def outside_outcome(outcome: dict[str, Any]) -> str:
    """One run from outside: held, ran out (of memory) or failed (anything else). A run whose allocator printed
    its out-of-memory dump ran out, also when TensorFlow then crashed (the cnn's MaxPoolGrad can, on the CPU)."""
    if outcome.get("status") == "ok":
        return "held"
    if outcome.get("oom"):
        return "ran out"
    message = str((outcome.get("error") or {}).get("message", "")).lower()
    return "ran out" if "out of memory" in message or "oom" in message or "resource exhausted" in message \
        else f"failed ({outcome.get('status')}: {message[:120]})"


def answer_checks(folder: Path) -> list[Result]:
    """fit-batch and share on the real allocator, each answer checked by runs from outside it, and a GPU job
    cancelled by Ctrl+C."""
    results = []
    started = time.monotonic()
    found = run_json("fit-batch", _profile(folder, "whole", DeviceConfig()), "model=cnn", "device=/GPU:0",
                     f"budget_mib={ANSWER_BUDGET_MIB}", timeout=1200)
    result = found.get("result") or {}
    answer = result.get("predicted_max_batch")
    seconds = time.monotonic() - started
    at_answer: list[str] = []
    above: list[str] = []
    if answer:
        capped = _profile(folder, "capped", DeviceConfig(visible_gpus=(0,), virtual_gpus={0: (ANSWER_BUDGET_MIB,)}))
        for batch, outcomes in ((answer, at_answer), (int(answer * 1.2), above)):
            for _ in range(OUTSIDE_RUNS):
                outcomes.append(outside_outcome(run_json(
                    "fit", capped, "model=cnn", f"batch_per_replica={batch}", f"samples={batch}", "epochs=1")))
    figures = (f"{answer} under {ANSWER_BUDGET_MIB} MiB on /GPU:0 in {result.get('runs')} runs / {seconds:.0f} s "
               f"(boundary {result.get('boundary')}, repeats {result.get('repeats')}); from outside: {answer} "
               f"{at_answer.count('held')} of {len(at_answer)} held, {int((answer or 0) * 1.2)} ran out "
               f"{above.count('ran out')} of {len(above)}")
    judged = judge_fit_batch(answer, at_answer, above, figures)
    if answer is None:
        judged.detail.append(textwrap.shorten(json.dumps(found.get("error") or found)[:1500], 600))
    else:
        judged.detail.append("runs: " + "; ".join(
            f"{row.get('role')} {row.get('batch')} {'held' if row.get('fits') else 'ran out'}"
            f" {(row.get('peak_bytes') or 0) / 2**20:.0f} MiB" for row in result.get("rows") or []))
    results.append(judged)

    out = folder / "share"
    done = panel("share", "--max", "--model", "cnn", "--batch", str(SHARE_BATCH), "--out", str(out), "--json",
                 timeout=1200)
    try:
        report = dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        report = {"error": done.stderr[-600:]}
    results.append(judge_share(report, done.returncode))
    results.append(cancel_check())
    return results


def cancel_check() -> Result:
    """A custom loop on the GPU, cancelled (Ctrl+C) once it steps: it must end "cancelled", never crashed."""
    from tf_device_panel.core.client.runtime import RuntimeProcess
    from tf_device_panel.core.protocol import events

    statuses = []
    for _ in range(CANCELS):
        runtime = RuntimeProcess(DeviceConfig(memory_growth=True))
        runtime.start()
        status = "no finish"
        try:
            runtime.wait_ready(120)
            runtime.submit("custom-loop", {"steps": 1_000_000})
            deadline = time.monotonic() + 180
            cancelled = False
            while time.monotonic() < deadline:
                event = runtime.next_event(0.2)
                if not cancelled and isinstance(event, events.Progress) and event.done >= 1:
                    runtime.cancel(grace=20)
                    cancelled = True
                if isinstance(event, events.JobFinished):
                    status = event.status
                    break
                if runtime.exited is not None and event is None:
                    status = f"process exited {runtime.exited}"
                    break
        finally:
            runtime.stop()
        statuses.append(status)
    bad = [s for s in statuses if s != "cancelled"]
    return Result("answers", "a GPU custom loop cancelled", not bad, ", ".join(statuses),
                  [f"{len(bad)} of {len(statuses)} did not end cancelled"] if bad else [])


SECTIONS = ("basics", "jobs", "answers", "benchmark", "exporter", "zygote", "doctor")


def run_all(quick: bool, sections: Sequence[str] = SECTIONS,
            report: Callable[[list[Result], dict[str, Any]], None] = lambda results, facts: None
            ) -> tuple[list[Result], dict[str, Any]]:
    facts = gpu_facts()
    results: list[Result] = []
    if "error" in facts:
        results.append(Result("GPU", "NVML", False, facts["error"], ["run this on a host with an NVIDIA GPU"]))
        return results, facts
    done = panel("devices", "--json", timeout=300)
    with contextlib.suppress(json.JSONDecodeError):
        facts["tf_version"] = json.loads(done.stdout).get("tf_version")
    results.append(Result("GPU", "NVML and CUDA", True,
                          f"{facts['gpu']}: NVML {facts['nvml_total_mib']} MiB, CUDA {facts['cuda_total_mib']} MiB, "
                          f"reserve {facts['reserved_mib']} MiB, {facts['sm_count']} SMs, "
                          f"{facts['max_sm_clock_mhz']} MHz, compute {facts['compute_capability']}"))
    results.append(judge_totals(facts))
    folder = Path(tempfile.mkdtemp(prefix="gpu-acceptance-"))
    profiles = {}
    for name, config in PROFILES.items():
        profiles[name] = folder / f"{name}.json"
        save_profile(config, profiles[name])
    steps: dict[str, Callable[[Path, dict[str, Path], bool, list[Result], dict[str, Any]], None]] = {
        "basics": _basics, "jobs": _jobs, "benchmark": _benchmark, "doctor": _doctor,
        "answers": lambda folder, profiles, quick, results, facts: results.extend(answer_checks(folder)),
        "exporter": lambda folder, profiles, quick, results, facts: results.append(
            exporter_during_run(profiles["growth"])),
        "zygote": lambda folder, profiles, quick, results, facts: results.extend(zygote_checks())}
    for section in sections:
        steps[section](folder, profiles, quick, results, facts)
        report(results, facts)
    return results, facts


def _basics(folder: Path, profiles: dict[str, Path], quick: bool, results: list[Result],
            facts: dict[str, Any]) -> None:
    for name, path in profiles.items():
        shown = panel("devices", "--config", str(path), timeout=300)
        results.append(check_devices(name, shown.stdout, facts["gpu_count"], facts["cuda_total_mib"]))
    for name in ("default", "growth", "split", "fraction", "hidden"):
        held, tail = held_by_run(profiles[name], device="/CPU:0" if name == "hidden" else "/GPU:0")
        result = judge_memory(name, held, facts["nvml_total_mib"], facts["cuda_total_mib"])
        if not result.passed:
            result.detail.append(textwrap.shorten(tail, 600))
        results.append(result)


def _jobs(folder: Path, profiles: dict[str, Path], quick: bool, results: list[Result], facts: dict[str, Any]) -> None:
    split, whole = profiles["split"], profiles["default"]
    product = [[22.0, 28.0], [49.0, 64.0]]
    results.append(judge_job("matmul on /GPU:0", run_json("matmul", whole), matrix_expect(product)))
    results.append(judge_job("matmul on /GPU:1 of a split", run_json("matmul", split, "device=/GPU:1"),
                             matrix_expect(product)))
    results.append(judge_job("replicate over a split", run_json("replicate", split),
                             matrix_expect([[44.0, 56.0], [98.0, 128.0]])))
    results.append(judge_job("session two-devices", run_json("session", split, "example=two-devices"),
                             session_expect))
    from tf_device_panel.core.devices.cudalibs import nccl_version

    nccl = nccl_version()  # in this environment, which the runs inherit (LD_LIBRARY_PATH)
    facts["nccl"] = nccl[0] or f"not loadable: {nccl[1]}"
    results.append(judge_split_choice("fit over a split (auto cross-device ops)", run_json("fit", split), nccl))
    results.append(judge_split_choice("custom-loop over a split (auto)", run_json("custom-loop", split), nccl))
    results.append(judge_job("fit dense, whole GPU", run_json("fit", whole), fit_expect(1, None)))
    results.append(judge_job("memory under growth", run_json("memory", profiles["growth"])))
    oom = run_json("memory", split, "step_mib=1024", "steps=6")
    results.append(judge_job("memory past a 2048 MiB logical GPU (OOM expected)", oom,
                             lambda o: None if "out of memory" in str((o.get("error") or {}).get("message"))
                             else "no out-of-memory error", want_status="error"))
    if not quick:
        results.append(judge_job("fit cnn 150 px, whole GPU", run_json("fit", whole, "model=cnn", "image_size=150"),
                                 fit_expect(1, None)))
        results.append(judge_job("fit cnn over a 4096+4096 split", run_json(
            "fit", _profile(folder, "split4096", DeviceConfig(virtual_gpus={0: (4096, 4096)})), "model=cnn"),
            fit_expect(2, "HierarchicalCopyAllReduce")))
    # Several TensorFlow processes share the one GPU: each must grow its memory, not take it all.
    growth = profiles["growth"]
    results.append(judge_cluster("multi-worker, 2 workers", run_json(
        "multi-worker", growth, "workers=2", "steps=5", "timeout_s=600", timeout=900), 2))
    results.append(judge_cluster("parameter-server, 2 workers", run_json(
        "parameter-server", growth, "workers=2", "steps=10", "log_placement=true", "timeout_s=600", timeout=900), 2))
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(HOLD_SCRIPT)
    try:
        results.append(judge_job("your script (one op on /GPU:0)", run_json(
            "script", whole, f"path={script.name}", "args=/GPU:0 0"), script_expect))
    finally:
        os.unlink(script.name)


def _benchmark(folder: Path, profiles: dict[str, Path], quick: bool, results: list[Result],
               facts: dict[str, Any]) -> None:
    whole = profiles["default"]
    sizes = "1024,4096" if quick else "1024,4096,8192"
    for tf32 in (True, False):
        dtypes = "dtypes=float32,float16,bfloat16" if tf32 else "dtypes=float32"
        bench = run_json("benchmark", whole, f"sizes={sizes}", "devices=/GPU:0", dtypes,
                         f"tf32={'on' if tf32 else 'off'}")
        results.append(judge_benchmark(bench.get("result") or {}, str(facts["compute_capability"]), tf32)
                       if bench.get("status") == "ok" else judge_job("benchmark", bench))
        if tf32 and bench.get("status") == "ok":
            facts["benchmark_rows"] = (bench.get("result") or {}).get("rows")


def _doctor(folder: Path, profiles: dict[str, Path], quick: bool, results: list[Result],
            facts: dict[str, Any]) -> None:
    doctor = panel("doctor", "--json", timeout=600)
    try:
        results.append(judge_doctor(json.loads(doctor.stdout)))
    except json.JSONDecodeError:
        results.append(Result("doctor", "doctor", False, f"no report (exit {doctor.returncode})",
                              [doctor.stderr[-500:]]))


def fixture_files(facts: dict[str, Any], results: Sequence[Result], when: str) -> dict[str, Any]:
    """The readings as tests/fixtures/h100/'s files: gpu.json (NVML, CUDA's total, SMs and clock as read, the
    memory each profile's run held) and benchmark-rows.json (the tf32=on table), each saying where it came from."""
    source = (f"scripts/gpu_acceptance.py --record on {when}: {facts.get('gpu')}, driver {facts.get('driver')}, "
              f"TensorFlow {facts.get('tf_version')}")
    held = {r.name: int(re.sub(r"[^\d]", "", r.figures.split(" MiB")[0])) for r in results
            if r.section == "memory" and " MiB held" in r.figures}
    files: dict[str, Any] = {"gpu.json": {
        "source": source,
        "nvml": {"name": facts.get("gpu"), "memory_total_mib": facts.get("nvml_total_mib"),
                 "reserved_mib": facts.get("reserved_mib"), "compute_capability": facts.get("compute_capability")},
        "cuda_total_mib": facts.get("cuda_total_mib"),
        "sm_count": facts.get("sm_count"), "max_sm_clock_mhz": facts.get("max_sm_clock_mhz"),
        "nccl": facts.get("nccl"),
        "process_memory_after_first_op_mib": held}}
    if facts.get("benchmark_rows"):
        files["benchmark-rows.json"] = {"source": source, "rows": facts["benchmark_rows"]}
    return files


def _profile(folder: Path, name: str, config: DeviceConfig) -> Path:
    path = folder / f"{name}.json"
    save_profile(config, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", default="gpu-acceptance.md", help="where to write the Markdown report")
    parser.add_argument("--json", dest="json_path", help="also write the results and figures as JSON")
    parser.add_argument("--quick", action="store_true", help="skip the CNN fits and the 8192 benchmark")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"which checks, in this order (default: all: {','.join(SECTIONS)})")
    parser.add_argument("--record", metavar="DIR", help="also write the readings as fixture JSON into DIR "
                        "(gpu.json, benchmark-rows.json), the shape tests/fixtures/h100/ holds")
    args = parser.parse_args(argv)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")

    def write(results: list[Result], facts: dict[str, Any]) -> None:
        Path(args.report).write_text(to_markdown(results, facts, when), encoding="utf-8")
        if args.json_path:
            Path(args.json_path).write_text(json.dumps({"when": when, "facts": facts,
                                                        "results": [asdict(r) for r in results]}, indent=1))

    results, facts = run_all(args.quick, sections, write)
    if args.record:
        for name, content in fixture_files(facts, results, when).items():
            Path(args.record).mkdir(parents=True, exist_ok=True)
            (Path(args.record) / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    write(results, facts)
    failed = [r for r in results if r.passed is False]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed; report: {args.report}")
    for result in failed:
        print(f"FAILED {result.section} / {result.name}: {result.figures}; {'; '.join(result.detail)[:400]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
