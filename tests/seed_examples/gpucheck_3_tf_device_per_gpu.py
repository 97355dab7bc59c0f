# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "3. cpu만 사용하는 코드에서 gpu 사용하는 코드로 변환 방법", "1. tensorflow-gpu", first block.
# Changed so that it can run at all: the two `{} <= …` annotation lines (Korean prose, not Python) became comments; the functions stay undefined, as in the document.

import tensorflow as tf

with tf.device("GPU:0"):
  get_something_from_dataset()
# {} <= 여기에 들어가는 변수 또는 method는 GPU:0의 메모리에 저장됩니다.

with tf.device("GPU:1"):
  caculate_number_in_dataset()
# {} <= 여기에 들어가는 변수 또는 method는 GPU:1의 메모리에 저장됩니다.
