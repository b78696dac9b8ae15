// Dense residual steps of width at most 32 on the host, product included, one pass per
// sample row: z = u K^T, the bias, the activation and the step update (or, backward,
// g = h w act'(z + b), then w + g K and/or the parameter gradient g^T u, sum g), with
// the row's operands in registers or L1 and each row of the states read and written
// once. For widths this small BLAS's product costs more than the rest of the step
// (OpenBLAS's dgemm_small_kernel on (5000, 8) x (8, 8)), and writing it out costs a
// second pass. Plain C++ (no Python): host_dense.cpp binds it and compiles it twice,
// for the baseline x86-64 and for AVX2.
//
// The order of the operations is fixed and documented so that a NumPy reference with the
// same explicit order reproduces the bits (tests/test_nn_dense.py), whatever the vector
// width the compiler picks: every lane of a vector does one column's scalar operations,
// one rounding each (the build forbids FMA contraction, -ffp-contract=off):
// - product: z[j] = u[0] K[j, 0], then z[j] = z[j] + u[k] K[j, k] for k = 1, 2, ...;
// - forward: u[j] + h act(z[j] + b[j]) (kern::dense_step_value);
// - slope: g[j] = (act'(z[j] + b[j]) w[j]) h (kern::dense_slope_value);
// - adjoint: s[i] = g[0] K[0, i], then s[i] = s[i] + g[j] K[j, i] for j = 1, 2, ...;
//   the result w[i] + s[i];
// - gradient: dK[j, k] and db[j] start at 0 and add g[j] u[k] and g[j] row by row,
//   rows ascending (one interval's rows in one accumulator: no blocking by rows).
#pragma once

// Row<T, N>'s vectors never cross a call boundary (always inlined): no ABI concern. GCC
// reports it where the templates are instantiated, at the end of the including file, so
// the warning stays off from here on (no push/pop).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "../cuda/kernels.hpp"

#if defined(__GNUC__)
#define BRAIDPY_ROWS_INLINE inline __attribute__((always_inline))
#else
#define BRAIDPY_ROWS_INLINE inline
#endif

namespace braidpy {
namespace dense_rows {

using kern::Index;

// The widest layer these kernels take; wider ones keep BLAS's product.
constexpr Index kMaxWidth = 32;

// What one call computes. The last three use or keep the activation's slopes
// D = act'(U K^T + b), which depend on the primal states and weights only: MGRIT's
// adjoint visits each layer several times per gradient with both fixed, so the first
// visit keeps them (kAdjointKeep) and the others skip the product U K^T (kAdjointGiven,
// kGradientGiven). g = (D w) h is the slope's own order (kern::dense_slope_value), so
// the results have the same bits either way.
enum Mode : int {
  kForward = 0,
  kAdjoint = 1,
  kGradient = 2,
  kAdjointGradient = 3,
  kAdjointKeep = 4,
  kAdjointGiven = 5,
  kGradientGiven = 6
};

// One call's operands: m intervals of rows x width states, each interval's state
// C-contiguous. Per interval iv: U + iv su (and W + iv sw) (rows, width), K[iv] (width,
// width), b[iv] (width,), h[iv]; out + iv so (rows, width) receives the step or the
// adjoint (it may be U, resp. W, itself: each row is read whole before it is written);
// dK[iv], db[iv] the gradient; D + iv sd the slopes (written by kAdjointKeep, read by
// the Given modes). The interval strides su, sw, so, sd (in elements, any sign) let a
// stack be a strided view, such as every cf-th state of a stored trajectory.
template <class T>
struct Job {
  const T* U;
  const T* W;
  const T* K;
  const T* b;
  const T* h;
  T* out;
  T* dK;
  T* db;
  Index m, rows, width;
  Index su, sw, so;
  T* D = nullptr;
  Index sd = 0;
};

// KT <- K^T (n x n): the product then reads a row of KT per input column.
template <class T>
BRAIDPY_ROWS_INLINE void transpose(const T* K, T* KT, Index n) {
  for (Index j = 0; j < n; ++j)
    for (Index k = 0; k < n; ++k) KT[k * n + j] = K[j * n + k];
}

// z <- u M for one row (M = K^T: the product u K^T), k ascending (see the top).
template <class T>
BRAIDPY_ROWS_INLINE void product(const T* u, const T* M, T* z, Index n) {
  if (n == 0) return;
  for (Index j = 0; j < n; ++j) z[j] = u[0] * M[j];
  for (Index k = 1; k < n; ++k) {
    const T uk = u[k];
    const T* mk = M + k * n;
    for (Index j = 0; j < n; ++j) z[j] = z[j] + uk * mk[j];
  }
}

// A row of N numbers (a power of two) as vectors of GCC's vector extension, at most 32
// bytes each: the compiler's own SLP vectorizer, given the unrolled row, mixed half and
// whole registers with shuffles (the product took twice BLAS's time). Each lane does
// the scalar operations above, so the bits are theirs; the baseline build splits each
// vector into SSE2 halves.
template <class T, int N>
struct Row {
  static constexpr int kBytes = N * int(sizeof(T)) < 32 ? N * int(sizeof(T)) : 32;
  static constexpr int kLanes = kBytes / int(sizeof(T));
  static constexpr int kVecs = N / kLanes;
  typedef T V __attribute__((vector_size(kBytes)));

