"""Test target for `aiops profile`: CUDA calls from a thread that starts after the profiler attached (argv:
library path, delay seconds). PyTorch launches from several threads (autograd's backward threads)."""

import ctypes
import sys
import threading
import time

cudart = ctypes.CDLL(sys.argv[1])


def worker() -> None:
    time.sleep(float(sys.argv[2]))
    while True:
        cudart.cudaDeviceSynchronize()
        time.sleep(0.0005)


threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
time.sleep(120)
