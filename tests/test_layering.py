"""The architecture's import rules, checked on the real import statements of every module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QT_MODULES = {"PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6", "qtpy"}
TF_MODULES = {"tensorflow", "keras", "tf_keras"}


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


def test_importing_core_pulls_in_neither_qt_nor_tensorflow() -> None:
    import subprocess
    import sys

    code = ("import sys, core.cli, core.runtime, core.session, core.jobs, core.config, core.history;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(QT_MODULES | TF_MODULES)!r}); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
