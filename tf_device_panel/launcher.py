"""The `tf-device-panel` command: the window by default, the command line for any other command.

It lives outside `core` so that the Qt-free engine never imports the window.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def open_window(profile: str | None) -> int:
    from tf_device_panel.gui.app import main as window_main  # Qt is loaded only when a window is asked for

    return int(window_main(profile))


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl+C


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # Ctrl+C while the command line is still being imported (its first half second) ends it quietly, as
        # a Ctrl+C anywhere later does, never with a traceback of whatever module was loading.
        from tf_device_panel.core import cli

        return cli.main(sys.argv[1:] if argv is None else argv, open_window=open_window)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
