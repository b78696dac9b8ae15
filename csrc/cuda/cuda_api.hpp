// What kernels.cu (compiled by nvcc) offers the rest of braidpy._cuda (compiled
// by the host compiler): the device-ops table and the runtime's facts. No CUDA
// header is needed to use it; errors are cudaError_t codes as int.
#pragma once

#include "device_ops.hpp"

namespace braidpy {
namespace cuda {

// The table handed to braidpy._core (device_ops.hpp).
const DeviceOps* device_ops();
// cudaRuntimeGetVersion (e.g. 13000); works without a driver.
int runtime_version(int* version);
// cudaDriverGetVersion: 0 when no driver is installed.
int driver_version(int* version);
// cudaGetDeviceCount; 35 (no driver) and 100 (no device) mean "no GPU".
int device_count(int* count);
// Name and compute capability of device `dev`.
int device_properties(int dev, char* name, int name_len, int* major, int* minor);
// The current device is usable (0) or why not.
int check_device();
// cudaGetDevice: the device cuDNN handles are made for.
int current_device(int* dev);
// out <- U + h * act(Y + b) for a batched conv step (kern::step_epilogue_at): U, out of
// m*N*C*HW elements, Y the grouped convolution's output, b (m, C), h (m); dtype a
// DeviceDtype, act a kern::StepActivation. One kernel on `stream`.
int step_epilogue(int dtype, int act, const void* U, const void* Y, const void* b,
                  const void* h, void* out, std::int64_t m, std::int64_t N, std::int64_t C,
                  std::int64_t HW, std::uintptr_t stream);
// The elementwise half of a dense residual step (kern::dense_finish_at), after the
// product Z = u K^T (cuBLAS): out <- X + h * act(Z + b) (forward, X = U) or, with slope,
// out <- (act'(Z + b) * X) * h (X = W). Z, X, out of m*rows*width elements (out may be Z
// or X), b (m, width), h (m,) or null for one step of size h0. One kernel on `stream`.
int dense_finish(int dtype, bool slope, int act, const void* Z, const void* X, const void* b,
                 const void* h, double h0, void* out, std::int64_t m, std::int64_t rows,
                 std::int64_t width, std::uintptr_t stream);

// The direct convolution steps (conv_direct.hpp; shapes there): stacked states of
// m intervals, N samples, C channels, H x W; kernels k x k (k odd, k <= kConvMaxK).
struct ConvShape {
  std::int64_t m, N, C, H, W, k;
};
// out <- U + h * act(conv(U, K) + b): a forward step of every interval, one kernel.
int conv_direct_step(int dtype, int act, const void* U, const void* K, const void* b,
                     const void* h, void* out, const ConvShape& s, std::uintptr_t stream);
// G <- h * (W * act'(conv(U, K) + b)): the adjoint's and the gradient's common factor.
int conv_direct_g(int dtype, int act, const void* W, const void* U, const void* K,
                  const void* b, const void* h, void* G, const ConvShape& s,
                  std::uintptr_t stream);
// out <- W + conv^T(G, K): the adjoint step after conv_direct_g.
int conv_direct_transpose_add(int dtype, const void* W, const void* G, const void* K,
                              void* out, const ConvShape& s, std::uintptr_t stream);
// dK, db <- the parameter gradients from G and U (fixed-order reductions, two kernels).
int conv_direct_param_grads(int dtype, const void* G, const void* U, void* dK, void* db,
                            const ConvShape& s, std::uintptr_t stream);

}  // namespace cuda
}  // namespace braidpy
