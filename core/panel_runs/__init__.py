"""Runs of the panel's own command line, started, watched and read: this room starts processes.

`tf-device-panel run JOB --config PROFILE --json`, started as a user would start it, its record in a history of
its own; what it did read back from the outcome it printed and its record. fit-batch runs every batch it tries
this way (core.client.fit_batch), and `share` every seat (core.client.share).

- `runs`: start a run of a work (core.catalogue.fit_work) at one batch, wait for it, stop it, read its outcome.
- `command`: the module such a run starts as, which becomes the command line and still dies with its starter.

It sits below the client, which starts these runs (fit-batch's search is a client job: core.client.client_job),
and above the catalogue (declarations only), which imports nothing that starts a process.
"""
