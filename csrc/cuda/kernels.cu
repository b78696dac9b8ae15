// The device-block kernels (thin launchers around kernels.hpp) and the table
// of operations braidpy._core calls through (device_ops.hpp). Every runtime
// call's error is returned; nothing here throws or prints.
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "cuda_api.hpp"
#include "kernels.hpp"
#include "launch.hpp"

namespace braidpy {
namespace cuda {

namespace {

using kern::Index;

constexpr Index kMaxBlocks = 4096;

unsigned blocks_for(Index n) { return cuda::blocks_for(n, kMaxBlocks); }

// ------------------------------------------------------------------ kernels

template <class T>
__global__ void axpby_kernel(T a, const T* x, T b, T* y, Index n) {
  BRAIDPY_GRID_LOOP(i, n)
    kern::axpby_at(i, a, x, b, y);
}

template <class T>
__global__ void axpby_rows_kernel(T a, const T* const* xs, T b, T* const* ys, Index len,
                                  Index n) {
  BRAIDPY_GRID_LOOP(i, n)
    kern::axpby_rows_at(i, a, xs, b, ys, len);
}

template <class T>
__global__ void step_epilogue_kernel(const T* U, const T* Y, const T* b, const T* h, int act,
                                     Index m, Index N, Index C, Index HW, T* out, Index n) {
  BRAIDPY_GRID_LOOP(i, n)
    kern::step_epilogue_at(i, U, Y, b, h, act, m, N, C, HW, out);
}

template <class T, bool Slope>
__global__ void dense_finish_kernel(int act, const T* Z, const T* X, const T* b, const T* h,
                                    T h0, Index rows, Index width, T* out, Index n) {
  BRAIDPY_GRID_LOOP(i, n)
    kern::dense_finish_at<T, Slope>(i, act, Z, X, b, h, h0, rows, width, out);
}

template <class T>
__global__ void gather_kernel(const T* const* srcs, Index len, T* block, Index n) {
  BRAIDPY_GRID_LOOP(i, n)
    kern::gather_at(i, srcs, len, block);
}

// One block of kern::kNormThreads threads per row.
template <class T>
__global__ void row_norms_kernel(const T* const* rows, Index len, double* out) {
  __shared__ double parts[kern::kNormThreads];
  const int t = static_cast<int>(threadIdx.x);
  parts[t] = kern::sumsq_part(rows[blockIdx.x], len, t, kern::kNormThreads);
  __syncthreads();
  for (int s = kern::kNormThreads / 2; s > 0; s >>= 1) {
    kern::tree_step(parts, t, s);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = kern::norm_from_sumsq(parts[0]);
}

// ------------------------------------------------------------------ scratch

// Device scratch for pointer tables and norms, grown as needed and reused.
// Calls come with the GIL held (one at a time); a change of stream waits for
// the previous one so that a table still being read is never overwritten.
struct Scratch {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = -1;
  cudaStream_t last = nullptr;
  bool used = false;
};
Scratch scratch;

int reserve(std::size_t bytes, cudaStream_t stream, void** out) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (scratch.used && (scratch.last != stream || scratch.device != dev)) {
    if (scratch.device == dev) {
      e = cudaStreamSynchronize(scratch.last);
      if (e != cudaSuccess) return e;
    }
  }
  if (scratch.device != dev || scratch.bytes < bytes) {
    if (scratch.ptr != nullptr && scratch.device == dev) {
      e = cudaFree(scratch.ptr);  // synchronizes the device
      if (e != cudaSuccess) return e;
    }
    scratch.ptr = nullptr;
    scratch.bytes = 0;
    std::size_t want = bytes < 4096 ? 4096 : bytes * 2;
    e = cudaMalloc(&scratch.ptr, want);
    if (e != cudaSuccess) return e;
    scratch.bytes = want;
    scratch.device = dev;
  }
  scratch.last = stream;
  scratch.used = true;
  *out = scratch.ptr;
  return cudaSuccess;
}

int launched() { return cudaGetLastError(); }

// ------------------------------------------------------------------ the table

template <class T>
int sum_t(double a, const void* x, double b, void* y, Index n, cudaStream_t s) {
  axpby_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
      static_cast<T>(a), static_cast<const T*>(x), static_cast<T>(b), static_cast<T*>(y), n);
  return launched();
}

int op_sum(int dtype, double a, const void* x, double b, void* y, std::int64_t n,
           std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  if (e != cudaSuccess || n == 0) return e;
  return dtype == kDeviceF64 ? sum_t<double>(a, x, b, y, n, as_stream(stream))
                             : sum_t<float>(a, x, b, y, n, as_stream(stream));
}

template <class T>
int sum_rows_t(double a, void* table, double b, Index nrows, Index len, cudaStream_t s) {
  T* const* xs = static_cast<T* const*>(table);  // the table: nrows x pointers, then ys
  T* const* ys = xs + nrows;
  const Index n = nrows * len;
  axpby_rows_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T>(a), xs,
                                                          static_cast<T>(b), ys, len, n);
  return launched();
}

int op_sum_rows(int dtype, double a, const void* const* xs, double b, void* const* ys,
                std::int64_t nrows, std::int64_t len, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  if (e != cudaSuccess || nrows == 0 || len == 0) return e;
  const cudaStream_t s = as_stream(stream);
  const std::size_t half = static_cast<std::size_t>(nrows) * sizeof(void*);
  std::vector<const void*> table(2 * static_cast<std::size_t>(nrows));  // xs, then ys
  for (Index r = 0; r < nrows; ++r) {
    table[static_cast<std::size_t>(r)] = xs[r];
    table[static_cast<std::size_t>(nrows + r)] = ys[r];
  }
  void* dev = nullptr;
  if ((e = static_cast<cudaError_t>(reserve(2 * half, s, &dev))) != cudaSuccess) return e;
  e = cudaMemcpyAsync(dev, table.data(), 2 * half, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) return e;
  return dtype == kDeviceF64 ? sum_rows_t<double>(a, dev, b, nrows, len, s)
                             : sum_rows_t<float>(a, dev, b, nrows, len, s);
}

int op_gather(int dtype, const void* const* srcs, std::int64_t nrows, std::int64_t len,
              void* block, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  if (e != cudaSuccess || nrows == 0 || len == 0) return e;
  const cudaStream_t s = as_stream(stream);
  const std::size_t table = static_cast<std::size_t>(nrows) * sizeof(void*);
  void* dev = nullptr;
  if ((e = static_cast<cudaError_t>(reserve(table, s, &dev))) != cudaSuccess) return e;
  e = cudaMemcpyAsync(dev, srcs, table, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) return e;
  const Index n = nrows * len;
  if (dtype == kDeviceF64)
    gather_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const double* const*>(dev), len, static_cast<double*>(block), n);
  else
    gather_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const float* const*>(dev), len, static_cast<float*>(block), n);
  return launched();
}

