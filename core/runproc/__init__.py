"""What runs inside a run process (TensorFlow's side): its main, the supervisor, jobs, cluster tasks, the
doctor's probe.

Nothing here imports the client side (core.client, core.cli, core.lab); import-linter checks it."""
