"""`python -m tf_device_panel`: the same as the `tf-device-panel` command."""

import sys

try:
    from tf_device_panel.launcher import main
except KeyboardInterrupt:  # Ctrl+C in the first instant: quiet, as later (launcher.main)
    sys.exit(130)

sys.exit(main())
