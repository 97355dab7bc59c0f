"""The PySide6 window over `core`. Never imports TensorFlow."""
