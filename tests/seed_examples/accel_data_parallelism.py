# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "Multiple GPU", tf.distribute.Strategy (data parallelism).
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: profile={"cpu_devices": 2} gpu=true slow=true

import tensorflow as tf

tf.debugging.set_log_device_placement(True)
gpus = tf.config.list_logical_devices('GPU')
strategy = tf.distribute.MirroredStrategy(gpus)
with strategy.scope():
  inputs = tf.keras.layers.Input(shape=(1,))
  predictions = tf.keras.layers.Dense(1)(inputs)
  model = tf.keras.models.Model(inputs=inputs, outputs=predictions)
  model.compile(loss='mse',
                optimizer=tf.keras.optimizers.SGD(learning_rate=0.2))
