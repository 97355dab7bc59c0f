"""Why doesn't TensorFlow see (or use) my GPU? Checks with evidence and fixes.

`gather()` collects facts: the platform, environment variables, installed packages, NVML, and a
probe subprocess that imports TensorFlow (its stderr kept for TF's own hints). `diagnose(facts)` runs
every check as a pure function of those facts, so each check can be tested against simulated
machines; a check that raises becomes a skipped check, never a crash of the report.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from packaging.requirements import Requirement
from tf_device_panel.core.catalogue.doctor_probe import PROBE_PREFIX, ProbePlacement
from tf_device_panel.core.client.records import JsonObject
from tf_device_panel.core.config import DeviceConfig, unchecked_gpus_warning, validate
from tf_device_panel.core.devices.cudalibs import NVIDIA_VENDOR, PCI_DEVICES, TESTED_TF_VERSION, is_display_class
from tf_device_panel.core.devices.gpus import (
    created_gpus,
    is_mig_entry,
    mig_warning,
    same_bus,
    tf_gpu_inventory,
    uuid_matches,
)
from tf_device_panel.core.devices.nvml import GpuProcessJson, GpuSnapshotJson, Nvml
from tf_device_panel.core.processes import run_module

log = logging.getLogger(__name__)

PASS, WARN, FAIL, SKIPPED = "pass", "warn", "fail", "skipped"
PROBE_TIMEOUT_S = 180
TF_GPU_HINTS = ("could not find cuda drivers", "failed call to cuinit", "cannot dlopen", "could not load dynamic",
                "skipping registering gpu", "driver version is insufficient", "ignoring visible gpu",
                "cuda_error", "unable to register", "cudnn", "dso loader")
CUDA_PACKAGES_EXTRA = "and-cuda"
CRASH_LINES = 12               # the probe's last output lines kept when it crashes
# The stage a crashed probe was in, from the last stage it reported complete (core.runproc.doctor_probe).
CRASHED_IN = {"started": "import", "import": "GPU discovery", "GPU discovery": "first op", "done": "exit"}
# Checks that ask something of an NVIDIA GPU: on a machine without one they cannot apply.
NEEDS_NVIDIA_GPU = ("driver", "gpus", "cuda-visible-devices", "cuda-libraries", "compute-capability", "gpu-memory",
                    "placement", "pytorch", "xla-devices")


# The facts' parts, as the probe (a JSON line), NVML, sysfs and PyTorch report them. TypedDicts, not classes: they
# are JSON as gathered and as `doctor --json` prints them, and tests simulate machines by writing them out.
class BuildInfo(TypedDict, total=False):
    """tf.sysconfig.get_build_info()'s plain values (core.runproc.tf_facts), the ones the checks read."""

    is_cuda_build: bool
    is_rocm_build: bool
    cuda_version: str
    cudnn_version: str
    cuda_compute_capabilities: list[str]
    error: str


class TfDevice(TypedDict, total=False):
    """A physical device as TensorFlow lists it (core.runproc.tf_facts.physical_devices)."""

    name: str
    device_type: str
    index: int
    visible: bool
    device_name: str
    compute_capability: str | None
    details_error: str


class ProbeCrash(TypedDict):
    """How a probe that did not finish ended, and the stage it was in."""

    returncode: int | None
    how: str
    hung: bool
    timeout_s: float | None
    stage: str
    last_lines: list[str]


class ProbeFacts(TypedDict, total=False):
    """What the probe (core.runproc.doctor_probe) reported of its last stage, and how it ended if it crashed."""

    imported: bool
    stage: str
    env: dict[str, str | None]
    import_error: str
    import_traceback: str
    version: str
    build: BuildInfo
    physical: list[TfDevice]
    logical: list[dict[str, str]]
    placement: list[ProbePlacement]
    runtime_error: str
    crash: ProbeCrash


class NvmlGpu(GpuSnapshotJson, total=False):
    """core.devices.nvml's GpuSnapshot as JSON, with the processes on it (None: the driver does not say)."""

    processes: list[GpuProcessJson] | None


class NvmlFacts(TypedDict, total=False):
    available: bool
    message: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[NvmlGpu]


# One PCI function of NVIDIA's ("class" is a keyword, hence the functional form).
PciFunction = TypedDict("PciFunction", {"address": str, "device": str, "class": str})


class PciFacts(TypedDict, total=False):
    readable: bool
    error: str
    devices: int
    nvidia: list[PciFunction]
    nvidia_other: list[PciFunction]


class TorchFacts(TypedDict, total=False):
    version: str
    cuda: str | None
    available: bool
    count: int
    names: list[str]
    error: str


class LibraryFound(TypedDict):
    """core.devices.cudalibs.Found as JSON: where a CUDA library opens from, or why it does not."""

    soname: str
    path: str | None
    how: str
    error: str


@dataclass
class Check:
    id: str
    title: str
    status: str = PASS
    summary: str = ""
    evidence: list[str] = field(default_factory=list)
    fix: str = ""

    def to_json(self) -> dict[str, str | list[str]]:
        return asdict(self)


@dataclass
class Facts:
    system: str = ""                       # platform.system(): Linux, Windows, Darwin
    release: str = ""
    machine: str = ""
    wsl: bool = False
    python: str = ""
    env: dict[str, str | None] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)        # normalised name -> version
    cuda_requirements: list[str] = field(default_factory=list)    # tensorflow's [and-cuda] requirements
    nvml: NvmlFacts = field(default_factory=lambda: NvmlFacts())
    probe: ProbeFacts = field(default_factory=lambda: ProbeFacts())
    tf_stderr: list[str] = field(default_factory=list)
    verbose_stderr: list[str] = field(default_factory=list)       # re-probe with TF's verbose logging
    torch: TorchFacts | None = None
    config: JsonObject | None = None                              # DeviceConfig.to_json of the profile checked
    pci: PciFacts = field(default_factory=lambda: PciFacts())
    libraries: list[LibraryFound] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return asdict(self)


