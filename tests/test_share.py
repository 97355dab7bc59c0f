"""`share`: one device split into seats, one profile per seat, and the seats verified side by side.

The GPU split is checked against the H100's recorded facts (tests/fixtures/h100/gpu.json: CUDA's total, and the
522 MiB a process held under memory growth after its first op: its CUDA context); the CPU split, and the seats
run side by side, for real under the CPU's BFC allocator capped by cpu_memory_limit_mib."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from tf_device_panel.core import cli
from tf_device_panel.core.client.share import (
    CONTEXT_RESERVE_MIB,
    HEADROOM_MIB,
    MIN_SEAT_MIB,
    ShareError,
    plan_seats,
)
from tf_device_panel.core.config import DeviceConfig, GpuInfo, load_profile
from tf_device_panel.core.devices import nvml

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
H100 = json.loads((Path(__file__).parent / "fixtures" / "h100" / "gpu.json").read_text())
H100_GPU = GpuInfo(index=0, name=H100["nvml"]["name"], total_mib=H100["cuda_total_mib"], total_source="CUDA")


HELD = H100["process_memory_after_first_op_mib"]
# What an H100 process held beyond TensorFlow's allocator: under growth after its first op (522 MiB, next to
# nothing allocated), and above the limit under memory_fraction 0.25 (20,790 - 20,269 = 521 MiB).
CONTEXTS_MIB = (HELD["memory_growth"], HELD["memory_fraction_0_25"] - H100["tf_limit_for_fraction_0_25_mib"])


def test_the_reserve_per_seat_is_the_cuda_context_measured_on_the_h100_and_covers_it() -> None:
    assert CONTEXTS_MIB == (522, 521)
    assert CONTEXT_RESERVE_MIB == 520 and all(abs(CONTEXT_RESERVE_MIB - m) <= 8 for m in CONTEXTS_MIB)
    assert max(CONTEXTS_MIB) <= CONTEXT_RESERVE_MIB + HEADROOM_MIB
    # A logical GPU's process takes its whole limit at its first op (the 2048+4096 split held 522 + 2048).
    assert HELD["split_2048_4096"] == HELD["memory_growth"] + 2048
    # So with 520 MiB and no headroom, three seats would not fit: 3 × (26,506 + 522) = 81,084 > 81,079.
    assert 3 * ((H100["cuda_total_mib"] - 3 * 520) // 3 + max(CONTEXTS_MIB)) > H100["cuda_total_mib"]


@pytest.mark.parametrize("seats", [1, 2, 3, 4, 7, 10, 30, 100, 142])
def test_every_seat_of_an_h100_holding_its_limit_and_its_measured_context_at_once_fits_cudas_total(seats) -> None:
    plan = plan_seats(DeviceConfig(), seats, [H100_GPU])
    assert seats * (plan.seat_mib + max(CONTEXTS_MIB)) <= H100["cuda_total_mib"]


H200 = json.loads((Path(__file__).parent / "fixtures" / "h200" / "gpu.json").read_text())


@pytest.mark.parametrize("seats", [1, 2, 3, 7, 50, 200, 252])
def test_every_seat_of_an_h200_holding_its_limit_and_the_context_read_there_fits_cudas_total(seats) -> None:
    # Read on an H200 (scripts/gpu_acceptance.py --record): CUDA's total, and the 522 MiB a process held under
    # memory growth after one op — the H100's context, which CONTEXT_RESERVE_MIB and HEADROOM_MIB cover.
    gpu = GpuInfo(index=0, name=H200["nvml"]["name"], total_mib=H200["cuda_total_mib"], total_source="CUDA")
    context = H200["process_memory_after_first_op_mib"]["growth"]
    assert context <= CONTEXT_RESERVE_MIB + HEADROOM_MIB
    plan = plan_seats(DeviceConfig(), seats, [gpu])
    assert seats * (plan.seat_mib + context) <= H200["cuda_total_mib"]


def test_an_h100_split_in_three_reserves_each_seats_context_and_fits_cudas_total() -> None:
    plan = plan_seats(DeviceConfig(), 3, [H100_GPU])
    assert plan.device == "/GPU:0" and plan.reserved_mib == 520 + 16
    assert plan.seat_mib == (81_079 - 3 * 536) // 3 == 26_490
    assert len(plan.configs) == 3
    for config in plan.configs:
        assert config.visible_gpus == (0,) and dict(config.virtual_gpus) == {0: (26_490,)}
        assert not config.memory_growth and config.memory_fraction is None
        assert config.problems([H100_GPU], cuda_visible_devices=None) == []   # each seat's profile is valid there
    # The seats' limits and their contexts together stay within what CUDA counts.
    assert 3 * (plan.seat_mib + plan.reserved_mib) <= H100["cuda_total_mib"]


def test_a_base_profiles_visible_gpu_is_the_one_split_and_growth_or_a_fraction_give_way() -> None:
    second = GpuInfo(index=1, name="NVIDIA H100 80GB HBM3", total_mib=81_079, total_source="CUDA")
    base = DeviceConfig(visible_gpus=(1,), memory_fraction=0.5, log_placement=False)
    plan = plan_seats(base, 2, [H100_GPU, second])
    assert plan.device == "/GPU:1"
    assert [dict(c.virtual_gpus) for c in plan.configs] == [{1: ((81_079 - 2 * 536) // 2,)}] * 2
    assert all(c.memory_fraction is None and not c.log_placement for c in plan.configs)


@pytest.mark.parametrize(("seats", "said"), [
    (0, "0 is not a number of seats; use 1 or more"),
    (-2, "-2 is not a number of seats; use 1 or more"),
    (143, "use at most 142 seats"),   # 81,079 MiB / (32 + 536): 142 seats of at least 32 MiB
])
def test_a_count_of_seats_that_is_not_one_or_more_or_too_many_for_the_h100_is_refused(seats: int, said: str) -> None:
    with pytest.raises(ShareError, match=said.replace("(", r"\(")):
        plan_seats(DeviceConfig(), seats, [H100_GPU])
    assert plan_seats(DeviceConfig(), 142, [H100_GPU]).seat_mib >= MIN_SEAT_MIB  # the most it allows


def _h100_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML reporting the recorded H100 (memory v2: its total and the driver's reserve, so CUDA's total)."""
    import pynvml
    from fake_nvml import FakeGpus

    FakeGpus(count=1, total_mib=H100["nvml"]["memory_total_mib"], name=H100["nvml"]["name"]).install(monkeypatch)
    total = H100["nvml"]["memory_total_mib"] * MIB
    reserved = total - H100["cuda_total_mib"] * MIB
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda handle, version=None: SimpleNamespace(
        total=total, reserved=reserved, used=0, free=total - reserved))
    monkeypatch.setattr(nvml, "_shared", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_nvml import no_library

    no_library(monkeypatch)
    monkeypatch.setattr(nvml, "_shared", None)


def test_share_on_the_h100_writes_a_profile_per_seat_that_run_accepts(monkeypatch, tmp_path, capsys) -> None:
    _h100_nvml(monkeypatch)
    out = tmp_path / "class"
    assert cli.main(["share", "--seats", "2", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "/GPU:0" and report["reserved_mib_per_seat"] == 536
    limit = (H100["cuda_total_mib"] - 2 * 536) // 2
    assert [s["limit_bytes"] for s in report["seats"]] == [limit * MIB] * 2
    assert sorted(p.name for p in out.iterdir()) == ["seat-1.json", "seat-2.json"]
    for path in out.iterdir():
        assert json.loads(path.read_text())["virtual_gpus"] == {"0": [limit]}
        assert cli.main(["validate", str(path)]) == 0   # checked against the same (fake) H100
    capsys.readouterr()


def test_on_a_cpu_only_machine_a_base_without_a_cap_is_refused_saying_to_set_one(monkeypatch, tmp_path,
                                                                                  capsys) -> None:
    _no_nvml(monkeypatch)
    out = tmp_path / "class"
    assert cli.main(["share", "--seats", "3", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "no GPU to split" in error and "set its cpu_memory_limit_mib" in error and "3072" in error
    assert error.startswith("error: --config: ")
    assert "Traceback" not in error and not out.exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--seats", "0"], "--seats: 0 is not a number of seats"),
    (["--seats", "-1"], "--seats: -1 is not a number of seats"),
    (["--seats", "three"], "--seats: expected a whole number of seats, got 'three'"),
    (["--seats", "4"], "4 seats are too many: the CPU cap of 96 MiB split 4 ways leaves 24 MiB a seat, under "
                       "the 32 MiB a seat needs; use at most 3 seats"),
])
def test_bad_counts_of_seats_are_usage_errors_that_write_nothing(monkeypatch, tmp_path, capsys, args, said) -> None:
    _no_nvml(monkeypatch)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 96}))
    out = tmp_path / "class"
    code = cli.main(["share", *args, "--config", str(base), "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2 and said in error and "Traceback" not in error
    assert not out.exists()


def test_an_existing_folder_with_files_is_refused_unless_forced_and_a_file_is_never_used(monkeypatch, tmp_path,
                                                                                         capsys) -> None:
    _no_nvml(monkeypatch)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 300}))
    out = tmp_path / "class"
    out.mkdir()
    (out / "notes.txt").write_text("the instructor's")
    assert cli.main(["share", "--seats", "3", "--config", str(base), "--out", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err and sorted(os.listdir(out)) == ["notes.txt"]
    assert cli.main(["share", "--seats", "3", "--config", str(base), "--out", str(out), "--force"]) == 0
    assert sorted(os.listdir(out)) == ["notes.txt", "seat-1.json", "seat-2.json", "seat-3.json"]
    assert [load_profile(out / f"seat-{i}.json").cpu_memory_limit_mib for i in (1, 2, 3)] == [100] * 3
    assert cli.main(["share", "--seats", "3", "--config", str(base), "--out", str(out / "notes.txt"),
                     "--force"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def _share(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "share", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_three_seats_of_a_cpu_cap_run_side_by_side_and_each_peak_stays_within_its_limit(tmp_path) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 192, "log_placement": False}))
    out = tmp_path / "class"
    done = _share("--seats", "3", "--config", str(base), "--out", str(out), "--verify", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["device"] == "/CPU:0" and report["verified"] is True
    assert [s["seat"] for s in report["seats"]] == [1, 2, 3]
    # One run of the work alone measured what each seat's TensorFlow process takes beside its allocator...
    overhead = report["overhead"]
    assert overhead["measured"] is True and overhead["said"].startswith("measured by one run of cnn (batch 32)")
    assert 200 < overhead["host_mib"] < 4096 and overhead["gpu_mib"] is None
    for seat in report["seats"]:
        assert seat["limit_bytes"] == 64 * MIB
        assert seat["status"] == "held", seat
        assert 0 < seat["peak_bytes"] <= seat["limit_bytes"]   # the seat's own allocator, really used
        assert load_profile(seat["profile"]).cpu_memory_limit_mib == 64
        # ... and it is what each seat's processes took beside their allocator's peak, side by side.
        expected = overhead["host_mib"] * MIB + seat["peak_bytes"]
        assert abs(seat["process_peak_bytes"] - expected) <= 0.1 * expected, (seat, overhead)


@pytest.mark.slow
def test_a_seat_whose_run_does_not_fit_its_limit_fails_the_command(tmp_path) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 128, "log_placement": False}))
    done = _share("--seats", "2", "--config", str(base), "--out", str(tmp_path / "class"), "--verify",
                  "--batch", "4096")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count(": out of memory") == 2 and "a seat did not hold" in done.stdout
    # The work ran out of memory alone too, so nothing measured the seats' overhead: said, with what was assumed.
    assert "beyond each seat's allocator: not measured (the run that measures it did not hold: " in done.stdout
    assert "assumed about 640 MiB of this machine's memory for each seat's TensorFlow process" in done.stdout


