"""Test target for `aiops profile`: Python calling libcudart through ctypes in known proportions per round
(3 x cudaLaunchKernel in feed_launches, 2 x cudaMemcpy in copy_inputs, 1 x cudaDeviceSynchronize in
wait_gpu). Without a driver every call returns an error at once. argv: library path, rounds, sleep seconds."""

import ctypes
import sys
import time


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(sys.argv[1])
cudart.cudaLaunchKernel.argtypes = [
    ctypes.c_void_p,
    Dim3,
    Dim3,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
]
cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
buffer = ctypes.create_string_buffer(64)


def feed_launches() -> None:
    for _ in range(3):
        cudart.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)


def copy_inputs() -> None:
    for _ in range(2):
        cudart.cudaMemcpy(buffer, ctypes.byref(buffer, 32), 16, 0)


def wait_gpu() -> None:
    cudart.cudaDeviceSynchronize()


print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    feed_launches()
    copy_inputs()
    wait_gpu()
    time.sleep(float(sys.argv[3]))
