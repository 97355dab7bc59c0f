# Seed 000_8fd7763e0517edd6.txt ("Tensorflow 2.0 GPU 사용하기"), section "1. 설정하기", second block.
# Changed so that it can run at all: removed the block's 4-space indentation (an IndentationError at the top level).

from tensorflow.python.client import device_lib

device_lib.list_local_devices()