  static BRAIDPY_ROWS_INLINE V load(const T* p) {
    V v;
    __builtin_memcpy(&v, p, sizeof(V));
    return v;
  }
  static BRAIDPY_ROWS_INLINE void store(T* p, const V& v) { __builtin_memcpy(p, &v, sizeof(V)); }
};

// For each of the count / N rows x of X (offset i): epilogue(i, z) with z = x M in
// vectors (row by row as product()), two rows at a time where their sums fit in
// registers (the loads of M serve both); row i's epilogue runs after both rows are read.
template <class T, int N, class F>
BRAIDPY_ROWS_INLINE void product_rows(const T* X, const T* M, Index count, F epilogue) {
  using R = Row<T, N>;
  using V = typename R::V;
  constexpr int kV = R::kVecs, kL = R::kLanes;
  Index i = 0;
  if constexpr (kV <= 4) {
    for (; i + 2 * N <= count; i += 2 * N) {
      const T* x0 = X + i;
      const T* x1 = x0 + N;
      V a[kV], c[kV];
      for (int v = 0; v < kV; ++v) {
        const V m = R::load(M + v * kL);
        a[v] = x0[0] * m;
        c[v] = x1[0] * m;
      }
      for (int k = 1; k < N; ++k) {
        for (int v = 0; v < kV; ++v) {
          const V m = R::load(M + k * N + v * kL);
          a[v] = a[v] + x0[k] * m;
          c[v] = c[v] + x1[k] * m;
        }
      }
      epilogue(i, a);
      epilogue(i + N, c);
    }
  }
  for (; i < count; i += N) {
    const T* x = X + i;
    V a[kV];
    for (int v = 0; v < kV; ++v) a[v] = x[0] * R::load(M + v * kL);
    for (int k = 1; k < N; ++k)
      for (int v = 0; v < kV; ++v) a[v] = a[v] + x[k] * R::load(M + k * N + v * kL);
    epilogue(i, a);
  }
}

// Z <- X M for the count / N rows of X.
template <class T, int N>
BRAIDPY_ROWS_INLINE void product_rows(const T* X, const T* M, T* Z, Index count) {
  using R = Row<T, N>;
  product_rows<T, N>(X, M, count, [Z](Index i, const typename R::V* a) {
    for (int v = 0; v < R::kVecs; ++v) R::store(Z + i + v * R::kLanes, a[v]);
  });
}

// gK <- gK + g^T u and gb <- gb + g for the count / N rows (g, u) of a tile, rows
// ascending, each sum one addition per row (see the top); two rows share each load and
// store of the sums.
template <class T, int N>
BRAIDPY_ROWS_INLINE void gradient_rows(const T* G, const T* U, T* gK, T* gb, Index count) {
  using R = Row<T, N>;
  using V = typename R::V;
  constexpr int kV = R::kVecs, kL = R::kLanes;
  Index i = 0;
  for (; i + 2 * N <= count; i += 2 * N) {
    const T* g0 = G + i;
    const T* g1 = g0 + N;
    V u0[kV], u1[kV];
    for (int v = 0; v < kV; ++v) {
      u0[v] = R::load(U + i + v * kL);
      u1[v] = R::load(U + i + N + v * kL);
    }
    for (int j = 0; j < N; ++j) {
      for (int v = 0; v < kV; ++v) {
        T* p = gK + j * N + v * kL;
        V acc = R::load(p);
        acc = acc + g0[j] * u0[v];
        acc = acc + g1[j] * u1[v];
        R::store(p, acc);
      }
    }
    for (int v = 0; v < kV; ++v) {
      V acc = R::load(gb + v * kL);
      acc = acc + R::load(g0 + v * kL);
      acc = acc + R::load(g1 + v * kL);
      R::store(gb + v * kL, acc);
    }
  }
  for (; i < count; i += N) {
    const T* g = G + i;
    for (int j = 0; j < N; ++j) {
      for (int v = 0; v < kV; ++v) {
        T* p = gK + j * N + v * kL;
        R::store(p, R::load(p) + g[j] * R::load(U + i + v * kL));
      }
    }
    for (int v = 0; v < kV; ++v)
      R::store(gb + v * kL, R::load(gb + v * kL) + R::load(g + v * kL));
  }
}

// gK <- gK + g^T u, gb <- gb + g over a tile: vectors for a compile-time width N, the
// scalar loops for any other.
template <class T, int N>
BRAIDPY_ROWS_INLINE void tile_gradient(const T* G, const T* U, T* gK, T* gb, Index count,
                                       Index n) {
  if constexpr (N > 0) {
    gradient_rows<T, N>(G, U, gK, gb, count);
  } else {
    for (Index i = 0; i < count; i += n) {
      const T* g = G + i;
      const T* u = U + i;
      for (Index j = 0; j < n; ++j) {
        const T gj = g[j];
        T* row = gK + j * n;
        for (Index k = 0; k < n; ++k) row[k] = row[k] + gj * u[k];
      }
      for (Index j = 0; j < n; ++j) gb[j] = gb[j] + g[j];
    }
  }
}

// Z <- X M over a tile of count numbers: the vector rows for a compile-time width N,
// product() row by row for any other (N = 0: width n).
template <class T, int N>
BRAIDPY_ROWS_INLINE void tile_product(const T* X, const T* M, T* Z, Index count, Index n) {
  if constexpr (N > 0) {
    product_rows<T, N>(X, M, Z, count);
  } else {
    for (Index i = 0; i < count; i += n) product(X + i, M, Z + i, n);
  }
}

// Elements per tile: the rows of a tile (at least one) go through each stage at once,
// their products, slopes or results in small arrays that stay in L1 (2 KiB of
// float64). Only the products are formed row by row; the activation runs as one flat
// loop over the tile, which the compiler vectorizes with its selects turned into blends
// (in one row's unrolled code they stayed branches: the step took twice as long).
constexpr Index kTile = 256;

// Rows per tile for width n.
constexpr Index tile_rows(Index n) { return n > 0 && n < kTile ? kTile / n : 1; }

// Bt <- b repeated over the rows of a tile: the flat loops read the bias as they read
// the states, one element per element.
template <class T>
BRAIDPY_ROWS_INLINE void tile_bias(const T* b, T* Bt, Index n) {
  const Index rows = tile_rows(n);
  for (Index r = 0; r < rows; ++r)
    for (Index j = 0; j < n; ++j) Bt[r * n + j] = b[j];
}

// o[i] <- value(i) for i < count, o apart from x (the caller checks): restrict lets the
// loop vectorize without a run-time overlap test.
template <class T, class F>
BRAIDPY_ROWS_INLINE void apart(const T* __restrict x, T* __restrict o, Index count, F value) {
  (void)x;
  for (Index i = 0; i < count; ++i) o[i] = value(i);
}

// One interval's forward steps: out <- U + h act(U K^T + b), a tile at a time. N: the
// width when it is a compile-time constant (the product in vectors), 0 for any width up
// to kMaxWidth. (Finishing each row in registers, the activation on vectors, took 8 %
// longer at (5000, 8): the flat loop over the tile keeps more divisions in flight.)
template <class T, int A, int N>
BRAIDPY_ROWS_INLINE void forward_interval(const T* U, const T* K, const T* b, T h, T* out,
                                          Index rows, Index width) {
  constexpr Index kCap = N ? N : kMaxWidth;
  const Index n = N ? N : width;
  T KT[kCap * kCap];
  transpose(K, KT, n);
  const Index per_tile = tile_rows(n);
  T Bt[kTile];
  T Z[kTile];
  tile_bias(b, Bt, n);
  for (Index r0 = 0; r0 < rows; r0 += per_tile) {
    const Index count = (rows - r0 < per_tile ? rows - r0 : per_tile) * n;
    const T* u = U + r0 * n;
    tile_product<T, N>(u, KT, Z, count, n);
    if (out == U) {  // in place: one pointer, so that the loop vectorizes unversioned
      T* x = out + r0 * n;
      for (Index i = 0; i < count; ++i)
        x[i] = kern::dense_step_value(A, x[i], Z[i], Bt[i], h);
    } else {
      apart<T>(u, out + r0 * n, count, [&](Index i) {
        return kern::dense_step_value(A, u[i], Z[i], Bt[i], h);
      });
    }
  }
}

// Where a backward pass gets the slopes act'(z + b): from the product (kFormed), from
// the product and kept in D (kKept), or read from D (kGiven: no product, no bias).
enum Slopes : int { kFormed = 0, kKept = 1, kGiven = 2 };

// One interval's backward: g = h W act'(U K^T + b) row by row; with Adjoint out <- W + g K,
// with Gradient dK <- g^T U and db <- sum_rows g (orders: see the top). From: where the
// slopes come from (D: the interval's, rows x width).
template <class T, int A, int N, bool Adjoint, bool Gradient, int From = kFormed>
BRAIDPY_ROWS_INLINE void backward_interval(const T* U, const T* W, const T* K, const T* b,
                                           T h, T* out, T* dK, T* db, Index rows,
                                           Index width, T* D = nullptr) {
  constexpr Index kCap = N ? N : kMaxWidth;
  constexpr Index kBuf = kTile > kCap ? kTile : kCap;
  const Index n = N ? N : width;
  const Index per_tile = tile_rows(n);
  T KT[kCap * kCap];
  T Bt[kBuf];
  T G[kBuf];
  T S[Adjoint && !N ? kBuf : 1];
  T gK[Gradient ? kCap * kCap : 1];
  T gb[Gradient ? kCap : 1];
  if constexpr (From != kGiven) {
    transpose(K, KT, n);
    tile_bias(b, Bt, n);
  }
  if constexpr (Gradient) {
    for (Index i = 0; i < n * n; ++i) gK[i] = T(0);
    for (Index j = 0; j < n; ++j) gb[j] = T(0);
  }
  for (Index r0 = 0; r0 < rows; r0 += per_tile) {
    const Index count = (rows - r0 < per_tile ? rows - r0 : per_tile) * n;
    const T* u = Gradient || From != kGiven ? U + r0 * n : nullptr;
    const T* w = W + r0 * n;
    if constexpr (From == kGiven) {  // (act'(z + b) w) h with act'(z + b) read from D
      const T* d = D + r0 * n;
      for (Index i = 0; i < count; ++i) G[i] = (d[i] * w[i]) * h;
    } else if constexpr (From == kKept) {
      tile_product<T, N>(u, KT, G, count, n);
      T* d = D + r0 * n;
      for (Index i = 0; i < count; ++i) {
        d[i] = kern::activate_derivative(A, G[i] + Bt[i]);
        G[i] = (d[i] * w[i]) * h;
      }
    } else {
      tile_product<T, N>(u, KT, G, count, n);
      for (Index i = 0; i < count; ++i)
        G[i] = kern::dense_slope_value(A, w[i], G[i], Bt[i], h);
    }
    if constexpr (Gradient) tile_gradient<T, N>(G, u, gK, gb, count, n);
    if constexpr (Adjoint) {
      // s = g K is the product with K^T's transpose: product() over K's rows
      T* o = out + r0 * n;
      if constexpr (N > 0) {  // w + s in registers; a row of W is read before it is written
        using R = Row<T, N>;
        using V = typename R::V;
        product_rows<T, N>(G, K, count, [&](Index i, const V* a) {
          for (int v = 0; v < R::kVecs; ++v) {
            const Index at = i + v * R::kLanes;
            R::store(o + at, R::load(w + at) + a[v]);
          }
        });
      } else {
        tile_product<T, N>(G, K, S, count, n);
        if (out == W) {  // in place, as forward_interval
          for (Index i = 0; i < count; ++i) o[i] = o[i] + S[i];
        } else {
          apart<T>(w, o, count, [&](Index i) { return w[i] + S[i]; });
        }
      }
    }
  }
  if constexpr (Gradient) {
    for (Index i = 0; i < n * n; ++i) dK[i] = gK[i];
    for (Index j = 0; j < n; ++j) db[j] = gb[j];
  }
}

// The whole job, interval by interval, for activation A, width N (0: any) and mode M.
template <class T, int A, int N, int M>
BRAIDPY_ROWS_INLINE void run_job(const Job<T>& job) {
  const Index n = N ? N : job.width;
  for (Index iv = 0; iv < job.m; ++iv) {
    const T* K = job.K + iv * n * n;
    const T* b = job.b + iv * n;
    const T* U = job.U + iv * job.su;
    if constexpr (M == kForward) {
      forward_interval<T, A, N>(U, K, b, job.h[iv], job.out + iv * job.so, job.rows, n);
    } else {
      constexpr bool kAdj = M == kAdjoint || M == kAdjointGradient || M == kAdjointKeep ||
                            M == kAdjointGiven;
      constexpr bool kGrad = M == kGradient || M == kAdjointGradient || M == kGradientGiven;
      constexpr int kS = M == kAdjointKeep ? kKept
                         : (M == kAdjointGiven || M == kGradientGiven) ? kGiven
                                                                         : kFormed;
      backward_interval<T, A, N, kAdj, kGrad, kS>(
          U, job.W + iv * job.sw, K, b, job.h[iv], kAdj ? job.out + iv * job.so : nullptr,
          kGrad ? job.dK + iv * n * n : nullptr, kGrad ? job.db + iv * n : nullptr, job.rows,
          n, kS == kFormed ? nullptr : job.D + iv * job.sd);
    }
  }
}

}  // namespace dense_rows
}  // namespace braidpy
