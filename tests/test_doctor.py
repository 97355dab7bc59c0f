"""Every doctor check against simulated machines, plus one real run on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields, replace
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import ROOT
from tf_device_panel.core.client import doctor
from tf_device_panel.core.client.doctor import FAIL, PASS, SKIPPED, WARN, Facts
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.runproc import doctor_probe

CUDA_BUILD = {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9",
              "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]}
REQUIREMENTS = ["nvidia-cublas-cu12<13.0,>=12.5.3.2", "nvidia-cudnn-cu12<10.0,>=9.3.0.75"]
CUDA_PACKAGES = {"nvidia-cublas-cu12": "12.5.3.2", "nvidia-cudnn-cu12": "9.3.0.75"}
CREATED = ("I0000 00:00:1.0 1 gpu_device.cc:2020] Created device /job:localhost/replica:0/task:0/device:GPU:{i} "
           "with 22000 MB memory:  -> device: {i}, name: NVIDIA L4, pci bus id: 0000:0{b}:00.0, "
           "compute capability: 8.9")


def nvml_gpu(index: int, bus: int, name: str = "NVIDIA L4", processes: list | None = None) -> dict:
    return {"index": index, "name": name, "uuid": f"GPU-{index}aaa", "pci_bus_id": f"00000000:0{bus}:00.0",
            "memory_total_mib": 23034, "memory_used_mib": 300, "compute_capability": "8.9",
            "error": None, "processes": processes if processes is not None else []}


def tf_gpu(index: int) -> dict:
    return {"name": f"/physical_device:GPU:{index}", "device_type": "GPU", "device_name": "NVIDIA L4",
            "compute_capability": "8.9"}


def pip_libraries() -> list[dict]:
    """Every CUDA library TensorFlow opens, found in its pip packages (as `tensorflow[and-cuda]` installs them)."""
    from tf_device_panel.core.devices.cudalibs import LIBRARIES

    return [{"soname": lib.soname, "path": f"/venv/site-packages/nvidia/x/lib/{lib.soname}",
             "how": "pip package nvidia-x", "error": ""} for lib in LIBRARIES]


def healthy(gpus: int = 2) -> Facts:
    """A Linux machine where everything works, with `gpus` L4s."""
    return Facts(
        pci={"readable": True, "devices": 6, "nvidia": [{"address": f"0000:0{b}:00.0", "device": "0x27b8",
                                                         "class": "0x030200"} for b in (1, 2)]},
        libraries=pip_libraries(),
        system="Linux", release="6.8.0", machine="x86_64", python="3.11.7",
        env={"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None, "TF_FORCE_GPU_ALLOW_GROWTH": None},
        packages={"tensorflow": "2.21.0", "keras": "3.15.1", **CUDA_PACKAGES},
        cuda_requirements=REQUIREMENTS,
        nvml={"available": True, "driver_version": "570.1", "cuda_driver_version": "12.8",
              "gpus": [nvml_gpu(i, i + 1) for i in range(gpus)]},
        probe={"imported": True, "version": "2.21.0", "build": CUDA_BUILD,
               "physical": [{"name": "/physical_device:CPU:0", "device_type": "CPU"},
                            *[tf_gpu(i) for i in range(gpus)]],
               "placement": [{"requested": f"/device:GPU:{i}", "value": 11.0,
                              "actual": f"/job:localhost/replica:0/task:0/device:GPU:{i}"} for i in range(gpus)]},
        tf_stderr=[CREATED.format(i=i, b=i + 1) for i in range(gpus)],
    )


def by_id(facts: Facts) -> dict[str, doctor.Check]:
    return {c.id: c for c in doctor.diagnose(facts)}


def test_a_healthy_two_gpu_machine_passes_everything() -> None:
    checks = by_id(healthy())
    assert {k: c.status for k, c in checks.items() if c.status not in (PASS, SKIPPED)} == {}
    assert checks["configuration"].status == SKIPPED and checks["pytorch"].status == SKIPPED
    assert "driver sees 2, TensorFlow sees 2" in checks["gpus"].summary
    assert doctor.exit_code(list(checks.values())) == 0


def test_no_driver_fails_with_a_fix_and_tf_hint() -> None:
    facts = replace(healthy(0), nvml={"available": False, "message": "no NVIDIA driver found"},
                    tf_stderr=["E0000 00:00:1 1 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)"])
    check = by_id(facts)["driver"]
    assert check.status == FAIL and "no NVIDIA driver" in check.summary and "nvidia-smi" in check.fix
    assert any("cuInit" in e for e in check.evidence)


def test_old_driver_is_too_old_for_tensorflows_cuda() -> None:
    facts = healthy(1)
    facts.nvml["cuda_driver_version"] = "11.4"
    check = by_id(facts)["driver"]
    assert check.status == FAIL and "too old" in check.summary and "12.5.1" in check.fix


def test_gpu_gap_names_the_missing_gpu_by_bus_id() -> None:
    facts = healthy(2)
    facts.probe["physical"] = facts.probe["physical"][:2]       # TF sees only GPU 0
    facts.tf_stderr = facts.tf_stderr[:1]
    check = by_id(facts)["gpus"]
    assert check.status == WARN and "GPU 1" in check.summary and "00000000:02:00.0" in check.summary


@pytest.mark.parametrize(("value", "status", "words"), [
    ("", FAIL, "hides every GPU"), ("-1", FAIL, "hides every GPU"), ("0,5", FAIL, "do not exist: 5"),
    ("1", PASS, "CUDA_VISIBLE_DEVICES=1"), ("GPU-1a", PASS, "CUDA_VISIBLE_DEVICES=GPU-1a"),
    ("GPU-zz", FAIL, "do not exist: GPU-zz"), ("gpu-1AAA", PASS, "CUDA_VISIBLE_DEVICES=gpu-1AAA"),
    ("MIG-3f2e9a,1", WARN, "MIG instance(s) MIG-3f2e9a: CUDA uses them"),
])
def test_cuda_visible_devices(value: str, status: str, words: str) -> None:
    facts = healthy(2)
    facts.env["CUDA_VISIBLE_DEVICES"] = value
    check = by_id(facts)["cuda-visible-devices"]
    assert check.status == status and words in check.summary


def test_a_mig_instance_in_cuda_visible_devices_does_not_refuse_the_profile() -> None:
    facts = healthy(2)
    facts.env["CUDA_VISIBLE_DEVICES"] = "MIG-3f2e9a"
    facts.config = DeviceConfig(virtual_gpus={0: (2048, 2048)}).to_json()
    checks = by_id(facts)
    assert checks["configuration"].status == PASS, checks["configuration"]
    assert checks["cuda-visible-devices"].status == WARN and "not checked" in checks["cuda-visible-devices"].summary


def test_device_order_advice_for_mixed_gpus() -> None:
    facts = healthy(2)
    facts.nvml["gpus"][1]["name"] = "NVIDIA A100"
    check = by_id(facts)["cuda-visible-devices"]
    assert check.status == WARN and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in check.fix


def test_missing_cuda_libraries_are_named_from_verbose_logs() -> None:
    facts = healthy(0)
    facts.packages = {"tensorflow": "2.21.0"}
    facts.tf_stderr = ["W0000 00:00:1 1 gpu_device.cc:2342] Cannot dlopen some GPU libraries. Please make sure the "
                       "missing libraries mentioned above are installed properly. Skipping registering GPU devices..."]
    facts.verbose_stderr = ["I0000 dso_loader.cc:77] Could not load dynamic library 'libcudnn.so.9'; dlerror: "
                            "libcudnn.so.9: cannot open shared object file: No such file or directory"]
    check = by_id(facts)["cuda-libraries"]
    assert check.status == FAIL and "tensorflow[and-cuda]==2.21.0" in check.fix
    assert any("libcudnn.so.9" in e for e in check.evidence)
    assert any("nvidia-cudnn-cu12" in e for e in check.evidence)


def test_a_cuda_package_at_another_version_is_evidence_while_its_library_opens() -> None:
    facts = healthy(1)
    facts.packages["nvidia-cudnn-cu12"] = "9.1.0"
    check = by_id(facts)["cuda-libraries"]
    assert check.status == PASS and any("nvidia-cudnn-cu12 9.1.0" in e for e in check.evidence)


def test_cpu_only_build_warns() -> None:
    facts = healthy(0)
    facts.probe["build"] = {"is_cuda_build": False}
    assert by_id(facts)["tensorflow"].status == WARN
    assert by_id(facts)["cuda-libraries"].status == SKIPPED


def test_tensorflow_not_importable() -> None:
    facts = replace(healthy(0), probe={"imported": False, "import_error": "ModuleNotFoundError: No module named 'tf'"})
    check = by_id(facts)["tensorflow"]
    assert check.status == FAIL and "pip install" in check.fix


@pytest.mark.parametrize(("capability", "status"), [("8.9", PASS), ("9.0", PASS), ("8.6", PASS), ("5.2", FAIL)])
def test_compute_capability_against_the_build(capability: str, status: str) -> None:
    facts = healthy(1)
    facts.nvml["gpus"][0]["compute_capability"] = capability
    assert by_id(facts)["compute-capability"].status == status


@pytest.mark.parametrize(("packages", "words"), [
    ({"tensorflow": "2.21.0", "tensorflow-gpu": "2.10.0"}, "tensorflow-gpu"),
    ({"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"}, "both tensorflow and tensorflow-cpu"),
    ({"tensorflow": "2.21.0", "keras": "2.15.0"}, "expects Keras 3"),
    ({"tensorflow": "2.21.0", "tf-keras": "2.19.0"}, "tf-keras 2.19.0 does not match"),
])
def test_conflicting_packages(packages: dict, words: str) -> None:
    facts = replace(healthy(0), packages=packages)
    check = by_id(facts)["packages"]
    assert check.status == WARN and words in check.summary


def test_other_processes_holding_gpu_memory() -> None:
    facts = healthy(1)
    facts.nvml["gpus"][0]["processes"] = [{"pid": 4242, "used_mib": 18000, "name": "python"},
                                          {"pid": 99, "used_mib": None, "name": ""}]
    check = by_id(facts)["gpu-memory"]
    assert check.status == WARN and any("pid 4242 python holds 18000 MiB" in e for e in check.evidence)
    assert any("memory N/A" in e for e in check.evidence)


def test_configuration_problems_and_growth_variable() -> None:
    facts = healthy(1)
    facts.config = {"version": 1, "virtual_gpus": {"0": [30000]}, "visible_gpus": [0, 3]}
    check = by_id(facts)["configuration"]
    assert check.status == FAIL and any("GPU 3 does not exist" in e for e in check.evidence)
    assert any("limits sum to 30000" in e for e in check.evidence)
    facts.config = {"version": 1, "virtual_gpus": {"0": [1024, 1024]}}
    facts.env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    check = by_id(facts)["configuration"]
    assert check.status == WARN and "TF_FORCE_GPU_ALLOW_GROWTH" in check.summary


def test_silent_soft_placement_fallback_warns() -> None:
    facts = healthy(1)
    facts.probe["placement"][0]["actual"] = "/job:localhost/replica:0/task:0/device:CPU:0"
    check = by_id(facts)["placement"]
    assert check.status == WARN and "moved ops off" in check.summary


def test_pytorch_sees_the_gpu_but_tensorflow_does_not() -> None:
    facts = healthy(0)
    facts.torch = {"version": "2.5.0", "cuda": "12.4", "available": True, "count": 1, "names": ["NVIDIA L4"]}
    check = by_id(facts)["pytorch"]
    assert check.status == WARN and "driver works" in check.summary


def test_xla_only_devices_and_platform_traps() -> None:
    facts = healthy(0)
    facts.probe["physical"] = [{"name": "/physical_device:XLA_GPU:0", "device_type": "XLA_GPU"}]
    assert by_id(facts)["xla-devices"].status == FAIL
    windows = replace(healthy(0), system="Windows")
    assert by_id(windows)["platform"].status == FAIL and "WSL2" in by_id(windows)["platform"].fix
    assert by_id(replace(healthy(0), system="Darwin"))["platform"].status == WARN


def test_a_broken_check_is_skipped_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(facts: Facts) -> doctor.Check:
        raise KeyError("surprise")

    monkeypatch.setattr(doctor, "CHECKS", [broken, doctor.check_platform])
    checks = doctor.diagnose(healthy(0))
    assert checks[0].status == SKIPPED and "surprise" in checks[0].summary and checks[1].status == PASS


def test_reports_render() -> None:
    facts = healthy(0)
    facts.nvml = {"available": False, "message": "no NVIDIA driver found"}
    checks = doctor.diagnose(facts)
    markdown = doctor.to_markdown(checks, facts)
    assert "| ✘ | NVIDIA driver | no NVIDIA driver found |" in markdown and "**Fix:**" in markdown
    assert "fix: Install the NVIDIA driver" in doctor.to_text(checks, facts)


def test_fake_nvml_feeds_the_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML with one GPU and an old driver, through the real helper with pynvml's functions patched."""
    import pynvml

    process = SimpleNamespace(pid=os.getpid(), usedGpuMemory=pynvml.__dict__.get("UNAVAILABLE", 2**64 - 1))
    fakes = {
        "nvmlInit": lambda: None, "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlSystemGetDriverVersion": lambda: "470.57", "nvmlSystemGetCudaDriverVersion_v2": lambda: 11040,
        "nvmlDeviceGetName": lambda h: "Tesla T4", "nvmlDeviceGetUUID": lambda h: "GPU-abc",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b"00000000:00:04.0"),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (7, 5),
        "nvmlDeviceGetMemoryInfo": lambda h, version=None: SimpleNamespace(total=16 * 2**30, used=2**30),
        "nvmlDeviceGetComputeRunningProcesses_v3": lambda h: [process],
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    facts = replace(healthy(0), nvml=doctor.nvml_facts(Nvml()))
    assert facts.nvml["cuda_driver_version"] == "11.4"
    assert facts.nvml["gpus"][0]["processes"][0]["used_mib"] is None
    checks = by_id(facts)
    assert checks["driver"].status == FAIL and "too old" in checks["driver"].summary
    assert checks["gpus"].status == FAIL and "TensorFlow sees 0" in checks["gpus"].summary