def test_verifying_more_seats_than_this_machines_memory_holds_is_refused_before_anything_is_written(
        monkeypatch, tmp_path, capsys) -> None:
    import psutil
    from tf_device_panel.core.client.share import SEAT_HOST_MIB

    _no_nvml(monkeypatch)
    if 256 * (SEAT_HOST_MIB["/CPU"] + 32) * MIB <= psutil.virtual_memory().available:
        pytest.skip("this machine could start 256 seats at once")
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 256 * 32, "log_placement": False}))
    out = tmp_path / "class"
    # The work runs alone first (its TensorFlow process measured), then the seats are refused with that figure.
    assert cli.main(["share", "--seats", "256", "--config", str(base), "--out", str(out), "--verify"]) == 2
    captured = capsys.readouterr()
    assert "measuring the work alone (cnn, batch 32)" in captured.out
    each = int(captured.err.split("(about ")[1].split(" MiB for each seat's TensorFlow process, measured)")[0]
               .replace(",", ""))
    assert 200 < each < 4096
    assert f"--seats: 256 seats side by side need about {256 * each:,} MiB" in captured.err
    assert "verify at most" in captured.err
    assert not out.exists()
    assert cli.main(["share", "--seats", "256", "--config", str(base), "--out", str(out)]) == 0  # writing is fine
    assert len(list(out.iterdir())) == 256


