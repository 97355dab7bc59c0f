"""Where TensorFlow's CUDA libraries open from, judged as its loader judges (core.devices.cudalibs)."""

from __future__ import annotations

import ctypes.util
import shutil
from pathlib import Path

import pytest
from tf_device_panel.core.devices import cudalibs
from tf_device_panel.core.devices.cudalibs import Library


def a_real_library() -> Path:
    name = ctypes.util.find_library("z") or ctypes.util.find_library("m")
    for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if name and (Path(folder) / name).exists():
            return Path(folder) / name
    pytest.skip("no system library to stand in for a CUDA one")


def test_a_library_in_a_pip_package_folder_is_found_there_and_named(tmp_path: Path) -> None:
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(a_real_library(), lib / "libtfdp-test-cublas.so.12")
    (found,) = cudalibs.locate([Library("libtfdp-test-cublas.so.12", "test", "nothing")], paths=[str(tmp_path)])
    assert found.path == str(lib / "libtfdp-test-cublas.so.12") and found.how == "pip package nvidia-cublas"


def test_a_library_on_ld_library_path_is_found_by_its_soname(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    (found,) = cudalibs.locate([Library("libtfdp-absent.so.1", "absent", "nothing")], paths=[])
    assert found.path is None and found.how == "not found" and "libtfdp-absent.so.1" in found.error


def test_a_stand_in_nccl_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(a_real_library(), lib / "libnccl.so.2")  # opens, but has no ncclGetVersion: a stand-in
    monkeypatch.setattr(cudalibs.sys, "path", [str(tmp_path)])
    version, why = cudalibs.nccl_version()
    assert version is None and why == (f"libnccl.so.2 is not a working NCCL: {lib / 'libnccl.so.2'} opens but has "
                                       "no ncclGetVersion: a stand-in or a broken file")


def test_a_library_that_opens_without_its_functions_is_not_found(tmp_path: Path) -> None:
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(a_real_library(), lib / "libtfdp-test-cublas.so.12")  # the gpu-host's empty stand-ins are such
    (found,) = cudalibs.locate([Library("libtfdp-test-cublas.so.12", "cuBLAS", "MatMul", symbol="cublasCreate_v2")],
                               paths=[str(tmp_path)])
    assert found.path is None and found.error.endswith("opens but has no cublasCreate_v2: a stand-in or a broken file")


def test_tensorflows_dlopen_messages_name_each_library_once() -> None:
    lines = ["W0000 00:00:1 1 dso_loader.cc:77] Could not load dynamic library 'libcudnn.so.9'; dlerror: "
             "libcudnn.so.9: cannot open shared object file: No such file or directory",
             "I0000 gpu_device.cc:2342] Cannot dlopen some GPU libraries.",
             "W0000 dso_loader.cc:77] Could not load dynamic library 'libcudnn.so.9'; dlerror: again"]
    assert cudalibs.tf_dlopen_failures(lines) == {
        "libcudnn.so.9": "libcudnn.so.9: cannot open shared object file: No such file or directory"}