def test_real_run_on_this_machine() -> None:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "doctor", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    checks = {c["id"]: c for c in report["checks"]}
    assert len(checks) == 14 and report["checks"][0]["id"] == "hardware"
    assert checks["tensorflow"]["status"] == PASS
    if report["facts"]["pci"].get("readable") and not report["facts"]["pci"]["nvidia"]:  # this machine, CI
        assert checks["hardware"]["status"] == FAIL and "no NVIDIA GPU" in checks["hardware"]["summary"]
        assert checks["driver"]["status"] == SKIPPED and done.returncode == 1
    elif not report["facts"]["nvml"]["available"]:
        assert checks["driver"]["status"] == FAIL and checks["driver"]["fix"]
        assert done.returncode == 1


def test_tf_gpus_match_nvml_by_bus_id_not_index() -> None:
    from tf_device_panel.core.devices.gpus import nvml_gpu_for_physical

    nvml = [{"index": 0, "pci_bus_id": "00000000:01:00.0"}, {"index": 1, "pci_bus_id": "00000000:02:00.0"}]
    created = [{"physical": 0, "pci_bus_id": "0000:02:00.0"}]
    assert nvml_gpu_for_physical(0, created, nvml)["index"] == 1
    assert nvml_gpu_for_physical(1, created, nvml)["index"] == 1  # nothing logged for it: by index


