"""Devices and telemetry: NVML, TensorFlow GPU facts, CUDA libraries, the memory sampler."""
