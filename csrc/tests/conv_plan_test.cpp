// Host tests of csrc/cuda/conv_plan.hpp: descriptor parameters against
// hand-computed values, and the grouped-over-intervals layout against
// per-interval convolutions. The references are naive loops written here from
// the definitions cuDNN documents for grouped cross-correlation (output channel
// o of group g reads input channels g * Cin/G .. (g + 1) * Cin/G - 1), forward,
// backward data, backward filter and the bias gradient. Prints one line per
// check ("ok  " / "FAIL"); exit code 1 on any failure.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../cuda/conv_plan.hpp"

namespace {

namespace cp = braidpy::convplan;
using cp::Index;
using Vec = std::vector<double>;

int failures = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

Vec values(Index n, double c) {
  Vec v(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = std::sin(1.3 * i + c);
  return v;
}

// A grouped convolution problem's sizes, for the references.
struct Shape {
  Index N, Cin, Cout, H, W, k, G;
  Index cin_g() const { return Cin / G; }
  Index cout_g() const { return Cout / G; }
  Index r() const { return (k - 1) / 2; }
  Index x(Index n, Index c, Index i, Index j) const { return ((n * Cin + c) * H + i) * W + j; }
  Index y(Index n, Index o, Index i, Index j) const { return ((n * Cout + o) * H + i) * W + j; }
  Index f(Index o, Index c, Index a, Index b) const { return ((o * cin_g() + c) * k + a) * k + b; }
};

// y[n, o, i, j] = sum_{c, a, b} f[o, c, a, b] x[n, g cin_g + c, i + a - r, j + b - r].
Vec ref_forward(const Shape& s, const Vec& x, const Vec& f) {
  Vec y(static_cast<std::size_t>(s.N * s.Cout * s.H * s.W), 0.0);
  for (Index n = 0; n < s.N; ++n)
    for (Index o = 0; o < s.Cout; ++o)
      for (Index i = 0; i < s.H; ++i)
        for (Index j = 0; j < s.W; ++j) {
          const Index g = o / s.cout_g();
          double acc = 0.0;
          for (Index c = 0; c < s.cin_g(); ++c)
            for (Index a = 0; a < s.k; ++a)
              for (Index b = 0; b < s.k; ++b) {
                const Index ii = i + a - s.r(), jj = j + b - s.r();
                if (ii < 0 || ii >= s.H || jj < 0 || jj >= s.W) continue;
                acc += f[s.f(o, c, a, b)] * x[s.x(n, g * s.cin_g() + c, ii, jj)];
              }
          y[s.y(n, o, i, j)] = acc;
        }
  return y;
}

// The transpose of x -> y: dx[n, g cin_g + c, ii, jj] += f[o, c, a, b] dy[n, o, i, j].
Vec ref_backward_data(const Shape& s, const Vec& f, const Vec& dy) {
  Vec dx(static_cast<std::size_t>(s.N * s.Cin * s.H * s.W), 0.0);
  for (Index n = 0; n < s.N; ++n)
    for (Index o = 0; o < s.Cout; ++o)
      for (Index i = 0; i < s.H; ++i)
        for (Index j = 0; j < s.W; ++j) {
          const Index g = o / s.cout_g();
          for (Index c = 0; c < s.cin_g(); ++c)
            for (Index a = 0; a < s.k; ++a)
              for (Index b = 0; b < s.k; ++b) {
                const Index ii = i + a - s.r(), jj = j + b - s.r();
                if (ii < 0 || ii >= s.H || jj < 0 || jj >= s.W) continue;
                dx[s.x(n, g * s.cin_g() + c, ii, jj)] += f[s.f(o, c, a, b)] * dy[s.y(n, o, i, j)];
              }
        }
  return dx;
}

// The transpose of f -> y: df[o, c, a, b] = sum_{n, i, j} dy[n, o, i, j] x[...].
Vec ref_backward_filter(const Shape& s, const Vec& x, const Vec& dy) {
  Vec df(static_cast<std::size_t>(s.Cout * s.cin_g() * s.k * s.k), 0.0);
  for (Index o = 0; o < s.Cout; ++o)
    for (Index c = 0; c < s.cin_g(); ++c)
      for (Index a = 0; a < s.k; ++a)
        for (Index b = 0; b < s.k; ++b) {
          const Index g = o / s.cout_g();
          double acc = 0.0;
          for (Index n = 0; n < s.N; ++n)
            for (Index i = 0; i < s.H; ++i)
              for (Index j = 0; j < s.W; ++j) {
                const Index ii = i + a - s.r(), jj = j + b - s.r();
                if (ii < 0 || ii >= s.H || jj < 0 || jj >= s.W) continue;
                acc += dy[s.y(n, o, i, j)] * x[s.x(n, g * s.cin_g() + c, ii, jj)];
              }
          df[s.f(o, c, a, b)] = acc;
        }
  return df;
}

// db[o] = sum_{n, i, j} dy[n, o, i, j].
Vec ref_bias(const Shape& s, const Vec& dy) {
  Vec db(static_cast<std::size_t>(s.Cout), 0.0);
  for (Index n = 0; n < s.N; ++n)
    for (Index o = 0; o < s.Cout; ++o)
      for (Index p = 0; p < s.H * s.W; ++p) db[o] += dy[(n * s.Cout + o) * s.H * s.W + p];
  return db;
}

double dot(const Vec& u, const Vec& v) {
  double s = 0.0;
  for (std::size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
  return s;
}

Vec pack(const Vec& stacked, Index m, Index N, Index C, Index P) {
  Vec out(stacked.size());
  for (Index e = 0; e < m * N * C * P; ++e) cp::pack_at(e, stacked.data(), out.data(), m, N, C, P);
  return out;
}

Vec unpack(const Vec& packed, Index m, Index N, Index C, Index P) {
  Vec out(packed.size());
  for (Index e = 0; e < m * N * C * P; ++e) cp::unpack_at(e, packed.data(), out.data(), m, N, C, P);
  return out;
}

Vec slice(const Vec& v, Index i, Index len) {
  return Vec(v.begin() + i * len, v.begin() + (i + 1) * len);
}

// ------------------------------------------------------------------ descriptors

void test_descriptors() {
  report(cp::same_padding(1) == 0 && cp::same_padding(3) == 1 && cp::same_padding(7) == 3,
         "same padding of k = 1, 3, 7 is 0, 1, 3");
  report(cp::same_padding(2) == -1 && cp::same_padding(0) == -1 && cp::same_padding(-3) == -1,
         "same padding refuses even and non-positive k");
  // The formula by hand: 1 + (28 + 2 - 3) / 1 = 28; 1 + (5 + 0 - 3) = 3; strided, dilated.
  report(cp::output_dim(28, 1, 3) == 28 && cp::output_dim(7, 2, 5) == 7 &&
             cp::output_dim(1, 3, 7) == 1,
         "output dim of 'same' padding is the input dim (k = 3, 5, 7)");
  report(cp::output_dim(5, 0, 3) == 3 && cp::output_dim(8, 1, 3, 2) == 4 &&
             cp::output_dim(9, 0, 3, 1, 2) == 5,
         "output dim: valid, strided, dilated by hand");
  const cp::Tensor4 t = cp::nchw(2, 3, 4, 5);
  report(t.n == 2 && t.c == 3 && t.h == 4 && t.w == 5 && t.ns == 60 && t.cs == 20 && t.hs == 5 &&
             t.ws == 1,
         "nchw(2, 3, 4, 5) strides (60, 20, 5, 1)");

  cp::Problem p;
  p.n = 32; p.c_in = 8; p.c_out = 8; p.h = 28; p.w = 28; p.k = 3;
  report(cp::check(p).empty(), "an MNIST-size problem is describable");
  const cp::Tensor4 y = cp::output_desc(p);
  report(y.n == 32 && y.c == 8 && y.h == 28 && y.w == 28 && y.ns == 8 * 784 && y.cs == 784,
         "output descriptor (32, 8, 28, 28), packed");
  const cp::Filter4 f = cp::filter_desc(p);
  report(f.k == 8 && f.c == 8 && f.h == 3 && f.w == 3, "filter descriptor (8, 8, 3, 3)");
  const cp::Conv2 c = cp::conv_desc(p);
  report(c.pad_h == 1 && c.pad_w == 1 && c.stride_h == 1 && c.dil_w == 1 && c.groups == 1,
         "convolution descriptor pad 1, stride 1, dilation 1, 1 group");

  // Grouped over m = 6 intervals of (batch 4, C 3, 7 x 5), k = 5.
  const cp::Problem g = cp::grouped_over_intervals(6, 4, 3, 7, 5, 5, cp::kF32);
  report(cp::check(g).empty() && g.groups == 6 && g.c_in == 18 && g.c_out == 18,
         "grouped problem: 6 groups of 3 channels");
  const cp::Tensor4 gx = cp::input_desc(g);
  report(gx.n == 4 && gx.c == 18 && gx.ns == 18 * 35 && gx.cs == 35 && gx.hs == 5,
         "grouped input descriptor (4, 18, 7, 5), packed");
  const cp::Filter4 gf = cp::filter_desc(g);
  report(gf.k == 18 && gf.c == 3 && gf.h == 5, "grouped filter descriptor (18, 3, 5, 5)");
  report(cp::conv_desc(g).groups == 6 && cp::conv_desc(g).pad_h == 2, "grouped conv: 6 groups, pad 2");
  const cp::Tensor4 gb = cp::bias_desc(g);
  report(gb.n == 1 && gb.c == 18 && gb.h == 1 && gb.w == 1 && gb.ns == 18 && gb.cs == 1,
         "bias descriptor (1, 18, 1, 1) = the stacked (6, 3) biases");

  cp::Problem bad = p;
  bad.k = 4;
  report(cp::check(bad).find("k = 4 must be odd") != std::string::npos, "even k refused by name");
  bad = p;
  bad.groups = 3;
  report(cp::check(bad).find("group count 3 must divide") != std::string::npos,
         "group count not dividing the channels refused");
  bad = p;
  bad.h = 0;
  report(cp::check(bad).find("image 0 x 28") != std::string::npos, "zero height refused");
  bad = p;
  bad.dtype = 3;
  report(cp::check(bad).find("dtype code 3") != std::string::npos, "unknown dtype refused");
  bad = p;
  bad.n = 1 << 20; bad.c_in = bad.c_out = 64;
  report(cp::check(bad).find("32-bit") != std::string::npos, "a tensor of >= 2^31 elements refused");
}

// ------------------------------------------------------------------ grouped layout

void test_pack_by_hand() {
  // m = 2 intervals, N = 2 images, C = 1, P = 1: stacked (i, n) order s0=(0,0),
  // s1=(0,1), s2=(1,0), s3=(1,1); packed (n, i) order: s0, s2, s1, s3.
  const Vec s = {10, 11, 20, 21};
  const Vec pk = pack(s, 2, 2, 1, 1);
  report(pk == Vec({10, 20, 11, 21}), "pack by hand: (interval, image) -> (image, interval)");
  report(unpack(pk, 2, 2, 1, 1) == s, "unpack by hand");
  report(cp::packed_offset(1, 2, 0, 3, 3, 2, 5) == ((2 * 3 + 1) * 2 + 0) * 5 + 3 &&
             cp::stacked_offset(1, 2, 0, 3, 4, 2, 5) == ((1 * 4 + 2) * 2 + 0) * 5 + 3,
         "packed and stacked offsets by hand");
  // Kernels need no copy: every tap's stacked offset is its grouped-filter offset.
  bool same = true;
  const Index m = 3, C = 2, k = 3;
  for (Index i = 0; i < m; ++i)
    for (Index o = 0; o < C; ++o)
      for (Index c = 0; c < C; ++c)
        for (Index a = 0; a < k; ++a)
          for (Index b = 0; b < k; ++b)
            same = same && cp::stacked_kernel_offset(i, o, c, a, b, C, k) ==
                               cp::grouped_filter_offset(i, o, c, a, b, C, k);
  report(same, "stacked kernels (m, C, C, k, k) are the grouped filter (m C, C, k, k) as is");
}

void test_references_by_hand() {
  // conv2d's docstring example: a 3 x 3 ramp with a ones kernel sums neighbourhoods.
  const Shape s{1, 1, 1, 3, 3, 3, 1};
  Vec x(9);
  for (int i = 0; i < 9; ++i) x[i] = i;
  const Vec y = ref_forward(s, x, Vec(9, 1.0));
  report(y == Vec({8, 15, 12, 21, 36, 27, 20, 33, 24}), "reference forward by hand");
  // Adjoint identities: <conv(x, f), dy> = <x, bwd_data(f, dy)> = <f, bwd_filter(x, dy)>.
  const Shape t{2, 4, 6, 5, 4, 3, 2};
  const Vec xx = values(2 * 4 * 5 * 4, 0.1), ff = values(6 * 2 * 9, 0.7),
            dy = values(2 * 6 * 5 * 4, 1.9);
  const double lhs = dot(ref_forward(t, xx, ff), dy);
  report(std::fabs(lhs - dot(xx, ref_backward_data(t, ff, dy))) < 1e-12 * std::fabs(lhs) + 1e-12,
         "reference backward data is the forward's transpose (2 groups)");
  report(std::fabs(lhs - dot(ff, ref_backward_filter(t, xx, dy))) < 1e-12 * std::fabs(lhs) + 1e-12,
         "reference backward filter is the forward's transpose (2 groups)");
}

// Grouped over m intervals equals m per-interval convolutions, for every
// operation, bit for bit (the references sum in the same order).
void test_grouped_equals_per_interval(Index m, Index N, Index C, Index H, Index W, Index k) {
  const std::string tag = " (m " + std::to_string(m) + ", N " + std::to_string(N) + ", C " +
                          std::to_string(C) + ", " + std::to_string(H) + "x" + std::to_string(W) +
                          ", k " + std::to_string(k) + ")";
  const Index P = H * W, len = N * C * P, klen = C * C * k * k;
  const Vec U = values(m * len, 0.3), Ks = values(m * klen, 1.1), dY = values(m * len, 2.3);
  const cp::Problem gp = cp::grouped_over_intervals(m, N, C, H, W, k, cp::kF64);
  const cp::Filter4 gf = cp::filter_desc(gp);
  const Shape g{N, gp.c_in, gp.c_out, H, W, gf.h, gp.groups};
  const Shape one{N, C, C, H, W, k, 1};
  report(g.cin_g() == C && gf.c == C && gf.k == m * C, "grouped shape from the plan" + tag);

  const Vec X = pack(U, m, N, C, P), dYp = pack(dY, m, N, C, P);
  report(unpack(X, m, N, C, P) == U, "unpack(pack(U)) == U" + tag);
  const Vec Y = unpack(ref_forward(g, X, Ks), m, N, C, P);
  const Vec dX = unpack(ref_backward_data(g, Ks, dYp), m, N, C, P);
  const Vec dK = ref_backward_filter(g, X, dYp);
  const Vec db = ref_bias(Shape{N, gp.c_out, gp.c_out, H, W, k, 1}, dYp);
  bool fwd = true, bwd = true, fil = true, bias = true;
  for (Index i = 0; i < m; ++i) {
    const Vec u = slice(U, i, len), K = slice(Ks, i, klen), dy = slice(dY, i, len);
    fwd = fwd && slice(Y, i, len) == ref_forward(one, u, K);
    bwd = bwd && slice(dX, i, len) == ref_backward_data(one, K, dy);
    fil = fil && slice(dK, i, klen) == ref_backward_filter(one, u, dy);
    bias = bias && slice(db, i, C) == ref_bias(one, dy);
  }
  report(fwd, "grouped forward == per-interval forward" + tag);
  report(bwd, "grouped backward data == per-interval backward data" + tag);
  report(fil, "grouped backward filter == per-interval backward filter" + tag);
  report(bias, "grouped bias gradient (1, m C) == per-interval (m, C)" + tag);
}

// ------------------------------------------------------------------ bookkeeping

void test_workspace() {
  cp::Workspace w;
  report(w.request() == 0, "no workspace asked: none requested");
  w.record(cp::kForward, 1);
  report(w.request() == 256, "1 byte asked: 256 requested");
  w.record(cp::kBackwardData, 256);
  w.record(cp::kBackwardFilter, 1000);
  report(w.request() == 1024, "the largest of the three, rounded to 256: 1024");
  report(w.enough(cp::kForward, 256) && w.enough(cp::kBackwardFilter, 1000) &&
             !w.enough(cp::kBackwardFilter, 999),
         "enough() compares with each operation's own need");
}

void test_cache() {
  int evicted = 0;
  auto evict = [&](int&) { ++evicted; };
  cp::PlanCache<int> cache(2);
  cp::Problem a, b, c;
  a.n = 1; a.c_in = a.c_out = 2; a.h = a.w = 3; a.k = 3;
  b = a; b.dtype = cp::kF32;   // same shape, other dtype: another key
  c = a; c.groups = 2;         // same shape, grouped: another key
  report(cache.find(a) == nullptr && cache.misses() == 1, "empty cache misses");
  cache.insert(a, 1, evict);
  cache.insert(b, 2, evict);
  report(cache.find(a) && *cache.find(a) == 1 && *cache.find(b) == 2 && cache.hits() == 3,
         "keyed by shape and dtype");
  cache.find(a);  // a most recent: b is evicted next
  cache.insert(c, 3, evict);
  report(cache.size() == 2 && evicted == 1 && cache.find(b) == nullptr && *cache.find(c) == 3,
         "least recently used evicted beyond capacity, evict() called");
  cache.insert(c, 4, evict);
  report(evicted == 2 && *cache.find(c) == 4 && cache.size() == 2,
         "re-inserting a key replaces (and evicts) its plan");
  cache.clear(evict);
  report(evicted == 4 && cache.size() == 0, "clear evicts every plan");
  report(cp::ProblemHash()(a) != cp::ProblemHash()(b) && !(a == b) && !(a == c),
         "hash and equality see dtype and groups");
}

// The convolution descriptor's math type: TF32 tensor cores only for float32 that asks
// for them (CUDNN_TENSOR_OP_MATH, never ..._ALLOW_CONVERSION = 2), FMA only for other
// float32, the default for float64 whatever it asks; and a TF32 problem is a plan of its
// own (its descriptor differs).
void test_math_type() {
  report(cp::math_type(cp::kF32, false) == 3 && cp::math_type(cp::kF32, true) == 1,
         "float32: FMA math (3) by default, tensor-op math (1) with tf32");
  report(cp::math_type(cp::kF64, false) == 0 && cp::math_type(cp::kF64, true) == 0,
         "float64: the default math (0), tf32 ignored");
  cp::Problem a;
  a.dtype = cp::kF32; a.n = 2; a.c_in = a.c_out = 8; a.h = a.w = 28; a.k = 3; a.groups = 2;
  cp::Problem t = a;
  t.tf32 = true;
  report(!(a == t) && cp::ProblemHash()(a) != cp::ProblemHash()(t),
         "tf32 is part of the plan cache's key");
  cp::PlanCache<int> cache(4);
  cache.insert(a, 1, [](int&) {});
  report(cache.find(t) == nullptr && *cache.find(a) == 1, "a tf32 problem misses a plain plan");
}

// The measured choice (BRAIDPY_CUDNN_BENCHMARK=1): the workspace a measurement offers, and
// the fastest algorithm that ran, fits that workspace, is deterministic and has the plan's
// math type, from records in no particular order; its plan is a cache entry of its own.
void test_measured_choice() {
  const std::size_t limit = cp::kMeasureWorkspaceLimit;
  const std::size_t needs[] = {0, 5000, limit + 1, 300, limit};
  report(cp::measure_offer(needs, 4, limit) == 5000 && cp::measure_offer(needs, 5, limit) == limit,
         "measurement offers the largest need within the 1 GiB limit");
  report(cp::measure_offer(needs, 1, limit) == 0 && cp::measure_offer(needs + 2, 1, limit) == 0 &&
             cp::measure_offer(needs, 0, limit) == 0,
         "nothing asked within the limit: no workspace offered");

  auto timed = [](int algo, bool ran, float ms, std::size_t ws, bool det, int math) {
    cp::Timed t;
    t.algo = algo; t.ran = ran; t.ms = ms; t.workspace = ws; t.deterministic = det;
    t.math_type = math;
    return t;
  };
  const int fma = cp::kMathFma;
  const cp::Timed rec[] = {
      timed(0, true, 1.0f, 0, true, fma),         // slow, no workspace
      timed(1, true, 0.5f, 100, true, fma),       // the fastest that fits 100 bytes
      timed(2, true, 0.1f, 1000, true, fma),      // faster, needs 1000 bytes
      timed(3, false, 0.05f, 0, true, fma),       // failed
      timed(4, true, 0.02f, 0, false, fma),       // not deterministic
      timed(5, true, 0.01f, 0, true, cp::kMathTensorOp),  // another math type
      timed(6, true, 0.5f, 100, true, fma)};      // as fast as algorithm 1, listed later
  report(cp::fastest(rec, 7, 100, fma) == 1,
         "measured: the fastest that ran, fits, is deterministic and has the plan's math type");
  report(cp::fastest(rec, 7, 1000, fma) == 2, "measured: a larger workspace admits a faster one");
  report(cp::fastest(rec, 7, 99, fma) == 0, "measured: workspace 99 bytes leaves the slowest");
  report(cp::fastest(rec, 7, 0, cp::kMathTensorOp) == 5,
         "measured: a tensor-op plan takes its tensor-op record");
  report(cp::fastest(rec + 3, 3, 1000, fma) == -1 && cp::fastest(rec, 0, 1000, fma) == -1,
         "measured: none qualifies -> -1 (the heuristic choice stays)");

  cp::Problem a;
  a.dtype = cp::kF64; a.n = 2; a.c_in = a.c_out = 8; a.h = a.w = 6; a.k = 3; a.groups = 4;
  cp::Problem b = a;
  b.benchmark = true;
  report(!(a == b) && cp::ProblemHash()(a) != cp::ProblemHash()(b),
         "benchmark is part of the plan cache's key");
  cp::PlanCache<int> cache(4);
  cache.insert(a, 1, [](int&) {});
  report(cache.contains(a) && !cache.contains(b) && cache.hits() == 0 && cache.misses() == 0,
         "contains() sees the measured key apart and counts no hit or miss");
}

}  // namespace

int main() {
  test_descriptors();
  test_pack_by_hand();
  test_references_by_hand();
  test_grouped_equals_per_interval(1, 1, 1, 1, 1, 1);
  test_grouped_equals_per_interval(3, 2, 2, 5, 4, 3);
  test_grouped_equals_per_interval(4, 3, 3, 6, 7, 5);
  test_grouped_equals_per_interval(2, 1, 4, 3, 3, 1);
  test_workspace();
  test_cache();
  test_math_type();
  test_measured_choice();
  std::printf("%s: %d failed\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