def test_tensorflows_gpu_messages_are_read_once_without_their_log_prefix() -> None:
    from tf_device_panel.core.devices.gpus import tf_gpu_messages

    lines = ["I0000 00:00:1.0  1 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
             "step 1",
             "I0000 00:00:2.0  1 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
             "E0000 00:00:3.0  1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error (303)"]
    assert tf_gpu_messages(lines) == ["Could not find cuda drivers on your machine, GPU will not be used.",
                                      "failed call to cuInit: INTERNAL: CUDA error (303)"]


# -- measured on the H100 and on machines without a GPU (tests/fixtures/h100) ------------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "h100"


def test_no_nvidia_gpu_on_the_pci_bus_comes_first_and_skips_what_cannot_apply(tmp_path) -> None:
    for address, vendor in (("0000:00:00.0", "0x8086"), ("0000:00:01.0", "0x1af4"), ("0000:00:02.0", "0x1af4")):
        (tmp_path / address).mkdir()
        (tmp_path / address / "vendor").write_text(vendor + "\n")
    facts = replace(healthy(0), pci=doctor.pci_facts(tmp_path), nvml={"available": False, "message": "no driver"},
                    probe={"imported": False, "import_error": "ModuleNotFoundError: No module named 'tensorflow'"},
                    libraries=[], torch={"version": "2.5.0", "available": False, "count": 0})
    checks = doctor.diagnose(facts)
    first = checks[0]
    assert first.id == "hardware" and first.status == FAIL
    assert first.summary == ("no NVIDIA GPU on this machine: none of its 3 PCI devices is an NVIDIA display "
                             "controller (vendor 0x10de, class 0x03xxxx), and neither NVML nor TensorFlow sees a GPU")
    assert "GPU instance" in first.fix and "passed through" in first.fix
    skipped = {c.id for c in checks if c.status == SKIPPED and "no NVIDIA GPU on this machine" in c.summary}
    assert skipped == {"driver", "gpus", "cuda-visible-devices", "cuda-libraries", "compute-capability",
                       "gpu-memory", "placement", "pytorch", "xla-devices"}
    text = doctor.to_text(checks, facts)
    assert "Install the NVIDIA driver" not in text and "and-cuda" not in text  # no GBs of CUDA wheels
    assert "pip install 'tensorflow==2.21.0'" in by_id(facts)["tensorflow"].fix


