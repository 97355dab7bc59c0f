"""Which CUDA libraries TensorFlow can open, and from where: judged as TensorFlow's loader judges them.

TensorFlow opens each CUDA library by its soname with dlopen: from its own pip packages (`nvidia/*/lib`
beside it in site-packages, through its RUNPATH), then `LD_LIBRARY_PATH`, the `ldconfig` cache and the
system folders. So a machine with every library on `LD_LIBRARY_PATH` (system CUDA, conda, NVIDIA's
containers) has a working GPU without one `nvidia-*` pip package; this module looks where TensorFlow looks.

Run inside the process that matters (the doctor's probe, the run process): `LD_LIBRARY_PATH` is read by the
loader when the process starts. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The TensorFlow these libraries are for, and the one this panel is tested with: what an install fix names.
TESTED_TF_VERSION = "2.21.0"


NVIDIA_VENDOR = "0x10de"
PCI_DEVICES = Path("/sys/bus/pci/devices")


def is_display_class(pci_class: str) -> bool:
    """A PCI display controller (class 0x03xxxx: VGA 0x0300, 3D 0x0302): a GPU, not its HDMI audio function
    (0x0403) or an NVSwitch bridge (0x0680), which carry NVIDIA's vendor id too."""
    return pci_class.strip().lower().startswith("0x03")


