"""Events in words: the one place that says what an event means, for the command line and the window alike.

Each function takes one kind of event and returns its sentence without decoration; the command line prefixes
it ("  ⚠ ", "runtime …"), the window's log prefixes "[panel] ", the devices panel puts it in red. A change of
wording made here shows on both sides, and their tests keep asserting the same texts.
"""

from __future__ import annotations

from tf_device_panel.core.protocol import events


def error(error_type: str, message: str) -> str:
    """An exception as Python names it: its class, then its message."""
    return f"{error_type}: {message}"


def startup_error(failure: events.StartupError) -> str:
    """A run's start-up failure: TensorFlow missing from its Python, or what TensorFlow refused."""
    if failure.not_installed:
        return failure.message
    return f"TensorFlow rejected the configuration at {failure.stage}: {error(failure.error_type, failure.message)}"


def fallback(event: events.Fallback) -> str:
    """An op that soft placement moved: from a user's script, where its `tf.device(...)` was entered."""
    if event.file:
        return (f"soft-placement fallback: {event.file}, line {event.line}: tf.device({event.requested!r}) names "
                f"no device here; its ops run on {event.actual_short}")
    return f"soft-placement fallback: {event.op} asked for {event.requested}, ran on {event.actual_short}"


def runtime_exited(event: events.RuntimeExited) -> str:
    """How the run's process ended ("runtime exited with code 1")."""
    return f"runtime {event.description}"


def exited_after_cancel(event: events.RuntimeExited) -> str:
    """The process's end after its job was cancelled: its exit status is the cancel's, not a failure."""
    return f"the run's process ended after its job was cancelled ({event.description})"


def job_error(event: events.Error) -> str:
    return error(event.error_type, event.message)


def job_started(event: events.JobStarted) -> str:
    return f"job {event.job} started"


def job_finished(event: events.JobFinished) -> str:
    return f"{event.job} {event.status}"


def ready(event: events.Ready) -> str:
    names = ", ".join(device.get("short_name", "?") for device in event.logical)
    return f"runtime ready: TensorFlow {event.tf_version}, logical devices {names} [pid {event.pid}]"


def placement(event: events.Placement) -> str:
    return f"placed {event.op_type:<16} {event.op:<28} → {event.short_device}  ({event.mode})"
