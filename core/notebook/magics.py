"""The IPython magics: `%tf_config`, `%tf_devices` and `%%tf_run` (registered by `%load_ext tf_device_panel`).

The work is in Qt-free, IPython-free modules beside this one (configure, devices, cell_run, views); this module
reads the magics' words, runs the cell as IPython would, and displays the views.
"""

from __future__ import annotations

import ast
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display
from tf_device_panel.core.notebook.capture import OutputSieve
from tf_device_panel.core.notebook.cell_run import run_cell
from tf_device_panel.core.notebook.configure import ConfigUsageError, kernel_configuration, read_config
from tf_device_panel.core.notebook.devices import devices_view
from tf_device_panel.core.notebook.views import CellRunView, ConfigView


@magics_class
class DevicePanelMagics(Magics):
    def __init__(self, shell: Any):
        super().__init__(shell)
        self.configuration = kernel_configuration
        self.sieve = OutputSieve()

    @line_magic
    def tf_config(self, line: str) -> None:
        """Configure TensorFlow's devices in this kernel before it initializes, as a run of the panel would:

            %tf_config cpu_devices=2 memory_growth=true
            %tf_config profile.json                 # a profile saved by the panel
            %tf_config profile.json cpu_devices=4   # a profile, with settings changed

        The keys, values and rules are the profile's (see `tf-device-panel validate`). After TensorFlow
        initialized (its first op, or listing its logical devices) it can no longer be configured: restart the
        kernel and run this first."""
        if not line.strip():
            raise UsageError("%tf_config needs a profile or settings, e.g. %tf_config cpu_devices=2 (or "
                             "%tf_config profile.json); %tf_devices shows what TensorFlow has now")
        try:
            config = read_config(line)
            steps = self.configuration.apply(config)
        except ConfigUsageError as exc:
            raise UsageError(str(exc)) from None
        if config.log_placement:
            # TensorFlow now logs every op's placement on fds 1 and 2: kept for %%tf_run's report, dropped
            # between its cells instead of printed under every cell.
            self.sieve.install()
        notes = []
        if self.configuration.imported_before:
            notes.append("TensorFlow was imported before this cell: what it reads as it imports (the GPUs' order, "
                         "CUDA_DEVICE_ORDER) was already fixed; everything else applies.")
        display(ConfigView(self.configuration.summary(), steps, notes))

    @line_magic
    def tf_devices(self, line: str) -> None:
        """Show TensorFlow's build, its physical and logical devices and NVML's GPUs (never initializes
        TensorFlow: before it runs, its logical devices are not listed)."""
        if line.strip():
            raise UsageError("%tf_devices takes no arguments")
        display(devices_view(self.configuration))

    @cell_magic
    def tf_run(self, line: str, cell: str) -> Any:
        """Run the cell and show under it where its ops ran (ops per device, soft-placement fallbacks), the
        allocator's peak per device and the time; an out-of-memory error is explained instead of raised."""
        __tracebackhide__ = True  # IPython leaves the magic's own frames out of a cell's traceback
        if line.strip():
            raise UsageError("%%tf_run takes no arguments; put the code in the cell below it")
        shell = self.shell
        assert shell is not None
        # A blank first line stands for the %%tf_run line: tracebacks and fallbacks then name the lines as the
        # notebook numbers them.
        source = "\n" + shell.transform_cell(cell)
        cell_file = shell.compile.cache(source, shell.execution_count, raw_code=cell)
        tree = shell.transform_ast(shell.compile.ast_parse(source, filename=cell_file))
        # The last expression's value is the cell's result, as in a plain cell.
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = shell.compile(tree, cell_file, "exec")
        # IPython's compiler takes a tree as the builtin compile does (its stubs say str since IPython 9).
        expression: Any = ast.Expression(last.value) if last is not None else None
        result = shell.compile(expression, cell_file, "eval") if expression is not None else None
        namespace = shell.user_ns

        def run() -> Any:
            __tracebackhide__ = True
            exec(body, namespace)
            return eval(result, namespace) if result is not None else None

        report, value = run_cell(run, cell_file, self.sieve)
        if report.error is None or report.placements or report.fallbacks:
            display(CellRunView(report))  # (a cell that failed before any op ran has nothing to show but its error)
        if report.error is not None:
            raise report.error
        return value

    def close(self) -> None:
        self.sieve.uninstall()
