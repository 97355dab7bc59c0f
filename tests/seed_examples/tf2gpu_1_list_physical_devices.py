# Seed 000_8fd7763e0517edd6.txt ("Tensorflow 2.0 GPU 사용하기"), section "1. 설정하기", third block.
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).

import tensorflow as tf

gpus = tf.config.experimental.list_physical_devices('GPU')
print(gpus)
