// Arithmetic of the device-block kernels, single-sourced: every function here is
// __host__ __device__ under nvcc and plain C++ under g++, so the C++ tests
// (csrc/tests/kernels_test.cpp) run exactly what the GPU runs, on the host.
// The __global__ kernels in kernels.cu only pick indices and call these.
// No CUDA header is included; nothing here knows Python.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define BRAIDPY_HD __host__ __device__
#else
#define BRAIDPY_HD
#endif

namespace braidpy {
namespace kern {

using Index = std::int64_t;

// Threads per row in row_norms: the partial sums and their tree are fixed by
// this number, so a row's norm never depends on how many rows a launch has.
constexpr int kNormThreads = 256;

// y <- a*x + b*y for one element, the cases and operation order of the NumPy
// fast path (csrc/bindings/array_fast.cpp) and braidpy.backends._axpby:
// a == 0 scales (or leaves y), b == 1 adds a*x, otherwise b*y + a*x. T is the
// state's precision; a and b are already rounded to T (NumPy's weak scalars).
template <class T>
BRAIDPY_HD inline T axpby_value(T a, T x, T b, T y) {
  if (a == T(0)) return b == T(1) ? y : b * y;
  if (b == T(1)) return y + a * x;
  return b * y + a * x;
}

// Element i of y <- a*x + b*y; x may be y (each element is read, then written once).
template <class T>
BRAIDPY_HD inline void axpby_at(Index i, T a, const T* x, T b, T* y) {
  y[i] = axpby_value(a, x[i], b, y[i]);
}

// Element i of the batched sum ys[r] <- a*xs[r] + b*ys[r] over rows of len elements:
// the element of axpby_at in pair r (the pairs' rows never overlap; xs[r] may be ys[r]).
template <class T>
BRAIDPY_HD inline void axpby_rows_at(Index i, T a, const T* const* xs, T b, T* const* ys,
                                     Index len) {
  const Index r = i / len;
  const Index j = i - r * len;
  ys[r][j] = axpby_value(a, xs[r][j], b, ys[r][j]);
}

// Activations the conv-step kernels know (braidpy.nn.activations' tanh, relu and
// smooth_relu with its default eps; relu as where(z > 0, z, 0): NaN gives 0). The fused
// epilogue takes tanh and relu, the direct conv kernels all three.
enum StepActivation : int { kActTanh = 1, kActRelu = 2, kActSmoothRelu = 3 };

// braidpy.nn.activations.SMOOTH_RELU_EPS.
constexpr double kSmoothReluEps = 0.1;

// smooth_relu's operations as NumPy does them: s = clip(z, -eps, eps) + eps, then
// z > eps ? z : s * s * (1 / (4 eps)); eps and 1 / (4 eps) computed in double and
// rounded to T once (NumPy's weak scalars). A product by the reciprocal, not a
// division: a vector division costs as much as the rest of a dense step's pass
// (braidpy.nn.activations says the same). Both pieces are computed and one selected,
// with no branch, so that the host compiler vectorizes the loop (a branch on random
// signs mispredicted half the time: 4x slower at 5000 x 8). The same operations, so the
// same bits.
constexpr double kSmoothReluQuarterInverse = 1.0 / (4 * kSmoothReluEps);
constexpr double kSmoothReluHalfInverse = 1.0 / (2 * kSmoothReluEps);

template <class T>
BRAIDPY_HD inline T smooth_relu_value(T z) {
  const T eps = T(kSmoothReluEps);
  const T c = z > eps ? eps : z;
  const T s = (c < -eps ? -eps : c) + eps;
  const T blend = s * s * T(kSmoothReluQuarterInverse);
  return z > eps ? z : blend;
}

template <class T>
BRAIDPY_HD inline T activate(int act, T z) {
  if (act == kActSmoothRelu) return smooth_relu_value(z);
  return act == kActTanh ? std::tanh(z) : (z > T(0) ? z : T(0));
}

// act'(z) as braidpy.nn.activations computes it: tanh: 1 - tanh(z)^2; relu: 1 where
// z > 0, else 0; smooth_relu: (clip(z, -eps, eps) + eps) * (1 / (2 eps)).
template <class T>
BRAIDPY_HD inline T activate_derivative(int act, T z) {
  if (act == kActTanh) {
    const T t = std::tanh(z);
    return T(1) - t * t;
  }
  if (act == kActSmoothRelu) {
    const T eps = T(kSmoothReluEps);
    const T c = z > eps ? eps : z;
    return ((c < -eps ? -eps : c) + eps) * T(kSmoothReluHalfInverse);
  }
  return z > T(0) ? T(1) : T(0);
}

// A dense residual step's last operations on one element, given its product
// z = (u K^T)[r, j] before the bias: the forward value u + h * act(z + b), and the
// adjoint pulled back through the activation, g = (act'(z + b) * w) * h. The
// operations and their order are braidpy.nn.dense's NumPy code (z += b, act, *h, +u;
// act', *w, *h), one rounding each, so the fused and unfused kernels agree bit for
// bit wherever the activation's own value does.
template <class T>
BRAIDPY_HD inline T dense_step_value(int act, T u, T z, T b, T h) {
  return u + h * activate(act, z + b);
}

template <class T>
BRAIDPY_HD inline T dense_slope_value(int act, T w, T z, T b, T h) {
  return (activate_derivative(act, z + b) * w) * h;
}

// Element i of a dense step's epilogue on the GPU, over Z = u K^T shaped (m, rows, width)
// (m = 1 for a single step): its interval iv and column j pick the bias b[iv, j] and the
// step size h[iv] (h null: the single step's h0). out[i] <- X[i] + h * act(Z[i] + b)
// (forward, X = U) or (act'(Z[i] + b) * X[i]) * h (Slope, X = W); out may be Z or X
// (each element is read, then written once).
template <class T, bool Slope>
BRAIDPY_HD inline void dense_finish_at(Index i, int act, const T* Z, const T* X, const T* b,
                                       const T* h, T h0, Index rows, Index width, T* out) {
  const Index j = i % width;
  const Index iv = i / (rows * width);
  const T hv = h != nullptr ? h[iv] : h0;
  const T bv = b[iv * width + j];
  out[i] = Slope ? dense_slope_value(act, X[i], Z[i], bv, hv)
                 : dense_step_value(act, X[i], Z[i], bv, hv);
}

// Element i of a batched conv step's epilogue, out = U + h * act(Z), Z = Y + b: U and
// out (m, N, C, HW) in braidpy's interval-major layout, Y the grouped convolution's
// (N, m*C, HW) output (channel block iv is interval iv), b (m, C), h (m). The
// operations and their order are those of the unfused array code (Y+b, act, h*a, U+s),
// one rounding each (built without FMA contraction), so the bits are the same.
template <class T>
BRAIDPY_HD inline void step_epilogue_at(Index i, const T* U, const T* Y, const T* b,
                                        const T* h, int act, Index m, Index N, Index C,
                                        Index HW, T* out) {
  const Index p = i % HW;
  Index r = i / HW;
  const Index c = r % C;
  r /= C;
  const Index n = r % N;
  const Index iv = r / N;
  const T z = Y[((n * m + iv) * C + c) * HW + p] + b[iv * C + c];
  const T s = h[iv] * activate(act, z);
  out[i] = U[i] + s;
}

// Element i of a stacked block of nrows rows of len elements: row r copies
// srcs[r], or is zero where srcs[r] is null (a placeholder row).
template <class T>
BRAIDPY_HD inline void gather_at(Index i, const T* const* srcs, Index len, T* block) {
  const Index r = i / len;
  const Index j = i - r * len;
  const T* s = srcs[r];
  block[i] = s != nullptr ? s[j] : T(0);
}

// Thread t's part of a row's sum of squares: elements t, t+nt, t+2nt, ... in
// that order, accumulated in double (also for float rows).
template <class T>
BRAIDPY_HD inline double sumsq_part(const T* row, Index len, int t, int nt) {
  double acc = 0.0;
  for (Index j = t; j < len; j += nt) {
    const double v = static_cast<double>(row[j]);
    acc += v * v;
  }
  return acc;
}

// One level of the fixed reduction tree: thread t < s adds partial t+s to t.
BRAIDPY_HD inline void tree_step(double* parts, int t, int s) {
  if (t < s) parts[t] = parts[t] + parts[t + s];
}

// The norm from a row's reduced sum of squares.
BRAIDPY_HD inline double norm_from_sumsq(double s) { return std::sqrt(s); }

// A row's norm in the kernel's order, on the host: what row_norms' block for
// that row computes (kNormThreads partial sums, then the tree s = nt/2 ... 1).
template <class T>
inline double row_norm_host(const T* row, Index len) {
  double parts[kNormThreads];
  for (int t = 0; t < kNormThreads; ++t) parts[t] = sumsq_part(row, len, t, kNormThreads);
  for (int s = kNormThreads / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; ++t) tree_step(parts, t, s);
  return norm_from_sumsq(parts[0]);
}

}  // namespace kern
}  // namespace braidpy
