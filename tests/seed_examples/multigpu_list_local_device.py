# Seed 004_c18e23b16ad6c9dd.txt ("MirroredStrategy … 분산전략"), the first block ("gpu 확인을 위한 함수 호출").
# Changed so that it can run at all: nothing: the document's `list_local_device()` (no `s`) is kept, so it fails as it does bare, with Python's `Did you mean` hint.

# gpu 확인을 위한 함수 호출
from tensorflow.python.client import device_lib
device_lib.list_local_device()