def test_pci_devices_with_an_nvidia_vendor_are_found(tmp_path) -> None:
    (tmp_path / "0000:00:06.0").mkdir()
    for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):  # the H100 SXM
        (tmp_path / "0000:00:06.0" / name).write_text(value + "\n")
    pci = doctor.pci_facts(tmp_path)
    assert pci == {"readable": True, "devices": 1, "nvidia_other": [],
                   "nvidia": [{"address": "0000:00:06.0", "device": "0x2330", "class": "0x030200"}]}
    assert doctor.pci_facts(tmp_path / "absent")["readable"] is False


def write_pci(root: Any, functions: list[tuple[str, str, str]]) -> None:
    for address, vendor, pci_class in functions:
        (root / address).mkdir()
        (root / address / "vendor").write_text(vendor + "\n")
        (root / address / "class").write_text(pci_class + "\n")


def test_only_display_class_functions_count_as_gpus(tmp_path) -> None:
    # An NVSwitch bridge (0x068000) and a GPU's HDMI audio function (0x040300) carry NVIDIA's vendor id too.
    write_pci(tmp_path, [("0000:00:00.0", "0x8086", "0x060000"), ("0000:05:00.0", "0x10de", "0x068000"),
                         ("0000:06:00.1", "0x10de", "0x040300"), ("0000:07:00.0", "0x10de", "0x030000")])
    pci = doctor.pci_facts(tmp_path)
    assert [d["address"] for d in pci["nvidia"]] == ["0000:07:00.0"]
    assert [d["address"] for d in pci["nvidia_other"]] == ["0000:05:00.0", "0000:06:00.1"]
    check = doctor.check_hardware(replace(healthy(1), pci=pci))
    assert check.status == PASS and check.summary == "1 NVIDIA GPU(s) on the PCI bus"


