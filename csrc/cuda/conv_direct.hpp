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

#include <vector>

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
// o = at.c at (at.y, at.x). Fixed order c, dy, dx; one rounding per operation; a tap
// outside the plane adds K * 0 (the tiled kernels' zero halo: the same operations).
template <class T>
BRAIDPY_HD inline T conv_value(const T* X, const T* K, const ConvAt& at, const ConvDims& d) {
  const Index p = d.k / 2, hw = d.plane();
  T acc = T(0);
  for (Index c = 0; c < d.C; ++c) {
    const T* xs = X + ((at.iv * d.N + at.n) * d.C + c) * hw;
    const T* ks = K + ((at.iv * d.C + at.c) * d.C + c) * d.k * d.k;
    for (Index dy = 0; dy < d.k; ++dy) {
      const Index yy = at.y + dy - p;
      for (Index dx = 0; dx < d.k; ++dx) {
        const Index xx = at.x + dx - p;
        const T v = (yy >= 0 && yy < d.H && xx >= 0 && xx < d.W) ? xs[yy * d.W + xx] : T(0);
        acc = acc + ks[dy * d.k + dx] * v;
      }
    }
  }
  return acc;
}

// The convolution's transpose (its input VJP) for input channel c = at.c:
// sum_{o, e, f} K[iv, o, c, k-1-e, k-1-f] * G[iv, n, o, y + e - p, x + f - p], in that
// order (the tiled kernel's), zero taps outside the plane as above.
template <class T>
BRAIDPY_HD inline T conv_transpose_value(const T* G, const T* K, const ConvAt& at,
                                         const ConvDims& d) {
  const Index p = d.k / 2, hw = d.plane(), k = d.k;
  T acc = T(0);
  for (Index o = 0; o < d.C; ++o) {
    const T* gs = G + ((at.iv * d.N + at.n) * d.C + o) * hw;
    const T* ks = K + ((at.iv * d.C + o) * d.C + at.c) * k * k;
    for (Index e = 0; e < k; ++e) {
      const Index yy = at.y + e - p;
      for (Index f = 0; f < k; ++f) {
        const Index xx = at.x + f - p;
        const T v = (yy >= 0 && yy < d.H && xx >= 0 && xx < d.W) ? gs[yy * d.W + xx] : T(0);
        acc = acc + ks[(k - 1 - e) * k + (k - 1 - f)] * v;
      }
    }
  }
  return acc;
}

// The steps' last operations for element i, given its convolution value z (bias not
// yet added): the element kernels and the tiled kernels share them.
template <class T>
BRAIDPY_HD inline void conv_step_finish(Index i, T z, Index iv, Index ch, const T* U,
                                        const T* b, const T* h, int act, const ConvDims& d,
                                        T* out) {
  out[i] = U[i] + h[iv] * activate(act, z + b[iv * d.C + ch]);
}

template <class T>
BRAIDPY_HD inline void conv_g_finish(Index i, T z, Index iv, Index ch, const T* Wa, const T* b,
                                     const T* h, int act, const ConvDims& d, T* G) {
  G[i] = h[iv] * (Wa[i] * activate_derivative(act, z + b[iv * d.C + ch]));
}

// Element i of the forward step out = U + h * act(conv(U, K) + b).
template <class T>
BRAIDPY_HD inline void conv_step_at(Index i, const T* U, const T* K, const T* b, const T* h,
                                    int act, const ConvDims& d, T* out) {
  const ConvAt at = conv_decode(i, d);
  conv_step_finish(i, conv_value(U, K, at, d), at.iv, at.c, U, b, h, act, d, out);
}

// Element i of G = h * (W * act'(conv(U, K) + b)): the adjoint's and the gradient's
// common factor (W the adjoint state).
template <class T>
BRAIDPY_HD inline void conv_step_g_at(Index i, const T* Wa, const T* U, const T* K,
                                      const T* b, const T* h, int act, const ConvDims& d,
                                      T* G) {
  const ConvAt at = conv_decode(i, d);
  conv_g_finish(i, conv_value(U, K, at, d), at.iv, at.c, Wa, b, h, act, d, G);
}

// Element i of the adjoint step out = W + conv^T(G, K).
template <class T>
BRAIDPY_HD inline void conv_transpose_add_at(Index i, const T* Wa, const T* G, const T* K,
                                             const ConvDims& d, T* out) {
  out[i] = Wa[i] + conv_transpose_value(G, K, conv_decode(i, d), d);
}

// ------------------------------------------------------------------ the tiled kernels
//
// One block per (interval, sample, kTile x kTile tile of the plane), one thread per
// position of the tile computing all C channels there: the block first copies the
// tile's input planes with a zero halo of k/2 and the interval's kernel into shared
// memory (conv_tile_load), then each thread sums (conv_tile_sums) in the element
// functions' order, so both give the same bits. Used where C <= kTileMaxC and the shared
// memory fits kTileSmemBytes; the wide kernels (below) otherwise (conv_family).