def test_profiles_only_written_say_the_overhead_they_assumed_and_why(monkeypatch, tmp_path, capsys) -> None:
    from tf_device_panel.core.client.share import SEAT_HOST_MIB

    _no_nvml(monkeypatch)
    assert cli.main(["share", "--seats", "2", "--config", str(_cpu_base(tmp_path, 128)), "--out",
                     str(tmp_path / "class"), "--json"]) == 0
    overhead = json.loads(capsys.readouterr().out)["overhead"]
    assert overhead["measured"] is False and overhead["host_mib"] == SEAT_HOST_MIB["/CPU"]
    assert overhead["said"].startswith("not measured (the profiles are only written, nothing runs; verifying the "
                                       "seats measures it); assumed about 640 MiB")
    assert "--" not in overhead["said"]   # the window shows it as it is


def test_a_gpus_seats_keep_the_overhead_measured_for_the_work_beyond_their_limit() -> None:
    from tf_device_panel.core.client.share import WorkNeeds

    # What one run of the work alone on the H100 would report: its process held 700 MiB beyond its limit.
    needs = WorkNeeds(peak_mib=900.0, process_mib=80_000, host_mib=2_300, gpu_overhead_mib=700, device="/GPU:0",
                      what="cnn (batch 32)")
    overhead = needs.overhead()
    assert overhead.measured and overhead.gpu_reserve_mib == 700 + HEADROOM_MIB and overhead.host_mib == 2_300
    plan = plan_seats(DeviceConfig(), 3, [H100_GPU], reserved_mib=overhead.gpu_reserve_mib)
    assert plan.reserved_mib == 716 and plan.seat_mib == (H100["cuda_total_mib"] - 3 * 716) // 3
    assert 3 * (plan.seat_mib + 700) <= H100["cuda_total_mib"]
    assert "held 700 MiB on the GPU beyond its limit (NVML)" in overhead.said
    # Where NVML saw nothing of the run, the H100's context is assumed, and said.
    unseen = WorkNeeds(peak_mib=900.0, process_mib=2_300, host_mib=2_300, gpu_overhead_mib=None, device="/GPU:0",
                       what="cnn (batch 32)").overhead()
    assert not unseen.measured and unseen.gpu_reserve_mib is None and "NVML gave no figure" in unseen.said
    assert plan_seats(DeviceConfig(), 3, [H100_GPU], reserved_mib=unseen.gpu_reserve_mib).reserved_mib == 536


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_stopping_share_while_it_verifies_leaves_no_seat_running(tmp_path, signal_number) -> None:
    import psutil
    from helpers import wait_until

    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 192, "log_placement": False}))
    # Each seat's work outlasts the test: the signal lands while the seats run however slowly a busy machine
    # starts them (the CNN's few steps could end first, and share with them). The first run, the work alone
    # that measures each seat's overhead before the seats start, ends at once.
    work = tmp_path / "seat_work.py"
    work.write_text(textwrap.dedent(f"""\
        import pathlib, time
        measured = pathlib.Path({str(tmp_path / "measured")!r})
        if not measured.exists():
            measured.write_text("")
            raise SystemExit(0)
        print('seat under way', flush=True)
        time.sleep(600)
    """))
    process = subprocess.Popen([sys.executable, "-m", "tf_device_panel", "share", "--seats", "2", "--config",
                                str(base), "--out", str(tmp_path / "class"), "--verify", "--script", str(work)],
                               cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        command = psutil.Process(process.pid)
        # Each seat's command line and the runtime it started: both seats under way.
        def under_way() -> list[psutil.Process] | None:
            found = command.children(recursive=True)
            return found if len(found) >= 4 else None

        seats = wait_until(under_way, timeout=120, message="the seats never started")
        process.send_signal(signal_number)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert "Traceback" not in err
    assert process.returncode in (130 if signal_number == signal.SIGINT else 143, -signal_number), (out, err)

    def running(seat: psutil.Process) -> bool:
        try:
            return seat.is_running() and seat.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    wait_until(lambda: not any(running(seat) for seat in seats), timeout=30,
               message=lambda: f"left running: {[s.pid for s in seats if running(s)]}")


def test_with_only_nvmls_total_known_the_drivers_reserve_is_taken_off_as_the_h100s() -> None:
    nvml_only = GpuInfo(index=0, name=H100["nvml"]["name"], total_mib=H100["nvml"]["memory_total_mib"],
                        total_source="NVML")
    plan = plan_seats(DeviceConfig(), 3, [nvml_only])
    assert plan.total_mib == H100["cuda_total_mib"]   # 81,559 - 480: CUDA's total, as on the real H100
    assert plan.seat_mib == plan_seats(DeviceConfig(), 3, [H100_GPU]).seat_mib
    assert "as NVML counts it, less 480 MiB the driver keeps" in plan.source


def test_a_batch_the_fit_job_does_not_take_is_refused_before_anything_is_written(monkeypatch, tmp_path,
                                                                                  capsys) -> None:
    _no_nvml(monkeypatch)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 96}))
    out = tmp_path / "class"
    for batch in ("0", "-1", "1000001"):
        assert cli.main(["share", "--seats", "2", "--config", str(base), "--out", str(out), "--verify",
                         "--batch", batch]) == 2
        assert f"--batch: {batch} is not a batch; use 1 to 1,000,000 samples" in capsys.readouterr().err
    assert not out.exists()


