"""TensorFlow's import raises the recursion limit: the script sees the interpreter's before it, TensorFlow's
after it."""
import sys

print("before import:", sys.getrecursionlimit())
import tensorflow  # noqa: E402, F401

print("after import:", sys.getrecursionlimit())