def test_nvidia_audio_and_bridges_alone_are_no_gpu(tmp_path) -> None:
    write_pci(tmp_path, [("0000:05:00.0", "0x10de", "0x068000"), ("0000:06:00.1", "0x10de", "0x040300")])
    facts = replace(healthy(0), pci=doctor.pci_facts(tmp_path), nvml={"available": False, "message": "no driver"})
    check = by_id(facts)["hardware"]
    assert check.status == FAIL and "none of its 2 PCI devices is an NVIDIA display controller" in check.summary
    assert any("0000:05:00.0" in e and "not a GPU" in e for e in check.evidence)


@pytest.mark.parametrize("witness", ["nvml", "tensorflow"])
def test_a_hidden_pci_bus_does_not_override_nvml_or_tensorflow(tmp_path, witness: str) -> None:
    # A container's /sys/bus/pci shows only virtual devices while the GPU works: the PCI bus is the odd one out.
    write_pci(tmp_path, [("0000:00:00.0", "0x8086", "0x060000")])
    facts = replace(healthy(1), pci=doctor.pci_facts(tmp_path))
    if witness == "tensorflow":
        facts.nvml = {"available": False, "message": "libnvidia-ml.so.1 not found"}
    checks = by_id(facts)
    hardware = checks["hardware"]
    assert hardware.status == WARN
    assert "the PCI bus shows no NVIDIA GPU, yet NVML sees" in hardware.summary
    assert "the other checks run" in hardware.summary
    assert not any("no NVIDIA GPU on this machine" in c.summary for c in checks.values())
    assert checks["placement"].status == PASS and checks["cuda-libraries"].status == PASS