constexpr int kTile = 16;
constexpr int kTileThreads = kTile * kTile;
constexpr int kTileMaxC = 16;
constexpr Index kTileSmemBytes = 48 * 1024;

BRAIDPY_HD inline Index conv_halo(const ConvDims& d) { return kTile + d.k - 1; }

// Shared memory elements of a block: C halo planes, then C*C*k*k kernel entries.
BRAIDPY_HD inline Index conv_tile_smem(const ConvDims& d) {
  return d.C * conv_halo(d) * conv_halo(d) + d.C * d.C * d.k * d.k;
}

BRAIDPY_HD inline Index conv_tile_blocks(const ConvDims& d) {
  return d.m * d.N * ((d.H + kTile - 1) / kTile) * ((d.W + kTile - 1) / kTile);
}

// Whether the tiled kernels take these dims (a grid has fewer than 2^31 blocks).
inline bool conv_tiled(const ConvDims& d, Index itemsize) {
  return d.C <= kTileMaxC && conv_tile_smem(d) * itemsize <= kTileSmemBytes &&
         conv_tile_blocks(d) < (Index(1) << 31);
}

// Block b's sample (iv * N + n) and tile origin (y0, x0).
BRAIDPY_HD inline void conv_tile_origin(Index b, const ConvDims& d, Index* ivn, Index* y0,
                                        Index* x0) {
  // 32-bit arithmetic: a grid has fewer than 2^31 blocks
  const auto tiles_y = static_cast<std::uint32_t>((d.H + kTile - 1) / kTile);
  const auto tiles_x = static_cast<std::uint32_t>((d.W + kTile - 1) / kTile);
  auto r = static_cast<std::uint32_t>(b);
  const std::uint32_t bx = r % tiles_x;
  r /= tiles_x;
  *x0 = Index(bx) * kTile;
  *y0 = Index(r % tiles_y) * kTile;
  *ivn = r / tiles_y;
}

// Thread t of nt's share of block b's shared memory: X's C planes of the block's sample
// over rows y0-p .. y0+kTile-1+p and columns likewise (zeros outside the plane), then
// the interval's kernel K[iv] as it is.
template <class T>
BRAIDPY_HD inline void conv_tile_load(const T* X, const T* K, const ConvDims& d, Index b, int t,
                                      int nt, T* smem) {
  Index ivn = 0, y0 = 0, x0 = 0;
  conv_tile_origin(b, d, &ivn, &y0, &x0);
  const Index p = d.k / 2, h = conv_halo(d), hh = h * h, hw = d.plane();
  const T* xs = X + ivn * d.C * hw;
  // 32-bit index arithmetic (a block's few thousand entries; 64-bit division is slow)
  const auto h32 = static_cast<std::uint32_t>(h), hh32 = static_cast<std::uint32_t>(hh);
  for (std::uint32_t e = static_cast<std::uint32_t>(t); e < d.C * hh; e += nt) {
    const std::uint32_t c = e / hh32, r = e - c * hh32, ry = r / h32;
    const Index yy = y0 - p + ry, xx = x0 - p + (r - ry * h32);
    smem[e] = (yy >= 0 && yy < d.H && xx >= 0 && xx < d.W) ? xs[c * hw + yy * d.W + xx] : T(0);
  }
  const Index kk = d.C * d.C * d.k * d.k, iv = ivn / d.N;
  for (Index e = t; e < kk; e += nt) smem[d.C * hh + e] = K[iv * kk + e];
}

#if defined(__CUDA_ARCH__)  // nvcc's device pass (its host pass gives the pragma to g++)
#define BRAIDPY_UNROLL _Pragma("unroll")
#else
#define BRAIDPY_UNROLL
#endif

// Thread t's sums at its tile position (row t / kTile, column t % kTile), acc[a] for
// a < C: forward (Transpose false): a = output channel o, over (c, dy, dx) as conv_value;
// transpose: a = input channel c, over (o, e, f) as conv_transpose_value. MaxC >= C is
// the accumulators' count (registers on the GPU).
template <class T, int MaxC, bool Transpose>
BRAIDPY_HD inline void conv_tile_sums(const T* smem, const ConvDims& d, int t, T* acc) {
  const Index h = conv_halo(d), hh = h * h, k = d.k, C = d.C;
  const T* ks = smem + C * hh;
  const Index ty = t / kTile, tx = t % kTile;
  BRAIDPY_UNROLL
  for (int a = 0; a < MaxC; ++a) acc[a] = T(0);
  for (Index s = 0; s < C; ++s)
    for (Index e = 0; e < k; ++e)
      for (Index f = 0; f < k; ++f) {
        const T v = smem[s * hh + (ty + e) * h + tx + f];
        BRAIDPY_UNROLL
        for (int a = 0; a < MaxC; ++a)
          if (a < C) {
            const T w = Transpose ? ks[((s * C + a) * k + (k - 1 - e)) * k + (k - 1 - f)]
                                  : ks[((a * C + s) * k + e) * k + f];
            acc[a] = acc[a] + w * v;
          }
      }
}

