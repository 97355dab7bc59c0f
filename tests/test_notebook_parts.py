"""The notebook extension's parts without a kernel: `%tf_config`'s words read as a profile (the schema's rules and
messages), the output sieve on real file descriptors (in a child process: it takes over fds 1 and 2), and the
views' text."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT
from tf_device_panel.core.config import DeviceConfig, parse_config, save_profile
from tf_device_panel.core.notebook.cell_run import CellFallback, CellReport
from tf_device_panel.core.notebook.configure import ConfigUsageError, profile_json, read_config
from tf_device_panel.core.notebook.views import CellRunView
from tf_device_panel.core.oom import explain
from tf_device_panel.core.protocol.output_lines import PlacedOp


def test_settings_are_read_as_a_profile_would_hold_them() -> None:
    data, path = profile_json(["cpu_devices=3", "memory_growth=yes", "soft_placement=false", "visible_gpus=0,1",
                               'virtual_gpus={"0": [1024, 1024]}', "gpu_allocator=cuda_malloc_async",
                               "memory_fraction=null", "cpu_memory_limit_mib=64"])
    assert path is None
    assert data == {"version": 1, "cpu_devices": 3, "memory_growth": True, "soft_placement": False,
                    "visible_gpus": [0, 1], "virtual_gpus": {"0": [1024, 1024]},
                    "gpu_allocator": "cuda_malloc_async", "memory_fraction": None, "cpu_memory_limit_mib": 64}
    assert read_config("cpu_devices=3 log_placement=off") == DeviceConfig(cpu_devices=3, log_placement=False)
    assert profile_json(["visible_gpus=1"])[0]["visible_gpus"] == [1]          # one GPU, as "0,1" is two
    assert profile_json(["visible_gpus=null"])[0]["visible_gpus"] is None


def test_bad_settings_get_the_schemas_own_messages_every_one_at_once() -> None:
    settings = {"cpu_devices": "two", "gpu_allocator": "fast", "bogus": 1, "memory_fraction": 2.0}
    with pytest.raises(ConfigUsageError) as refused:
        read_config("cpu_devices=two gpu_allocator=fast bogus=1 memory_fraction=2")
    _, problems = parse_config({"version": 1, **settings})
    assert len(problems) == 4
    for problem in problems:
        assert f"  {problem}" in str(refused.value).splitlines(), (problem, str(refused.value))
    assert str(refused.value).startswith("the configuration (cpu_devices=two gpu_allocator=fast bogus=1 "
                                         "memory_fraction=2) was not applied:")


def test_a_profile_file_first_then_settings_that_change_it(tmp_path: Path) -> None:
    profile = tmp_path / "two.json"
    save_profile(DeviceConfig(cpu_devices=2, cpu_memory_limit_mib=256), profile)
    assert read_config(f"{profile} cpu_devices=4") == DeviceConfig(cpu_devices=4, cpu_memory_limit_mib=256)
    with pytest.raises(ConfigUsageError, match="no such file"):
        read_config(str(tmp_path / "missing.json"))
    with pytest.raises(ConfigUsageError, match=r"'stray': expected key=value \(a profile file can only come "
                                               r"first\)"):
        read_config("cpu_devices=2 stray")
    with pytest.raises(ConfigUsageError, match="cpu_devices is given twice"):
        read_config("cpu_devices=2 cpu_devices=3")
    with pytest.raises(ConfigUsageError, match="cannot read"):
        read_config('cpu_devices="2')


SIEVE_CHILD = textwrap.dedent("""\
    import json, os, sys
    from tf_device_panel.core.notebook.capture import OutputSieve

    CPU = b"/job:localhost/replica:0/task:0/device:CPU:"
    LOG = b"I0000 00:00:1.5 1 "
    sieve = OutputSieve()
    sieve.install()
    os.write(2, LOG + b"placer.cc:162] MatMul: (MatMul): " + CPU + b"1\\n")
    os.write(2, b"between cells\\n")
    sieve.sync()
    with sieve.capture() as captured:
        os.write(1, b"MatMul: (MatMul): " + CPU + b"1\\n")
        os.write(2, LOG + b"execute.cc:1775] Executing op MatMul in device " + CPU + b"1\\n")
        print("Executing op AddV2 in device " + CPU.decode() + "0")
        sys.stdout.flush()
        os.write(2, b"W0000 00:00:1.5 1 bfc_allocator.cc:502] Allocator (bfc) ran out of memory trying to "
                    b"allocate 4.00MiB (rounded to 4194304)requested by op AddV2\\n")
        os.write(2, b"Limit:                        64.00MiB\\n")
        os.write(1, b"C code's own line on stdout, amid the dump\\n")
        sieve.sync()  # both threads have read all so far: the stdout line was read while the dump was open
        os.write(2, b"W0000 00:00:1.5 1 op_kernel.cc:1858] OP_REQUIRES failed : RESOURCE_EXHAUSTED: OOM when "
                    b"allocating tensor with shape[1024,1024] and type float on " + CPU + b"0\\n")
        os.write(2, b"the user's own line\\n")
        os.write(2, b"an unfinished line")
    sieve.uninstall()
    os.write(2, b"after the sieve\\n")
    json.dump({"lines": captured.lines, "dump": captured.dump.lines}, open(sys.argv[1], "w"))
    """)


def test_the_sieve_keeps_placements_and_the_dump_and_passes_everything_else_on(tmp_path: Path) -> None:
    result = tmp_path / "captured.json"
    done = subprocess.run([sys.executable, "-c", SIEVE_CHILD, str(result)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # What reached the real stderr and stdout: only what is neither a placement nor the allocator's dump.
    assert done.stderr == "between cells\nthe user's own line\nan unfinished line\nafter the sieve\n", done.stderr
    # fd 1 is read on a thread of its own: its lines are never taken for a part of fd 2's dump, nor held with it
    assert done.stdout == "C code's own line on stdout, amid the dump\n", done.stdout
    captured = json.loads(result.read_text())
    texts = [line for _, line in captured["lines"]]
    assert any("execute.cc:1775] Executing op MatMul" in line for line in texts)
    assert any(line.endswith("Executing op AddV2 in device /job:localhost/replica:0/task:0/device:CPU:0")
               for line in texts)  # the Python-side echo, kept as the eager op's line
    assert captured["dump"][0].endswith("requested by op AddV2") and len(captured["dump"]) == 3
    assert "between cells" not in texts  # captured only during the cell


def test_the_report_as_text() -> None:
    dump = (ROOT / "tests" / "fixtures" / "oom_cpu_bfc_64mib.stderr.txt").read_text().splitlines()
    message = ("OOM when allocating tensor with shape[1024,1024] and type float on "
               "/job:localhost/replica:0/task:0/device:CPU:0 by allocator bfc_cpu_allocator_for_gpu [Op:AddV2]")
    report = CellReport(wall_s=1.25, from_log=True, devices=["/CPU:0", "/CPU:1"],
                        placements=[PlacedOp(op="MatMul", op_type="MatMul", kernel="_MklMatMul",
                                             device="/job:localhost/replica:0/task:0/device:CPU:1",
                                             short_device="/CPU:1", mode="eager")] * 2,
                        fallbacks=[CellFallback("/GPU:0", "/CPU:0", 4)], peaks={"/CPU:0": 3 * 1024 * 1024},
                        limits={"/CPU:0": 64 * 1024 * 1024}, shared_cpu_allocator=True,
                        oom=explain(dump, message))
    assert report.counts() == {"/CPU:1": Counter({"MatMul": 2})}
    text = repr(CellRunView(report))
    assert text.splitlines()[0] == ("%%tf_run: 1.250 s wall, 2 op placement(s) (from TensorFlow's placement log) — "
                                    "ran out of memory")
    assert "out of memory on /CPU:0 (bfc_cpu_allocator_for_gpu): tensor of shape [1024, 1024] (float)" in text
    assert ("⚠ soft-placement fallback: line 4: tf.device('/GPU:0') names no device here (/GPU:0); its ops ran on "
            "/CPU:0") in text
    rows = [line.split() for line in text.splitlines() if line.startswith("  /CPU:")]
    assert rows[0][:3] == ["/CPU:0", "0", "3.00"] and "(all logical CPUs)" in " ".join(rows[0])
    assert rows[1] == ["/CPU:1", "2", "MatMul", "×2"]
    page = CellRunView(report)._repr_html_()
    assert "<script" not in page and page.count("<svg") == 2


def test_a_process_the_cell_left_running_keeps_its_output_after_the_capture(tmp_path: Path) -> None:
    """A child started during a captured cell inherits the pipe on fd 2: once the capture ends its output still
    reaches the real stderr, and the capture does not wait for it to exit."""
    child = textwrap.dedent("""\
        import subprocess, sys, time
        from tf_device_panel.core.notebook.capture import OutputSieve

        sieve = OutputSieve()
        sieve.install()
        with sieve.capture():
            server = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); "
                                       "sys.stderr.write('the server says goodbye\\\\n')"], stdin=subprocess.PIPE)
        started = time.monotonic()
        sieve.uninstall()
        print(f"returned {time.monotonic() - started < 3}", flush=True)
        server.stdin.close()
        server.wait(timeout=30)
        """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "returned True\n" and "the server says goodbye" in done.stderr, (done.stdout, done.stderr)


def test_an_oom_the_cell_caught_itself_is_still_explained_from_the_dump() -> None:
    """The cell handled the ResourceExhaustedError (no error reaches %%tf_run), but the allocator's dump went by on
    fd 2: the report explains it, and the dump does not reach the output (in a child process: TensorFlow and fd 2).
    The dump is the one recorded from TensorFlow 2.21 under a 64 MiB cap."""
    child = textwrap.dedent("""\
        import json, os, sys
        from tf_device_panel.core.notebook.capture import OutputSieve
        from tf_device_panel.core.notebook.cell_run import run_cell

        def cell():
            with open(sys.argv[1], "rb") as dump:
                os.write(2, dump.read())
            return "the cell's value"

        report, value = run_cell(cell, "<cell>", OutputSieve())
        print(json.dumps({"value": value, "caught": report.oom_caught_by_cell, "error": repr(report.error),
                          "request": report.oom and report.oom.get("request_bytes"),
                          "verdict": report.oom and report.oom.get("verdict")}))
        """)
    fixture = ROOT / "tests" / "fixtures" / "oom_cpu_bfc_64mib.stderr.txt"
    done = subprocess.run([sys.executable, "-c", child, str(fixture)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"value": "the cell's value", "caught": True, "error": "None", "request": 4 * 1024 * 1024,
                      "verdict": result["verdict"]} and result["verdict"] in ("shortage", "fragmentation"), result
    assert "bfc_allocator" not in done.stderr and "InUse at" not in done.stderr, done.stderr[-2000:]