def _cpu_base(tmp_path: Path, cap_mib: int) -> Path:
    base = tmp_path / f"cap{cap_mib}.json"
    base.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": cap_mib, "log_placement": False}))
    return base


def test_a_cap_too_small_for_one_seat_says_what_to_raise_not_zero_seats(monkeypatch, tmp_path, capsys) -> None:
    _no_nvml(monkeypatch)
    code = cli.main(["share", "--seats", "2", "--config", str(_cpu_base(tmp_path, 1)), "--out", str(tmp_path / "o")])
    error = capsys.readouterr().err
    assert code == 2 and "0 seats" not in error
    assert "--config: the CPU cap of 1 MiB cannot hold even one seat" in error and "at least 32" in error


def test_counts_of_seats_read_in_the_singular_and_plural(monkeypatch, tmp_path, capsys) -> None:
    _no_nvml(monkeypatch)
    assert cli.main(["share", "--seats", "1", "--config", str(_cpu_base(tmp_path, 64)),
                     "--out", str(tmp_path / "one")]) == 0
    said = capsys.readouterr().out
    assert ": 1 seat of 64 MiB" in said and "1 seats" not in said
    assert cli.main(["share", "--seats", "3", "--config", str(_cpu_base(tmp_path, 64)),
                     "--out", str(tmp_path / "three")]) == 2
    assert "use at most 2 seats" in capsys.readouterr().err
    assert cli.main(["share", "--seats", "2", "--config", str(_cpu_base(tmp_path, 40)),
                     "--out", str(tmp_path / "two")]) == 2
    assert "use at most 1 seat\n" in capsys.readouterr().err + "\n"