// Where thread t's results go: element index of channel 0 at its position (add
// a * H * W for channel a), or -1 when the position is outside the plane.
BRAIDPY_HD inline Index conv_tile_target(Index b, const ConvDims& d, int t, Index* iv) {
  Index ivn = 0, y0 = 0, x0 = 0;
  conv_tile_origin(b, d, &ivn, &y0, &x0);
  const Index y = y0 + t / kTile, x = x0 + t % kTile;
  *iv = ivn / d.N;
  if (y >= d.H || x >= d.W) return -1;
  return ivn * d.C * d.plane() + y * d.W + x;
}

// Modes of the tiled kernels.
enum ConvMode : int { kConvStep = 0, kConvG = 1, kConvTransposeAdd = 2 };

// Element i's last operations in a mode, given its sum z over channel ch's taps: the
// tiled and the wide kernels share them.
template <class T>
BRAIDPY_HD inline void conv_epilogue(int mode, Index i, T z, Index iv, Index ch, const T* U,
                                     const T* Wa, const T* bias, const T* h, int act,
                                     const ConvDims& d, T* out) {
  if (mode == kConvStep) conv_step_finish(i, z, iv, ch, U, bias, h, act, d, out);
  else if (mode == kConvG) conv_g_finish(i, z, iv, ch, Wa, bias, h, act, d, out);
  else out[i] = Wa[i] + z;
}

// The tiled kernels' work for thread t of block b, after the block's conv_tile_load of
// X (U, or G for the transpose): sums, then each channel's epilogue.
template <class T, int MaxC>
BRAIDPY_HD inline void conv_tile_finish(int mode, const T* smem, Index b, int t,
                                        const ConvDims& d, const T* U, const T* Wa,
                                        const T* bias, const T* h, int act, T* out) {
  T acc[MaxC];
  if (mode == kConvTransposeAdd) conv_tile_sums<T, MaxC, true>(smem, d, t, acc);
  else conv_tile_sums<T, MaxC, false>(smem, d, t, acc);
  Index iv = 0;
  const Index i0 = conv_tile_target(b, d, t, &iv);
  if (i0 < 0) return;
  BRAIDPY_UNROLL
  for (int a = 0; a < MaxC; ++a)
    if (a < d.C) conv_epilogue(mode, i0 + a * d.plane(), acc[a], iv, Index(a), U, Wa, bias, h,
                               act, d, out);
}

// The tiled kernels on the host, block by block, each block's threads in two phases
// (load, then finish) as the GPU's __syncthreads() separates them.
template <class T>
inline void conv_tiled_host(int mode, const T* X, const T* K, const ConvDims& d, const T* U,
                            const T* Wa, const T* bias, const T* h, int act, T* out) {
  T smem[kTileSmemBytes / sizeof(T)];
  for (Index b = 0; b < conv_tile_blocks(d); ++b) {
    for (int t = 0; t < kTileThreads; ++t) conv_tile_load(X, K, d, b, t, kTileThreads, smem);
    for (int t = 0; t < kTileThreads; ++t)
      conv_tile_finish<T, kTileMaxC>(mode, smem, b, t, d, U, Wa, bias, h, act, out);
  }
}

// ------------------------------------------------------------------- the wide kernels
//
// For layers the tiled kernels do not hold (more than kTileMaxC channels, or C halo
// planes and the C*C*k*k kernel over kTileSmemBytes: 16 channels 3x3 in float64 already
// are). One block per (interval, sample, kTile x kTile tile, group of kWideGroup
// accumulated channels: output channels o forward, input channels c for the transpose);
// each thread keeps the group's kWideGroup sums at its position in registers. The
// streamed channels (c forward, o for the transpose) pass through shared memory in
// chunks of kWideChunk, ascending: per chunk, the block loads the chunk's halo planes and
// the matching kernel slice (conv_wide_load), synchronizes, and each thread adds the
// chunk's taps to its sums (conv_wide_sums) in the element functions' order (channel
// ascending across and within chunks, then dy, dx), so all three families give the same
// bits. Shared memory kWideGroup*kWideChunk*k*k + kWideChunk*(kTile+k-1)^2 entries: at
// most 40576 bytes (float64, k = 7), whatever C is.
//
// Which family a shape takes (conv_family) depends on its dims and itemsize only:
// tiled where conv_tiled holds, else wide where conv_wide holds, else element.

