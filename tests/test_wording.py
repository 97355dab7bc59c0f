"""One place says what an event means: the command line and the window's log print the same sentence."""

from __future__ import annotations

import io

import pytest
from tf_device_panel.core.cli.output import RunPrinter, error_text
from tf_device_panel.core.client import wording
from tf_device_panel.core.client.records import RunError
from tf_device_panel.core.protocol import events

FALLBACK = events.Fallback(op="MatMul", requested="/device:GPU:2", requested_short="/GPU:2",
                           actual="/job:localhost/replica:0/task:0/device:CPU:0", actual_short="/CPU:0")
SAME_WORDS = [
    (FALLBACK, "soft-placement fallback: MatMul asked for /device:GPU:2, ran on /CPU:0"),
    (FALLBACK.replace(file="train.py", line=7),
     "soft-placement fallback: train.py, line 7: tf.device('/device:GPU:2') names no device here; its ops run on "
     "/CPU:0"),
    (events.StartupError(stage="set_visible_devices", error_type="RuntimeError", message="already initialized"),
     "TensorFlow rejected the configuration at set_visible_devices: RuntimeError: already initialized"),
    (events.StartupError(not_installed=True, message="TensorFlow is not installed in /usr/bin/python3"),
     "TensorFlow is not installed in /usr/bin/python3"),
    (events.RuntimeExited(description="killed by SIGKILL", expected=False), "runtime killed by SIGKILL"),
]


def printed(event: events.Event) -> str:
    out = io.StringIO()
    RunPrinter(verbose=False, stream=out)(event)
    return out.getvalue()


@pytest.mark.parametrize(("event", "words"), SAME_WORDS)
def test_the_cli_and_the_log_say_an_event_in_the_same_words(event: events.Event, words: str, qtbot) -> None:
    from tf_device_panel.gui.views.log_view import event_log_entry

    entry = event_log_entry(event)
    assert entry is not None and entry[1] == f"[panel] {words}"
    assert words in printed(event)


def test_an_error_is_said_alike_by_the_cli_and_the_log(qtbot) -> None:
    from tf_device_panel.gui.views.log_view import event_log_entry

    error = events.Error(error_type="ResourceExhaustedError", message="OOM when allocating")
    assert event_log_entry(error) == ("error", "[panel] ResourceExhaustedError: OOM when allocating")
    assert error_text(RunError(type="ResourceExhaustedError", message="OOM when allocating"), False) == [
        "error: ResourceExhaustedError: OOM when allocating"]
    assert wording.job_error(error) == "ResourceExhaustedError: OOM when allocating"
