"""Source of a stand-in CUDA array for scripts that tests run in a subprocess (host
memory behind ``__cuda_array_interface__``; no GPU involved): ``Fake`` wraps a NumPy
array. Scripts paste it after ``import numpy as np``."""

FAKE_CUDA_ARRAY = """
class Fake:
    def __init__(self, a): self.a = a
    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "strides": None,
                "data": (self.a.ctypes.data, False), "version": 3, "stream": 1}
"""
