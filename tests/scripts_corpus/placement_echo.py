"""A script that turns placement logging on itself: TensorFlow's echo of each placement on C's stdout comes as
bare (held in C's buffer into a pipe, lost by os._exit), the C++ log lines on stderr right after the op."""
import os
import sys

import tensorflow as tf

tf.debugging.set_log_device_placement(True)
a = tf.constant([[1.0, 2.0]])
b = a @ tf.transpose(a)
print("after the op:", b.numpy().tolist(), flush=True)
print("on stderr after the op", file=sys.stderr, flush=True)
if sys.argv[1:] == ["os_exit"]:
    os._exit(0)
print("normal end")