constexpr int kWideGroup = 16;
constexpr int kWideChunk = 4;

// The kernel slice's entries (first in shared memory), then the chunk's halo planes.
BRAIDPY_HD inline Index conv_wide_slice(const ConvDims& d) {
  return Index(kWideGroup) * kWideChunk * d.k * d.k;
}

BRAIDPY_HD inline Index conv_wide_smem(const ConvDims& d) {
  return conv_wide_slice(d) + kWideChunk * conv_halo(d) * conv_halo(d);
}

BRAIDPY_HD inline Index conv_wide_groups(const ConvDims& d) {
  return (d.C + kWideGroup - 1) / kWideGroup;
}

BRAIDPY_HD inline Index conv_wide_blocks(const ConvDims& d) {
  return conv_tile_blocks(d) * conv_wide_groups(d);
}

// Whether the wide kernels can take these dims (shared memory, fewer than 2^31 blocks).
inline bool conv_wide(const ConvDims& d, Index itemsize) {
  return conv_wide_smem(d) * itemsize <= kTileSmemBytes &&
         conv_wide_blocks(d) < (Index(1) << 31);
}

// The kernel families, and the one a shape takes.
enum ConvFamily : int { kConvElement = 0, kConvTiled = 1, kConvWide = 2 };

inline int conv_family(const ConvDims& d, Index itemsize) {
  if (conv_tiled(d, itemsize)) return kConvTiled;
  return conv_wide(d, itemsize) ? kConvWide : kConvElement;
}

// Block b's tile block (conv_tile_origin's b) and first accumulated channel a0: the
// groups of one tile are neighbouring blocks (they read the same input planes).
BRAIDPY_HD inline Index conv_wide_tile(Index b, const ConvDims& d, Index* a0) {
  // 32-bit arithmetic: a grid has fewer than 2^31 blocks
  const auto groups = static_cast<std::uint32_t>(conv_wide_groups(d));
  const auto b32 = static_cast<std::uint32_t>(b), tile = b32 / groups;
  *a0 = Index(b32 - tile * groups) * kWideGroup;
  return tile;
}

// Thread t of nt's share of loading the chunk of streamed channels c0 .. c0+kWideChunk-1
// for block b: the kernel slice, entry ((s*k + e)*k + f)*kWideGroup + a holding the weight
// of accumulated channel a0+a, streamed channel c0+s, tap (e, f) (forward: K[iv, a0+a,
// c0+s, e, f]; transpose: K[iv, c0+s, a0+a, k-1-e, k-1-f]; 0 past C), then the streamed
// channels' halo planes as conv_tile_load's (zeros outside the plane; past C unread).
template <class T>
BRAIDPY_HD inline void conv_wide_load(bool transpose, const T* X, const T* K, const ConvDims& d,
                                      Index b, Index c0, int t, int nt, T* smem) {
  Index a0 = 0, ivn = 0, y0 = 0, x0 = 0;
  conv_tile_origin(conv_wide_tile(b, d, &a0), d, &ivn, &y0, &x0);
  const Index p = d.k / 2, h = conv_halo(d), hh = h * h, hw = d.plane(), C = d.C;
  const Index iv = ivn / d.N, kk = d.k * d.k, slice = conv_wide_slice(d);
  // 32-bit index arithmetic (a block's few thousand entries; 64-bit division is slow)
  const auto k32 = static_cast<std::uint32_t>(d.k);
  for (std::uint32_t e = static_cast<std::uint32_t>(t); e < slice; e += nt) {
    const std::uint32_t a = e % kWideGroup, r = e / kWideGroup, rr = r / k32;
    const std::uint32_t f = r - rr * k32, s = rr / k32, ey = rr - s * k32;
    const Index acc_ch = a0 + a, str_ch = c0 + s;
    T w = T(0);
    if (acc_ch < C && str_ch < C)
      w = transpose ? K[((iv * C + str_ch) * C + acc_ch) * kk + (d.k - 1 - ey) * d.k +
                        (d.k - 1 - f)]
                    : K[((iv * C + acc_ch) * C + str_ch) * kk + ey * d.k + f];
    smem[e] = w;
  }
  const T* xs = X + ivn * C * hw;
  const auto h32 = static_cast<std::uint32_t>(h), hh32 = static_cast<std::uint32_t>(hh);
  for (std::uint32_t e = static_cast<std::uint32_t>(t); e < kWideChunk * hh; e += nt) {
    const std::uint32_t s = e / hh32, r = e - s * hh32, ry = r / h32;
    const Index c = c0 + s, yy = y0 - p + ry, xx = x0 - p + (r - ry * h32);
    smem[slice + e] = (c < C && yy >= 0 && yy < d.H && xx >= 0 && xx < d.W)
                          ? xs[c * hw + yy * d.W + xx]
                          : T(0);
  }
}

