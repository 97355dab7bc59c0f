"""A TF1-style graph run in a compat.v1 Session: under the profile's placement log, its placer lines and its
"Device mapping:" are the panel's, never on the script's streams."""
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, shape=(None, 2))
y = tf.reduce_sum(x * 3.0)
with tf.compat.v1.Session() as session:
    print("sum:", session.run(y, feed_dict={x: [[1.0, 2.0], [3.0, 4.0]]}))
