# Seed 004_c18e23b16ad6c9dd.txt ("MirroredStrategy … 분산전략"), the third block ("딥러닝 모델 생성 & 학습").
# Changed so that it can run at all: restored the indentation the page lost; added the imports and `strategy` the document makes earlier (`tf`, `models`, `layers`, `optimizers` from tf.keras, `strategy = tf.distribute.MirroredStrategy()`); `optimizers.Adam(lr=1e-4)` (Keras 2) and the undefined `train_generator` are kept as in the document.
# panel-test: profile={"cpu_devices": 2} slow=true

import tensorflow as tf
from tensorflow.keras import layers, models, optimizers
strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = models.Sequential()
    model.add(layers.Conv2D(32, (3, 3), activation='relu', input_shape=(150, 150, 3)))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Conv2D(64, (3, 3), activation='relu'))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Conv2D(128, (3, 3), activation='relu'))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Conv2D(128, (3, 3), activation='relu'))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Flatten())
    model.add(layers.Dropout(0.5))
    model.add(layers.Dense(512, activation='relu'))
    model.add(layers.Dense(1, activation='sigmoid'))
    model.compile(loss='binary_crossentropy',
                  optimizer=optimizers.Adam(lr=1e-4),
                  metrics=['acc'])
history = model.fit(
    train_generator,
    steps_per_epoch=100,
    epochs=100,
    validation_data=validation_generator,
    validation_steps=50
)