// Thread t's sums at its tile position over the loaded chunk (streamed channels c0 ..
// min(c0 + kWideChunk, C) - 1, then dy, dx): acc[a] += w * v for its kWideGroup
// accumulated channels. Channels past C are skipped, not added as zeros: the element
// functions make no such operations.
template <class T>
BRAIDPY_HD inline void conv_wide_sums(const T* smem, const ConvDims& d, Index c0, int t,
                                      T* acc) {
  const Index h = conv_halo(d), hh = h * h, k = d.k;
  const Index n = d.C - c0 < kWideChunk ? d.C - c0 : kWideChunk;
  const T* planes = smem + conv_wide_slice(d);
  const Index ty = t / kTile, tx = t % kTile;
  for (Index s = 0; s < n; ++s)
    for (Index e = 0; e < k; ++e)
      for (Index f = 0; f < k; ++f) {
        const T v = planes[s * hh + (ty + e) * h + tx + f];
        const T* w = smem + ((s * k + e) * k + f) * kWideGroup;
        BRAIDPY_UNROLL
        for (int a = 0; a < kWideGroup; ++a) acc[a] = acc[a] + w[a] * v;
      }
}

// Thread t's results after the last chunk: each accumulated channel's epilogue.
template <class T>
BRAIDPY_HD inline void conv_wide_finish(int mode, const T* acc, Index b, int t,
                                        const ConvDims& d, const T* U, const T* Wa,
                                        const T* bias, const T* h, int act, T* out) {
  Index a0 = 0, iv = 0;
  const Index i0 = conv_tile_target(conv_wide_tile(b, d, &a0), d, t, &iv);
  if (i0 < 0) return;
  BRAIDPY_UNROLL
  for (int a = 0; a < kWideGroup; ++a)
    if (a0 + a < d.C)
      conv_epilogue(mode, i0 + (a0 + a) * d.plane(), acc[a], iv, a0 + a, U, Wa, bias, h, act,
                    d, out);
}

// The wide kernels on the host, block by block: per chunk, every thread's load, then
// every thread's sums (the GPU's __syncthreads() between them), then the epilogues.
template <class T>
inline void conv_wide_host(int mode, const T* X, const T* K, const ConvDims& d, const T* U,
                           const T* Wa, const T* bias, const T* h, int act, T* out) {
  std::vector<T> smem(static_cast<std::size_t>(conv_wide_smem(d)));
  std::vector<T> acc(static_cast<std::size_t>(kTileThreads) * kWideGroup);
  for (Index b = 0; b < conv_wide_blocks(d); ++b) {
    for (T& a : acc) a = T(0);
    for (Index c0 = 0; c0 < d.C; c0 += kWideChunk) {
      for (int t = 0; t < kTileThreads; ++t)
        conv_wide_load(mode == kConvTransposeAdd, X, K, d, b, c0, t, kTileThreads, smem.data());
      for (int t = 0; t < kTileThreads; ++t)
        conv_wide_sums(smem.data(), d, c0, t, acc.data() + t * kWideGroup);
    }
    for (int t = 0; t < kTileThreads; ++t)
      conv_wide_finish(mode, acc.data() + t * kWideGroup, b, t, d, U, Wa, bias, h, act, out);
  }
}

// ------------------------------------------------------------------ the reductions
//
// The parameter gradients are fixed-order block reductions of kConvThreads threads: each
// thread sums its positions in double, then a tree over the kConvThreads partials
// (tree_step, s = nt/2 ... 1). A grid has at most kConvMaxGrid blocks; the kernels loop
// over the rest (b = blockIdx.x, blockIdx.x + gridDim.x, ...), so any m fits.

constexpr Index kConvMaxGrid = (Index(1) << 31) - 1;  // CUDA's limit of gridDim.x

BRAIDPY_HD inline Index conv_reduction_grid(Index blocks) {
  return blocks < kConvMaxGrid ? blocks : kConvMaxGrid;
}

