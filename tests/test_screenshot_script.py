"""scripts/screenshot.py: its options are documented and a bad one is refused before any window opens (exit 2,
the option and what to give named, no traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT

SCRIPT = ROOT / "scripts" / "screenshot.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("args", "said"), [
    (["out.png", "--job", "nope"], "--job nope: no such job; choose from matmul"),
    (["out.png", "--job", "fit", "--param", "epoch=3"], "--param epoch=3: give NAME=VALUE with NAME one of fit's"),
    (["out.png", "--job", "fit", "--param", "epochs=many"], "--param epochs=many: 'many' is not a whole number"),
    (["out.png", "--dock", "sidebar"], "--dock sidebar: no such dock; choose from devices"),
    (["out.png", "--runs", "0"], "--runs 0: run the job at least once"),
    (["out.png", "--config", "/nonexistent/profile.json"], "--config /nonexistent/profile.json:"),
])
def test_a_bad_option_is_refused_with_what_to_give(args: list[str], said: str) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_options_are_documented() -> None:
    done = run("--help")
    assert done.returncode == 0
    for option in ("--config", "--cpus", "--job", "--param", "--dock", "--presentation", "--zoom", "--doctor",
                   "--runs", "--delay", "--during"):
        assert option in done.stdout, option
