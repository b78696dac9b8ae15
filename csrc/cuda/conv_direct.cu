// The direct convolution steps' kernels: thin launchers around conv_direct.hpp.
#include <cuda_runtime.h>

#include "conv_direct.hpp"
#include "cuda_api.hpp"
#include "launch.hpp"

namespace braidpy {
namespace cuda {

namespace {

using kern::ConvDims;
using kern::Index;

constexpr Index kMaxBlocks = 8192;

unsigned blocks_for(Index n) { return cuda::blocks_for(n, kMaxBlocks); }

template <class T>
__global__ void conv_step_kernel(const T* U, const T* K, const T* b, const T* h, int act,
                                 ConvDims d, T* out) {
  BRAIDPY_GRID_LOOP(i, d.size()) kern::conv_step_at(i, U, K, b, h, act, d, out);
}

template <class T>
__global__ void conv_step_g_kernel(const T* Wa, const T* U, const T* K, const T* b,
                                   const T* h, int act, ConvDims d, T* G) {
  BRAIDPY_GRID_LOOP(i, d.size()) kern::conv_step_g_at(i, Wa, U, K, b, h, act, d, G);
}

template <class T>
__global__ void conv_transpose_add_kernel(const T* Wa, const T* G, const T* K, ConvDims d,
                                          T* out) {
  BRAIDPY_GRID_LOOP(i, d.size()) kern::conv_transpose_add_at(i, Wa, G, K, d, out);
}

// The tiled kernels (conv_direct.hpp): one block per tile, kern::kTileThreads threads.
template <class T, int MaxC>
__global__ void conv_tiled_kernel(int mode, const T* X, const T* K, ConvDims d, const T* U,
                                  const T* Wa, const T* bias, const T* h, int act, T* out) {
  extern __shared__ __align__(sizeof(double)) unsigned char raw[];
  T* smem = reinterpret_cast<T*>(raw);
  const int t = static_cast<int>(threadIdx.x);
  const Index b = blockIdx.x;
  kern::conv_tile_load(X, K, d, b, t, kern::kTileThreads, smem);
  __syncthreads();
  kern::conv_tile_finish<T, MaxC>(mode, smem, b, t, d, U, Wa, bias, h, act, out);
}

// A tiled kernel for C channels: as few accumulators as cover C.
template <class T>
int launch_tiled(int mode, const T* X, const T* K, const ConvDims& d, const T* U, const T* Wa,
                 const T* bias, const T* h, int act, T* out, cudaStream_t st) {
  const auto blocks = static_cast<unsigned>(kern::conv_tile_blocks(d));
  const auto bytes = static_cast<std::size_t>(kern::conv_tile_smem(d)) * sizeof(T);
  if (d.C <= 4)
    conv_tiled_kernel<T, 4><<<blocks, kern::kTileThreads, bytes, st>>>(mode, X, K, d, U, Wa,
                                                                      bias, h, act, out);
  else if (d.C <= 8)
    conv_tiled_kernel<T, 8><<<blocks, kern::kTileThreads, bytes, st>>>(mode, X, K, d, U, Wa,
                                                                      bias, h, act, out);
  else
    conv_tiled_kernel<T, 16><<<blocks, kern::kTileThreads, bytes, st>>>(mode, X, K, d, U, Wa,
                                                                       bias, h, act, out);
  return cudaGetLastError();
}

// The wide kernels (conv_direct.hpp): one block per (tile, channel group),
// kern::kTileThreads threads, the streamed channels in chunks through shared memory.
template <class T>
__global__ void conv_wide_kernel(int mode, const T* X, const T* K, ConvDims d, const T* U,
                                 const T* Wa, const T* bias, const T* h, int act, T* out) {
  extern __shared__ __align__(16) unsigned char wide_raw[];
  T* smem = reinterpret_cast<T*>(wide_raw);
  const int t = static_cast<int>(threadIdx.x);
  const Index b = blockIdx.x;
  T acc[kern::kWideGroup];
#pragma unroll
  for (int a = 0; a < kern::kWideGroup; ++a) acc[a] = T(0);
  for (Index c0 = 0; c0 < d.C; c0 += kern::kWideChunk) {
    if (c0 > 0) __syncthreads();  // every thread is done with the previous chunk
    kern::conv_wide_load(mode == kern::kConvTransposeAdd, X, K, d, b, c0, t,
                         kern::kTileThreads, smem);
    __syncthreads();
    kern::conv_wide_sums(smem, d, c0, t, acc);
  }
  kern::conv_wide_finish(mode, acc, b, t, d, U, Wa, bias, h, act, out);
}

template <class T>
int launch_wide(int mode, const T* X, const T* K, const ConvDims& d, const T* U, const T* Wa,
                const T* bias, const T* h, int act, T* out, cudaStream_t st) {
  const auto blocks = static_cast<unsigned>(kern::conv_wide_blocks(d));
  const auto bytes = static_cast<std::size_t>(kern::conv_wide_smem(d)) * sizeof(T);
  conv_wide_kernel<T><<<blocks, kern::kTileThreads, bytes, st>>>(mode, X, K, d, U, Wa, bias, h,
                                                                 act, out);
  return cudaGetLastError();
}

// The tiled or the wide kernel, whichever conv_family picks for these dims (called only
// where it picks one of the two).
template <class T>
int launch_family(int mode, const T* X, const T* K, const ConvDims& d, const T* U, const T* Wa,
                  const T* bias, const T* h, int act, T* out, cudaStream_t st) {
  if (kern::conv_family(d, sizeof(T)) == kern::kConvTiled)
    return launch_tiled<T>(mode, X, K, d, U, Wa, bias, h, act, out, st);
  return launch_wide<T>(mode, X, K, d, U, Wa, bias, h, act, out, st);
}

// The row kernel: one block of kern::kConvThreads threads per row (iv, o, c, dy) of dK.
template <class T>
__global__ void conv_wgrad_kernel(const T* G, const T* U, ConvDims d, T* dK) {
  __shared__ double parts[kern::kConvMaxK * kern::kConvThreads];
  const int t = static_cast<int>(threadIdx.x);
  const Index rows = d.m * d.C * d.C * d.k;
  for (Index row = blockIdx.x; row < rows; row += gridDim.x) {
    if (row != blockIdx.x) __syncthreads();  // the previous row's results are read
    kern::conv_wgrad_part(G, U, row, d, t, kern::kConvThreads, parts);
    __syncthreads();
    for (int s = kern::kConvThreads / 2; s > 0; s >>= 1) {
      for (Index dx = 0; dx < d.k; ++dx) kern::tree_step(parts + dx * kern::kConvThreads, t, s);
      __syncthreads();
    }
    if (t < d.k) dK[row * d.k + t] = static_cast<T>(parts[t * kern::kConvThreads]);
  }
}

// The grouped kernel for kernel size K (conv_direct.hpp): one block of kern::kConvThreads
// threads per (iv, output group, input group, dy); its accumulators in registers, the
// trees in one 48 KiB buffer, pass by pass.
template <class T, int K>
__global__ void __launch_bounds__(kern::kConvThreads)
    conv_wgrad_grouped_kernel(const T* G, const T* U, ConvDims d, T* dK) {
  __shared__ double parts[kern::kWgradPartsRows * kern::kConvThreads];
  const int t = static_cast<int>(threadIdx.x);
  const Index blocks = kern::conv_wgrad_group_blocks(d);
  for (Index b = blockIdx.x; b < blocks; b += gridDim.x) {
    double acc[kern::conv_wgrad_accs(K)];
    kern::conv_wgrad_group_part<T, K>(G, U, b, d, t, kern::kConvThreads, acc);
#pragma unroll
    for (int pass = 0; pass < kern::conv_wgrad_passes(K); ++pass) {
      __syncthreads();  // the previous pass's (or block's) results are read
      kern::conv_wgrad_group_store<K>(acc, pass, t, kern::kConvThreads, parts);
      __syncthreads();
      for (int s = kern::kConvThreads / 2; s > 0; s >>= 1) {
        kern::conv_wgrad_group_tree<K>(parts, pass, t, kern::kConvThreads, s);
        __syncthreads();
      }
      kern::conv_wgrad_group_write<T, K>(parts, pass, b, d, t, kern::kConvThreads, dK);
    }
  }
}

template <class T, int K>
int launch_wgrad_grouped(const T* G, const T* U, const ConvDims& d, T* dK, cudaStream_t st) {
  const Index blocks = kern::conv_wgrad_group_blocks(d);
  const auto grid = static_cast<unsigned>(kern::conv_reduction_grid(blocks));
  conv_wgrad_grouped_kernel<T, K><<<grid, kern::kConvThreads, 0, st>>>(G, U, d, dK);
  return cudaGetLastError();
}

// The row or the grouped kernel, whichever conv_wgrad_family picks for these dims.
template <class T>
int launch_wgrad(const T* G, const T* U, const ConvDims& d, T* dK, cudaStream_t st) {
  if (kern::conv_wgrad_family(d) == kern::kWgradRows) {
    const auto grid = static_cast<unsigned>(kern::conv_reduction_grid(d.m * d.C * d.C * d.k));
    conv_wgrad_kernel<T><<<grid, kern::kConvThreads, 0, st>>>(G, U, d, dK);
    return cudaGetLastError();
  }
  if (d.k == 1) return launch_wgrad_grouped<T, 1>(G, U, d, dK, st);
  if (d.k == 3) return launch_wgrad_grouped<T, 3>(G, U, d, dK, st);
  if (d.k == 5) return launch_wgrad_grouped<T, 5>(G, U, d, dK, st);
  return launch_wgrad_grouped<T, 7>(G, U, d, dK, st);
}

// One block per row (iv, o) of db.
template <class T>
__global__ void conv_bgrad_kernel(const T* G, ConvDims d, T* db) {
  __shared__ double parts[kern::kConvThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (Index row = blockIdx.x; row < d.m * d.C; row += gridDim.x) {
    if (row != blockIdx.x) __syncthreads();  // the previous row's result is read
    parts[t] = kern::conv_bgrad_part(G, row, d, t, kern::kConvThreads);
    __syncthreads();
    for (int s = kern::kConvThreads / 2; s > 0; s >>= 1) {
      kern::tree_step(parts, t, s);
      __syncthreads();
    }
    if (t == 0) db[row] = static_cast<T>(parts[0]);
  }
}

ConvDims dims(const ConvShape& s) { return ConvDims{s.m, s.N, s.C, s.H, s.W, s.k}; }

template <class T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}

// Each mode in precision T: the tiled or wide kernel where one applies (conv_family), else
// the element kernel.
template <class T>
int step_t(int act, const void* U, const void* K, const void* b, const void* h, void* out,
           const ConvDims& d, cudaStream_t st) {
  if (kern::conv_family(d, sizeof(T)) != kern::kConvElement)
    return launch_family<T>(kern::kConvStep, in<T>(U), in<T>(K), d, in<T>(U), nullptr, in<T>(b),
                            in<T>(h), act, static_cast<T*>(out), st);
  conv_step_kernel<T><<<blocks_for(d.size()), kThreads, 0, st>>>(
      in<T>(U), in<T>(K), in<T>(b), in<T>(h), act, d, static_cast<T*>(out));
  return cudaGetLastError();
}

template <class T>
int g_t(int act, const void* Wa, const void* U, const void* K, const void* b, const void* h,
        void* G, const ConvDims& d, cudaStream_t st) {
  if (kern::conv_family(d, sizeof(T)) != kern::kConvElement)
    return launch_family<T>(kern::kConvG, in<T>(U), in<T>(K), d, nullptr, in<T>(Wa), in<T>(b),
                            in<T>(h), act, static_cast<T*>(G), st);
  conv_step_g_kernel<T><<<blocks_for(d.size()), kThreads, 0, st>>>(
      in<T>(Wa), in<T>(U), in<T>(K), in<T>(b), in<T>(h), act, d, static_cast<T*>(G));
  return cudaGetLastError();
}

template <class T>
int transpose_add_t(const void* Wa, const void* G, const void* K, void* out, const ConvDims& d,
                    cudaStream_t st) {
  if (kern::conv_family(d, sizeof(T)) != kern::kConvElement)
    return launch_family<T>(kern::kConvTransposeAdd, in<T>(G), in<T>(K), d, nullptr, in<T>(Wa),
                            nullptr, nullptr, 0, static_cast<T*>(out), st);
  conv_transpose_add_kernel<T><<<blocks_for(d.size()), kThreads, 0, st>>>(
      in<T>(Wa), in<T>(G), in<T>(K), d, static_cast<T*>(out));
  return cudaGetLastError();
}

template <class T>
int param_grads_t(const void* G, const void* U, void* dK, void* db, const ConvDims& d,
                  cudaStream_t st) {
  const int e = launch_wgrad<T>(in<T>(G), in<T>(U), d, static_cast<T*>(dK), st);
  if (e != cudaSuccess) return e;
  const auto brows = static_cast<unsigned>(kern::conv_reduction_grid(d.m * d.C));
  conv_bgrad_kernel<T><<<brows, kern::kConvThreads, 0, st>>>(in<T>(G), d, static_cast<T*>(db));
  return cudaGetLastError();
}

// The device is usable and there is work: 0 and *go true; else the error (or 0, no work).
int ready(bool work, bool* go) {
  const int e = check_device();
  *go = e == 0 && work;
  return e;
}

}  // namespace

int conv_direct_step(int dtype, int act, const void* U, const void* K, const void* b,
                     const void* h, void* out, const ConvShape& s, std::uintptr_t stream) {
  const ConvDims d = dims(s);
  bool go = false;
  const int e = ready(d.size() > 0, &go);
  if (!go) return e;
  return dtype == kDeviceF64 ? step_t<double>(act, U, K, b, h, out, d, as_stream(stream))
                             : step_t<float>(act, U, K, b, h, out, d, as_stream(stream));
}

int conv_direct_g(int dtype, int act, const void* Wa, const void* U, const void* K,
                  const void* b, const void* h, void* G, const ConvShape& s,
                  std::uintptr_t stream) {
  const ConvDims d = dims(s);
  bool go = false;
  const int e = ready(d.size() > 0, &go);
  if (!go) return e;
  return dtype == kDeviceF64 ? g_t<double>(act, Wa, U, K, b, h, G, d, as_stream(stream))
                             : g_t<float>(act, Wa, U, K, b, h, G, d, as_stream(stream));
}

int conv_direct_transpose_add(int dtype, const void* Wa, const void* G, const void* K,
                              void* out, const ConvShape& s, std::uintptr_t stream) {
  const ConvDims d = dims(s);
  bool go = false;
  const int e = ready(d.size() > 0, &go);
  if (!go) return e;
  return dtype == kDeviceF64 ? transpose_add_t<double>(Wa, G, K, out, d, as_stream(stream))
                             : transpose_add_t<float>(Wa, G, K, out, d, as_stream(stream));
}

int conv_direct_param_grads(int dtype, const void* G, const void* U, void* dK, void* db,
                            const ConvShape& s, std::uintptr_t stream) {
  const ConvDims d = dims(s);
  bool go = false;
  const int e = ready(d.m * d.C > 0, &go);
  if (!go) return e;
  return dtype == kDeviceF64 ? param_grads_t<double>(G, U, dK, db, d, as_stream(stream))
                             : param_grads_t<float>(G, U, dK, db, d, as_stream(stream));
}

}  // namespace cuda
}  // namespace braidpy
