"""`python -m tf_device_panel`: the same as the `tf-device-panel` command."""

import sys

from tf_device_panel.launcher import main

sys.exit(main())
