"""Bytes a terminal would redraw or that are not text: all must arrive as written."""
import sys

for i in range(1, 28):
    sys.stdout.write(f"\r{i}/27 [{'=' * i}{'.' * (27 - i)}]")
sys.stdout.write("\n")
sys.stdout.buffer.write(b"windows line\r\nnot utf-8: \xff\xfe\xc3(\n")
sys.stderr.write("err progress 1\rerr progress 2\r")
sys.stderr.buffer.write(b"\x1b[31mred\x1b[0m \xff\n")
sys.stderr.flush()
sys.stdout.write("no final newline")
