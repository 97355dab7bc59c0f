# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "1. GPU 인식 확인", "1. tensorflow".
# Changed so that it can run at all: nothing.

from tensorflow.python.client import device_lib
device_lib.list_local_devices()
