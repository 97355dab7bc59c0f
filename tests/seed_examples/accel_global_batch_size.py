# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "tf.distribute.Strategy with Keras model.fit", second block.
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block) and `mirrored_strategy = tf.distribute.MirroredStrategy()` (defined in the block before).
# panel-test: profile={"cpu_devices": 2}

import tensorflow as tf
mirrored_strategy = tf.distribute.MirroredStrategy()

# Compute a global batch size using a number of replicas.
BATCH_SIZE_PER_REPLICA = 5
global_batch_size = (BATCH_SIZE_PER_REPLICA *
                     mirrored_strategy.num_replicas_in_sync)
dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100)
dataset = dataset.batch(global_batch_size)

LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20:0.175}
learning_rate = LEARNING_RATES_BY_BATCH_SIZE[global_batch_size]
