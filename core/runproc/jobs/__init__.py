"""The jobs' code, run inside the run process; each job's declaration (its parameters, their kinds and rules) is
the catalogue's (core.catalogue), which names the function here that runs it.

Each sibling module imports TensorFlow inside its functions, in the run process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tf_device_panel.core.catalogue import get_job, load_entry


def implementation(name: str) -> Callable[..., Any]:
    """The function that runs the job called `name`, as its declaration names it (ParamError for an unknown job)."""
    return load_entry(get_job(name).entry)
