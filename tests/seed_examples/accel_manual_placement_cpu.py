# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "GPU 장치 할당", "장치 수동 할당".
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).

import tensorflow as tf

tf.debugging.set_log_device_placement(True)

with tf.device('/CPU:0'):
  a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
