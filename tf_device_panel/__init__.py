"""TF Device Panel: see the devices TensorFlow can use, configure them before it starts, watch where ops run.

The repository's `core/` (Qt-free engine), `gui/` (the window) and `resources/` install as
`tf_device_panel.core`, `tf_device_panel.gui` and `tf_device_panel.resources`.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Read from the installed metadata only when asked: every run process imports this package, and reading
    # the metadata costs tens of milliseconds of its start.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("tf-device-panel")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
