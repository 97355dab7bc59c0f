"""TF Device Panel: see the devices TensorFlow can use, configure them before it starts, watch where ops run.

The repository's `core/` (Qt-free engine), `gui/` (the window) and `resources/` install as
`tf_device_panel.core`, `tf_device_panel.gui` and `tf_device_panel.resources`. In Jupyter or IPython,
`%load_ext tf_device_panel` loads the notebook magics (core/notebook, docs/notebook.md).
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tf_device_panel`: the notebook magics (%tf_config, %tf_devices, %%tf_run; docs/notebook.md).
    Imported here only when loaded: importing this package stays free of IPython and TensorFlow."""
    from tf_device_panel.core.notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from tf_device_panel.core.notebook import unload_ipython_extension as unload

    unload(ipython)


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
