# Seed 002_cbe893d222de4d4d.txt ("텐서플로우 가속 | Tensorflow Acceleration"), section "tf.distribute.Strategy with Keras model.fit".
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).
# panel-test: profile={"cpu_devices": 2, "log_placement": false} volatile=true slow=true

import tensorflow as tf

mirrored_strategy = tf.distribute.MirroredStrategy()

with mirrored_strategy.scope():
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])

model.compile(loss='mse', optimizer='sgd')

dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10)
model.fit(dataset, epochs=2)
model.evaluate(dataset)

# Numpy도 사용 가능
import numpy as np

inputs, targets = np.ones((100, 1)), np.ones((100, 1))
model.fit(inputs, targets, epochs=2, batch_size=10) # 각 배치가 여러 복제본에 균등하게 분할
