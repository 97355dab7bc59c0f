"""A pool whose workers return instances of a class defined here, under the start method named in argv[1]."""
import multiprocessing
import sys


class Box:
    def __init__(self, value):
        self.value = value


def work(n):
    return Box(n * n)


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    with context.Pool(2) as pool:
        boxes = pool.map(work, range(6))
    print(sys.argv[1], [box.value for box in boxes], type(boxes[0]).__module__)
