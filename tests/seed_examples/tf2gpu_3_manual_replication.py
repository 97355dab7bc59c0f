# Seed 000_8fd7763e0517edd6.txt ("Tensorflow 2.0 GPU 사용하기"), section "3. Multi-GPU 환경", last block (replication without a strategy).
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: profile={"cpu_devices": 2} gpu=true

import tensorflow as tf

tf.debugging.set_log_device_placement(True)

gpus = tf.config.experimental.list_logical_devices('GPU')
if gpus:
  # 여러 GPU에 계산을 복제
  c = []
  for gpu in gpus:
    with tf.device(gpu.name):
      a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
      b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
      c.append(tf.matmul(a, b))

  with tf.device('/CPU:0'):
    matmul_sum = tf.add_n(c)

  print(matmul_sum)
