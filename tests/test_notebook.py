"""The notebook extension (`%load_ext tf_device_panel`) in a real Jupyter kernel, executed headless by nbclient:
the kernel is this very interpreter (a kernelspec in a temporary folder names sys.executable), so it runs the
panel under test with real TensorFlow on the CPU (two logical CPUs stand in for GPUs, a 64 MiB cap on the CPU's
BFC allocator for a small GPU)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from helpers import ROOT
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from tf_device_panel.core.config import parse_config

KERNEL = "tf-device-panel-test"
EXAMPLE = ROOT / "examples" / "device-panel.ipynb"
RAISES = {"tags": ["raises-exception"]}  # nbclient lets such a cell fail; any other failure fails the test


def kernel_manager(folder: Path) -> KernelManager:
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the interpreter under test", "language": "python"}))
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))


def execute(notebook: Any, folder: Path, timeout: int = 120) -> Any:
    """Run every cell in a fresh kernel (shut down at the end); a cell that fails unless tagged
    raises-exception fails the test."""
    manager = kernel_manager(folder)
    try:
        NotebookClient(notebook, km=manager, timeout=timeout, resources={"metadata": {"path": str(folder)}}).execute()
    finally:  # nbclient shuts down only a kernel it started itself
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    return notebook


def run_cells(sources: list[str | tuple[str, dict[str, Any]]], folder: Path) -> list[Any]:
    cells = [new_code_cell(s) if isinstance(s, str) else new_code_cell(s[0], metadata=s[1]) for s in sources]
    return execute(new_notebook(cells=cells), folder).cells


def text(cell: Any) -> str:
    """Everything a cell showed as text: its streams, its displays' text/plain, its error."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            parts.append(output.data.get("text/plain", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(parts)


def html(cell: Any) -> str:
    return "\n".join(o.data.get("text/html", "") for o in cell.outputs if o.output_type == "display_data")


def streams(cell: Any) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream")


def schema_messages(settings: dict[str, Any]) -> list[str]:
    """What the profile's schema says of these settings, as a profile file, the window and the CLI say it."""
    _, problems = parse_config({"version": 1, **settings})
    assert problems
    return [str(problem) for problem in problems]


def test_configure_before_tensorflow_starts_then_see_placements_and_the_refusal(tmp_path: Path) -> None:
    cells = run_cells([
        "%load_ext tf_device_panel",
        ("%tf_config cpu_devices=0", RAISES),
        ("%tf_config cpu_devices=two bogus=1 memory_growth=maybe", RAISES),
        ("%tf_config visible_gpus=99 cpu_devices=3", RAISES),  # no GPU 99: validation or the plan's check refuses
        "%tf_config cpu_devices=2",
        "import tensorflow as tf\nprint([d.name for d in tf.config.list_logical_devices('CPU')])",
        ("%tf_config cpu_devices=3", RAISES),
        "print('plain cell', float(tf.reduce_sum(tf.ones([2]) * 2)))",
        textwrap.dedent("""\
            %%tf_run
            with tf.device("/CPU:1"):
                product = tf.matmul(tf.ones([3, 3]), tf.ones([3, 3]))
            with tf.device("/GPU:99"):
                moved = product + 1
            print("cell output", product.device)
            moved.shape"""),
        "%tf_devices",
    ], tmp_path)
    load, zero, wrong, no_gpu, configured, imported, refused, plain, placed, devices = cells

    # Bad input: the schema's own messages, every problem at once, and nothing applied.
    assert all(message in text(zero) for message in schema_messages({"cpu_devices": 0})), text(zero)
    assert "UsageError" in text(zero) and "Traceback" not in text(zero)
    for message in schema_messages({"cpu_devices": "two", "bogus": 1, "memory_growth": "maybe"}):
        assert message in text(wrong), (message, text(wrong))

    # Where NVML sees no GPU, the plan's own check (a run's) refuses the index, before any step of the plan.
    assert "was not applied" in text(no_gpu) and "GPU 99" in text(no_gpu), text(no_gpu)
    assert "set_logical_device_configuration(CPU:0, 2 logical CPUs)" in text(configured)
    assert "<ol>" in html(configured)
    assert "['/device:CPU:0', '/device:CPU:1']" in text(imported)

    # After initialization: one sentence (what was initialized, how to go on), not TensorFlow's RuntimeError.
    refusal = text(refused)
    assert "TensorFlow is already initialized in this kernel (its runtime started with /CPU:0, /CPU:1" in refusal
    assert ("), so its devices can no longer be configured: restart the kernel, then run this %tf_config cell "
            "first, before anything that uses TensorFlow.") in refusal, refusal
    assert "RuntimeError" not in refusal and "cannot be modified" not in refusal and "Traceback" not in refusal

    # The placement log is on (the profile's default) but belongs under %%tf_run cells: a plain cell shows only
    # its own output.
    assert streams(plain) == "plain cell 4.0\n", streams(plain)

    # The matmul on /CPU:1, the /GPU:99 block moved by soft placement, the cell's own output and value kept,
    # and none of TensorFlow's placement lines printed under the cell.
    report = text(placed)
    rows = {line.split()[0]: line for line in report.splitlines() if line.strip().startswith("/CPU:")}
    assert "MatMul" in rows["/CPU:1"] and "MatMul" not in rows["/CPU:0"], report
    if "/GPU:0" not in report:  # without a GPU, soft placement runs the block on the first CPU
        assert "AddV2" in rows["/CPU:0"], report
    assert "from TensorFlow's placement log" in report
    assert ("soft-placement fallback: line 4: tf.device('/GPU:99') names no device here (/GPU:99); its ops ran "
            "on /") in report, report
    assert "cell output /job:localhost/replica:0/task:0/device:CPU:1" in streams(placed)
    assert "TensorShape([3, 3])" in report
    assert "Executing op" not in streams(placed) and "placer.cc" not in streams(placed), streams(placed)
    assert "<svg" in html(placed) and "<table>" in html(placed)

    listed = text(devices)
    assert "Physical devices:" in listed and "/physical_device:CPU:0" in listed
    assert "Logical devices: /CPU:0, /CPU:1" in listed
    gpus = "TensorFlow sees no GPU." not in listed
    assert f"Configuration: %tf_config: {'all GPUs' if gpus else 'no GPU on this machine'}, 2 logical CPUs" in listed
    assert "NVML:" in listed and "<table>" in html(devices)
    assert "UsageError" not in text(load)


