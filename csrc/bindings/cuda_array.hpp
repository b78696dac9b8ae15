// Reading __cuda_array_interface__ (version 2 or 3) without importing any GPU
// library: the protocol by which CuPy (and Numba, PyTorch, ...) describe a device
// array. Used by braidpy._core's device paths and by braidpy._cuda's entry points.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace braidpy {

// A C-contiguous float64/float32 device array as its interface describes it.
struct CudaArrayView {
  void* data = nullptr;
  int dtype = 0;                  // kDeviceF64 / kDeviceF32 (device_ops.hpp)
  std::int64_t size = 0;          // elements
  std::vector<std::int64_t> shape;
  bool readonly = false;
  std::uintptr_t stream = 0;      // the producer's stream (0: none given)
  std::int64_t itemsize() const { return dtype == 1 ? 8 : 4; }
};

// True when the type of o defines __cuda_array_interface__ (cached per type).
bool has_cuda_array_interface(PyObject* o);
// Fills v from o.__cuda_array_interface__ when o has one describing a
// C-contiguous float64 or float32 array without a mask; false otherwise (no
// Python error left set).
bool cuda_array_view(PyObject* o, CudaArrayView& v);

}  // namespace braidpy
