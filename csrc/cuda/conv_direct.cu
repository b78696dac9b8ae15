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

// One block of kern::kConvThreads threads per row (iv, o, c, dy) of dK.
template <class T>
__global__ void conv_wgrad_kernel(const T* G, const T* U, ConvDims d, T* dK) {
  __shared__ double parts[kern::kConvMaxK * kern::kConvThreads];
  const int t = static_cast<int>(threadIdx.x);
  const Index row = blockIdx.x;
  kern::conv_wgrad_part(G, U, row, d, t, kern::kConvThreads, parts);
  __syncthreads();
  for (int s = kern::kConvThreads / 2; s > 0; s >>= 1) {
    for (Index dx = 0; dx < d.k; ++dx) kern::tree_step(parts + dx * kern::kConvThreads, t, s);
    __syncthreads();
  }
  if (t < d.k) dK[row * d.k + t] = static_cast<T>(parts[t * kern::kConvThreads]);
}

// One block per row (iv, o) of db.
template <class T>
__global__ void conv_bgrad_kernel(const T* G, ConvDims d, T* db) {
  __shared__ double parts[kern::kConvThreads];
  const int t = static_cast<int>(threadIdx.x);
  parts[t] = kern::conv_bgrad_part(G, static_cast<Index>(blockIdx.x), d, t, kern::kConvThreads);
  __syncthreads();
  for (int s = kern::kConvThreads / 2; s > 0; s >>= 1) {
    kern::tree_step(parts, t, s);
    __syncthreads();
  }
  if (t == 0) db[blockIdx.x] = static_cast<T>(parts[0]);
}

ConvDims dims(const ConvShape& s) { return ConvDims{s.m, s.N, s.C, s.H, s.W, s.k}; }

}  // namespace

int conv_direct_step(int dtype, int act, const void* U, const void* K, const void* b,
                     const void* h, void* out, const ConvShape& s, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const ConvDims d = dims(s);
  if (e != cudaSuccess || d.size() == 0) return e;
  const cudaStream_t st = as_stream(stream);
  if (dtype == kDeviceF64 && kern::conv_tiled(d, sizeof(double)))
    return launch_tiled<double>(kern::kConvStep, static_cast<const double*>(U),
                                static_cast<const double*>(K), d, static_cast<const double*>(U),
                                nullptr, static_cast<const double*>(b),
                                static_cast<const double*>(h), act, static_cast<double*>(out),
                                st);
  if (dtype == kDeviceF32 && kern::conv_tiled(d, sizeof(float)))
    return launch_tiled<float>(kern::kConvStep, static_cast<const float*>(U),
                               static_cast<const float*>(K), d, static_cast<const float*>(U),
                               nullptr, static_cast<const float*>(b),
                               static_cast<const float*>(h), act, static_cast<float*>(out), st);
  if (dtype == kDeviceF64)
    conv_step_kernel<double><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const double*>(U), static_cast<const double*>(K),
        static_cast<const double*>(b), static_cast<const double*>(h), act, d,
        static_cast<double*>(out));
  else
    conv_step_kernel<float><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const float*>(U), static_cast<const float*>(K),
        static_cast<const float*>(b), static_cast<const float*>(h), act, d,
        static_cast<float*>(out));
  return cudaGetLastError();
}

