"""Every malformed input is refused before TensorFlow starts, with one short line that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tf_device_panel.core import cli
from tf_device_panel.core.catalogue import JOBS, ParamError
from tf_device_panel.core.client import machine
from tf_device_panel.core.config import MAX_PROFILE_BYTES, DeviceConfig, ProfileError, load_profile

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


def profile_problem(path: Path) -> str:
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    (problem,) = caught.value.problems
    text = str(problem)
    assert "\n" not in text and len(text) < 300, text
    return text


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b'\xef\xbb\xbf{"version": 1, "cpu_devices": 2}')
    assert load_profile(path) == DeviceConfig(cpu_devices=2)


@pytest.mark.parametrize(("content", "expected"), [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"version": 1, "cpu_devices": ' + b"9" * 5000 + b"}", "a number with 5000 digits"),
    (b'{"version": 1, "cpu_devices": 1e999}', "too long or too large"),
    (b'{"version": 1, "cpu_devices": NaN}', "NaN is not a number JSON allows"),
    (b'{"version": 1, "cpu_devices": 2', "not valid JSON"),
    (b'{"version": 1}\xff', "cannot be read as UTF-8 text"),
    (b'{"version": 1, "gpu_allocator": "' + b"x" * 900_000 + b'"}', "unknown allocator 'xxxxx"),
    (b'{"version": 1, "cpu_devices": 2, "cpu_devices": 3}', "the key 'cpu_devices' is given twice"),
    (b'{"version": 1, "virtual_gpus": {"0": [1024], "0": [2048]}}', "the key '0' is given twice"),
])
def test_malformed_profiles_get_one_short_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert expected in profile_problem(path)


def test_huge_keys_and_values_are_quoted_shortened(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"version": 1, "k' + "y" * 5000 + '": 1, "visible_gpus": "' + "z" * 5000 + '"}')
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    texts = [str(p) for p in caught.value.problems]
    assert len(texts) == 2 and all(len(t) < 300 and "..." in t for t in texts), texts


def test_only_regular_files_of_at_most_a_mebibyte_are_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b'{"version": 1}' + b" " * MAX_PROFILE_BYTES)
    assert "larger than 1024 KiB" in profile_problem(big)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # nobody writes to it: reading it would block forever
    assert "is a FIFO, not a regular file" in profile_problem(fifo)
    assert "is a device, not a regular file" in profile_problem(Path("/dev/zero"))
    assert "is a folder" in profile_problem(tmp_path)


def test_validate_exits_2_at_once_on_dev_zero_and_fifos(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in ("/dev/zero", str(fifo)):
        done = run_cli("validate", target, timeout=30)
        assert done.returncode == 2 and "not a regular file" in done.stdout
        assert len(done.stdout) < 400


def test_gpus_that_cannot_be_checked_get_a_warning_not_a_plain_valid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(machine, "nvml_gpu_inventory", lambda: None)  # a machine where NVML sees no GPU
    path = tmp_path / "gpus.json"
    path.write_text('{"version": 1, "visible_gpus": [0, 99], "virtual_gpus": {"0": [1024]}}')
    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert ": valid —" not in out and "could not be checked" in out and "GPU 0, 99" in out

    path.write_text('{"version": 1, "cpu_devices": 2}')  # names no GPU: nothing to warn about
    assert cli.main(["validate", str(path)]) == 0
    assert ": valid —" in capsys.readouterr().out


def test_validate_with_six_problems_lists_the_gpu_warning_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: the GPU-5 warning was shown only when it was alone."""
    monkeypatch.setattr(machine, "nvml_gpu_inventory", lambda: None)  # a machine where NVML sees no GPU
    path = tmp_path / "six.json"
    path.write_text('{"visible_gpus": [5], "cpu_devices": -1, "memory_growth": "yes", "soft_placement": 3, '
                    '"log_placement": "x", "threads": 4}')
    assert cli.main(["validate", str(path)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 6 problem(s) and 1 warning(s)")
    assert len([line for line in out if line.startswith("  - ")]) == 7
    assert out[-1].startswith("  - warning: visible_gpus: names GPU 5, which could not be checked")
    # A valid-as-read profile with a problem of this machine's: the warning too.
    path.write_text('{"version": 1, "visible_gpus": [5], "memory_growth": true, "memory_fraction": 0.5}')
    assert cli.main(["validate", str(path)]) == 2
    out = capsys.readouterr().out
    assert "1 problem(s) and 1 warning(s)" in out and "warning: visible_gpus: names GPU 5" in out


@pytest.mark.parametrize(("job", "param", "text", "expected"), [
    ("custom-loop", "learning_rate", "nan", "expected a finite number, got nan"),
    ("custom-loop", "learning_rate", "-inf", "expected a finite number, got -inf"),
    ("custom-loop", "learning_rate", "1e400", "expected a finite number"),
    ("matmul", "device", "/FOO:0", "'/FOO:0' is not a TensorFlow device name"),
    ("matmul", "device", "/device:GPU:x", "is not a TensorFlow device name"),
    ("matmul", "device", "/GPU:99999999999999999999", "device index '99999999999999999999' is too large"),
    ("fit", "devices", "/CPU:0,/FOO:1", "'/FOO:1' is not a TensorFlow device name"),
    ("benchmark", "sizes", "²", "'²' is not a whole number above 0 in digits 0-9"),
    ("benchmark", "sizes", "256,٣", "'٣' is not a whole number"),
    ("fit", "epochs", "٣", "expected a whole number in plain digits 0-9"),
    ("fit", "epochs", "9" * 5000, "got 5000 characters"),
    ("script", "path", "missing.py", "'missing.py' does not exist"),
    ("fit", "epochs", "1_000", "expected a whole number in plain digits 0-9 (e.g. 1000), got '1_000'"),
    ("custom-loop", "learning_rate", "1_0.5", "expected a number in plain digits 0-9"),
    ("fit", "devices", "/CPU:0,/CPU:0,/CPU:0", "'/CPU:0' is listed twice; list each device once"),
    ("fit", "devices", "/CPU:0,/device:cpu:0", "'/device:cpu:0' is listed twice (as '/CPU:0')"),
    ("script", "path", "~nouser_h24/x.py", "'~nouser_h24' names no user of this machine"),
])
def test_bad_job_parameters_are_refused_with_what_was_wrong(job: str, param: str, text: str, expected: str) -> None:
    with pytest.raises(ParamError) as caught:
        JOBS[job].resolve(texts={param: text})
    ((name, message),) = caught.value.problems
    assert name == param and expected in message and len(message) < 300, message


@pytest.mark.parametrize("device", ["/GPU:0", "gpu:1", "/device:CPU:1", "/device:XLA_GPU:0",
                                    "/job:localhost/replica:0/task:0/device:GPU:1", "/job:worker/task:1/cpu:0"])
def test_device_names_tensorflow_parses_are_accepted(device: str) -> None:
    assert JOBS["matmul"].resolve(texts={"device": device})["device"] == device


def test_typed_values_from_the_window_are_checked_too() -> None:
    with pytest.raises(ParamError, match="finite"):
        JOBS["custom-loop"].resolve({"learning_rate": float("nan")})


def test_a_missing_script_exits_2_before_tensorflow_starts() -> None:
    done = run_cli("run", "script", "-p", "path=missing.py")
    assert done.returncode == 2 and "'missing.py' does not exist" in done.stderr
    assert "runtime ready" not in done.stdout


def test_huge_command_line_values_are_quoted_shortened() -> None:
    huge = "y" * 100_000
    for args in ((huge,), ("run", "matmul", "-p", huge), ("run", huge)):
        done = run_cli(*args)
        assert done.returncode == 2 and "..." in done.stderr and len(done.stderr) < 1500, done.stderr[:300]


def test_the_doctor_warns_about_gpus_it_cannot_check_and_growth_with_a_fraction() -> None:
    from tf_device_panel.core.client import doctor
    from tf_device_panel.core.client.doctor import PASS, WARN, Facts

    def configuration(config: dict, nvml: dict, growth_env: str | None = None) -> doctor.Check:
        facts = Facts(system="Linux", release="6.8.0", machine="x86_64", python="3.11.7",
                      env={"TF_FORCE_GPU_ALLOW_GROWTH": growth_env}, packages={}, cuda_requirements=[],
                      nvml=nvml, probe={}, tf_stderr=[], config=config)
        return doctor.check_configuration(facts)

    no_driver = {"available": False, "message": "no NVIDIA driver found"}
    check = configuration({"version": 1, "visible_gpus": [0]}, no_driver)
    assert check.status == WARN and "could not be checked" in check.summary and "no NVIDIA driver" in check.summary
    assert configuration({"version": 1, "cpu_devices": 2}, no_driver).status == PASS
    check = configuration({"version": 1, "memory_fraction": 0.5}, {"available": True, "gpus": []}, "true")
    assert check.status == WARN and "memory_fraction" in check.summary and "memory_fraction" in check.fix


def test_environment_and_empty_name_problems_exit_2_with_what_to_do(tmp_path: Path) -> None:
    done = run_cli("snippet", "--config", "")
    assert done.returncode == 2 and "no file name given" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "file").write_text("")
    for home, expected in [(str(tmp_path / "file" / "home"), "is a file, not a folder"),
                           ("~nouser_h24/home", "'~nouser_h24' names no user of this machine")]:
        done = subprocess.run([sys.executable, "-m", "tf_device_panel", "runs"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "TF_DEVICE_PANEL_HOME": home})
        assert done.returncode == 2 and expected in done.stderr and "TF_DEVICE_PANEL_HOME" in done.stderr, done.stderr