# -- gathering -----------------------------------------------------------------------------------------
def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normalise(name), dist.version)
    return found


def tensorflow_cuda_requirements() -> list[str]:
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        return [r.split(";")[0].strip() for r in requires if f'extra == "{CUDA_PACKAGES_EXTRA}"' in r]
    return []


def signal_name(returncode: int) -> str:
    import signal

    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_probe(env_extra: dict[str, str] | None = None, place: bool = True,
              timeout: float = PROBE_TIMEOUT_S) -> tuple[ProbeFacts, list[str]]:
    """The probe's facts (the last stage it reported) and its stderr. A probe that died, or hung and was
    killed after `timeout` seconds, keeps the facts of the stages it completed, with `crash`: how it ended
    (a signal, an exit code, or hung), the stage it was in, its last lines."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "0", **(env_extra or {})}
    try:
        done = run_module("tf_device_panel.core.runproc.doctor_probe", *([] if place else ["--no-placement"]), env=env,
                          timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        # What the probe wrote before it hung came with the exception: its stages' facts are kept.
        return probe_outcome(_text(exc.stdout), _text(exc.stderr), None, timeout)
    return probe_outcome(done.stdout, done.stderr, done.returncode, timeout)


def _text(output: bytes | str | None) -> str:
    if output is None:
        return ""
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output


def probe_outcome(stdout: str, stderr_text: str, returncode: int | None,
                  timeout: float) -> tuple[ProbeFacts, list[str]]:
    """The facts of the probe's last reported stage; `returncode` None: it hung and was killed at `timeout`."""
    facts = ProbeFacts(imported=False, stage="started")
    lines = stdout.split("\n")  # not splitlines(): it also splits at the prefix's \x1e
    for line in lines:
        if line.startswith(PROBE_PREFIX):
            facts = cast(ProbeFacts, json.loads(line[len(PROBE_PREFIX):]))
    stderr = stderr_text.splitlines()
    if returncode is None or returncode != 0 or facts.get("stage") != "done":
        output = [ln for ln in lines if ln.strip() and not ln.startswith(PROBE_PREFIX)] + stderr
        if returncode is None:
            how = f"hung: no answer within {timeout:.0f} s, killed"
        else:
            how = signal_name(returncode) if returncode < 0 else f"exit code {returncode}"
        facts["crash"] = {"returncode": returncode, "how": how, "hung": returncode is None,
                          "timeout_s": timeout if returncode is None else None,
                          "stage": CRASHED_IN.get(str(facts.get("stage")), "import"),
                          "last_lines": [ln[-300:] for ln in output[-CRASH_LINES:]]}
    return facts, stderr


def probe_libraries() -> list[LibraryFound]:
    """Where each CUDA library TensorFlow opens is found, asked in a process of the probe's environment."""
    try:
        done = run_module("tf_device_panel.core.runproc.doctor_probe", "--libraries", timeout=60)
        for line in done.stdout.split("\n"):
            if line.startswith(PROBE_PREFIX):
                return list(json.loads(line[len(PROBE_PREFIX):]))
    except (subprocess.SubprocessError, ValueError, OSError) as exc:
        log.warning("could not look for the CUDA libraries: %s", exc)
    return []


def pci_facts(root: Path = PCI_DEVICES) -> PciFacts:
    """The PCI devices the kernel lists: is there an NVIDIA GPU (an NVIDIA display-class function) at all?
    `nvidia`: NVIDIA's GPUs; `nvidia_other`: NVIDIA's other functions (audio, NVSwitch), evidence only."""
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        return {"readable": False, "error": f"cannot read {root}: {exc.strerror or exc}"}
    nvidia: list[PciFunction] = []
    other: list[PciFunction] = []
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR:
            def read(name: str, entry: Path = entry) -> str:
                try:
                    return (entry / name).read_text().strip()
                except OSError:
                    return ""
            function = PciFunction({"address": entry.name, "device": read("device"), "class": read("class")})
            (nvidia if is_display_class(function["class"]) else other).append(function)
    return {"readable": True, "devices": len(entries), "nvidia": nvidia, "nvidia_other": other}


def probe_torch() -> TorchFacts:
    code = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'version': torch.__version__, "
            "'cuda': torch.version.cuda, 'available': ok, 'count': torch.cuda.device_count() if ok else 0, "
            "'names': [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if ok else []}))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return cast(TorchFacts, dict(json.loads(done.stdout.strip().splitlines()[-1])))
    except (subprocess.SubprocessError, ValueError, IndexError, OSError) as exc:
        return {"error": f"could not ask PyTorch: {exc}"}


def nvml_facts(nvml: Nvml) -> NvmlFacts:
    if not nvml.init():
        return {"available": False, "message": nvml.message}
    gpus = []
    for gpu in nvml.gpus():
        processes = nvml.processes(gpu.index)
        gpus.append(cast(NvmlGpu, {**gpu.to_json(), "processes": None if processes is None
                                   else [process.to_json() for process in processes]}))
    return {"available": True, "driver_version": nvml.driver_version(),
            "cuda_driver_version": nvml.cuda_driver_version(), "gpus": gpus}


