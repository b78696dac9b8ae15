// Arithmetic of braidpy's direct convolution steps ("cuda-direct" conv backend),
// single-sourced like kernels.hpp: __host__ __device__ under nvcc, plain C++ under
// g++, so the C++ tests and braidpy._core's host twins run what the GPU runs.
//
// Why a direct convolution: a layer-parallel ResNet's conv step is small (8-16
// channels, 3x3) and MGRIT batches the k-th step of m intervals, each with its own
// kernel. cuDNN's grouped convolution of that shape ran at a few percent of the
// GPU's float64 rate on an H200 (README), while one output element is C*k*k
// multiply-adds on neighbouring inputs: one thread per output, the step's bias,
// activation and residual update in the same pass, is one kernel per step.
//
// Layouts (C-contiguous): states and adjoints (m, N, C, H, W); kernels (m, C, C, k, k)
// (output channel, then input channel); biases (m, C); step sizes (m). k odd, zero
// "same" padding p = k/2, cross-correlation (cuDNN's and PyTorch's convention).
#pragma once

#include "kernels.hpp"

namespace braidpy {
namespace kern {

// Largest kernel size of the weight-gradient kernel (its per-thread accumulators).
constexpr int kConvMaxK = 7;
// Threads per block of the reductions (weight and bias gradients): the partial sums and
// their tree are fixed by this number, so results never depend on the launch.
constexpr int kConvThreads = 256;

struct ConvDims {
  Index m, N, C, H, W, k;
  BRAIDPY_HD Index plane() const { return H * W; }
  BRAIDPY_HD Index size() const { return m * N * C * H * W; }
};

// (interval, sample, channel, y, x) of element i of a stacked state.
struct ConvAt {
  Index iv, n, c, y, x;
};

BRAIDPY_HD inline ConvAt conv_decode(Index i, const ConvDims& d) {
  ConvAt a;
  a.x = i % d.W;
  i /= d.W;
  a.y = i % d.H;
  i /= d.H;
  a.c = i % d.C;
  i /= d.C;
  a.n = i % d.N;
  a.iv = i / d.N;
  return a;
}

// sum_{c, dy, dx} K[iv, o, c, dy, dx] * X[iv, n, c, y + dy - p, x + dx - p]: output channel
// o = at.c at (at.y, at.x). Fixed order c, dy, dx; one rounding per operation.
template <class T>
BRAIDPY_HD inline T conv_value(const T* X, const T* K, const ConvAt& at, const ConvDims& d) {
  const Index p = d.k / 2, hw = d.plane();
  T acc = T(0);
  for (Index c = 0; c < d.C; ++c) {
    const T* xs = X + ((at.iv * d.N + at.n) * d.C + c) * hw;
    const T* ks = K + ((at.iv * d.C + at.c) * d.C + c) * d.k * d.k;
    for (Index dy = 0; dy < d.k; ++dy) {
      const Index yy = at.y + dy - p;
      if (yy < 0 || yy >= d.H) continue;
      for (Index dx = 0; dx < d.k; ++dx) {
        const Index xx = at.x + dx - p;
        if (xx < 0 || xx >= d.W) continue;
        acc = acc + ks[dy * d.k + dx] * xs[yy * d.W + xx];
      }
    }
  }
  return acc;
}

// The convolution's transpose (its input VJP): sum_{o, dy, dx} K[iv, o, c, dy, dx] *
// G[iv, n, o, y - dy + p, x - dx + p] for input channel c = at.c.
template <class T>
BRAIDPY_HD inline T conv_transpose_value(const T* G, const T* K, const ConvAt& at,
                                         const ConvDims& d) {
  const Index p = d.k / 2, hw = d.plane();
  T acc = T(0);
  for (Index o = 0; o < d.C; ++o) {
    const T* gs = G + ((at.iv * d.N + at.n) * d.C + o) * hw;
    const T* ks = K + ((at.iv * d.C + o) * d.C + at.c) * d.k * d.k;
    for (Index dy = 0; dy < d.k; ++dy) {
      const Index yy = at.y - dy + p;
      if (yy < 0 || yy >= d.H) continue;
      for (Index dx = 0; dx < d.k; ++dx) {
        const Index xx = at.x - dx + p;
        if (xx < 0 || xx >= d.W) continue;
        acc = acc + ks[dy * d.k + dx] * gs[yy * d.W + xx];
      }
    }
  }
  return acc;
}

// act'(z) as braidpy.nn.activations computes it: tanh: 1 - tanh(z)^2; relu: 1 where
// z > 0, else 0.
template <class T>
BRAIDPY_HD inline T activate_derivative(int act, T z) {
  if (act == kActTanh) {
    const T t = std::tanh(z);
    return T(1) - t * t;
  }
  return z > T(0) ? T(1) : T(0);
}

// Element i of the forward step out = U + h * act(conv(U, K) + b).
template <class T>
BRAIDPY_HD inline void conv_step_at(Index i, const T* U, const T* K, const T* b, const T* h,
                                    int act, const ConvDims& d, T* out) {
  const ConvAt at = conv_decode(i, d);
  const T z = conv_value(U, K, at, d) + b[at.iv * d.C + at.c];
  out[i] = U[i] + h[at.iv] * activate(act, z);
}

// Element i of G = h * (W * act'(conv(U, K) + b)): the adjoint's and the gradient's
// common factor (W the adjoint state).
template <class T>
BRAIDPY_HD inline void conv_step_g_at(Index i, const T* Wa, const T* U, const T* K,
                                      const T* b, const T* h, int act, const ConvDims& d,
                                      T* G) {
  const ConvAt at = conv_decode(i, d);
  const T z = conv_value(U, K, at, d) + b[at.iv * d.C + at.c];
  G[i] = h[at.iv] * (Wa[i] * activate_derivative(act, z));
}

// Element i of the adjoint step out = W + conv^T(G, K).
template <class T>
BRAIDPY_HD inline void conv_transpose_add_at(Index i, const T* Wa, const T* G, const T* K,
                                             const ConvDims& d, T* out) {
  out[i] = Wa[i] + conv_transpose_value(G, K, conv_decode(i, d), d);
}

// Weight gradient dK[iv, o, c, dy, dx] = sum_{n, y, x} G[iv, n, o, y, x] *
// U[iv, n, c, y + dy - p, x + dx - p], one block per row (iv, o, c, dy) of dK: thread t
// of nt sums the positions q = t, t + nt, ... (q = (n*H + y)*W + x) in that order, in
// double, one partial per dx in parts[dx * nt + t]; then the tree (tree_step per dx).
template <class T>
BRAIDPY_HD inline void conv_wgrad_part(const T* G, const T* U, Index row, const ConvDims& d,
                                       int t, int nt, double* parts) {
  const Index dy = row % d.k;
  Index r = row / d.k;
  const Index c = r % d.C;
  r /= d.C;
  const Index o = r % d.C;
  const Index iv = r / d.C;
  const Index p = d.k / 2, hw = d.plane(), positions = d.N * hw;
  double acc[kConvMaxK];
  for (int dx = 0; dx < kConvMaxK; ++dx) acc[dx] = 0.0;
  for (Index q = t; q < positions; q += nt) {
    const Index n = q / hw, yx = q - n * hw, y = yx / d.W, x = yx - y * d.W;
    const Index yy = y + dy - p;
    if (yy < 0 || yy >= d.H) continue;
    const double g = static_cast<double>(G[((iv * d.N + n) * d.C + o) * hw + yx]);
    const T* us = U + ((iv * d.N + n) * d.C + c) * hw + yy * d.W;
    for (int dx = 0; dx < kConvMaxK; ++dx) {
      const Index xx = x + dx - p;
      if (dx < d.k && xx >= 0 && xx < d.W) acc[dx] += g * static_cast<double>(us[xx]);
    }
  }
  for (int dx = 0; dx < kConvMaxK; ++dx)
    if (dx < d.k) parts[dx * nt + t] = acc[dx];
}

// Bias gradient db[iv, o] = sum_{n, y, x} G[iv, n, o, y, x]: thread t's partial (as above).
template <class T>
BRAIDPY_HD inline double conv_bgrad_part(const T* G, Index row, const ConvDims& d, int t,
                                         int nt) {
  const Index o = row % d.C, iv = row / d.C, hw = d.plane(), positions = d.N * hw;
  double acc = 0.0;
  for (Index q = t; q < positions; q += nt) {
    const Index n = q / hw, yx = q - n * hw;
    acc += static_cast<double>(G[((iv * d.N + n) * d.C + o) * hw + yx]);
  }
  return acc;
}

// The reductions' results on the host, in the kernels' order (kConvThreads partials, then
// the tree nt/2 ... 1): what conv_wgrad's and conv_bgrad's blocks compute.
template <class T>
inline void conv_wgrad_host(const T* G, const T* U, const ConvDims& d, T* dK) {
  double parts[kConvMaxK * kConvThreads];
  const Index rows = d.m * d.C * d.C * d.k;
  for (Index row = 0; row < rows; ++row) {
    for (int t = 0; t < kConvThreads; ++t) conv_wgrad_part(G, U, row, d, t, kConvThreads, parts);
    for (Index dx = 0; dx < d.k; ++dx) {
      double* ps = parts + dx * kConvThreads;
      for (int s = kConvThreads / 2; s > 0; s >>= 1)
        for (int t = 0; t < s; ++t) tree_step(ps, t, s);
      dK[row * d.k + dx] = static_cast<T>(ps[0]);
    }
  }
}

template <class T>
inline void conv_bgrad_host(const T* G, const ConvDims& d, T* db) {
  double parts[kConvThreads];
  for (Index row = 0; row < d.m * d.C; ++row) {
    for (int t = 0; t < kConvThreads; ++t) parts[t] = conv_bgrad_part(G, row, d, t, kConvThreads);
    for (int s = kConvThreads / 2; s > 0; s >>= 1)
      for (int t = 0; t < s; ++t) tree_step(parts, t, s);
    db[row] = static_cast<T>(parts[0]);
  }
}

}  // namespace kern
}  // namespace braidpy
