"""The architecture's import rules, checked on the real import statements of every module."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QT_MODULES = {"PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6", "qtpy"}
TF_MODULES = {"tensorflow", "keras", "tf_keras"}
# How many import contracts pyproject.toml declares: each plant below breaks exactly one (or two) of them.
CONTRACTS = (ROOT / "pyproject.toml").read_text(encoding="utf-8").count("\n[[tool.importlinter.contracts]]\n")
ONE_BROKEN = f"{CONTRACTS - 1} kept, 1 broken"


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def offenders(package: str, forbidden: set[str]) -> dict[str, set[str]]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_roots(path) & forbidden
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_core_never_imports_qt() -> None:
    assert offenders("core", QT_MODULES) == {}


def test_gui_never_imports_tensorflow() -> None:
    assert offenders("gui", TF_MODULES) == {}


def test_checker_really_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from PySide6 import QtCore\n    import importlib\n"
                      "    importlib.import_module('pyqtgraph.exporters')\n")
    assert imported_roots(sample) >= {"PySide6", "pyqtgraph"}


def test_importing_core_pulls_in_neither_qt_nor_tensorflow(tmp_path: Path) -> None:
    code = ("import sys; from tf_device_panel.core import cli, config; "
            "from tf_device_panel.core.client import runtime, run_record, run_manager, history; "
            "from tf_device_panel.core.runproc import jobs; from tf_device_panel.core import catalogue;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(QT_MODULES | TF_MODULES)!r}); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _lint_script():
    spec = importlib.util.spec_from_file_location("lint", ROOT / "scripts" / "lint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _contracts(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "lint.py"), "--only", "imports", "--tree", str(tree)],
                          capture_output=True, text=True, timeout=120)


def test_import_contracts_hold_and_catch_a_planted_violation(tmp_path: Path) -> None:
    lint = _lint_script()
    clean = lint.stage(tmp_path / "clean")
    done = _contracts(clean)
    assert done.returncode == 0 and f"{CONTRACTS} kept, 0 broken" in done.stdout, done.stdout + done.stderr

    # Each plant must break exactly its contract: if the checker read the installed package instead of
    # the staged tree, or ignored function-level imports, these would pass.
    core_plant = lint.stage(tmp_path / "core-plant")
    with (core_plant / "tf_device_panel" / "core" / "client" / "history.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from tf_device_panel.gui.widgets import colors\n    return colors\n")
    done = _contracts(core_plant)
    assert done.returncode != 0 and "core is Qt-free and never imports the window BROKEN" in done.stdout, done.stdout

    gui_plant = lint.stage(tmp_path / "gui-plant")
    with (gui_plant / "tf_device_panel" / "gui" / "widgets" / "colors.py").open("a") as f:
        f.write("\n\ndef _planted():\n    import tensorflow\n    return tensorflow\n")
    done = _contracts(gui_plant)
    assert done.returncode != 0 and "the window never imports TensorFlow" in done.stdout, done.stdout
    assert ONE_BROKEN in done.stdout, done.stdout

    # A panel that reaches another panel (even inside a function) breaks the panels' independence.
    panel_plant = lint.stage(tmp_path / "panel-plant")
    with (panel_plant / "tf_device_panel" / "gui" / "docks" / "memory_panel.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from tf_device_panel.gui.docks import device_map\n    return device_map\n")
    done = _contracts(panel_plant)
    assert done.returncode != 0 and "the window's panels are independent of each other BROKEN" in done.stdout, (
        done.stdout)
    assert ONE_BROKEN in done.stdout, done.stdout

    # The process layout: the run process's side never imports the panel's side, and what both sides share
    # imports neither.
    layout = "core is laid out by process: the run process never imports the panel's side BROKEN"
    for plant, planted in (("runproc-plant", ("runproc", "runtime_main.py", "client.history")),
                           ("devices-plant", ("devices", "telemetry.py", "lab.exporter")),
                           ("protocol-plant", ("protocol", "events.py", "catalogue.jobs")),
                           ("config-plant", ("devices", "gpu_facts.py", "config"))):  # devices sit below config
        package, module, imported = planted
        tree = lint.stage(tmp_path / plant)
        with (tree / "tf_device_panel" / "core" / package / module).open("a") as f:
            f.write(f"\n\ndef _planted():\n    import tf_device_panel.core.{imported}\n    return None\n")
        done = _contracts(tree)
        assert done.returncode != 0 and layout in done.stdout and ONE_BROKEN in done.stdout, done.stdout


def test_the_panels_side_never_imports_the_run_process(tmp_path: Path) -> None:
    """The window, the command line, the client and the lab know jobs by their declarations (core.catalogue);
    the run process's code (its jobs, its cluster) is imported by none of them, even inside a function."""
    lint = _lint_script()
    broken = "the panel's side never imports the run process's code BROKEN"
    for plant, (package, module, imported) in (("gui-runproc", ("gui/widgets", "job_form.py", "runproc.jobs")),
                                              ("cli-runproc", ("core/cli", "output.py", "runproc.cluster")),
                                              ("client-runproc", ("core/client", "share.py", "runproc.jobs.training")),
                                              ("lab-runproc", ("core/lab", "fetch.py", "runproc.doctor_probe"))):
        tree = lint.stage(tmp_path / plant)
        with (tree / "tf_device_panel" / package / module).open("a") as f:
            f.write(f"\n\ndef _planted():\n    import tf_device_panel.core.{imported}\n    return None\n")
        done = _contracts(tree)
        assert done.returncode != 0 and broken in done.stdout and ONE_BROKEN in done.stdout, (plant,
                                                                                                     done.stdout)

    # The catalogue sits below the run process: its importing a job's code breaks the layers, and through the
    # catalogue the window would import the run process.
    tree = lint.stage(tmp_path / "catalogue-runproc")
    with (tree / "tf_device_panel" / "core" / "catalogue" / "jobs.py").open("a") as f:
        f.write("\n\ndef _planted():\n    import tf_device_panel.core.runproc.jobs.basic\n    return None\n")
    done = _contracts(tree)
    two_broken = f"{CONTRACTS - 2} kept, 2 broken"
    assert done.returncode != 0 and broken in done.stdout and two_broken in done.stdout, done.stdout