def gather(config: DeviceConfig | None = None, nvml: Nvml | None = None) -> Facts:
    packages = installed_packages()
    facts = Facts(
        system=platform.system(), release=platform.release(), machine=platform.machine(),
        wsl="microsoft" in platform.release().lower(), python=platform.python_version(),
        env={k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                                            "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "LD_LIBRARY_PATH")},
        packages=packages, cuda_requirements=tensorflow_cuda_requirements(),
        nvml=nvml_facts(nvml or Nvml()), config=config.to_json() if config else None, pci=pci_facts())
    facts.probe, stderr = run_probe()
    facts.libraries = probe_libraries()
    relevant = [line for line in stderr if any(h in line.lower() for h in TF_GPU_HINTS) or "Created device" in line]
    by_message = {line.split("] ", 1)[-1]: line for line in relevant}  # TF repeats some lines; keep one each
    facts.tf_stderr = list(by_message.values())[-40:]
    libraries_missing = any("dlopen" in line.lower() or "could not load dynamic" in line.lower()
                            for line in facts.tf_stderr)
    if libraries_missing:  # verbose logging names the library that failed to load
        _, verbose = run_probe({"TF_CPP_MAX_VLOG_LEVEL": "3"}, place=False)
        facts.verbose_stderr = [line for line in verbose
                                if re.search(r"(could not load|cannot open|dlopen|No such file).*\.so", line,
                                             re.IGNORECASE)][-20:]
    if "torch" in packages:
        facts.torch = probe_torch()
    return facts


# -- checks --------------------------------------------------------------------------------------------
def _tf_gpus(facts: Facts) -> list[TfDevice]:
    return [d for d in facts.probe.get("physical", []) if d.get("device_type") == "GPU"]


def _nvml_gpus(facts: Facts) -> list[NvmlGpu]:
    return list(facts.nvml.get("gpus") or []) if facts.nvml.get("available") else []


def _version_tuple(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or "")[:2])


def tf_bus_ids(lines: list[str]) -> dict[int, str]:
    """TF's physical GPU index -> PCI bus id, from its 'Created device' lines."""
    return {gpu["physical"]: gpu["pci_bus_id"] for gpu in created_gpus(lines)}


def tf_version_for_fix(facts: Facts) -> str:
    """The TensorFlow version a fix should install: the one there (imported or installed), else the tested one."""
    return str(facts.probe.get("version") or facts.packages.get("tensorflow") or TESTED_TF_VERSION)


def pip_command() -> str:
    """pip of the Python the panel runs in (the one its runs use), not whichever `pip` is first on PATH."""
    return f"{shlex.quote(sys.executable)} -m pip"


def install_fix(facts: Facts) -> str:
    return f"{pip_command()} install 'tensorflow[and-cuda]=={tf_version_for_fix(facts)}'"


def cpu_install_command(facts: Facts) -> str:
    return f"{pip_command()} install 'tensorflow=={tf_version_for_fix(facts)}'"


def has_nvidia_gpu(facts: Facts) -> bool | None:
    """Whether this machine has an NVIDIA GPU: True when the PCI bus, NVML or TensorFlow shows one; False when
    the PCI bus was read and none of them shows one; None when nothing could tell (PCI unreadable, no NVML)."""
    if facts.pci.get("nvidia") or _nvml_gpus(facts) or _tf_gpus(facts):
        return True
    return False if facts.pci.get("readable") else None


CRASH_FIXES = {
    "import": "TensorFlow's own libraries or the CUDA libraries it loads at import do not match: see cuda-libraries "
              "for where each was found; reinstall with {pip} install --force-reinstall '{tf}', and take other CUDA "
              "folders out of LD_LIBRARY_PATH",
    "GPU discovery": "TensorFlow died opening the GPU: a driver or CUDA runtime that does not match (see driver and "
                     "cuda-libraries); {pip} install --force-reinstall '{tf}'",
    "first op": "TensorFlow saw the GPU but died running its first op: a CUDA library it opened fails when called "
                "(a mismatched or stand-in cuBLAS/cuDNN; see cuda-libraries for where each was found)",
    "exit": "TensorFlow finished but the process died on its way out; the checks above hold",
}


HANG_FIXES = {
    "import": "importing TensorFlow did not finish: a slow or stalled file system (a network home, a busy disk) "
              "or a library that blocks at load; time `python -c 'import tensorflow'` by hand",
    "GPU discovery": "TensorFlow stalled opening the GPU (cuInit): a GPU in a bad state or held by another "
                     "process, or a driver that is being updated; check `nvidia-smi`, and its persistence mode "
                     "(sudo nvidia-smi -pm 1), then try again",
    "first op": "TensorFlow saw the GPU but its first op did not finish: compiling kernels for a GPU its build "
                "has no binaries for (PTX JIT, can take many minutes once), or a GPU held by another process; "
                "see compute-capability and gpu-memory",
    "exit": "TensorFlow finished but the process did not exit; the checks above hold",
}


