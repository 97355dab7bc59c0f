"""A job's parameter is declared in one place, the catalogue, and every side follows from it: the window's form,
the command line's `jobs` listing, validation (from the form, the command line and the run process), and the run,
where the job's code receives it."""

from __future__ import annotations

import dataclasses
import json
import signal
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel, QSpinBox
from tf_device_panel.core import catalogue
from tf_device_panel.core.catalogue import JOBS, JobSpec, Param, ParamError
from tf_device_panel.core.cli import main
from tf_device_panel.core.config import DeviceConfig, Kind, config_fields
from tf_device_panel.core.protocol import events

ADDED = Param("repeats", Kind.COUNT, 3, "How many times the product is computed.", minimum=1, maximum=10,
              label="Repeats", unit="times")


@pytest.fixture
def matmul_with_repeats(monkeypatch: pytest.MonkeyPatch) -> JobSpec:
    """The matmul job with one more parameter, declared only in the catalogue."""
    spec = JOBS["matmul"]
    monkeypatch.setitem(JOBS, "matmul", dataclasses.replace(spec, params=(*spec.params, ADDED)))
    return JOBS["matmul"]


def test_the_form_shows_the_declared_parameter_and_refuses_a_value_out_of_its_range(
        qtbot: Any, matmul_with_repeats: JobSpec) -> None:
    from tf_device_panel.gui.docks.runs_panel import RunsPanel

    panel = RunsPanel()
    qtbot.addWidget(panel)
    panel.set_devices(["/CPU:0", "/CPU:1"])
    panel.set_can_run(True)
    panel.select_job("matmul")
    panel.show()
    form = panel.form()
    spin = form.widgets["repeats"]
    assert isinstance(spin, QSpinBox) and spin.value() == 3 and spin.suffix() == " times"
    assert spin.toolTip() == ADDED.help
    label = form.labels["repeats"]
    assert isinstance(label, QLabel) and label.text() == "Repeats:" and label.buddy() is spin
    qtbot.waitUntil(lambda: form.fields["repeats"].isVisible())

    spin.setValue(11)
    panel.run_button.click()
    qtbot.waitUntil(panel.form_error.isVisible)
    assert panel.form_error.text() == "Repeats: 11 is out of range: use a value between 1 and 10 times"

    spin.setValue(7)
    with qtbot.waitSignal(panel.runRequested) as requested:
        panel.run_button.click()
    assert requested.args == ["matmul", {"device": "", "repeats": 7}]


def test_the_command_lines_jobs_listing_names_the_declared_parameter(
        capsys: pytest.CaptureFixture[str], matmul_with_repeats: JobSpec) -> None:
    assert main(["jobs"]) == 0
    listing = capsys.readouterr().out
    assert "--param repeats=<int>  default 3" in listing and ADDED.help in listing

    assert main(["jobs", "--json"]) == 0
    (matmul,) = [job for job in json.loads(capsys.readouterr().out) if job["name"] == "matmul"]
    assert matmul["params"][-1] == {
        "name": "repeats", "type": "int", "default": 3, "help": ADDED.help, "choices": [], "minimum": 1,
        "maximum": 10, "label": "Repeats", "unit": "times", "empty_means": "", "shown_when": None, "max_items": None}


def test_a_bad_value_is_refused_with_the_parameters_name(
        capsys: pytest.CaptureFixture[str], matmul_with_repeats: JobSpec) -> None:
    assert main(["run", "matmul", "--param", "repeats=11"]) == 2  # refused before any process starts
    assert capsys.readouterr().err.strip() == "error: job 'matmul': repeats: 11 is above the maximum 10"
    assert main(["run", "matmul", "--param", "repeats=many"]) == 2
    assert "repeats: expected a whole number" in capsys.readouterr().err
    with pytest.raises(ParamError) as refused:
        matmul_with_repeats.resolve({"repeats": 0})
    assert refused.value.problems == [("repeats", "0 is below the minimum 1")]
    assert matmul_with_repeats.resolve({})["repeats"] == 3  # its default


def test_the_run_process_checks_it_and_hands_it_to_the_jobs_code(
        monkeypatch: pytest.MonkeyPatch, matmul_with_repeats: JobSpec) -> None:
    """The run process finds the job's declaration by name in the catalogue, checks the parameters against it, and
    calls the code the declaration names with them."""
    from tf_device_panel.core.runproc import runtime_main
    from tf_device_panel.core.runproc.jobs import basic

    received: list[dict[str, Any]] = []

    def matmul_that_repeats(ctx: Any, device: str = "", repeats: int = 1) -> None:
        received.append({"device": device, "repeats": repeats})

    monkeypatch.setattr(basic, "matmul", matmul_that_repeats)
    sent: list[events.Event] = []
    sigint = signal.getsignal(signal.SIGINT)
    try:
        assert runtime_main.Run(sent.append, DeviceConfig(), "job-1", "matmul", {"repeats": 5}).execute() == 0
        assert received == [{"device": "", "repeats": 5}]
        assert runtime_main.Run(sent.append, DeviceConfig(), "job-2", "matmul", {"repeats": 50}).execute() != 0
    finally:
        signal.signal(signal.SIGINT, sigint)  # a run ignores Ctrl+C once its job is over
    assert received == [{"device": "", "repeats": 5}]  # the refused value never reached the code
    (refused,) = [event for event in sent if isinstance(event, events.Error)]
    assert refused.error_type == "ParamError" and refused.message == "repeats: 50 is above the maximum 10"


def test_the_catalogue_imports_no_job_code_and_no_tensorflow() -> None:
    """Both sides import the catalogue: it must not pull in the run process's code (it names it as text), not even
    to show a job's code (read from its file)."""
    import subprocess
    import sys

    code = ("import sys; import tf_device_panel.core.catalogue as c; c.get_job('fit').resolve({}); "
            "assert 'def mwms_worker' in c.get_job('multi-worker').code(); "
            "bad = sorted(m for m in sys.modules if m.startswith('tf_device_panel.core.runproc') "
            "or m.split('.')[0] in ('tensorflow', 'keras', 'PySide6')); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert catalogue.JOBS["fit"].entry == "tf_device_panel.core.runproc.jobs.training:fit"


def test_job_parameters_and_settings_share_one_kind_system() -> None:
    """One Kind for both: the same type rule and the same command-line reading for each kind."""
    count = Param("n", Kind.COUNT, 1, "", minimum=1, maximum=5)
    assert count.from_text("4") == Kind.COUNT.read_text("4") == 4
    with pytest.raises(ValueError, match="plain digits"):
        count.from_text("٣")
    assert Kind.COUNT.holds(3) and not Kind.COUNT.holds(True) and not Kind.COUNT.holds("3")
    assert Kind.TOGGLE.read_text("on") is True and Kind.NUMBER.read_text("1e-3") == 0.001
    # a setting and a job parameter of the same kind refuse the same values
    cpu_devices = next(f for f in config_fields(DeviceConfig) if f.key == "cpu_devices")
    assert cpu_devices.kind is Kind.COUNT
    for value in (True, "2", 2.5, None):
        assert cpu_devices.type_problem(value) is not None
        with pytest.raises(ValueError):
            count.check(value)
    assert not any(isinstance(p.kind, str) for spec in JOBS.values() for p in spec.params)