def nvidia_gpu_on_pci(root: Path = PCI_DEVICES) -> bool | None:
    """Whether the PCI bus lists an NVIDIA display controller; None when the bus cannot be read (not Linux)."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            if ((entry / "vendor").read_text().strip().lower() == NVIDIA_VENDOR
                    and is_display_class((entry / "class").read_text())):
                return True
        except OSError:
            continue
    return False


def install_commands(python: str = "python", version: str = TESTED_TF_VERSION, gpu_here: bool | None = None,
                     pci_root: Path = PCI_DEVICES) -> str:
    """How to install TensorFlow into `python`: with NVIDIA's CUDA libraries first where this machine has an
    NVIDIA GPU (`gpu_here`, by default read from the PCI bus), else the CPU build first — the CUDA wheels are
    gigabytes a machine without a GPU never uses."""
    if gpu_here is None:
        gpu_here = nvidia_gpu_on_pci(pci_root)
    cuda = f"{python} -m pip install 'tensorflow[and-cuda]=={version}'"
    cpu = f"{python} -m pip install 'tensorflow=={version}'"
    if gpu_here:
        return f"{cuda} (this machine has an NVIDIA GPU), or for the CPU only {cpu}"
    if gpu_here is False:
        return f"{cpu} (no NVIDIA GPU on this machine; where there is one: {cuda})"
    return f"{cpu}, or on Linux with an NVIDIA GPU {cuda}"


@dataclass(frozen=True)
class Library:
    soname: str
    what: str
    needed_for: str           # what fails without it
    required: bool = True     # without it TensorFlow registers no GPU (NCCL and CUPTI are optional)
    symbol: str = ""          # a function the real library has: a file without it opens, then fails when called


# The libraries TensorFlow 2.21 (built for CUDA 12 and cuDNN 9) opens by soname.
LIBRARIES: tuple[Library, ...] = (
    Library("libcudart.so.12", "CUDA runtime", "every GPU op", symbol="cudaGetDeviceCount"),
    Library("libcublas.so.12", "cuBLAS", "MatMul, Dense layers", symbol="cublasCreate_v2"),
    Library("libcublasLt.so.12", "cuBLASLt", "MatMul, Dense layers", symbol="cublasLtCreate"),
    Library("libcufft.so.11", "cuFFT", "FFT ops", symbol="cufftPlan1d"),
    Library("libcurand.so.10", "cuRAND", "random ops on the GPU", symbol="curandCreateGenerator"),
    Library("libcusolver.so.11", "cuSOLVER", "linear algebra ops", symbol="cusolverDnCreate"),
    Library("libcusparse.so.12", "cuSPARSE", "sparse ops", symbol="cusparseCreate"),
    Library("libcudnn.so.9", "cuDNN", "convolutions, and Keras's single-device fit (XLA)", symbol="cudnnGetVersion"),
    Library("libnccl.so.2", "NCCL", "NcclAllReduce across GPUs", required=False, symbol="ncclGetVersion"),
    Library("libcupti.so.12", "CUPTI", "the profiler", required=False, symbol="cuptiGetVersion"),
)


@dataclass(frozen=True)
class Found:
    soname: str
    path: str | None          # where the loader found it; None: not found
    how: str                  # "LD_LIBRARY_PATH", "pip package nvidia-…", "system (ldconfig)", or why not
    error: str = ""           # dlerror when it could not be opened


def pip_library_dirs(paths: Iterable[str] | None = None) -> list[Path]:
    """The `nvidia/*/lib` folders of NVIDIA's pip packages on `sys.path` (where TensorFlow's RUNPATH points)."""
    found = []
    for entry in paths if paths is not None else sys.path:
        root = Path(entry or ".") / "nvidia"
        if root.is_dir():
            found += sorted(p for p in root.glob("*/lib") if p.is_dir())
    return found


def _loaded_path(soname: str) -> str | None:
    """Where this process mapped `soname` from (it is loaded: /proc/self/maps names the file)."""
    stem = soname.split(".so")[0] + ".so"
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith(stem) and "/" in path:
            return path
    return None


def _origin(path: str, ld_dirs: Sequence[str], pip_dirs: Sequence[Path]) -> str:
    folder = str(Path(path).resolve().parent)
    for pip_dir in pip_dirs:
        if folder == str(pip_dir.resolve()):
            return f"pip package nvidia-{pip_dir.parent.name}"
    if any(folder == str(Path(d).resolve()) for d in ld_dirs if d):
        return "LD_LIBRARY_PATH"
    return "system (ldconfig cache or /usr/lib)"


def locate(libraries: Sequence[Library] = LIBRARIES, paths: Iterable[str] | None = None) -> list[Found]:
    """Open each library as TensorFlow would (its pip packages first, then the loader's own search by
    soname) and say where each was found. Opening loads it into this process: run it in a probe."""
    pip_dirs = pip_library_dirs(paths)
    ld_dirs = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    results = []
    for library in libraries:
        candidates = [str(d / library.soname) for d in pip_dirs if (d / library.soname).exists()]
        candidates.append(library.soname)  # LD_LIBRARY_PATH, ldconfig, system folders
        error = ""
        for candidate in candidates:
            try:
                opened = ctypes.CDLL(candidate)
            except OSError as exc:
                error = str(exc)
                continue
            path = candidate if "/" in candidate else (_loaded_path(library.soname) or candidate)
            lacks = library.symbol and not hasattr(opened, library.symbol)
            results.append(Found(library.soname, None if lacks else path, _origin(path, ld_dirs, pip_dirs),
                                 f"{path} opens but has no {library.symbol}: a stand-in or a broken file"
                                 if lacks else ""))
            break
        else:
            results.append(Found(library.soname, None, "not found", error))
    return results


# TensorFlow's own words when dlopen fails, e.g.
# W0000 ... Could not load dynamic library 'libcudnn.so.9'; dlerror: libcudnn.so.9: cannot open shared object file
_NOT_LOADED = re.compile(r"Could not load dynamic library '([^']+)'(?:; dlerror: (.*))?")


def tf_dlopen_failures(lines: Iterable[str]) -> dict[str, str]:
    """soname → dlerror for each library TensorFlow said it could not load (from its stderr)."""
    failures: dict[str, str] = {}
    for line in lines:
        match = _NOT_LOADED.search(line)
        if match:
            failures.setdefault(match.group(1), (match.group(2) or "").strip())
    return failures


def nccl_version() -> tuple[str | None, str]:
    """(NCCL's version, where it was found) when NCCL loads and answers ncclGetVersion; (None, why not)
    otherwise: a file named libnccl.so.2 that lacks NCCL's functions (a stand-in) does not count."""
    (found,) = locate([library for library in LIBRARIES if library.soname == "libnccl.so.2"])
    if found.path is None:
        return None, f"libnccl.so.2 is not a working NCCL: {found.error or 'not on any search path'}"
    try:
        get_version = ctypes.CDLL(found.path).ncclGetVersion
    except (OSError, AttributeError) as exc:
        return None, f"{found.path} is not a working NCCL ({exc})"
    version = ctypes.c_int()
    if get_version(ctypes.byref(version)) != 0:
        return None, f"{found.path}: ncclGetVersion failed"
    code = version.value  # 2.27.7 → 22707 (since 2.9: major*10000 + minor*100 + patch)
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}", f"{found.path} ({found.how})"