def check_tensorflow(facts: Facts) -> Check:
    check = Check("tensorflow", "TensorFlow imports, and its build")
    probe = facts.probe
    crash = probe.get("crash")
    if crash and crash.get("hung"):
        check.status = FAIL
        check.summary = (f"the TensorFlow probe hung during {crash['stage']}: no answer within "
                         f"{crash.get('timeout_s') or PROBE_TIMEOUT_S:.0f} s, so it was killed")
    elif crash:
        check.status = FAIL
        check.summary = f"the TensorFlow probe crashed ({crash['how']}) during {crash['stage']}"
    if crash:
        reached = [stage for stage in ("import", "GPU discovery") if stage != crash["stage"]
                   and probe.get("stage") in (stage, "GPU discovery", "done")]
        check.evidence = [f"stages completed before it: {', '.join(reached) or 'none'}"]
        if probe.get("version"):
            check.evidence.append(f"TensorFlow {probe['version']} had imported"
                                  + (f", seeing {len(_tf_gpus(facts))} GPU(s)" if "physical" in probe else ""))
        check.evidence += [f"last output: {line}" for line in crash.get("last_lines", [])]
        fixes = HANG_FIXES if crash.get("hung") else CRASH_FIXES
        check.fix = fixes.get(crash["stage"], fixes["import"]).format(
            tf=f"tensorflow[and-cuda]=={tf_version_for_fix(facts)}", pip=pip_command())
        return check
    if not probe.get("imported"):
        check.status, check.summary = FAIL, "TensorFlow cannot be imported"
        check.evidence = [probe.get("import_error", ""), *probe.get("import_traceback", "").splitlines()[-4:]]
        cpu_only = cpu_install_command(facts)
        gpu_here = has_nvidia_gpu(facts)
        if gpu_here is False:
            check.fix = f"{cpu_only}   (no NVIDIA GPU here: the CUDA packages would be gigabytes of nothing)"
        elif gpu_here is None:  # nothing showed a GPU: the CPU build first, the CUDA one for where there is one
            check.fix = f"{cpu_only}   (no NVIDIA GPU seen here); on Linux with an NVIDIA GPU: {install_fix(facts)}"
        else:
            check.fix = f"{install_fix(facts)}   (this machine has an NVIDIA GPU); for the CPU only: {cpu_only}"
        return check
    build = probe.get("build", {})
    check.evidence = [f"TensorFlow {probe.get('version')}, Python {facts.python}"]
    if build.get("is_cuda_build"):
        check.summary = f"TensorFlow {probe.get('version')}, built for CUDA {build.get('cuda_version')}"
        check.evidence.append(f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}, "
                              f"architectures {', '.join(build.get('cuda_compute_capabilities', []))}")
    elif build.get("is_rocm_build"):
        check.summary = f"TensorFlow {probe.get('version')}, built for ROCm"
    else:
        check.summary = f"TensorFlow {probe.get('version')} is a CPU-only build"
        if has_nvidia_gpu(facts) is False:
            check.summary += " (this machine has no NVIDIA GPU, so it loses nothing)"
        else:
            check.status = WARN
            replace_cpu = (f"{pip_command()} uninstall -y tensorflow-cpu && " if "tensorflow-cpu" in facts.packages
                           else "")
            check.fix = (f"This TensorFlow can never use a GPU. On Linux: {replace_cpu}{pip_command()} install "
                         f"--force-reinstall 'tensorflow[and-cuda]=={tf_version_for_fix(facts)}'")
    return check


def check_hardware(facts: Facts) -> Check:
    """First: is there an NVIDIA GPU on this machine at all? Without one no driver or library helps.

    "None" only when every witness agrees: the PCI bus lists no NVIDIA display controller AND NVML and
    TensorFlow's probe see no GPU. Containers often hide /sys/bus/pci while the GPU works: when NVML or
    TensorFlow sees a GPU the PCI bus does not, that is a contradiction to report, and the checks still run."""
    check = Check("hardware", "An NVIDIA GPU on the PCI bus")
    pci = facts.pci
    if facts.wsl:
        check.status, check.summary = SKIPPED, "WSL2 reaches the GPU through the Windows driver, not a PCI device"
        return check
    if not pci.get("readable"):
        check.status = SKIPPED
        check.summary = f"the PCI bus cannot be read here ({pci.get('error') or 'not Linux'})"
        return check
    nvidia = pci.get("nvidia") or []
    other = [f"{d['address']}: NVIDIA device {d.get('device') or '?'}, class {d.get('class') or '?'} — not a GPU "
             "(a GPU's audio function or an NVSwitch bridge)" for d in pci.get("nvidia_other") or []]
    if not nvidia:
        nvml_gpus, tf_gpus = _nvml_gpus(facts), _tf_gpus(facts)
        searched = (f"read {PCI_DEVICES}/*/vendor and class: {pci.get('devices', 0)} devices, no NVIDIA display "
                    f"controller (vendor {NVIDIA_VENDOR}, class 0x03xxxx)")
        if nvml_gpus or tf_gpus:
            check.status = WARN
            check.summary = (f"the PCI bus shows no NVIDIA GPU, yet NVML sees {len(nvml_gpus)} and TensorFlow sees "
                             f"{len(tf_gpus)}: {PCI_DEVICES} is probably hidden or partial here (a container); "
                             "the other checks run")
            check.evidence = [searched, *other,
                              *[f"NVML: GPU {g['index']} {g.get('name')} at {g.get('pci_bus_id')}" for g in nvml_gpus],
                              *[f"TensorFlow: {d['name']} {d.get('device_name', '')}" for d in tf_gpus]]
            return check
        check.status = FAIL
        check.summary = (f"no NVIDIA GPU on this machine: none of its {pci.get('devices', 0)} PCI devices is "
                         f"an NVIDIA display controller (vendor {NVIDIA_VENDOR}, class 0x03xxxx), and neither NVML "
                         "nor TensorFlow sees a GPU")
        check.evidence = [searched, *other,
                          f"NVML: {facts.nvml.get('message') or 'no GPU'}" if not facts.nvml.get("available")
                          else "NVML: 0 GPUs",
                          f"TensorFlow: {'0 GPUs' if 'physical' in facts.probe else 'no GPU list'}",
                          "no driver or CUDA library can help: the checks that need a GPU are skipped"]
        check.fix = ("Run on a machine with an NVIDIA GPU: a cloud GPU instance, or a VM or container with a GPU "
                     "passed through (PCI passthrough; docker run --gpus all). Here TensorFlow runs on the CPU"
                     + ("" if facts.probe.get("imported") or "tensorflow" in facts.packages
                        else f" ({cpu_install_command(facts)})")
                     + ": split the CPU into logical devices in the panel to try distribution")
        return check
    check.summary = f"{len(nvidia)} NVIDIA GPU(s) on the PCI bus"
    check.evidence = [f"{d['address']}: device {d.get('device') or '?'}, class {d.get('class') or '?'}"
                      for d in nvidia] + other
    return check


def check_platform(facts: Facts) -> Check:
    check = Check("platform", "Platform", summary=f"{facts.system} {facts.release} ({facts.machine})")
    check.evidence = [check.summary + (" under WSL2" if facts.wsl else "")]
    version = _version_tuple(facts.probe.get("version"))
    if facts.system == "Windows" and version and version >= (2, 11):
        check.status = FAIL
        check.summary = "native Windows: TensorFlow ≥ 2.11 has no GPU support there"
        check.fix = ("Use WSL2 (Ubuntu) with the Windows NVIDIA driver and, inside it, python3 -m pip install "
                     f"'tensorflow[and-cuda]=={tf_version_for_fix(facts)}'")
    elif facts.system == "Darwin":
        check.status = WARN
        check.summary = "macOS: no CUDA; Apple GPUs need the Metal plugin"
        check.fix = (f"{pip_command()} install tensorflow-metal (Apple silicon; its release notes name the TensorFlow "
                     "it pairs with)")
    return check


