# Seed 004_c18e23b16ad6c9dd.txt ("MirroredStrategy … 분산전략"), the second block ("MirroredStrategy 인스턴스를 생성하고 확인").
# Changed so that it can run at all: restored the indentation the page lost.
# panel-test: gpu=true

import tensorflow as tf
# gpu 이름
gpus = tf.config.experimental.list_logical_devices('GPU')
# gpu가 2개 이상이면, MirroredStrategy 인스턴스 생성
if len(gpus) > 1:
    strategy = tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    print('\n\n Running on multiple GPUs ', [gpu.name for gpu in gpus])
# gpu가 1개 이하면, 디폴트 전략 설정
else:
    strategy = tf.distribute.get_strategy() # default strategy that works on CPU and single GPU
    print('\n\n Running on single GPU', gpus[0].name)
print('\n\n #accelerators: ', strategy.num_replicas_in_sync, '\n\n')