// Weight gradient dK[iv, o, c, dy, dx] = sum_{n, y, x} G[iv, n, o, y, x] *
// U[iv, n, c, y + dy - p, x + dx - p], the row kernel: one block per row (iv, o, c, dy)
// of dK: thread t of nt sums the positions q = t, t + nt, ... (q = (n*H + y)*W + x) in
// that order, in double, one partial per dx in parts[dx * nt + t]; then the tree
// (tree_step per dx). The grouped kernel (below) gives the same bits.
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
  // positions < 2^31 (conv_direct_dims checks): 32-bit division, much faster on a GPU
  const auto hw32 = static_cast<std::uint32_t>(hw), w32 = static_cast<std::uint32_t>(d.W);
  for (Index q = t; q < positions; q += nt) {
    const std::uint32_t q32 = static_cast<std::uint32_t>(q), n32 = q32 / hw32;
    const std::uint32_t yx32 = q32 - n32 * hw32, y32 = yx32 / w32;
    const Index n = n32, yx = yx32, y = y32, x = yx32 - y32 * w32;
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
  const auto hw32 = static_cast<std::uint32_t>(hw);
  for (Index q = t; q < positions; q += nt) {
    const std::uint32_t q32 = static_cast<std::uint32_t>(q), n32 = q32 / hw32;
    const Index n = n32, yx = q32 - n32 * hw32;
    acc += static_cast<double>(G[((iv * d.N + n) * d.C + o) * hw + yx]);
  }
  return acc;
}