def check_driver(facts: Facts) -> Check:
    check = Check("driver", "NVIDIA driver")
    nvml = facts.nvml
    if not nvml.get("available"):
        check.status, check.summary = FAIL, nvml.get("message") or "NVML is unavailable"
        driver_lines = [ln for ln in facts.tf_stderr if "cuinit" in ln.lower() or "cuda drivers" in ln.lower()]
        check.evidence = [f"NVML: {nvml.get('message')}", *driver_lines[:3]]
        check.fix = ("Install the NVIDIA driver for your GPU (Ubuntu: sudo ubuntu-drivers install; then reboot) and "
                     "check that `nvidia-smi` lists the GPU. In a container, run it with --gpus all.")
        return check
    driver_cuda = nvml.get("cuda_driver_version")
    tf_cuda = facts.probe.get("build", {}).get("cuda_version")
    check.summary = f"driver {nvml.get('driver_version')}, supports CUDA up to {driver_cuda}"
    check.evidence = [check.summary] + ([f"TensorFlow was built with CUDA {tf_cuda}"] if tf_cuda else [])
    if tf_cuda and driver_cuda and _version_tuple(driver_cuda) < _version_tuple(tf_cuda):
        check.status = FAIL
        check.summary = f"driver too old: it supports CUDA {driver_cuda}, TensorFlow needs CUDA {tf_cuda}"
        check.fix = f"Update the NVIDIA driver to one that supports CUDA {tf_cuda} or newer"
    return check


def check_gpu_match(facts: Facts) -> Check:
    check = Check("gpus", "GPUs seen by the driver versus by TensorFlow")
    nvml_gpus, tf_gpus = _nvml_gpus(facts), _tf_gpus(facts)
    if not facts.nvml.get("available"):
        check.status, check.summary = SKIPPED, "no NVIDIA driver, so nothing to compare"
        check.evidence = [f"TensorFlow sees {len(tf_gpus)} GPU(s)"]
        return check
    crash = facts.probe.get("crash")
    if crash and "physical" not in facts.probe:
        check.status = SKIPPED
        check.summary = (f"driver sees {len(nvml_gpus)}; TensorFlow's count is unknown: its probe crashed during "
                         f"{crash['stage']} (see tensorflow)")
        if crash.get("hung"):
            check.summary = check.summary.replace("its probe crashed during", "its probe hung during")
        return check
    buses = tf_bus_ids(facts.tf_stderr)
    check.evidence = [f"driver: GPU {g['index']} {g.get('name')} at {g.get('pci_bus_id')}" for g in nvml_gpus]
    check.evidence += [f"TensorFlow: {d['name']} {d.get('device_name', '')}"
                       + (f" at {buses[i]}" if i in buses else "") for i, d in enumerate(tf_gpus)]
    unmatched = [g for g in nvml_gpus if not any(same_bus(g.get("pci_bus_id"), bus) for bus in buses.values())]
    check.summary = f"driver sees {len(nvml_gpus)}, TensorFlow sees {len(tf_gpus)}"
    if len(tf_gpus) < len(nvml_gpus):
        check.status = FAIL if not tf_gpus else WARN
        missing = ", ".join(f"GPU {g['index']} ({g.get('name')}, {g.get('pci_bus_id')})" for g in unmatched) \
            if buses else f"{len(nvml_gpus) - len(tf_gpus)} GPU(s)"
        check.summary += f": TensorFlow is missing {missing}"
        check.fix = ("The other checks say why: CUDA_VISIBLE_DEVICES, missing CUDA libraries, a driver too old, or a "
                     "compute capability the build lacks")
    return check


def check_visible_devices(facts: Facts) -> Check:
    check = Check("cuda-visible-devices", "CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER")
    value = facts.env.get("CUDA_VISIBLE_DEVICES")
    order = facts.env.get("CUDA_DEVICE_ORDER")
    nvml_gpus = _nvml_gpus(facts)
    check.evidence = [f"CUDA_VISIBLE_DEVICES={value!r}" if value is not None else "CUDA_VISIBLE_DEVICES is not set",
                      f"CUDA_DEVICE_ORDER={order!r}" if order else "CUDA_DEVICE_ORDER is not set (CUDA: fastest first)"]
    check.summary = "not restricting GPUs" if value is None else f"CUDA_VISIBLE_DEVICES={value}"
    if value is not None and value.strip() in ("", "-1"):
        check.status, check.summary = FAIL, f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
        check.fix = "unset CUDA_VISIBLE_DEVICES   (or set it to the GPUs to use, e.g. export CUDA_VISIBLE_DEVICES=0)"
        return check
    if value is not None and nvml_gpus:
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if not is_mig_entry(v)
               and ((v.isdigit() and int(v) >= len(nvml_gpus))
                    or (not v.isdigit() and len(uuid_matches(v, nvml_gpus)) != 1))]
        if bad:
            check.status = FAIL
            check.summary = f"CUDA_VISIBLE_DEVICES names GPUs that do not exist: {', '.join(bad)}"
            check.fix = (f"This machine has GPUs 0–{len(nvml_gpus) - 1}; CUDA stops at the first bad entry. "
                         f"Fix it, e.g. export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(len(nvml_gpus)))}")
            return check
    mig = mig_warning(value)
    if mig is not None:
        check.status, check.summary = WARN, mig
        check.fix = "`nvidia-smi -L` lists each MIG instance with its UUID and memory: check its size there"
        return check
    if len({g.get("name") for g in nvml_gpus}) > 1 and order != "PCI_BUS_ID":
        check.status = WARN
        check.summary = "different GPU models, and CUDA numbers them fastest-first, unlike nvidia-smi"
        check.fix = "export CUDA_DEVICE_ORDER=PCI_BUS_ID so TensorFlow's GPU indices match nvidia-smi's"
    return check


