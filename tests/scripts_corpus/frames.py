"""No frame under the script's: recursion depth, printed stacks, stack_info, warnings' stack levels and
sys._getframe as bare."""
import inspect
import logging
import sys
import traceback
import warnings

logging.basicConfig(format="%(levelname)s %(filename)s:%(lineno)d %(message)s")


def down(depth):
    return depth if depth >= 990 else down(depth + 1)


print("recursion to", down(1))
deepest = 0


def deeper(depth):
    global deepest
    deepest = depth
    deeper(depth + 1)


try:
    deeper(1)
except RecursionError:
    print("usable depth", deepest, "of", sys.getrecursionlimit())
traceback.print_stack()
logging.warning("with its stack", stack_info=True)
warnings.warn("reported at sys:1, as bare", stacklevel=2)
warnings.warn("reported at the script's line", stacklevel=1)


def frames_below():
    count, frame = 0, sys._getframe()
    while frame is not None:
        count, frame = count + 1, frame.f_back
    return count


print("frames:", frames_below(), "inspect.stack:", len(inspect.stack()))
try:
    sys._getframe(1)
except ValueError as exc:
    print("sys._getframe(1) at the top:", exc)


def in_a_function():
    warnings.warn("two levels up from a function: sys:1 too", stacklevel=3)


in_a_function()
sys.stdout.flush()
