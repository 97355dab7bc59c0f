"""TF Device Panel's engine: Qt-free and TensorFlow-free in this process (TF runs in `runtime_main`)."""