int op_copy(const void* src, void* dst, std::int64_t bytes, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  if (e != cudaSuccess || bytes == 0 || src == dst) return e;
  return cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice,
                         as_stream(stream));
}

int op_row_norms(int dtype, const void* const* rows, std::int64_t nrows, std::int64_t len,
                 double* out, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  if (e != cudaSuccess || nrows == 0) return e;
  const cudaStream_t s = as_stream(stream);
  const std::size_t table = static_cast<std::size_t>(nrows) * sizeof(void*);
  const std::size_t norms = static_cast<std::size_t>(nrows) * sizeof(double);
  void* dev = nullptr;
  if ((e = static_cast<cudaError_t>(reserve(table + norms, s, &dev))) != cudaSuccess) return e;
  auto* dnorms = reinterpret_cast<double*>(static_cast<char*>(dev) + table);
  e = cudaMemcpyAsync(dev, rows, table, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) return e;
  const unsigned grid = static_cast<unsigned>(nrows);
  if (dtype == kDeviceF64)
    row_norms_kernel<double><<<grid, kern::kNormThreads, 0, s>>>(
        static_cast<const double* const*>(dev), len, dnorms);
  else
    row_norms_kernel<float><<<grid, kern::kNormThreads, 0, s>>>(
        static_cast<const float* const*>(dev), len, dnorms);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  e = cudaMemcpyAsync(out, dnorms, norms, cudaMemcpyDeviceToHost, s);
  if (e != cudaSuccess) return e;
  return cudaStreamSynchronize(s);
}