def test_an_empty_folder_name_is_refused_and_a_newline_in_it_is_never_printed_raw(monkeypatch, tmp_path,
                                                                                  capsys) -> None:
    _no_nvml(monkeypatch)
    base = str(_cpu_base(tmp_path, 64))
    assert cli.main(["share", "--seats", "2", "--config", base, "--out", ""]) == 2
    assert "--out: no folder named" in capsys.readouterr().err
    assert not list(Path.cwd().glob("seat-*.json"))
    odd = tmp_path / "class\nroom"
    assert cli.main(["share", "--seats", "2", "--config", base, "--out", str(odd)]) == 0
    said = capsys.readouterr().out
    assert "class\\nroom" in said and "class\nroom" not in said
    (odd / "x").write_text("")
    assert cli.main(["share", "--seats", "2", "--config", base, "--out", str(odd)]) == 2
    error = capsys.readouterr().err
    assert "class\\nroom" in error and "class\nroom" not in error


def test_a_batch_without_verifying_is_refused_not_ignored(monkeypatch, tmp_path, capsys) -> None:
    _no_nvml(monkeypatch)
    out = tmp_path / "class"
    assert cli.main(["share", "--seats", "2", "--config", str(_cpu_base(tmp_path, 64)), "--out", str(out),
                     "--batch", "64"]) == 2
    assert "--batch: " in capsys.readouterr().err and not out.exists()