def _satisfies(version: str, requirement: str) -> bool:
    return Requirement(requirement).specifier.contains(version, prereleases=True)


def check_cuda_libraries(facts: Facts) -> Check:
    """Judged as TensorFlow's loader judges: can each library be opened by its soname in the probe's
    environment (TensorFlow's pip packages, LD_LIBRARY_PATH, the system), and did TensorFlow say it could not
    open one. Which pip packages are installed is evidence only: system CUDA, conda and NVIDIA's containers
    provide the libraries without them."""
    from tf_device_panel.core.devices.cudalibs import LIBRARIES, tf_dlopen_failures

    check = Check("cuda-libraries", "CUDA libraries for TensorFlow")
    build = facts.probe.get("build", {})
    crashed = bool(facts.probe.get("crash"))
    if not crashed and (not facts.probe.get("imported") or not build.get("is_cuda_build")):
        check.status, check.summary = SKIPPED, "not a CUDA build of TensorFlow"
        return check
    tf_failed = tf_dlopen_failures(facts.tf_stderr + facts.verbose_stderr)
    found = {entry["soname"]: entry for entry in facts.libraries}
    for library in LIBRARIES:
        entry = found.get(library.soname)
        if entry is None:
            continue
        if entry.get("path"):
            check.evidence.append(f"{library.soname} ({library.what}): {entry['path']} — {entry['how']}")
        else:
            check.evidence.append(f"{library.soname} ({library.what}): " + (entry.get("error") or "not found"))
    check.evidence += [f"TensorFlow: could not load {name}" + (f": {why}" if why else "")
                       for name, why in tf_failed.items()]
    required = [lib for lib in LIBRARIES if lib.required]
    missing = [lib for lib in required if (lib.soname in found and not found[lib.soname].get("path"))
               or lib.soname in tf_failed]
    optional_missing = [lib for lib in LIBRARIES if not lib.required and lib.soname in found
                        and not found[lib.soname].get("path")]
    dlopen_said = [ln for ln in facts.tf_stderr if "cannot dlopen" in ln.lower()
                   or "skipping registering gpu" in ln.lower()]
    packages = _cuda_package_notes(facts)
    if missing or (dlopen_said and not found):
        check.status = FAIL
        names = ", ".join(f"{lib.soname} ({lib.what}: {lib.needed_for})" for lib in missing) or \
            "some of them (TensorFlow's messages below)"
        stand_in = any(lib.soname in found and "opens but has no" in str(found[lib.soname].get("error"))
                       for lib in missing)
        check.summary = f"TensorFlow cannot {'use' if stand_in else 'open'} {names}"
        check.evidence += dlopen_said[:4] + packages
        check.fix = (f"{install_fix(facts)} (NVIDIA's pip packages, found by TensorFlow itself), or add the folder "
                     "that holds them (system CUDA 12, conda) to LD_LIBRARY_PATH")
        return check
    if not found:
        check.status = SKIPPED
        check.summary = "could not look for the libraries (the library probe gave nothing)"
        check.evidence += packages
        return check
    places = sorted({str(found[lib.soname].get("how")) for lib in required if lib.soname in found})
    check.summary = f"all {len(required)} CUDA libraries TensorFlow needs open ({'; '.join(places)})"
    if optional_missing:
        check.status = WARN
        check.summary += "; not found: " + ", ".join(f"{lib.soname} ({lib.needed_for})" for lib in optional_missing)
        check.fix = (f"only needed for {', '.join(lib.needed_for for lib in optional_missing)}: "
                     f"{install_fix(facts)} installs them")
    check.evidence += packages
    return check


def _cuda_package_notes(facts: Facts) -> list[str]:
    """TensorFlow's [and-cuda] pip packages: which are missing or at other versions (evidence, not a verdict)."""
    missing, wrong = [], []
    for requirement in facts.cuda_requirements:
        name = _normalise(re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0])
        version = facts.packages.get(name)
        if version is None:
            missing.append(name)
        elif not _satisfies(version, requirement):
            wrong.append(f"{name} {version} (TensorFlow asks {requirement[len(name):]})")
    notes = [f"pip package at another version: {w}" for w in wrong]
    if missing:
        notes.append(f"pip packages not installed (the libraries may come from elsewhere): {', '.join(missing)}")
    return notes


def check_compute_capability(facts: Facts) -> Check:
    check = Check("compute-capability", "GPU compute capability versus TensorFlow's build")
    archs = facts.probe.get("build", {}).get("cuda_compute_capabilities") or []
    gpus = [(g.get("name"), g.get("compute_capability")) for g in _nvml_gpus(facts) if g.get("compute_capability")]
    if not gpus:
        gpus = [(g.get("device_name"), g.get("compute_capability")) for g in _tf_gpus(facts)
                if g.get("compute_capability")]
    if not gpus or not archs:
        check.status, check.summary = SKIPPED, "no GPU capability or build architectures to compare"
        return check
    cubins = {int(a[3:]) for a in archs if a.startswith("sm_")}
    ptx = [int(a[8:]) for a in archs if a.startswith("compute_")]
    check.evidence = [f"build: {', '.join(archs)}"]
    unsupported = []
    for name, capability in gpus:
        value = int(str(capability).replace(".", ""))
        ok = value in cubins or any(p <= value for p in ptx) or any(c <= value and c // 10 == value // 10
                                                                    for c in cubins)
        check.evidence.append(f"{name}: compute {capability}" + ("" if ok else " — not in the build"))
        if not ok:
            unsupported.append(f"{name} ({capability})")
    ignored = [ln for ln in facts.tf_stderr if "ignoring visible gpu" in ln.lower()]
    check.evidence += ignored[:3]
    if unsupported or ignored:
        check.status = FAIL
        check.summary = f"TensorFlow was not built for {', '.join(unsupported) or 'a GPU here'}"
        check.fix = ("Use a TensorFlow release built for this GPU's architecture (older GPUs: an older TensorFlow), "
                     "or build TensorFlow from source with TF_CUDA_COMPUTE_CAPABILITIES including it")
    else:
        check.summary = "every GPU's architecture is in the build"
    return check


