// The table of device-block operations that braidpy._cuda hands to braidpy._core
// (a PyCapsule named kDeviceOpsCapsule), so that the CPU module calls the GPU
// kernels without linking CUDA. Plain C types only; pointers are device
// pointers of the provider's memory space; `stream` is a cudaStream_t as an
// integer (0 default, 1 legacy, 2 per-thread, else a handle), as in
// __cuda_array_interface__. Every operation returns 0 or a cudaError_t code.
#pragma once

#include <cstdint>

namespace braidpy {

constexpr const char* kDeviceOpsCapsule = "braidpy._cuda.device_ops";
constexpr int kDeviceOpsAbi = 2;

enum DeviceDtype : int { kDeviceF64 = 1, kDeviceF32 = 2 };

// CUDA's "no GPU here" codes: cudaErrorInsufficientDriver, cudaErrorNoDevice.
constexpr int kCudaNoDriver = 35;
constexpr int kCudaNoDevice = 100;

struct DeviceOps {
  int abi;  // kDeviceOpsAbi
  // y <- a*x + b*y on n elements (x == y allowed; a, b rounded to the dtype).
  int (*sum)(int dtype, double a, const void* x, double b, void* y, std::int64_t n,
             std::uintptr_t stream);
  // ys[r] <- a*xs[r] + b*ys[r], r < nrows, rows of len elements, in one kernel (pairs
  // independent: no ys[r] overlaps another pair's rows).
  int (*sum_rows)(int dtype, double a, const void* const* xs, double b, void* const* ys,
                  std::int64_t nrows, std::int64_t len, std::uintptr_t stream);
  // block[r] <- srcs[r] (null: zeros), r < nrows, rows of len elements.
  int (*gather)(int dtype, const void* const* srcs, std::int64_t nrows, std::int64_t len,
                void* block, std::uintptr_t stream);
  // dst <- src, bytes bytes (one device-to-device copy).
  int (*copy)(const void* src, void* dst, std::int64_t bytes, std::uintptr_t stream);
  // out[r] <- ||rows[r]|| (host array of nrows doubles); one kernel, one copy back.
  int (*row_norms)(int dtype, const void* const* rows, std::int64_t nrows, std::int64_t len,
                   double* out, std::uintptr_t stream);
  // cudaGetErrorName / cudaGetErrorString of a code.
  const char* (*error_name)(int code);
  const char* (*error_string)(int code);
};

}  // namespace braidpy
