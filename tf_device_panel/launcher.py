"""The `tf-device-panel` command: the window by default, the command line for any other command.

It lives outside `core` so that the Qt-free engine never imports the window.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def open_window(profile: str | None) -> int:
    from tf_device_panel.gui.shell.app import main as window_main  # Qt is loaded only when a window is asked for

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
    except Exception as exc:
        # Python wraps a Ctrl+C that lands in some import-time machinery (a class body's `__set_name__`, as in
        # NumPy's `finfo`) in a RuntimeError: still the person's Ctrl+C, still quiet.
        if _caused_by_ctrl_c(exc):
            return EXIT_INTERRUPTED
        raise


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