def test_without_tf_config_each_eager_op_is_still_placed(tmp_path: Path) -> None:
    """TensorFlow ignores placement logging turned on after it started: the report then reads each eager op's
    device (an op callback) and says what it cannot show."""
    cells = run_cells([
        "%load_ext tf_device_panel",
        "%tf_devices",
        "import tensorflow as tf\nvalue = tf.constant(2.0)",
        "%%tf_run\nwith tf.device('/CPU:0'):\n    squared = tf.square(tf.fill([2, 2], 3.0))",
        ("%%tf_run\nhalved = squared / 2\nbroken = 1 / 0", RAISES),
    ], tmp_path)
    before = text(cells[1])
    assert "Logical devices: not created yet: TensorFlow is not initialized" in before, before
    report = text(cells[3])
    assert "(eager ops)" in report and "Square ×1" in report and "Fill ×1" in report, report
    assert "placement log was off when it initialized" in report

    # Any other error: the report of what ran, then the error as in a plain cell, its lines numbered as the
    # notebook numbers them (the %%tf_run line is line 1).
    failed = cells[4]
    assert "RealDiv ×1" in text(failed) and failed.outputs[-1].output_type == "error", text(failed)
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(failed.outputs[-1].traceback))
    assert failed.outputs[-1].ename == "ZeroDivisionError" and "----> 3 broken = 1 / 0" in traceback, traceback
    assert "cell_run.py" not in traceback and "magics.py" not in traceback, traceback


def test_an_out_of_memory_cell_is_explained_and_the_kernel_goes_on(tmp_path: Path) -> None:
    cells = run_cells([
        "%load_ext tf_device_panel",
        "%tf_config cpu_memory_limit_mib=64",
        "import tensorflow as tf",
        "%%tf_run\nkept = []\nfor step in range(40):\n    kept.append(tf.random.normal([1024, 1024]))",
        "print('still running', step, float(tf.reduce_sum(tf.ones([4]))))",
    ], tmp_path)
    oom, after = cells[3], cells[4]
    report = text(oom)
    assert "out of memory — the kernel is still running" in report, report
    assert "tensor of shape [1024, 1024] (float), 4.00 MiB" in report           # the request
    assert "limit 64.00 MiB" in report and "largest free block" in report        # the limit, the largest block
    assert "a real shortage" in report or "fragmentation" in report
    # What to try, with a figure the panel knows (what this step needed against the cap), never a batch invented
    assert "a larger cap: this step alone needed" in report or "fragmentation" in report, report
    assert "of 64.00 MiB" in report  # the allocator's peak against the cap
    assert all(o.output_type != "error" for o in oom.outputs)
    # The allocator's dump is explained, not printed.
    assert "bfc_allocator" not in streams(oom) and "InUse at" not in streams(oom), streams(oom)
    assert "requested" in html(oom) and "largest free block" in html(oom) and "<svg" in html(oom)
    assert streams(after).startswith("still running") and streams(after).endswith(" 4.0\n"), streams(after)


def test_importing_the_package_stays_light_and_finds_the_extension() -> None:
    code = ("import sys, tf_device_panel; assert callable(tf_device_panel.load_ipython_extension); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'IPython', 'ipykernel')); "
            "print(heavy); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_example_notebook_runs_top_to_bottom_and_renders_to_html(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    notebook = nbformat.read(EXAMPLE, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "the example is kept with its outputs cleared"
    executed = execute(notebook, tmp_path, timeout=180)
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    shown = "\n".join(text(cell) for cell in code)
    assert "'/device:CPU:1'" in shown and "MatMul" in shown
    assert "out of memory — the kernel is still running" in shown
    assert "the kernel is alive: 3.0" in shown
    assert "TensorFlow is already initialized in this kernel" in shown
    gpus = "TensorFlow sees no GPU." not in shown

    from jupyter_core.paths import jupyter_path
    from nbconvert import HTMLExporter

    # nbconvert's templates live in its prefix's share/jupyter: a virtualenv made with --system-site-packages
    # has them only in the base interpreter's.
    base = Path(sys.base_prefix) / "share" / "jupyter"
    if not any((Path(p) / "nbconvert" / "templates" / "lab").is_dir() for p in jupyter_path()) and base.is_dir():
        monkeypatch.setenv("JUPYTER_PATH", str(base))
    page, _ = HTMLExporter().from_notebook_node(executed)
    (tmp_path / "device-panel.html").write_text(page, encoding="utf-8")
    # (nbconvert writes the outputs' HTML again, attributes in double quotes)
    assert 'aria-label="device map: ops per device"' in page and 'aria-label="allocator memory map"' in page
    assert "largest free block" in page
    assert gpus or "soft placement ran its ops on /CPU:0" in page  # the example's /GPU:0, on a machine without
