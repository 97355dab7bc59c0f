"""A tf.function that fails at run time: TensorFlow's "defined at" stack and the traceback show this file only."""
import tensorflow as tf


@tf.function
def take(x, i):
    return tf.gather(x, i)


take(tf.constant([1, 2, 3]), tf.constant(7))
