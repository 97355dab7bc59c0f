"""Sizes: the one set of byte-unit constants every part of the panel counts in (binary units, as TensorFlow's
allocator, NVML and the kernel report them)."""

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