def test_a_split_larger_than_this_machine_is_said_before_it_is_written(monkeypatch, tmp_path, capsys) -> None:
    import psutil

    _no_nvml(monkeypatch)
    host_mib = psutil.virtual_memory().total // MIB
    seats = 256
    cap = max(seats * 32, (host_mib // seats + 1024) * seats)
    out = tmp_path / "class"
    assert cli.main(["share", "--seats", str(seats), "--config", str(_cpu_base(tmp_path, cap)),
                     "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (warning,) = report["warnings"]
    assert f"more than this machine's {host_mib:,} MiB" in warning and "256 seats of" in warning
    assert cli.main(["share", "--seats", str(seats), "--config", str(_cpu_base(tmp_path, cap)),
                     "--out", str(tmp_path / "again")]) == 0
    assert "warning: 256 seats of" in capsys.readouterr().err


def test_a_bound_of_a_jobs_parameter_is_written_in_digits() -> None:
    from tf_device_panel.core.catalogue import JOBS, ParamError

    with pytest.raises(ParamError) as caught:
        JOBS["fit-batch"].resolve({"budget_mib": 2_000_000})
    assert "above the maximum 1,048,576" in str(caught.value) and "e+06" not in str(caught.value)


@pytest.mark.parametrize(("args", "field", "said"), [
    (["--seats", "2", "--max"], "seats", "not both"),
    ([], "seats", "--max"),
    (["--seats", "2", "--args", "{batch}"], "args", "give the script too"),
    (["--seats", "2", "--model", "resnet"], "model", "neither dense nor cnn"),
    (["--seats", "2", "--script", "missing.py"], "script", "does not exist"),
])
def test_the_work_is_checked_and_json_says_the_field_in_its_own_words(monkeypatch, tmp_path, capsys, args, field,
                                                                     said) -> None:
    _no_nvml(monkeypatch)
    code = cli.main(["share", *args, "--config", str(_cpu_base(tmp_path, 64)), "--out", str(tmp_path / "o"),
                     "--json"])
    captured = capsys.readouterr()
    assert code == 2 and f"error: --{field}: " in captured.err
    error = json.loads(captured.out)["error"]
    assert error["field"] == field and said in error["message"] and "--" not in error["message"].replace("--max", "")


@pytest.mark.slow
def test_the_most_seats_of_a_small_cpu_cap_all_hold_side_by_side(tmp_path) -> None:
    base = _cpu_base(tmp_path, 160)
    out = tmp_path / "class"
    done = _share("--max", "--config", str(base), "--out", str(out), "--batch", "16", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    most = report["most"]
    seats = most["seats"]
    assert seats >= 1 and len(report["seats"]) == seats == len(list(out.glob("seat-*.json")))
    assert all(seat["status"] == "held" and seat["peak_bytes"] <= seat["limit_bytes"] for seat in report["seats"])
    assert all(seat["process_peak_bytes"] > seat["peak_bytes"] for seat in report["seats"])  # its own RSS, measured
    assert most["tried"][-1]["held"] or any(t["held"] and t["seats"] == seats for t in most["tried"])
    # the most: one seat more did not hold, or would leave a seat less than the work's peak alone
    above = [t for t in most["tried"] if t["seats"] == seats + 1]
    assert (above and not above[0]["held"]) or (160 // (seats + 1)) < most["work_peak_mib"] * 1.0 or \
        (160 // (seats + 1)) < 32 or most["tried"][0]["seats"] == seats


def test_the_commands_options_are_its_declaration() -> None:
    # `share`'s options are generated from core.catalogue.share_params, as the Share dialog's fields are.
    from tf_device_panel.core.catalogue.share_params import SHARE_OPTIONS

    (share_parser,) = [action.choices["share"] for action in cli.build_parser()._actions
                       if isinstance(action.choices, dict) and "share" in action.choices]
    options = {action.option_strings[0]: action for action in share_parser._actions}
    assert list(options) == ["-h", *(option.flag for option in SHARE_OPTIONS), "--json", "--verbose"]
    for option in SHARE_OPTIONS:
        action = options[option.flag]
        assert action.help == option.param.help and action.required == option.required
        assert action.metavar == (option.metavar or None) and action.default in (None, False)


FAILING_SCRIPT = """
import sys
import tensorflow as tf

batch = int(sys.argv[1])


@tf.function
def step(x):
    return tf.gather(x, [batch + 5])   # past the end: TensorFlow refuses, whatever the memory


print(step(tf.ones([batch])))
"""


def test_work_that_fails_alone_for_another_reason_than_memory_is_said_so_not_told_to_shrink(tmp_path) -> None:
    # On an H200 the cnn at batch 16384 failed in its first Relu on the whole GPU, and share said it "does not fit
    # even the whole of GPU 0 … give it a smaller batch", with TensorFlow's stack for a reason.
    script = tmp_path / "failing.py"
    script.write_text(FAILING_SCRIPT)
    done = _share("--max", "--config", str(_cpu_base(tmp_path, 160)), "--out", str(tmp_path / "class"),
                  "--script", str(script), "--args", "{batch}")
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said == ("error: the work (script failing.py, batch 32) failed alone on /CPU:0, not for lack of memory: "
                    "at node GatherV2: indices[0] = 37 is not in [0, 32)"), said
    assert not (tmp_path / "class").exists() or not any((tmp_path / "class").iterdir())
