# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "3. …변환 방법", "1. tensorflow-gpu", two scopes.
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block) and `mirrored_strategy` (defined in the block before); the functions stay undefined.

import tensorflow as tf
mirrored_strategy = tf.distribute.MirroredStrategy()

with mirrored_strategy.scope():
  get_something_from_dataset()

with mirrored_strategy.scope():
  caculate_number_in_dataset()
