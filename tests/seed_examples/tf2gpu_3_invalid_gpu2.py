# Seed 000_8fd7763e0517edd6.txt ("Tensorflow 2.0 GPU 사용하기"), section "3. Multi-GPU 환경", first block (/device:GPU:2).
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).

import tensorflow as tf

tf.debugging.set_log_device_placement(True)

try:
  # 유효하지 않은 GPU 장치를 명시
  with tf.device('/device:GPU:2'):
    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    c = tf.matmul(a, b)
except RuntimeError as e:
  print(e)
