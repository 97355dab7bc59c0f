"""os._exit: nothing more on the script's streams than what it wrote (stdout's buffer is lost, as bare)."""
import os
import sys

print("lost in the buffer")
sys.stderr.write("said before exit\n")
os._exit(4)
