// Host-side logic of braidpy's cuDNN convolutions, with no cuDNN, CUDA or Python
// header: the parameters of the NCHW tensor, filter and convolution descriptors
// for "same" zero padding, output dimensions by cuDNN's documented formula, the
// grouped layout that runs the k-th step of m intervals as ONE grouped
// convolution, the bias-gradient layout, workspace bookkeeping, the choice among
// measured algorithms and a cache of per-shape plans. csrc/tests/conv_plan_test.cpp tests it with g++ against
// naive per-interval convolutions; tests/test_cudnn.py against cuDNN's own
// answers where cuDNN gives them without a GPU.
//
// Grouped layout (m intervals, batch N, C channels, P = H * W pixels):
//   stacked states   U[i, n, c, p]          (m, N, C, H, W)  braidpy's batched block
//   packed input     X[n, i * C + c, p]     (N, m * C, H, W) group i = interval i
//   stacked kernels  K[i, o, c, q]          (m, C, C, k, k)  = the grouped filter
//                                           (m * C, C, k, k) with no copy
//   stacked biases   b[i, o]                (m, C)           = the bias tensor
//                                           (1, m * C, 1, 1) with no copy
// so only the states move (pack/unpack); kernels and biases are reinterpreted.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

#if defined(__CUDACC__)
#define BRAIDPY_PLAN_HD __host__ __device__
#else
#define BRAIDPY_PLAN_HD
#endif

namespace braidpy {
namespace convplan {

using Index = std::int64_t;

// The dtypes braidpy passes (device_ops.hpp's DeviceDtype values).
constexpr int kF64 = 1;
constexpr int kF32 = 2;

// "Same" zero padding of an odd kernel size k: r = (k - 1) / 2; -1 for an even
// or non-positive k (no centred window exists).
inline int same_padding(int k) { return (k >= 1 && k % 2 == 1) ? (k - 1) / 2 : -1; }

// cuDNN's output size along one spatial axis (cuDNN API reference,
// cudnnGetConvolution2dForwardOutputDim):
//   out = 1 + (in + 2 pad - ((k - 1) dilation + 1)) / stride.
inline Index output_dim(Index in, Index pad, Index k, Index stride = 1, Index dilation = 1) {
  return 1 + (in + 2 * pad - ((k - 1) * dilation + 1)) / stride;
}

// A 4-D tensor descriptor's parameters (cudnnSetTensor4dDescriptorEx).
struct Tensor4 {
  int n = 0, c = 0, h = 0, w = 0;
  int ns = 0, cs = 0, hs = 0, ws = 0;
};

// Fully packed NCHW: strides (C H W, H W, W, 1).
inline Tensor4 nchw(int n, int c, int h, int w) {
  Tensor4 t;
  t.n = n; t.c = c; t.h = h; t.w = w;
  t.ws = 1; t.hs = w; t.cs = h * w; t.ns = c * h * w;
  return t;
}

// A filter descriptor's parameters (cudnnSetFilter4dDescriptor, NCHW format):
// k output channels, c input channels PER GROUP, h x w taps.
struct Filter4 {
  int k = 0, c = 0, h = 0, w = 0;
};

// A 2-D convolution descriptor's parameters (cudnnSetConvolution2dDescriptor,
// cudnnSetConvolutionGroupCount); braidpy's conv2d is a cross-correlation.
struct Conv2 {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int groups = 1;
};

// One convolution problem: x (n, c_in, h, w) with a (c_out, c_in / groups, k, k)
// filter in `groups` groups, "same" zero padding, stride 1.
struct Problem {
  int dtype = kF64;
  Index n = 0, c_in = 0, c_out = 0, h = 0, w = 0, k = 0, groups = 1;
  bool tf32 = false;  // float32 may use TF32 tensor cores (math_type); a plan of its own
  // Algorithms chosen by measurement (BRAIDPY_CUDNN_BENCHMARK=1), not by cuDNN's
  // heuristics; a plan of its own, so both choices of one shape can live side by side.
  bool benchmark = false;

