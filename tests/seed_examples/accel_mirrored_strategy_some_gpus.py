# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "tf.distribute.MirroredStrategy", "일부 GPU만 사용".
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: profile={"cpu_devices": 2} gpu=true

import tensorflow as tf

mirrored_strategy = tf.distribute.MirroredStrategy(devices=["/gpu:0", "/gpu:1"])