// The reductions' results on the host, in the kernels' order (kConvThreads partials, then
// the tree nt/2 ... 1): what the row kernel's and conv_bgrad's blocks compute.
template <class T>
inline void conv_wgrad_rows_host(const T* G, const T* U, const ConvDims& d, T* dK) {
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

// ------------------------------------------------- the grouped weight-gradient kernel
//
// The row kernel's block reads the G[iv, :, o] plane and rows of the U[iv, :, c] plane
// for ONE row (o, c, dy) of dK: every G plane and every U plane is read C*k times over an
// interval's C*C*k rows, which for wide layers (C = 32, 64) is most of the traffic. The
// grouped kernel's block computes kWgradOut output channels x conv_wgrad_in(k) input
// channels at one dy: per position q, thread t reads the kWgradOut values of G and the
// conv_wgrad_in(k)*k values of U once and updates its kWgradOut*conv_wgrad_in(k)*k
// accumulators (registers). Every accumulator sees exactly the row kernel's operations in
// the row kernel's order (positions q = t, t + nt, ..., acc += g * u in double, the same
// taps skipped), and each dK entry's kConvThreads partials go through the same tree
// (tree_step, s = nt/2 ... 1), so both kernels give the same bits. The trees share one
// shared-memory buffer of kWgradPartsRows rows of kConvThreads doubles (48 KiB), a pass
// of conv_wgrad_pass_pairs(k) (o, c) pairs at a time: store, sync, tree, write results.
// Channels past C (C not a multiple of a group) are neither read nor written.

// Output channels of a grouped block.
constexpr int kWgradOut = 4;

// Input channels of a grouped block for kernel size k (4x4 for k 1, 4x2 for k 3, 4x1 for k
// 5 and 7: 16, 24, 20 and 28 accumulators, doubles). kWgradOut is the larger side because
// a thread's loads per position are kWgradOut + conv_wgrad_in(k) * k: each G plane is then
// read C*k / conv_wgrad_in(k) times and each U plane C*k / 4 times per interval, 2.7x to
// 4x fewer loads than the row kernel. Sized so that ptxas (nvcc 13, sm_80 and sm_90) gives
// every instance at most 124 registers with no spills unforced: two blocks of 256 threads
// per SM. (4x4 at k 3 and 4x2 at k 5, 7 took 155-200 registers, one block per SM; held
// to 128, 4x4 at k 3 and 4x2 at k 7 spilled.)
BRAIDPY_HD constexpr int conv_wgrad_in(int k) { return k == 1 ? 4 : k == 3 ? 2 : 1; }

BRAIDPY_HD constexpr int conv_wgrad_accs(int k) { return kWgradOut * conv_wgrad_in(k) * k; }

// The trees' buffer: rows of kConvThreads partials, 24 * 256 doubles = 48 KiB (static).
constexpr int kWgradPartsRows = 24;

// (o, c) pairs per tree pass, and the passes of a block.
BRAIDPY_HD constexpr int conv_wgrad_pass_pairs(int k) { return kWgradPartsRows / k; }

BRAIDPY_HD constexpr int conv_wgrad_passes(int k) {
  return (kWgradOut * conv_wgrad_in(k) + conv_wgrad_pass_pairs(k) - 1) / conv_wgrad_pass_pairs(k);
}

BRAIDPY_HD inline Index conv_wgrad_group_blocks(const ConvDims& d) {
  const Index in = conv_wgrad_in(static_cast<int>(d.k));
  return d.m * ((d.C + kWgradOut - 1) / kWgradOut) * ((d.C + in - 1) / in) * d.k;
}

// Block b's interval, first output channel o0, first input channel c0 and dy: blocks in
// the order (iv, output group, input group, dy), so neighbouring blocks share G planes.
BRAIDPY_HD inline void conv_wgrad_group_at(Index b, const ConvDims& d, Index* iv, Index* o0,
                                           Index* c0, Index* dy) {
  const Index in = conv_wgrad_in(static_cast<int>(d.k));
  const Index groups_in = (d.C + in - 1) / in, groups_out = (d.C + kWgradOut - 1) / kWgradOut;
  *dy = b % d.k;
  Index r = b / d.k;
  *c0 = (r % groups_in) * in;
  r /= groups_in;
  *o0 = (r % groups_out) * kWgradOut;
  *iv = r / groups_out;
}

// Thread t of nt's partials for block b: acc[(a * conv_wgrad_in(K) + s) * K + dx] sums, as
// conv_wgrad_part does for row (iv, o0 + a, c0 + s, dy), g * u over the positions q = t,
// t + nt, ... in double. K = d.k, a compile-time constant (the accumulators' count).
template <class T, int K>
BRAIDPY_HD inline void conv_wgrad_group_part(const T* G, const T* U, Index b, const ConvDims& d,
                                             int t, int nt, double* acc) {
  constexpr int GO = kWgradOut, GC = conv_wgrad_in(K), p = K / 2;
  Index iv = 0, o0 = 0, c0 = 0, dy = 0;
  conv_wgrad_group_at(b, d, &iv, &o0, &c0, &dy);
  BRAIDPY_UNROLL
  for (int j = 0; j < conv_wgrad_accs(K); ++j) acc[j] = 0.0;
  // 32-bit positions and plane indices (N*H*W < 2^31: conv_direct_dims checks; fewer
  // registers and much faster division on a GPU), 64-bit offsets of samples and channels
  const Index hw = d.plane(), sample = d.C * hw;
  const T* gb = G + (iv * d.N * d.C + o0) * hw;  // sample 0, channel o0
  const T* ub = U + (iv * d.N * d.C + c0) * hw;
  const int H = static_cast<int>(d.H), W = static_cast<int>(d.W), ry = static_cast<int>(dy) - p;
  const int out_left = static_cast<int>(d.C - o0), in_left = static_cast<int>(d.C - c0);
  const auto hw32 = static_cast<std::uint32_t>(hw), w32 = static_cast<std::uint32_t>(d.W);
  const auto positions = static_cast<std::uint32_t>(d.N * hw);
  for (auto q = static_cast<std::uint32_t>(t); q < positions; q += static_cast<std::uint32_t>(nt)) {
    const std::uint32_t n = q / hw32, yx = q - n * hw32, y = yx / w32;
    const int x = static_cast<int>(yx - y * w32), yy = static_cast<int>(y) + ry;
    if (yy < 0 || yy >= H) continue;
    const T* gs = gb + n * sample + yx;
    const T* us = ub + n * sample + yy * W;
    // g = 0 for channels past C: their sums are never written
    double g[GO];
    BRAIDPY_UNROLL
    for (int a = 0; a < GO; ++a) g[a] = a < out_left ? static_cast<double>(gs[a * hw]) : 0.0;
    BRAIDPY_UNROLL
    for (int s = 0; s < GC; ++s) {
      if (s >= in_left) continue;
      BRAIDPY_UNROLL
      for (int dx = 0; dx < K; ++dx) {
        const int xx = x + dx - p;
        if (xx < 0 || xx >= W) continue;
        const double u = static_cast<double>(us[s * hw + xx]);
        BRAIDPY_UNROLL
        for (int a = 0; a < GO; ++a) acc[(a * GC + s) * K + dx] += g[a] * u;
      }
    }
  }
}

// Thread t's partials of tree pass `pass` into the buffer: pair j = a * conv_wgrad_in(K) + s
// of the pass's pairs j0 = pass * conv_wgrad_pass_pairs(K) ... takes rows (j - j0) * K + dx.
template <int K>
BRAIDPY_HD inline void conv_wgrad_group_store(const double* acc, int pass, int t, int nt,
                                              double* parts) {
  constexpr int pairs = kWgradOut * conv_wgrad_in(K), pp = conv_wgrad_pass_pairs(K);
  const int j0 = pass * pp;
  // every j, a constant index into acc (registers on the GPU), the pass's ones stored
  BRAIDPY_UNROLL
  for (int j = 0; j < pairs; ++j)
    if (j >= j0 && j < j0 + pp) {
      BRAIDPY_UNROLL
      for (int dx = 0; dx < K; ++dx) parts[((j - j0) * K + dx) * nt + t] = acc[j * K + dx];
    }
}

// Rows of the buffer that pass `pass` uses.
template <int K>
BRAIDPY_HD inline int conv_wgrad_pass_rows(int pass) {
  constexpr int pairs = kWgradOut * conv_wgrad_in(K), pp = conv_wgrad_pass_pairs(K);
  const int left = pairs - pass * pp;
  return (left < pp ? left : pp) * K;
}

// Thread t's share of tree step s of a pass: tree_step on each of the pass's rows.
template <int K>
BRAIDPY_HD inline void conv_wgrad_group_tree(double* parts, int pass, int t, int nt, int s) {
  const int rows = conv_wgrad_pass_rows<K>(pass);
  for (int r = 0; r < rows; ++r) tree_step(parts + r * nt, t, s);
}

// After a pass's tree: thread t < the pass's rows writes row t's sum, dK[iv, o, c, dy, dx]
// for its pair (o, c) and dx, where o and c are below C.
template <class T, int K>
BRAIDPY_HD inline void conv_wgrad_group_write(const double* parts, int pass, Index b,
                                              const ConvDims& d, int t, int nt, T* dK) {
  if (t >= conv_wgrad_pass_rows<K>(pass)) return;
  Index iv = 0, o0 = 0, c0 = 0, dy = 0;
  conv_wgrad_group_at(b, d, &iv, &o0, &c0, &dy);
  const int j = pass * conv_wgrad_pass_pairs(K) + t / K, dx = t % K;
  const Index o = o0 + j / conv_wgrad_in(K), c = c0 + j % conv_wgrad_in(K);
  if (o >= d.C || c >= d.C) return;
  dK[(((iv * d.C + o) * d.C + c) * K + dy) * K + dx] = static_cast<T>(parts[t * nt]);
}

// The grouped kernel on the host, block by block: every thread's partials, then per pass
// every thread's store, each tree step for every thread (the GPU's __syncthreads() between
// the phases), every thread's write.
template <class T, int K>
inline void conv_wgrad_grouped_host_k(const T* G, const T* U, const ConvDims& d, T* dK) {
  constexpr int A = conv_wgrad_accs(K), nt = kConvThreads;
  std::vector<double> acc(static_cast<std::size_t>(nt) * A);
  std::vector<double> parts(static_cast<std::size_t>(kWgradPartsRows) * nt);
  for (Index b = 0; b < conv_wgrad_group_blocks(d); ++b) {
    for (int t = 0; t < nt; ++t) conv_wgrad_group_part<T, K>(G, U, b, d, t, nt, &acc[t * A]);
    for (int pass = 0; pass < conv_wgrad_passes(K); ++pass) {
      double* ps = parts.data();
      for (int t = 0; t < nt; ++t) conv_wgrad_group_store<K>(&acc[t * A], pass, t, nt, ps);
      for (int s = nt / 2; s > 0; s >>= 1)
        for (int t = 0; t < nt; ++t) conv_wgrad_group_tree<K>(ps, pass, t, nt, s);
      for (int t = 0; t < nt; ++t) conv_wgrad_group_write<T, K>(ps, pass, b, d, t, nt, dK);
    }
  }
}

template <class T>
inline void conv_wgrad_grouped_host(const T* G, const T* U, const ConvDims& d, T* dK) {
  if (d.k == 1) conv_wgrad_grouped_host_k<T, 1>(G, U, d, dK);
  else if (d.k == 3) conv_wgrad_grouped_host_k<T, 3>(G, U, d, dK);
  else if (d.k == 5) conv_wgrad_grouped_host_k<T, 5>(G, U, d, dK);
  else conv_wgrad_grouped_host_k<T, 7>(G, U, d, dK);
}

// The weight-gradient kernels, and the one a shape takes: grouped where C >= 16, else rows
// (from dims only; the launchers and the host twins use the same rule). The grouped
// kernel saves loads by sharing each among the rows of its group: that matters for wide
// layers (C = 16-64: C*k reads of every plane per interval), little for narrow ones, whose
// grid of m * k * ceil(C/4) * ceil(C/conv_wgrad_in(k)) blocks would also be small for a
// GPU of 100+ SMs. Below 16 the row kernel stays: it is the one the 8-channel networks ran
// on an H200 (2026-11-26). Both give the same bits; the threshold is an estimate, not yet
// measured on a GPU.
enum ConvWgradFamily : int { kWgradRows = 0, kWgradGrouped = 1 };

constexpr Index kWgradGroupedMinC = 16;

inline int conv_wgrad_family(const ConvDims& d) {
  return d.C >= kWgradGroupedMinC ? kWgradGrouped : kWgradRows;
}

// The weight gradient on the host as the GPU computes it for these dims (conv_wgrad_family).
template <class T>
inline void conv_wgrad_host(const T* G, const T* U, const ConvDims& d, T* dK) {
  if (conv_wgrad_family(d) == kWgradGrouped) conv_wgrad_grouped_host(G, U, d, dK);
  else conv_wgrad_rows_host(G, U, d, dK);
}

}  // namespace kern
}  // namespace braidpy