const char* op_error_name(int code) { return cudaGetErrorName(static_cast<cudaError_t>(code)); }
const char* op_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

const DeviceOps kOps = {kDeviceOpsAbi, op_sum,        op_sum_rows,    op_gather,
                        op_copy,       op_row_norms,  op_error_name,  op_error_string};

}  // namespace

const DeviceOps* device_ops() { return &kOps; }

int runtime_version(int* version) { return cudaRuntimeGetVersion(version); }

int step_epilogue(int dtype, int act, const void* U, const void* Y, const void* b,
                  const void* h, void* out, std::int64_t m, std::int64_t N, std::int64_t C,
                  std::int64_t HW, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const Index n = m * N * C * HW;
  if (e != cudaSuccess || n == 0) return e;
  const cudaStream_t s = as_stream(stream);
  if (dtype == kDeviceF64)
    step_epilogue_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const double*>(U), static_cast<const double*>(Y),
        static_cast<const double*>(b), static_cast<const double*>(h), act, m, N, C, HW,
        static_cast<double*>(out), n);
  else
    step_epilogue_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const float*>(U), static_cast<const float*>(Y),
        static_cast<const float*>(b), static_cast<const float*>(h), act, m, N, C, HW,
        static_cast<float*>(out), n);
  return launched();
}

namespace {

template <class T>
int dense_finish_t(bool slope, int act, const void* Z, const void* X, const void* b,
                   const void* h, double h0, void* out, Index rows, Index width, Index n,
                   cudaStream_t s) {
  const auto* z = static_cast<const T*>(Z);
  const auto* x = static_cast<const T*>(X);
  const auto* bv = static_cast<const T*>(b);
  const auto* hv = static_cast<const T*>(h);
  auto* o = static_cast<T*>(out);
  // h0 rounded to T once, as NumPy rounds a Python float next to a float32 array.
  if (slope)
    dense_finish_kernel<T, true><<<blocks_for(n), kThreads, 0, s>>>(
        act, z, x, bv, hv, static_cast<T>(h0), rows, width, o, n);
  else
    dense_finish_kernel<T, false><<<blocks_for(n), kThreads, 0, s>>>(
        act, z, x, bv, hv, static_cast<T>(h0), rows, width, o, n);
  return launched();
}

}  // namespace

int dense_finish(int dtype, bool slope, int act, const void* Z, const void* X, const void* b,
                 const void* h, double h0, void* out, std::int64_t m, std::int64_t rows,
                 std::int64_t width, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const Index n = m * rows * width;
  if (e != cudaSuccess || n == 0) return e;
  const cudaStream_t s = as_stream(stream);
  return dtype == kDeviceF64
             ? dense_finish_t<double>(slope, act, Z, X, b, h, h0, out, rows, width, n, s)
             : dense_finish_t<float>(slope, act, Z, X, b, h, h0, out, rows, width, n, s);
}

int driver_version(int* version) { return cudaDriverGetVersion(version); }

int device_count(int* count) {
  *count = 0;
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) *count = 0;
  return e;
}

int device_properties(int dev, char* name, int name_len, int* major, int* minor) {
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) return e;
  std::strncpy(name, p.name, static_cast<std::size_t>(name_len) - 1);
  name[name_len - 1] = '\0';
  *major = p.major;
  *minor = p.minor;
  return cudaSuccess;
}

// Every device op starts here; once a device has been found the answer is kept (two
// runtime calls per op were a measurable share of a small-state solve's host time), and
// a device lost later shows up as the failing call's own error.
int check_device() {
  static std::atomic<bool> found{false};
  if (found.load(std::memory_order_relaxed)) return cudaSuccess;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return e;
  if (count == 0) return cudaErrorNoDevice;
  int dev = 0;
  e = cudaGetDevice(&dev);
  if (e == cudaSuccess) found.store(true, std::memory_order_relaxed);
  return e;
}

int current_device(int* dev) {
  *dev = 0;
  return cudaGetDevice(dev);
}

}  // namespace cuda
}  // namespace braidpy
