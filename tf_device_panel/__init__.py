"""TF Device Panel: see the devices TensorFlow can use, configure them before it starts, watch where ops run.

The repository's `core/` (Qt-free engine), `gui/` (the window) and `resources/` install as
`tf_device_panel.core`, `tf_device_panel.gui` and `tf_device_panel.resources`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tf-device-panel")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