def test_the_catalogue_imports_nothing_that_starts_processes(tmp_path: Path) -> None:
    """The catalogue holds declarations every side reads; starting, watching and reading processes (the process
    helpers, the panel's runs of its command line, subprocess, multiprocessing) is the rooms' above it."""
    lint = _lint_script()
    broken = "the catalogue imports nothing that starts processes BROKEN"
    for plant, (module, imported) in (("catalogue-processes", ("jobs.py", "tf_device_panel.core.processes")),
                                      ("catalogue-subprocess", ("params.py", "subprocess")),
                                      ("catalogue-multiprocessing", ("share_params.py", "multiprocessing"))):
        tree = lint.stage(tmp_path / plant)
        with (tree / "tf_device_panel" / "core" / "catalogue" / module).open("a") as f:
            f.write(f"\n\ndef _planted():\n    import {imported}\n    return None\n")
        done = _contracts(tree)
        assert done.returncode != 0 and broken in done.stdout and ONE_BROKEN in done.stdout, (plant, done.stdout)

    # The panel's runs sit above the catalogue: importing them breaks the layers too.
    tree = lint.stage(tmp_path / "catalogue-panel-runs")
    with (tree / "tf_device_panel" / "core" / "catalogue" / "fit_work.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from tf_device_panel.core.panel_runs import runs\n    return runs\n")
    done = _contracts(tree)
    layout = "core is laid out by process: the run process never imports the panel's side BROKEN"
    assert done.returncode != 0 and broken in done.stdout and layout in done.stdout, done.stdout
    assert f"{CONTRACTS - 2} kept, 2 broken" in done.stdout, done.stdout


def test_nothing_of_the_panel_imports_the_notebook_extension(tmp_path: Path) -> None:
    """The notebook extension runs TensorFlow in the user's kernel: the panel's side (window, command line,
    client, lab) never imports it, the run process's side and what both share sit below it, and it never
    imports the panel's side (it is a run process of its own, in the kernel)."""
    lint = _lint_script()
    forbidden = "nothing of the panel imports the notebook extension BROKEN"
    layout = "core is laid out by process: the run process never imports the panel's side BROKEN"
    for plant, (package, module, imported, broken) in (
            ("gui-notebook", ("gui/widgets", "colors.py", "notebook.configure", forbidden)),
            ("client-notebook", ("core/client", "share.py", "notebook.capture", forbidden)),
            ("runproc-notebook", ("core/runproc", "tf_facts.py", "notebook.capture", layout)),
            ("notebook-client", ("core/notebook", "cell_run.py", "client.history", layout))):
        tree = lint.stage(tmp_path / plant)
        with (tree / "tf_device_panel" / package / module).open("a") as f:
            f.write(f"\n\ndef _planted():\n    import tf_device_panel.core.{imported}\n    return None\n")
        done = _contracts(tree)
        assert done.returncode != 0 and broken in done.stdout, (plant, done.stdout)
        # The client sits above the notebook in the layers: only the forbidden contract catches its import (these
        # modules of the extension import nothing of core.runproc, whose contract would break too).
        assert ONE_BROKEN in done.stdout, (plant, done.stdout)

    # Qt in the extension breaks core's own contract.
    tree = lint.stage(tmp_path / "notebook-qt")
    with (tree / "tf_device_panel" / "core" / "notebook" / "views.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from PySide6 import QtCore\n    return QtCore\n")
    done = _contracts(tree)
    assert done.returncode != 0 and "core is Qt-free and never imports the window BROKEN" in done.stdout, done.stdout
