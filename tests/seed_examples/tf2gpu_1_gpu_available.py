# Seed 000_8fd7763e0517edd6.txt ("Tensorflow 2.0 GPU 사용하기"), section "1. 설정하기", first block.
# Changed so that it can run at all: removed the Colab-only `%tensorflow_version 2.x` line (not Python) and the stray `"` before the last `)` (a syntax error; the document's result line shows the intended `GPU Available:` output).

from __future__ import absolute_import, division, print_function, unicode_literals

try:
    # Colab에서만 적용되는 부분입니다 (%tensorflow_version)
  pass  # was: %tensorflow_version 2.x
except Exception:
  pass

import tensorflow as tf

print("GPU Available: ", tf.test.is_gpu_available())
