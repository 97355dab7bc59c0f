"""How the doctor's probe process (core.runproc.doctor_probe) marks the line that carries its report, read by the
doctor (core.client.doctor) among TensorFlow's own output."""

PROBE_PREFIX = "\x1eTFDP-PROBE "
