// Device paths of App's default clone/sum/norm for CUDA arrays (CuPy float64 and
// float32 states, found through __cuda_array_interface__): the GPU counterpart
// of array_fast.cpp. A sweep's states are rows of one device block; sums,
// copies and batched row norms run as kernels of braidpy._cuda on the array's
// stream, called through its DeviceOps table, so braidpy._core links no CUDA.
#pragma once

#include <Python.h>

namespace braidpy {

struct DeviceOps;

// kNo: the path does not apply (fall back to Python); kFailed: a Python
// exception is set (braidpy.NoGPUError / CudaError for a CUDA error).
enum class DevicePath { kNo, kDone, kFailed };

// The provider: set_device_ops' table, else braidpy._cuda's (imported on first
// use); null when there is none (the module was not compiled).
const DeviceOps* device_ops();
// Tests: a capsule (DeviceOps) to use, None for the default, False for none;
// false (nothing changed but the default restored) for anything else.
bool set_device_ops(PyObject* choice);
// A capsule of DeviceOps that run kernels.hpp on host memory (tests run the
// device paths on the CPU with fake arrays whose interface points at host memory).
PyObject* host_device_ops_capsule();
// Tests: the host provider's calls per operation since the last set_device_ops (so a
// test sees how many launches a solve would make on a GPU).
struct HostOpCalls {
  long long sum = 0, sum_rows = 0, gather = 0, copy = 0, row_norms = 0;
};
HostOpCalls& host_device_op_calls();

DevicePath device_clone(PyObject* u, PyObject** out);
DevicePath device_sum(double a, PyObject* x, double b, PyObject* y);
// ys[k] <- a*xs[k] + b*ys[k], k < n, in one kernel: every pair CUDA arrays of one dtype
// and size (the caller promises the pairs are independent).
DevicePath device_sums(double a, PyObject* const* xs, double b, PyObject* const* ys,
                       Py_ssize_t n);
// out[k] = ||us[k]|| for n states of one dtype and size: one kernel, one copy back.
DevicePath device_norms(PyObject* const* us, Py_ssize_t n, double* out);
// The states srcs[k] stacked into one new device array (n, *shape) in one kernel (null
// sources leave their row unwritten); the device path of Core.stored_block.
DevicePath device_stack(PyObject* const* srcs, Py_ssize_t n, PyObject** block);
// As fast_clone_block (array_fast.hpp) for device arrays: one block, row views.
DevicePath device_clone_block(PyObject* const* srcs, Py_ssize_t n, PyObject** block,
                              PyObject** rows);
DevicePath device_copy(PyObject* src, PyObject* dst);

// Which path App's defaults take for state u: "numpy" (array_fast), "device-f64",
// "device-f32" (this file) or "python" (braidpy.backends).
const char* default_path(PyObject* u);

}  // namespace braidpy