  bool operator==(const Problem& o) const {
    return dtype == o.dtype && n == o.n && c_in == o.c_in && c_out == o.c_out && h == o.h &&
           w == o.w && k == o.k && groups == o.groups && tf32 == o.tf32 &&
           benchmark == o.benchmark;
  }
};

// cudnnMathType_t values (cuDNN API reference; cudnn_api.hpp checks they agree).
constexpr int kMathDefault = 0;
constexpr int kMathTensorOp = 1;
constexpr int kMathFma = 3;

// The math type of a problem's convolution descriptor. float32 with TF32 allowed:
// CUDNN_TENSOR_OP_MATH (tensor cores round the inputs of each product to TF32's 10-bit
// mantissa and accumulate in float32; never ..._ALLOW_CONVERSION, which may also convert
// to float16); float32 otherwise: FMA only (no TF32 rounding, braidpy's default); float64:
// the default (no tensor-core rounding of float64 exists), whatever tf32 says.
inline int math_type(int dtype, bool tf32) {
  if (dtype != kF32) return kMathDefault;
  return tf32 ? kMathTensorOp : kMathFma;
}

// Why p cannot be described to cuDNN, or "" when it can. cuDNN's 4-D
// descriptors take int dimensions and strides, so every tensor must have fewer
// than 2^31 elements.
inline std::string check(const Problem& p) {
  auto s = [](Index v) { return std::to_string(v); };
  if (p.dtype != kF64 && p.dtype != kF32)
    return "dtype code " + s(p.dtype) + " is neither float64 (1) nor float32 (2)";
  if (p.n < 1 || p.c_in < 1 || p.c_out < 1 || p.h < 1 || p.w < 1)
    return "every dimension must be positive, got batch " + s(p.n) + ", channels " +
           s(p.c_in) + " -> " + s(p.c_out) + ", image " + s(p.h) + " x " + s(p.w);
  if (same_padding(static_cast<int>(p.k)) < 0 || p.k > INT_MAX)
    return "kernel size k = " + s(p.k) + " must be odd and positive ('same' zero padding "
           "needs a centred kernel)";
  if (p.groups < 1 || p.c_in % p.groups != 0 || p.c_out % p.groups != 0)
    return "group count " + s(p.groups) + " must divide both channel counts " + s(p.c_in) +
           " and " + s(p.c_out);
  const Index big = INT_MAX;
  const Index cmax = p.c_in > p.c_out ? p.c_in : p.c_out;
  if (p.h > big / p.w || p.h * p.w > big / cmax || p.h * p.w * cmax > big / p.n ||
      p.c_out * (p.c_in / p.groups) * p.k * p.k > big)
    return "tensor of " + s(p.n) + " x " + s(cmax) + " x " + s(p.h) + " x " + s(p.w) +
           " elements exceeds cuDNN's 32-bit dimensions";
  return "";
}

// The descriptors of a checked problem.
inline Tensor4 input_desc(const Problem& p) {
  return nchw(int(p.n), int(p.c_in), int(p.h), int(p.w));
}
inline Tensor4 output_desc(const Problem& p) {
  const Index r = same_padding(int(p.k));
  return nchw(int(p.n), int(p.c_out), int(output_dim(p.h, r, p.k)), int(output_dim(p.w, r, p.k)));
}
inline Filter4 filter_desc(const Problem& p) {
  Filter4 f;
  f.k = int(p.c_out); f.c = int(p.c_in / p.groups); f.h = int(p.k); f.w = int(p.k);
  return f;
}
inline Conv2 conv_desc(const Problem& p) {
  Conv2 c;
  c.pad_h = c.pad_w = same_padding(int(p.k));
  c.groups = int(p.groups);
  return c;
}
// The bias (gradient) tensor: one value per output channel, (1, c_out, 1, 1).
inline Tensor4 bias_desc(const Problem& p) { return nchw(1, int(p.c_out), 1, 1); }

// The k-th step of m intervals (batch N, C channels, H x W, k x k kernels) as
// one grouped convolution: group i is interval i (see the layout above).
inline Problem grouped_over_intervals(Index m, Index N, Index C, Index H, Index W, Index k,
                                      int dtype) {
  Problem p;
  p.dtype = dtype;
  p.n = N; p.c_in = m * C; p.c_out = m * C; p.h = H; p.w = W; p.k = k; p.groups = m;
  return p;
}

// Offsets of element (interval i, image n, channel c, pixel q) in the stacked
// block (m, N, C, P) and in the packed input (N, m * C, P).
BRAIDPY_PLAN_HD inline Index stacked_offset(Index i, Index n, Index c, Index q, Index N,
                                            Index C, Index P) {
  return ((i * N + n) * C + c) * P + q;
}
BRAIDPY_PLAN_HD inline Index packed_offset(Index i, Index n, Index c, Index q, Index m,
                                           Index C, Index P) {
  return ((n * m + i) * C + c) * P + q;
}

// Element e (an offset into the packed tensor) of pack: packed[e] <- stacked[...].
// A pack kernel runs this for every e < m N C P; unpack is the same map reversed.
template <class T>
BRAIDPY_PLAN_HD inline void pack_at(Index e, const T* stacked, T* packed, Index m, Index N,
                                    Index C, Index P) {
  const Index q = e % P;
  const Index c = (e / P) % C;
  const Index i = (e / (P * C)) % m;
  const Index n = e / (P * C * m);
  packed[e] = stacked[stacked_offset(i, n, c, q, N, C, P)];
}
template <class T>
BRAIDPY_PLAN_HD inline void unpack_at(Index e, const T* packed, T* stacked, Index m, Index N,
                                      Index C, Index P) {
  const Index q = e % P;
  const Index c = (e / P) % C;
  const Index n = (e / (P * C)) % N;
  const Index i = e / (P * C * N);
  stacked[e] = packed[packed_offset(i, n, c, q, m, C, P)];
}

// Offset of kernel tap (interval i, out o, in c, row a, column b) in the stacked
// kernels (m, C, C, k, k) and in the grouped filter (m C, C, k, k): the same
// number, which is why the kernels need no copy.
inline Index stacked_kernel_offset(Index i, Index o, Index c, Index a, Index b, Index C,
                                   Index k) {
  return (((i * C + o) * C + c) * k + a) * k + b;
}
inline Index grouped_filter_offset(Index i, Index o, Index c, Index a, Index b, Index C,
                                   Index k) {
  const Index row = i * C + o;  // output channel of group i
  return ((row * C + c) * k + a) * k + b;
}

// The operations that may ask for cuDNN workspace.
enum Op : int { kForward = 0, kBackwardData = 1, kBackwardFilter = 2, kOps = 3 };

// Workspace bookkeeping: the bytes each operation asked for, and the one
// request made to the caller's allocator (the largest, rounded up to whole
// 256-byte units: CuPy's pool hands out 512-byte aligned blocks anyway).
struct Workspace {
  std::size_t need[kOps] = {0, 0, 0};

