# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "3. …변환 방법", "1. tensorflow-gpu", MirroredStrategy block.
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block); the functions stay undefined, as in the document.

import tensorflow as tf

mirrored_strategy = tf.distribute.MirroredStrategy()

with mirrored_strategy.scope():
  get_something_from_dataset()
  caculate_number_in_dataset()
