"""A script that turns placement logging on itself sees TensorFlow's placement lines as bare."""
import tensorflow as tf

tf.debugging.set_log_device_placement(True)
a = tf.constant([[1.0, 2.0]])
print((a @ tf.transpose(a)).numpy())
