"""C's stdio through ctypes between Python's flushed writes: C's stdout buffered by blocks into a pipe (so its
lines come at the next flush: C's or the exit's), C's stderr unbuffered, both on the script's own fds 1 and 2."""
import ctypes
import sys

libc = ctypes.CDLL(None)
c_stderr = ctypes.c_void_p.in_dll(libc, "stderr")
print("python 1", flush=True)
libc.puts(b"C puts, held in C's buffer")
print("python 2", flush=True)
libc.fprintf(c_stderr, b"C stderr, at once\n")
print("python stderr", file=sys.stderr, flush=True)
libc.fflush(None)
print("python 3", flush=True)
libc.printf(b"C printf, flushed at the exit, after Python's own buffer\n")
print("python 4")
if sys.argv[1:] == ["exit"]:
    sys.exit("leaving by sys.exit: Python's buffer flushed, then C's")
