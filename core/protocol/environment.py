"""Environment variables the panel sets for a run process, read on the other side of the process boundary."""

from __future__ import annotations

# Variables the panel sets for its own sake; a script sees their values from the user's environment instead.
PANEL_ENVIRONMENT = ("TF_CPP_MIN_LOG_LEVEL",)
# The user's own values of PANEL_ENVIRONMENT, as JSON, for the run process to put back before a script runs.
USER_ENVIRONMENT_ENV = "TF_DEVICE_PANEL_USER_ENVIRONMENT"
