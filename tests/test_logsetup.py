"""Diagnostics through logging: the command line's stderr handler and the once-in-a-row failure log."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from tf_device_panel.core import logsetup
from tf_device_panel.core.logsetup import PACKAGE_LOGGER, RepeatedFailureLog, configure_logging


@pytest.fixture
def package_logger() -> Iterator[logging.Logger]:
    """The package logger without a stderr handler (an in-process CLI test may have added one), put back
    afterwards for the other tests."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    handlers, level = list(logger.handlers), logger.level
    logger.handlers[:] = [h for h in handlers if not isinstance(h, logsetup._CurrentStderr)]
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


def failing() -> ValueError:
    try:
        raise ValueError("bad sample")
    except ValueError as exc:
        return exc


def test_warnings_reach_stderr_without_traceback_unless_verbose(package_logger: logging.Logger,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("tf_device_panel.core.devices.telemetry")
    configure_logging(verbose=False)
    log.debug("a detail")
    log.warning("GPU 1 is lost")
    log.error("listener failed", exc_info=failing())
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines == ["tf-device-panel WARNING tf_device_panel.core.devices.telemetry: GPU 1 is lost",
                     "tf-device-panel ERROR tf_device_panel.core.devices.telemetry: listener failed "
                     "(--verbose shows the traceback)"]
    configure_logging(verbose=True)
    log.debug("a detail")
    log.error("listener failed", exc_info=failing())
    err = capsys.readouterr().err
    assert "DEBUG tf_device_panel.core.devices.telemetry: a detail" in err
    assert "Traceback" in err and "ValueError: bad sample" in err
    assert sum(isinstance(h, logsetup._CurrentStderr) for h in package_logger.handlers) == 1


def test_the_same_failure_is_logged_once_in_a_row(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tf_device_panel.test")
    failures = RepeatedFailureLog(logger)
    for _ in range(50):
        failures.failed("the listener", ValueError("bad sample"))
    failures.failed("the listener", KeyError("gpu9"))
    failures.failed("the listener", ValueError("bad sample"))
    messages = [r.getMessage() for r in caplog.records if r.name == "tf_device_panel.test"]
    assert messages == ["the listener failed (ValueError: bad sample); going on",
                        "the listener failed (KeyError: 'gpu9'); going on",
                        "the listener failed (ValueError: bad sample); going on"]
    assert all(r.levelno == logging.ERROR and r.exc_info for r in caplog.records if r.name == "tf_device_panel.test")