def check_packages(facts: Facts) -> Check:
    check = Check("packages", "Conflicting TensorFlow and Keras packages")
    packages = facts.packages
    present = {n: packages[n] for n in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                                       "keras", "tf-keras", "tensorflow-metal") if n in packages}
    check.evidence = [f"{n} {v}" for n, v in present.items()]
    problems, fixes = [], []
    if "tensorflow-gpu" in present:
        problems.append("the retired tensorflow-gpu package is installed")
        fixes.append(f"{pip_command()} uninstall -y tensorflow-gpu")
    if "tensorflow" in present and "tensorflow-cpu" in present:
        problems.append("both tensorflow and tensorflow-cpu are installed (one overwrites the other's files)")
        wanted = "tensorflow[and-cuda]" if has_nvidia_gpu(facts) else "tensorflow"
        fixes.append(f"{pip_command()} uninstall -y tensorflow-cpu tensorflow && {pip_command()} install "
                     f"'{wanted}=={tf_version_for_fix(facts)}'")
    tf_version = _version_tuple(present.get("tensorflow") or present.get("tensorflow-cpu"))
    keras = _version_tuple(present.get("keras"))
    if tf_version >= (2, 16) and keras and keras[0] < 3:
        problems.append(f"TensorFlow {'.'.join(map(str, tf_version))} expects Keras 3, but keras "
                        f"{present['keras']} is installed")
        fixes.append(f"{pip_command()} install -U 'keras>=3'")
    tf_keras = _version_tuple(present.get("tf-keras"))
    if tf_keras and tf_version and tf_keras[:2] != tf_version[:2]:
        problems.append(f"tf-keras {present['tf-keras']} does not match TensorFlow "
                        f"{'.'.join(map(str, tf_version))} (they are released in step)")
        fixes.append(f"{pip_command()} install 'tf-keras~={tf_version[0]}.{tf_version[1]}.0'")
    if problems:
        check.status, check.summary, check.fix = WARN, "; ".join(problems), " && ".join(fixes)
    else:
        check.summary = "no conflicting packages"
    return check


def check_gpu_memory(facts: Facts) -> Check:
    check = Check("gpu-memory", "Other processes holding GPU memory")
    gpus = _nvml_gpus(facts)
    if not gpus:
        check.status, check.summary = SKIPPED, "no GPU readable through NVML"
        return check
    holders = []
    for gpu in gpus:
        for process in gpu.get("processes") or []:
            used = f"{process['used_mib']} MiB" if process.get("used_mib") is not None else "memory N/A"
            holders.append(f"GPU {gpu['index']}: pid {process['pid']} {process.get('name') or '(other container)'}"
                           f" holds {used}")
        if gpu.get("processes") is None:
            check.evidence.append(f"GPU {gpu['index']}: process list not readable")
        if gpu.get("memory_total_mib"):
            check.evidence.append(f"GPU {gpu['index']}: {gpu.get('memory_used_mib')} of {gpu['memory_total_mib']} "
                                  "MiB in use")
    check.evidence += holders
    if holders:
        check.status = WARN
        check.summary = f"{len(holders)} process(es) already hold GPU memory"
        check.fix = ("TensorFlow reserves nearly all free GPU memory at start: stop those processes, or enable memory "
                     "growth / set memory limits in the configuration")
    else:
        check.summary = "no other process holds GPU memory"
    return check


def check_configuration(facts: Facts) -> Check:
    check = Check("configuration", "The device configuration")
    if facts.config is None:
        check.status, check.summary = SKIPPED, "no configuration given (use --config FILE)"
        return check
    config = DeviceConfig.from_json(facts.config)
    gpus = tf_gpu_inventory(_nvml_gpus(facts), facts.env.get("CUDA_VISIBLE_DEVICES"))
    problems = validate(config, gpus if facts.nvml.get("available") else None, facts.env.get("CUDA_VISIBLE_DEVICES"))
    check.evidence = [config.summary()] + [str(p) for p in problems]
    growth_env = (facts.env.get("TF_FORCE_GPU_ALLOW_GROWTH") or "").lower() == "true"
    if growth_env and (config.virtual_gpus or config.memory_fraction is not None):
        problems_text = ("TF_FORCE_GPU_ALLOW_GROWTH=true is set together with "
                         + ("virtual GPUs" if config.virtual_gpus else "memory_fraction"))
        check.evidence.append(problems_text)
        check.status, check.summary = WARN, problems_text + " (TensorFlow rejects growth on split GPUs)"
        check.fix = ("unset TF_FORCE_GPU_ALLOW_GROWTH, or remove "
                     + ("the virtual GPU split" if config.virtual_gpus else "memory_fraction"))
    unchecked = None if facts.nvml.get("available") else unchecked_gpus_warning(
        config, f"NVML is not available ({facts.nvml.get('message') or 'no NVIDIA driver'})")
    if unchecked is not None and not problems and check.status == PASS:
        check.evidence.append(str(unchecked))
        check.status, check.summary, check.fix = WARN, f"{unchecked.field}: {unchecked.message}", unchecked.hint
    if problems:
        check.status = FAIL
        check.summary = f"{len(problems)} problem(s): {problems[0]}"
        check.fix = problems[0].hint or "fix the configuration"
    elif check.status == PASS:
        check.summary = config.summary()
    return check


