# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "GPU 메모리 제한", set_logical_device_configuration (1 GB).
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: gpu=true

import tensorflow as tf

gpus = tf.config.list_physical_devices('GPU')
if gpus:
  # Restrict TensorFlow to only allocate 1GB of memory on the first GPU
  try:
    tf.config.set_logical_device_configuration(
      gpus[0],
      [tf.config.LogicalDeviceConfiguration(memory_limit=1024)])
    logical_gpus = tf.config.list_logical_devices('GPU')
    print(len(gpus), "Physical GPUs,", len(logical_gpus), "Logical GPUs")
  except RuntimeError as e:
    # Virtual devices must be set before GPUs have been initialized
    print(e)
