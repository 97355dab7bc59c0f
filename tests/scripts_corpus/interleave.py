"""print, os.write and a child process on the same fd keep the order they were written in."""
import os
import subprocess
import sys

for i in range(200):
    print(f"print {i}", flush=True)
    os.write(1, f"os.write {i}\n".encode())
    if i % 20 == 0:
        subprocess.run([sys.executable, "-c", f"print('child {i}')"], check=True)
        os.write(2, f"stderr {i}\n".encode())
print("buffered tail")  # block-buffered into a pipe: written at exit, after the child below
subprocess.run([sys.executable, "-c", "print('last child')"], check=True)
