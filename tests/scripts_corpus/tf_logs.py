"""TensorFlow's Python logger and warnings print to stderr as bare; the script's stdout keeps only its own lines
even though the panel logs every placement."""
import warnings

import tensorflow as tf

tf.get_logger().warning("a warning from tf.get_logger")
tf.get_logger().setLevel("INFO")
tf.get_logger().info("an info line from tf.get_logger")
warnings.warn("a warning of the script's own", stacklevel=1)
a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
print((a @ a).numpy())
print("logical devices:", len(tf.config.list_logical_devices()) > 0)
