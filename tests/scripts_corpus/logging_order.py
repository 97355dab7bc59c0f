"""Logging set up before or after `import tensorflow`: TensorFlow's logger gets its own handler at its import
only if the root logger has none then, so its warnings print once or twice, as bare."""
import logging
import sys

if sys.argv[1] == "before":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(name)s] %(message)s")
import tensorflow as tf

if sys.argv[1] == "after":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(name)s] %(message)s")
print("handlers:", [type(handler).__name__ for handler in tf.get_logger().handlers])
tf.get_logger().warning("a warning of TensorFlow's logger")


@tf.function
def double(x):
    return x * 2


for step in range(7):  # a new trace for each Python int: TensorFlow's retracing warning
    double(step)
print("done")