def h100_with_libraries_on_ld_library_path() -> Facts:
    """The H100 host: TensorFlow from /tmp/site_tf, every CUDA library in /tmp/cudalib via LD_LIBRARY_PATH, and
    none of TensorFlow's nvidia-*-cu12 pip packages (recorded: doctor-real-cublas.txt said 11 were missing)."""
    from tf_device_panel.core.devices.cudalibs import LIBRARIES

    facts = healthy(1)
    facts.packages = {"tensorflow": "2.21.0", "keras": "3.15.1"}
    facts.cuda_requirements = [f"nvidia-{n}-cu12" for n in ("cublas", "cuda-cupti", "cuda-nvcc", "cuda-nvrtc",
                                                            "cudnn", "cufft", "curand", "cusolver", "cusparse",
                                                            "nccl", "nvjitlink")]
    facts.env["LD_LIBRARY_PATH"] = "/tmp/cudalib"
    facts.libraries = [{"soname": lib.soname, "path": f"/tmp/cudalib/{lib.soname}", "how": "LD_LIBRARY_PATH",
                        "error": ""} for lib in LIBRARIES]
    return facts


def test_libraries_on_ld_library_path_pass_without_pip_packages() -> None:
    recorded = (FIXTURES / "doctor-real-cublas.txt").read_text()
    assert "11 of TensorFlow's CUDA packages are not installed" in recorded  # what it said on the H100
    check = by_id(h100_with_libraries_on_ld_library_path())["cuda-libraries"]
    assert check.status == PASS
    assert check.summary == "all 8 CUDA libraries TensorFlow needs open (LD_LIBRARY_PATH)"
    assert "libcublas.so.12 (cuBLAS): /tmp/cudalib/libcublas.so.12 — LD_LIBRARY_PATH" in check.evidence
    assert any(e.startswith("pip packages not installed (the libraries may come from elsewhere)")
               for e in check.evidence)


def test_a_library_tensorflow_cannot_open_is_named_with_what_needs_it() -> None:
    facts = h100_with_libraries_on_ld_library_path()
    for entry in facts.libraries:
        if entry["soname"] == "libcudnn.so.9":
            entry.update(path=None, how="not found", error="libcudnn.so.9: cannot open shared object file")
    check = by_id(facts)["cuda-libraries"]
    assert check.status == FAIL and check.summary.startswith("TensorFlow cannot open libcudnn.so.9 (cuDNN: ")
    assert "LD_LIBRARY_PATH" in check.fix and "tensorflow[and-cuda]==2.21.0" in check.fix


def test_a_missing_optional_library_only_warns() -> None:
    facts = h100_with_libraries_on_ld_library_path()
    facts.libraries = [e for e in facts.libraries if e["soname"] != "libnccl.so.2"] + [
        {"soname": "libnccl.so.2", "path": None, "how": "not found", "error": ""}]
    check = by_id(facts)["cuda-libraries"]
    assert check.status == WARN and "libnccl.so.2 (NcclAllReduce across GPUs)" in check.summary


def crashed_probe(stdout_facts: list[dict], returncode: int, stderr: str) -> Any:
    lines = [doctor_probe.PROBE_PREFIX + json.dumps(f) for f in stdout_facts]
    return subprocess.CompletedProcess([], returncode, "\n".join(lines) + "\n", stderr)


