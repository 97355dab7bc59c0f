# Seed 001_86927746795259b9.txt ("GPU 사용하기", the TensorFlow 1 guide), section "수동으로 디바이스에 배치".
# Changed so that it can run at all: the document is TensorFlow 1 / Python 2 code whose indentation the page lost: restored the indentation, `print x` → `print(x)`, `tf.Session`/`tf.ConfigProto` → `tf.compat.v1.…`, and graph mode (`tf.compat.v1.disable_eager_execution()`) so that `sess.run` can run at all; added `import tensorflow as tf`.

import tensorflow as tf
tf.compat.v1.disable_eager_execution()

# 그래프를 생성합니다.
with tf.device('/cpu:0'):
  a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name='a')
  b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name='b')
c = tf.matmul(a, b)
# log_device_placement을 True로 설정하여 세션을 만듭니다.
sess = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(log_device_placement=True))
# op를 실행합니다.
print(sess.run(c))
