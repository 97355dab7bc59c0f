"""The panel's side of a run: launching run processes, the run record and history, the doctor."""
