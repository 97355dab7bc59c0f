# Seed 004_c18e23b16ad6c9dd.txt ("MirroredStrategy … 분산전략"), method 2 ("Parameter Server Strategy").
# Changed so that it can run at all: added `import tensorflow as tf` (the document imports it in an earlier block).

import tensorflow as tf

strategy = tf.distribute.experimental.ParameterServerStrategy()
