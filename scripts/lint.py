"""Style, types and layering: ruff on the repository, mypy and import-linter on the package as it installs.

The repository keeps core/, gui/ and resources/ at its top while they install as tf_device_panel.core,
.gui and .resources; mypy and import-linter read packages from disk, so this lays the package out in a
temporary folder first. Exits non-zero on any finding.

    python scripts/lint.py            # all three
    python scripts/lint.py --only imports --tree DIR   # the import contracts on an already staged tree
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("core", "gui", "resources")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def stage(dest: Path) -> Path:
    """Copy the package into `dest` in its installed layout (tf_device_panel/core, …); return `dest`."""
    shutil.copytree(ROOT / "tf_device_panel", dest / "tf_device_panel", ignore=IGNORE)
    for name in SUBPACKAGES:
        shutil.copytree(ROOT / name, dest / "tf_device_panel" / name, ignore=IGNORE)
    shutil.copytree(ROOT / "benchmarks", dest / "benchmarks", ignore=IGNORE)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def tool(name: str) -> str:
    """The tool installed beside this interpreter (the virtualenv's), else the one on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def run(title: str, command: list[str], cwd: Path) -> bool:
    print(f"== {title}: {' '.join(command)}", flush=True)
    ok = subprocess.run(command, cwd=cwd).returncode == 0
    print(f"== {title}: {'ok' if ok else 'FAILED'}", flush=True)
    return ok


def check_imports(tree: Path) -> bool:
    # lint-imports imports the package: the staged copy must come before any installed one.
    return run("import contracts", [sys.executable, "-c", "import sys; sys.path.insert(0, '.'); "
                                    "from importlinter.cli import lint_imports_command as c; c()"], tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("ruff", "mypy", "imports"))
    parser.add_argument("--tree", type=Path, help="an already staged tree (with --only imports or mypy)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="tfdp-lint-") as tmp:
        tree = args.tree or stage(Path(tmp))
        if args.only in (None, "ruff"):
            results.append(run("ruff", [tool("ruff"), "check", "."], ROOT))
        if args.only in (None, "mypy"):
            results.append(run("mypy", [tool("mypy"), "--config-file", "pyproject.toml"], tree))
        if args.only in (None, "imports"):
            results.append(check_imports(tree))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
