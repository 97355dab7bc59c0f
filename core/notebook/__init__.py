"""TF Device Panel in a notebook: an IPython extension (`%load_ext tf_device_panel`) that configures
TensorFlow's devices in the kernel before it initializes (`%tf_config`, the same plan a run applies), shows the
devices (`%tf_devices`) and runs a cell under watch (`%%tf_run`: placements, fallbacks, allocator peaks, time, an
out-of-memory error explained). See docs/notebook.md.

The kernel is the one place the panel runs TensorFlow in the user's own process. Nothing else in the panel
imports this package (an import contract says so), and it imports nothing of Qt or the window.
"""

from __future__ import annotations

from typing import Any

_magics: Any = None


def load_ipython_extension(ipython: Any) -> None:
    global _magics
    from tf_device_panel.core.notebook.magics import DevicePanelMagics

    _magics = DevicePanelMagics(ipython)
    ipython.register_magics(_magics)


def unload_ipython_extension(ipython: Any) -> None:
    global _magics
    if _magics is not None:
        _magics.close()
        _magics = None
