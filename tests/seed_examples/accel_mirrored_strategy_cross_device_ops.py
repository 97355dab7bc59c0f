# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "tf.distribute.MirroredStrategy", "장치 간 통신을 재정의".
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: profile={"cpu_devices": 2}

import tensorflow as tf

mirrored_strategy = tf.distribute.MirroredStrategy(
    cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
