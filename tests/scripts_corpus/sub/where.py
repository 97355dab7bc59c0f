"""__file__, argv, executable, orig_argv, the SIGINT handler and buffering, as a bare run has them."""
import os
import signal
import sys
import warnings

print("__file__", __file__)
print("argv", sys.argv)
print("executable", os.path.basename(sys.executable))
print("orig_argv tail", sys.orig_argv[-len(sys.argv):])
print("sigint default", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print("line_buffering", sys.stdout.line_buffering, sys.stderr.line_buffering)
print("isatty", sys.stdout.isatty(), sys.stderr.isatty())
warnings.warn("where am I", stacklevel=1)