def check_placement(facts: Facts) -> Check:
    check = Check("placement", "Ops really run on each GPU")
    results = facts.probe.get("placement") or []
    if not _tf_gpus(facts):
        check.status, check.summary = SKIPPED, "TensorFlow has no GPU to place ops on"
        return check
    if facts.probe.get("runtime_error"):
        check.status, check.summary = FAIL, f"TensorFlow failed to start: {facts.probe['runtime_error']}"
        check.fix = "read the evidence of the other checks; this is usually a CUDA library or driver problem"
        return check
    moved = []
    for item in results:
        landed = item["actual"].split("device:")[-1] == item["requested"].split("device:")[-1]
        check.evidence.append(f"MatMul on {item['requested']} → ran on {item['actual']}")
        if not landed:
            moved.append(item["requested"])
    if moved:
        check.status = WARN
        check.summary = f"soft placement silently moved ops off {', '.join(moved)} to another device"
        check.fix = "turn soft placement off to get TensorFlow's error, and read it"
    else:
        check.summary = f"a MatMul ran on each of {len(results)} logical GPU(s)"
    return check


def check_torch(facts: Facts) -> Check:
    check = Check("pytorch", "PyTorch's view of the GPU")
    if facts.torch is None:
        check.status, check.summary = SKIPPED, "PyTorch is not installed"
        return check
    torch = facts.torch
    if "error" in torch:
        check.status, check.summary = SKIPPED, torch["error"]
        return check
    check.evidence = [f"torch {torch.get('version')} (CUDA {torch.get('cuda')}): "
                      f"{torch.get('count')} GPU(s) {', '.join(torch.get('names', []))}"]
    tf_count = len(_tf_gpus(facts))
    if torch.get("available") and tf_count == 0:
        check.status = WARN
        check.summary = "PyTorch uses the GPU but TensorFlow does not: the driver works, TensorFlow's setup does not"
        check.fix = f"{install_fix(facts)} (see cuda-libraries)"
    elif not torch.get("available"):
        check.summary = "PyTorch does not see a GPU either: look at the driver first"
    else:
        check.summary = f"PyTorch and TensorFlow both see GPUs ({torch.get('count')} / {tf_count})"
    return check


def check_xla_only(facts: Facts) -> Check:
    check = Check("xla-devices", "XLA-only GPU devices (old TensorFlow)")
    kinds = [d.get("device_type") for d in facts.probe.get("physical", [])]
    if "XLA_GPU" in kinds and "GPU" not in kinds:
        check.status = FAIL
        check.summary = "TensorFlow lists XLA_GPU but no GPU: the CUDA libraries failed to load in an old release"
        check.fix = (f"upgrade TensorFlow ({pip_command()} install -U 'tensorflow[and-cuda]=={TESTED_TF_VERSION}', the "
                     "release this panel is tested with) and check cuda-libraries")
    else:
        check.summary = "no XLA-only devices"
    return check


CHECKS: list[Callable[[Facts], Check]] = [
    check_hardware, check_tensorflow, check_platform, check_driver, check_gpu_match, check_visible_devices,
    check_cuda_libraries,
    check_compute_capability, check_packages, check_gpu_memory, check_configuration, check_placement,
    check_torch, check_xla_only,
]


def diagnose(facts: Facts) -> list[Check]:
    results: list[Check] = []
    for function in CHECKS:
        try:
            results.append(function(facts))
        except Exception as exc:  # one broken check must not cost the whole report
            name = function.__name__.removeprefix("check_").replace("_", "-")
            log.warning("doctor check %s failed; the report marks it skipped", name, exc_info=exc)
            results.append(Check(name, name, SKIPPED, f"the check itself failed: {type(exc).__name__}: {exc}"))
    hardware = results[0]
    if hardware.id == "hardware" and hardware.status == FAIL:
        # No NVIDIA GPU at all: a driver, CUDA libraries or GPU placement cannot apply; say so, not "install".
        results = [Check(c.id, c.title, SKIPPED, "cannot apply: no NVIDIA GPU on this machine (see the first check)")
                   if c.id in NEEDS_NVIDIA_GPU else c for c in results]
    return results


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0


ICONS = {PASS: "✔", WARN: "▲", FAIL: "✘", SKIPPED: "–"}


def to_text(checks: list[Check], facts: Facts) -> str:
    lines = [f"TF Device Panel doctor — {facts.system} {facts.release}, Python {facts.python}", ""]
    for check in checks:
        lines.append(f"{ICONS[check.status]} {check.status.upper():<7} {check.title}: {check.summary}")
        if check.status in (WARN, FAIL):
            lines += [f"      · {e}" for e in check.evidence if e]
            if check.fix:
                lines.append(f"      fix: {check.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL, SKIPPED)}
    lines += ["", ", ".join(f"{n} {s}" for s, n in counts.items())]
    return "\n".join(lines) + "\n"


def to_markdown(checks: list[Check], facts: Facts) -> str:
    probe = facts.probe
    lines = ["## TensorFlow GPU diagnosis (TF Device Panel doctor)", "",
             f"- System: {facts.system} {facts.release} ({facts.machine}), Python {facts.python}",
             f"- TensorFlow: {probe.get('version', 'not importable')}"
             + (f", CUDA {probe.get('build', {}).get('cuda_version')}" if probe.get("build", {}).get("cuda_version")
                else ""),
             f"- Driver: {facts.nvml.get('driver_version') or facts.nvml.get('message')}",
             "", "| | Check | Result |", "|---|---|---|"]
    for check in checks:
        lines.append(f"| {ICONS[check.status]} | {check.title} | {check.summary.replace('|', '/')} |")
    for check in checks:
        if check.status in (WARN, FAIL):
            lines += ["", f"### {check.title}", "", "```"] + [e for e in check.evidence if e] + ["```"]
            if check.fix:
                lines.append(f"**Fix:** `{check.fix}`")
    if facts.tf_stderr:
        lines += ["", "### TensorFlow's own messages", "", "```", *facts.tf_stderr[-12:], "```"]
    return "\n".join(lines) + "\n"