int conv_direct_g(int dtype, int act, const void* Wa, const void* U, const void* K,
                  const void* b, const void* h, void* G, const ConvShape& s,
                  std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const ConvDims d = dims(s);
  if (e != cudaSuccess || d.size() == 0) return e;
  const cudaStream_t st = as_stream(stream);
  if (dtype == kDeviceF64 && kern::conv_tiled(d, sizeof(double)))
    return launch_tiled<double>(kern::kConvG, static_cast<const double*>(U),
                                static_cast<const double*>(K), d, nullptr,
                                static_cast<const double*>(Wa), static_cast<const double*>(b),
                                static_cast<const double*>(h), act, static_cast<double*>(G), st);
  if (dtype == kDeviceF32 && kern::conv_tiled(d, sizeof(float)))
    return launch_tiled<float>(kern::kConvG, static_cast<const float*>(U),
                               static_cast<const float*>(K), d, nullptr,
                               static_cast<const float*>(Wa), static_cast<const float*>(b),
                               static_cast<const float*>(h), act, static_cast<float*>(G), st);
  if (dtype == kDeviceF64)
    conv_step_g_kernel<double><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const double*>(Wa), static_cast<const double*>(U),
        static_cast<const double*>(K), static_cast<const double*>(b),
        static_cast<const double*>(h), act, d, static_cast<double*>(G));
  else
    conv_step_g_kernel<float><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const float*>(Wa), static_cast<const float*>(U),
        static_cast<const float*>(K), static_cast<const float*>(b),
        static_cast<const float*>(h), act, d, static_cast<float*>(G));
  return cudaGetLastError();
}

int conv_direct_transpose_add(int dtype, const void* Wa, const void* G, const void* K,
                              void* out, const ConvShape& s, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const ConvDims d = dims(s);
  if (e != cudaSuccess || d.size() == 0) return e;
  const cudaStream_t st = as_stream(stream);
  if (dtype == kDeviceF64 && kern::conv_tiled(d, sizeof(double)))
    return launch_tiled<double>(kern::kConvTransposeAdd, static_cast<const double*>(G),
                                static_cast<const double*>(K), d, nullptr,
                                static_cast<const double*>(Wa), nullptr, nullptr, 0,
                                static_cast<double*>(out), st);
  if (dtype == kDeviceF32 && kern::conv_tiled(d, sizeof(float)))
    return launch_tiled<float>(kern::kConvTransposeAdd, static_cast<const float*>(G),
                               static_cast<const float*>(K), d, nullptr,
                               static_cast<const float*>(Wa), nullptr, nullptr, 0,
                               static_cast<float*>(out), st);
  if (dtype == kDeviceF64)
    conv_transpose_add_kernel<double><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const double*>(Wa), static_cast<const double*>(G),
        static_cast<const double*>(K), d, static_cast<double*>(out));
  else
    conv_transpose_add_kernel<float><<<blocks_for(d.size()), kThreads, 0, st>>>(
        static_cast<const float*>(Wa), static_cast<const float*>(G),
        static_cast<const float*>(K), d, static_cast<float*>(out));
  return cudaGetLastError();
}

int conv_direct_param_grads(int dtype, const void* G, const void* U, void* dK, void* db,
                            const ConvShape& s, std::uintptr_t stream) {
  cudaError_t e = static_cast<cudaError_t>(check_device());
  const ConvDims d = dims(s);
  if (e != cudaSuccess || d.m * d.C == 0) return e;
  const cudaStream_t st = as_stream(stream);
  const auto wrows = static_cast<unsigned>(d.m * d.C * d.C * d.k);
  const auto brows = static_cast<unsigned>(d.m * d.C);
  if (dtype == kDeviceF64) {
    conv_wgrad_kernel<double><<<wrows, kern::kConvThreads, 0, st>>>(
        static_cast<const double*>(G), static_cast<const double*>(U), d,
        static_cast<double*>(dK));
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    conv_bgrad_kernel<double><<<brows, kern::kConvThreads, 0, st>>>(
        static_cast<const double*>(G), d, static_cast<double*>(db));
  } else {
    conv_wgrad_kernel<float><<<wrows, kern::kConvThreads, 0, st>>>(
        static_cast<const float*>(G), static_cast<const float*>(U), d, static_cast<float*>(dK));
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    conv_bgrad_kernel<float><<<brows, kern::kConvThreads, 0, st>>>(
        static_cast<const float*>(G), d, static_cast<float*>(db));
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace braidpy