def test_a_probe_killed_by_sigsegv_in_its_first_op_keeps_what_it_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = (FIXTURES / "doctor-probe-sigsegv.txt").read_text()
    assert "TensorFlow cannot be imported" in recorded and "the probe exited with code -11" in recorded
    imported = {"imported": True, "version": "2.21.0", "build": CUDA_BUILD, "stage": "import"}
    discovered = {**imported, "stage": "GPU discovery", "physical": [
        {"name": "/physical_device:CPU:0", "device_type": "CPU"},
        {"name": "/physical_device:GPU:0", "device_type": "GPU", "device_name": "NVIDIA H100 80GB HBM3",
         "compute_capability": "9.0"}]}
    stderr = ("I0000 00:00:1795500165.111483    2064 execute.cc:1775] Executing op MatMul in device "
              "/job:localhost/replica:0/task:0/device:GPU:0\n")
    monkeypatch.setattr(doctor, "run_module", lambda *a, **k: crashed_probe(
        [{"imported": False, "stage": "started"}, imported, discovered], -11, stderr))
    probe, _ = doctor.run_probe()
    assert probe["crash"]["how"] == "SIGSEGV" and probe["crash"]["stage"] == "first op"
    facts = replace(healthy(1), probe=probe)
    facts.nvml["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3"
    checks = by_id(facts)
    tensorflow = checks["tensorflow"]
    assert tensorflow.status == FAIL
    assert tensorflow.summary == "the TensorFlow probe crashed (SIGSEGV) during first op"
    assert "TensorFlow 2.21.0 had imported, seeing 1 GPU(s)" in tensorflow.evidence
    assert any("Executing op MatMul" in e for e in tensorflow.evidence)
    assert "cannot be imported" not in tensorflow.summary and "pip install tensorflow" not in tensorflow.fix
    assert checks["gpus"].summary == "driver sees 1, TensorFlow sees 1"  # the facts before the crash are kept


def write_fake_tensorflow(folder: Any, crash_in: str) -> None:
    package = folder / "tensorflow"
    package.mkdir()
    die = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    if crash_in == "import":
        (package / "__init__.py").write_text(die + "\n")
        return
    (package / "__init__.py").write_text(
        "from types import SimpleNamespace\n__version__ = '2.21.0'\n"
        "sysconfig = SimpleNamespace(get_build_info=lambda: {'is_cuda_build': True, 'cuda_version': '12.5.1'})\n"
        f"def _die(*args):\n    {die}\n"
        "config = SimpleNamespace(list_physical_devices=_die)\n")


@pytest.mark.parametrize(("crash_in", "stage"), [("import", "import"), ("discovery", "GPU discovery")])
def test_a_real_probe_process_that_segfaults_is_reported_as_a_crash(tmp_path, crash_in: str, stage: str) -> None:
    write_fake_tensorflow(tmp_path, crash_in)  # a TensorFlow that dies as mismatched CUDA libraries make it
    probe, _ = doctor.run_probe({"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
                                timeout=60)
    assert probe["crash"]["how"] == "SIGSEGV" and probe["crash"]["stage"] == stage
    assert probe.get("version") == (None if crash_in == "import" else "2.21.0")
    check = doctor.check_tensorflow(replace(healthy(1), probe=probe))
    assert check.summary == f"the TensorFlow probe crashed (SIGSEGV) during {stage}"


def test_a_real_probe_that_hangs_keeps_its_stage_and_facts(tmp_path) -> None:
    package = tmp_path / "tensorflow"  # a TensorFlow that imports, then stalls in cuInit as a wedged GPU makes it
    package.mkdir()
    (package / "__init__.py").write_text(
        "import sys, time\nfrom types import SimpleNamespace\n__version__ = '2.21.0'\n"
        "sysconfig = SimpleNamespace(get_build_info=lambda: {'is_cuda_build': True, 'cuda_version': '12.5.1'})\n"
        "def _hang(*args):\n    print('hanging in cuInit', file=sys.stderr, flush=True)\n    time.sleep(600)\n"
        "config = SimpleNamespace(list_physical_devices=_hang)\n")
    probe, stderr = doctor.run_probe({"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
                                     timeout=8)
    assert probe["crash"]["hung"] and probe["crash"]["stage"] == "GPU discovery", probe
    assert probe["imported"] and probe["version"] == "2.21.0" and probe["build"]["cuda_version"] == "12.5.1"
    assert "hanging in cuInit" in probe["crash"]["last_lines"] and "hanging in cuInit" in stderr
    facts = replace(healthy(1), probe=probe)
    checks = by_id(facts)
    tensorflow = checks["tensorflow"]
    assert tensorflow.status == FAIL
    assert tensorflow.summary == ("the TensorFlow probe hung during GPU discovery: no answer within 8 s, "
                                  "so it was killed")
    assert "TensorFlow 2.21.0 had imported" in tensorflow.evidence and "nvidia-smi" in tensorflow.fix
    assert "cannot be imported" not in doctor.to_text(list(checks.values()), facts)
    assert checks["gpus"].summary.endswith("its probe hung during GPU discovery (see tensorflow)")


def test_without_tensorflow_the_pytorch_fix_names_a_version() -> None:
    report = json.loads((FIXTURES / "doctor-without-tensorflow.json").read_text())
    assert report["checks"][11]["fix"] == "pip install 'tensorflow[and-cuda]==' (see cuda-libraries)"  # recorded
    known = {f.name for f in fields(Facts)}
    facts = Facts(**{k: v for k, v in report["facts"].items() if k in known})
    check = by_id(facts)["pytorch"]
    assert check.status == WARN
    assert check.fix == f"{sys.executable} -m pip install 'tensorflow[and-cuda]==2.21.0' (see cuda-libraries)"


def test_a_stand_in_library_is_named_as_unusable() -> None:
    facts = h100_with_libraries_on_ld_library_path()
    for entry in facts.libraries:
        if entry["soname"] == "libcublas.so.12":  # the GPU host's empty stand-in: MatMul died with SIGSEGV
            entry.update(path=None, error="/tmp/cudalib/libcublas.so.12 opens but has no cublasCreate_v2: a "
                                          "stand-in or a broken file")
    check = by_id(facts)["cuda-libraries"]
    assert check.status == FAIL and check.summary.startswith("TensorFlow cannot use libcublas.so.12 (cuBLAS: MatMul")
    assert "libcublas.so.12 (cuBLAS): /tmp/cudalib/libcublas.so.12 opens but has no cublasCreate_v2: a stand-in or a " \
           "broken file" in check.evidence


# -- install hints: this interpreter's pip, a version always, the CPU build first where there is no GPU ---------

PIP = f"{sys.executable} -m pip"


def no_gpu_machine(tensorflow: bool) -> Facts:
    probe = ({"imported": True, "version": "2.21.0", "build": {"is_cuda_build": False},
              "physical": [{"name": "/physical_device:CPU:0", "device_type": "CPU"}]} if tensorflow
             else {"imported": False, "import_error": "ModuleNotFoundError: No module named 'tensorflow'"})
    return replace(healthy(0), pci={"readable": True, "devices": 3, "nvidia": [], "nvidia_other": []},
                   nvml={"available": False, "message": "no driver"}, probe=probe, libraries=[],
                   packages={"tensorflow": "2.21.0"} if tensorflow else {})


def test_without_a_gpu_the_cpu_build_is_the_only_install_hint() -> None:
    facts = no_gpu_machine(tensorflow=False)
    checks = by_id(facts)
    assert checks["tensorflow"].fix.startswith(f"{PIP} install 'tensorflow==2.21.0'")
    assert "and-cuda" not in doctor.to_text(list(checks.values()), facts)
    assert f"({PIP} install 'tensorflow==2.21.0')" in checks["hardware"].fix


def test_with_tensorflow_installed_the_hardware_check_suggests_no_pip_line() -> None:
    checks = by_id(no_gpu_machine(tensorflow=True))
    assert checks["hardware"].status == FAIL and "pip" not in checks["hardware"].fix
    assert checks["tensorflow"].status == PASS and "loses nothing" in checks["tensorflow"].summary  # CPU build, no GPU


def test_unknown_hardware_puts_the_cpu_build_first_and_a_gpu_puts_the_cuda_build_first() -> None:
    unknown = replace(no_gpu_machine(tensorflow=False), pci={"readable": False, "error": "not Linux"})
    fix = by_id(unknown)["tensorflow"].fix
    assert fix.index("'tensorflow==2.21.0'") < fix.index("'tensorflow[and-cuda]==2.21.0'")
    with_gpu = replace(healthy(1), probe={"imported": False, "import_error": "ModuleNotFoundError"})
    assert by_id(with_gpu)["tensorflow"].fix.startswith(f"{PIP} install 'tensorflow[and-cuda]==2.21.0'")


def test_every_fix_uses_this_interpreters_pip_and_names_a_version() -> None:
    cpu_build = healthy(1)
    cpu_build.probe["build"] = {"is_cuda_build": False}
    cpu_build.packages["tensorflow-cpu"] = "2.21.0"
    assert by_id(cpu_build)["tensorflow"].fix == (
        f"This TensorFlow can never use a GPU. On Linux: {PIP} uninstall -y tensorflow-cpu && {PIP} install "
        "--force-reinstall 'tensorflow[and-cuda]==2.21.0'")
    assert by_id(cpu_build)["packages"].fix == (f"{PIP} uninstall -y tensorflow-cpu tensorflow && {PIP} install "
                                                "'tensorflow[and-cuda]==2.21.0'")
    xla = healthy(1)
    xla.probe["physical"] = [{"name": "/physical_device:XLA_GPU:0", "device_type": "XLA_GPU"}]
    from tf_device_panel.core.devices.cudalibs import TESTED_TF_VERSION
    assert f"{PIP} install -U 'tensorflow[and-cuda]=={TESTED_TF_VERSION}'" in by_id(xla)["xla-devices"].fix
    crashed = replace(healthy(1), probe={"imported": False, "stage": "started", "crash": {
        "returncode": -11, "how": "SIGSEGV", "stage": "import", "last_lines": []}})
    assert f"{PIP} install --force-reinstall 'tensorflow[and-cuda]==2.21.0'" in by_id(crashed)["tensorflow"].fix