  void record(Op op, std::size_t bytes) { need[op] = bytes; }
  std::size_t request() const {
    std::size_t most = 0;
    for (std::size_t b : need) most = b > most ? b : most;
    return (most + 255) / 256 * 256;
  }
  // Whether a buffer of `have` bytes serves operation op.
  bool enough(Op op, std::size_t have) const { return have >= need[op]; }
};

// ---- algorithms chosen by measurement (BRAIDPY_CUDNN_BENCHMARK=1)

// The most workspace a measurement offers cuDNN: 1 GiB, taken from the caller's pool for
// the measurement only. Algorithms that ask for more (FFT ones may ask for several times
// the tensors) are not candidates, so no plan's workspace grows past it by measuring.
constexpr std::size_t kMeasureWorkspaceLimit = std::size_t(1) << 30;

// The workspace a measurement offers, given what each candidate algorithm asks for
// (needs[0 .. count)): the largest need within limit, so that every candidate that may
// be chosen can run, and no byte more; 0 when none asks for any.
inline std::size_t measure_offer(const std::size_t* needs, int count, std::size_t limit) {
  std::size_t most = 0;
  for (int i = 0; i < count; ++i)
    if (needs[i] <= limit && needs[i] > most) most = needs[i];
  return most;
}

// One algorithm as cuDNN's measurement reports it: the fields of a
// cudnnConvolution*AlgoPerf_t record that the choice reads.
struct Timed {
  int algo = -1;
  bool ran = false;            // its status was CUDNN_STATUS_SUCCESS
  float ms = 0.0f;             // its time
  std::size_t workspace = 0;   // the workspace bytes it needs
  bool deterministic = false;  // CUDNN_DETERMINISTIC
  int math_type = kMathDefault;
};

// The fastest of timed[0 .. count) that ran, needs at most `offered` workspace bytes (what
// the measurement had), is deterministic (as the heuristic choice: every call of a plan
// gives the same bits within a run) and ran with the plan's own math type `math` (a
// tensor-op result must not stand for an FMA plan's algorithm); the first of equal
// times; -1 when none qualifies.
inline int fastest(const Timed* timed, int count, std::size_t offered, int math) {
  int best = -1;
  for (int i = 0; i < count; ++i) {
    const Timed& t = timed[i];
    if (!t.ran || !t.deterministic || t.workspace > offered || t.math_type != math) continue;
    if (best < 0 || t.ms < timed[best].ms) best = i;
  }
  return best < 0 ? -1 : timed[best].algo;
}

// Hash of a Problem (FNV-1a over its fields).
struct ProblemHash {
  std::size_t operator()(const Problem& p) const {
    std::uint64_t h = 1469598103934665603ull;
    const Index f[] = {p.dtype, p.n, p.c_in, p.c_out, p.h, p.w, p.k, p.groups, p.tf32 ? 1 : 0,
                       p.benchmark ? 1 : 0};
    for (Index v : f) {
      h ^= static_cast<std::uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<std::size_t>(h);
  }
};

// A bounded cache of per-shape plans (descriptors, algorithms, workspace sizes),
// least recently used evicted first. V is moved in and owned; evict(v) is called
// on values that leave (to destroy descriptors).
template <class V>
class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // The cached plan of p (made most recent), or nullptr.
  V* find(const Problem& p) {
    auto it = index_.find(p);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Stores v as p's plan; returns it. Evicts the least recent beyond capacity,
  // handing each evicted value to evict.
  template <class Evict>
  V& insert(const Problem& p, V v, Evict evict) {
    auto it = index_.find(p);
    if (it != index_.end()) {
      evict(it->second->second);
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.emplace_front(p, std::move(v));
    index_[p] = order_.begin();
    while (order_.size() > capacity_) {
      evict(order_.back().second);
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }

  // Whether p has a plan (no hit or miss counted, recency unchanged).
  bool contains(const Problem& p) const { return index_.count(p) != 0; }

  template <class Evict>
  void clear(Evict evict) {
    for (auto& kv : order_) evict(kv.second);
    order_.clear();
    index_.clear();
  }

  std::size_t size() const { return order_.size(); }
  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }

 private:
  using Entry = std::pair<Problem, V>;
  std::size_t capacity_;
  std::list<Entry> order_;
  std::unordered_map<Problem, typename std::list<Entry>::iterator, ProblemHash> index_;
  std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace convplan
}  // namespace braidpy
