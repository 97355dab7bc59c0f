# Seed 001_86927746795259b9.txt ("GPU 사용하기", the TensorFlow 1 guide), section "GPU 메모리 증가 허용하기", allow_growth.
# Changed so that it can run at all: the document is TensorFlow 1 / Python 2 code whose indentation the page lost: restored the indentation, `print x` → `print(x)`, `tf.Session`/`tf.ConfigProto` → `tf.compat.v1.…`, and graph mode (`tf.compat.v1.disable_eager_execution()`) so that `sess.run` can run at all; added `import tensorflow as tf`; removed the placeholder `, ...` from `tf.Session(config=config, ...)` (a syntax error).

import tensorflow as tf

config = tf.compat.v1.ConfigProto()
config.gpu_options.allow_growth = True
session = tf.compat.v1.Session(config=config)
