"""One run of fit-batch or share: the panel's own command line, as a user would start it, that still dies with the
job that started it (the parent-death signal set here outlives exec).

    python -m tf_device_panel.core.panel_runs.command --panel run fit --config PROFILE --json -p ...
"""

from __future__ import annotations

import os
import sys

from tf_device_panel.core.processes import die_with_parent, module_command


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--panel"]:
        print("usage: python -m tf_device_panel.core.panel_runs.command --panel run JOB ...", file=sys.stderr)
        return 2
    os.execv(sys.executable, module_command("tf_device_panel", *argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
