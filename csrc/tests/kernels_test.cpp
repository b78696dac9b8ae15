// Host tests of the device kernels' arithmetic: csrc/cuda/kernels.hpp compiled by
// the host compiler and driven the way kernels.cu's launchers drive it (every
// index of a launch, the norm's partial sums and tree), against references
// written independently here. Prints one line per check ("ok  " / "FAIL");
// exit code 1 on any failure. Built with -DBRAIDPY_BUILD_TESTS=ON.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../cuda/conv_direct.hpp"
#include "../cuda/kernels.hpp"

namespace {

using braidpy::kern::Index;
namespace kern = braidpy::kern;

int failures = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Values with nothing special about their bits (no magic seed): x_i = sin(i + c).
template <class T>
std::vector<T> values(Index n, double c) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(std::sin(1.7 * i + c));
  return v;
}

// What axpby_kernel computes: every index of the launch.
template <class T>
void launch_axpby(double a, const T* x, double b, T* y, Index n) {
  for (Index i = 0; i < n; ++i) kern::axpby_at(i, static_cast<T>(a), x, static_cast<T>(b), y);
}

template <class T>
bool bit_equal(const std::vector<T>& u, const std::vector<T>& v) {
  return u.size() == v.size() && (u.empty() || std::memcmp(u.data(), v.data(), u.size() * sizeof(T)) == 0);
}

// y <- a*x + b*y, the reference: NumPy's in-place operators (braidpy.backends._axpby).
template <class T>
void reference_axpby(T a, const std::vector<T>& x0, T b, std::vector<T>& y, bool alias) {
  const std::vector<T> x = alias ? y : x0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (b == T(1)) {
      if (a == T(0)) continue;
      if (a == T(1)) y[i] = y[i] + x[i];
      else if (a == T(-1)) y[i] = y[i] - x[i];
      else y[i] = y[i] + a * x[i];
    } else if (a == T(0)) {
      y[i] = y[i] * b;
    } else {
      const T ax = a == T(1) ? x[i] : a * x[i];
      y[i] = y[i] * b;
      y[i] = y[i] + ax;
    }
  }
}

template <class T>
void test_axpby(const char* type) {
  const double cases[][2] = {{0.0, 1.0}, {0.0, 0.0}, {0.0, -2.5}, {1.0, 1.0}, {-1.0, 1.0},
                             {0.3, 1.0}, {1.0, 0.0}, {-1.0, 0.7}, {2.5, -0.25}, {1.0, 2.0}};
  for (Index n : {Index(0), Index(1), Index(7), Index(257), Index(1000)}) {
    for (const auto& ab : cases) {
      for (bool alias : {false, true}) {
        const T a = static_cast<T>(ab[0]), b = static_cast<T>(ab[1]);
        std::vector<T> x = values<T>(n, 0.5), y = values<T>(n, 2.0), want = y;
        reference_axpby(a, x, b, want, alias);
        if (alias) launch_axpby<T>(ab[0], y.data(), ab[1], y.data(), n);
        else launch_axpby<T>(ab[0], x.data(), ab[1], y.data(), n);
        char what[128];
        std::snprintf(what, sizeof what, "axpby<%s> n=%lld a=%g b=%g%s", type,
                      static_cast<long long>(n), ab[0], ab[1], alias ? " (x is y)" : "");
        report(bit_equal(y, want), what);
      }
    }
  }
  // x is never written.
  std::vector<T> x = values<T>(33, 0.1), x0 = x, y = values<T>(33, 0.2);
  launch_axpby<T>(2.0, x.data(), 3.0, y.data(), 33);
  report(bit_equal(x, x0), std::string("axpby<") + type + "> leaves x alone");
}

// What axpby_rows_kernel computes: every element of every pair, pairs of separate rows
// (one pair with x is y), against the single-pair reference row by row.
template <class T>
void test_axpby_rows(const char* type) {
  const double cases[][2] = {{1.0, -1.0}, {1.0, 1.0}, {-1.0, 1.0}, {0.3, 1.0}, {2.5, -0.25}};
  for (Index len : {Index(1), Index(8), Index(301)}) {
    for (const auto& ab : cases) {
      const Index nrows = 3;
      std::vector<std::vector<T>> x, y, want;
      for (Index r = 0; r < nrows; ++r) {
        x.push_back(values<T>(len, 0.5 + r));
        y.push_back(values<T>(len, 2.0 + 3 * r));
      }
      const T* xs[3] = {x[0].data(), x[1].data(), y[2].data()};  // pair 2: x is y
      T* ys[3] = {y[0].data(), y[1].data(), y[2].data()};
      for (Index r = 0; r < nrows; ++r) {
        want.push_back(y[static_cast<std::size_t>(r)]);
        reference_axpby(static_cast<T>(ab[0]), x[static_cast<std::size_t>(r)],
                        static_cast<T>(ab[1]), want.back(), r == 2);
      }
      for (Index i = 0; i < nrows * len; ++i)
        kern::axpby_rows_at(i, static_cast<T>(ab[0]), xs, static_cast<T>(ab[1]), ys, len);
      bool ok = true;
      for (Index r = 0; r < nrows; ++r)
        ok = ok && bit_equal(y[static_cast<std::size_t>(r)], want[static_cast<std::size_t>(r)]);
      char what[128];
      std::snprintf(what, sizeof what, "axpby_rows<%s> 3 pairs of %lld a=%g b=%g", type,
                    static_cast<long long>(len), ab[0], ab[1]);
      report(ok, what);
    }
  }
}

// What step_epilogue_kernel computes, against the unfused operations written out with
// 5-d indices: Z = unpack(Y) + b, A = act(Z), S = h * A, out = U + S (one rounding each).
template <class T>
void test_step_epilogue(const char* type) {
  const Index m = 3, N = 2, C = 4, H = 3, W = 5, HW = H * W, total = m * N * C * HW;
  const std::vector<T> U = values<T>(total, 0.3), Y = values<T>(total, 1.1),
                       b = values<T>(m * C, 2.2), h = values<T>(m, 0.7);
  for (int act : {kern::kActTanh, kern::kActRelu}) {
    std::vector<T> out(static_cast<std::size_t>(total), T(-7)), want(out.size());
    for (Index i = 0; i < total; ++i)
      kern::step_epilogue_at(i, U.data(), Y.data(), b.data(), h.data(), act, m, N, C, HW,
                             out.data());
    for (Index iv = 0; iv < m; ++iv)
      for (Index n = 0; n < N; ++n)
        for (Index c = 0; c < C; ++c)
          for (Index p = 0; p < HW; ++p) {
            const T z = Y[static_cast<std::size_t>(((n * m + iv) * C + c) * HW + p)] +
                        b[static_cast<std::size_t>(iv * C + c)];
            const T a = act == kern::kActTanh ? static_cast<T>(std::tanh(z))
                                              : (z > T(0) ? z : T(0));
            const T s = h[static_cast<std::size_t>(iv)] * a;
            const std::size_t i = static_cast<std::size_t>(((iv * N + n) * C + c) * HW + p);
            want[i] = U[i] + s;
          }
    report(bit_equal(out, want), std::string("step_epilogue<") + type + "> " +
                                     (act == kern::kActTanh ? "tanh" : "relu"));
  }
}

// The dense steps' element functions, against the unfused operations written out:
// z + b, the activation (smooth_relu by its piecewise formula), *h, +u; act', *w, *h.
template <class T>
void test_dense_elements(const char* type) {
  const Index n = 64;
  const std::vector<T> u = values<T>(n, 0.4), z = values<T>(n, 1.3), w = values<T>(n, 2.9);
  const T b = T(0.031), h = T(0.37), eps = T(0.1);
  for (int act : {kern::kActTanh, kern::kActRelu, kern::kActSmoothRelu}) {
    bool ok = true;
    for (Index i = 0; i < n; ++i) {
      const T x = z[static_cast<std::size_t>(i)] * T(0.2) + b;  // many in [-eps, eps]
      T a, d;
      if (act == kern::kActTanh) {
        a = static_cast<T>(std::tanh(x));
        d = T(1) - a * a;
      } else if (act == kern::kActRelu) {
        a = x > T(0) ? x : T(0);
        d = x > T(0) ? T(1) : T(0);
      } else {
        const T s = (x < -eps ? -eps : (x > eps ? eps : x)) + eps;
        a = x > eps ? x : s * s * T(1 / 0.4);
        d = s * T(1 / 0.2);
      }
      const T zi = z[static_cast<std::size_t>(i)] * T(0.2);
      const T f = kern::dense_step_value(act, u[static_cast<std::size_t>(i)], zi, b, h);
      const T g = kern::dense_slope_value(act, w[static_cast<std::size_t>(i)], zi, b, h);
      const T want_f = u[static_cast<std::size_t>(i)] + h * a;
      const T want_g = (d * w[static_cast<std::size_t>(i)]) * h;
      ok = ok && std::memcmp(&f, &want_f, sizeof(T)) == 0 &&
           std::memcmp(&g, &want_g, sizeof(T)) == 0;
    }
    report(ok, std::string("dense elements<") + type + "> act " + std::to_string(act));
  }
}

// What dense_finish_kernel computes: every index of a launch over Z (m, rows, width),
// against the element functions called with the bias and step size of each element's
// interval and column found by 3-d indices (stacked: h per interval; single: h0), into
// a separate out and in place over Z and over X.
template <class T>
void test_dense_finish(const char* type) {
  const Index m = 3, rows = 4, width = 5, total = m * rows * width;
  const std::vector<T> Z = values<T>(total, 0.6), X = values<T>(total, 1.9),
                       b = values<T>(m * width, 2.6), h = values<T>(m, 0.8);
  const T h0 = T(0.37);
  for (bool slope : {false, true})
    for (int act : {kern::kActTanh, kern::kActRelu, kern::kActSmoothRelu})
      for (bool stacked : {true, false}) {
        const Index mm = stacked ? m : 1, n = mm * rows * width;
        std::vector<T> want(static_cast<std::size_t>(n));
        for (Index iv = 0; iv < mm; ++iv)
          for (Index r = 0; r < rows; ++r)
            for (Index j = 0; j < width; ++j) {
              const std::size_t i = static_cast<std::size_t>((iv * rows + r) * width + j);
              const T bv = b[static_cast<std::size_t>(iv * width + j)];
              const T hv = stacked ? h[static_cast<std::size_t>(iv)] : h0;
              want[i] = slope ? kern::dense_slope_value(act, X[i], Z[i], bv, hv)
                              : kern::dense_step_value(act, X[i], Z[i], bv, hv);
            }
        const T* hp = stacked ? h.data() : nullptr;
        std::vector<T> out(static_cast<std::size_t>(n), T(-7));
        std::vector<T> overZ(Z.begin(), Z.begin() + n), overX(X.begin(), X.begin() + n);
        for (Index i = 0; i < n; ++i) {
          if (slope) {
            kern::dense_finish_at<T, true>(i, act, Z.data(), X.data(), b.data(), hp, h0, rows,
                                           width, out.data());
            kern::dense_finish_at<T, true>(i, act, overZ.data(), X.data(), b.data(), hp, h0,
                                           rows, width, overZ.data());
            kern::dense_finish_at<T, true>(i, act, Z.data(), overX.data(), b.data(), hp, h0,
                                           rows, width, overX.data());
          } else {
            kern::dense_finish_at<T, false>(i, act, Z.data(), X.data(), b.data(), hp, h0,
                                            rows, width, out.data());
            kern::dense_finish_at<T, false>(i, act, overZ.data(), X.data(), b.data(), hp, h0,
                                            rows, width, overZ.data());
            kern::dense_finish_at<T, false>(i, act, Z.data(), overX.data(), b.data(), hp, h0,
                                            rows, width, overX.data());
          }
        }
        report(bit_equal(out, want) && bit_equal(overZ, want) && bit_equal(overX, want),
               std::string("dense finish<") + type + "> " + (slope ? "slope" : "step") +
                   " act " + std::to_string(act) + (stacked ? " stacked" : " single") +
                   " (out, over Z, over X)");
      }
}

// What gather_kernel computes: every element of the block.
template <class T>
void test_gather(const char* type) {
  for (Index len : {Index(1), Index(5), Index(300)}) {
    const Index nrows = 4;
    std::vector<std::vector<T>> srcs = {values<T>(len, 1.0), values<T>(len, 2.0),
                                        values<T>(len, 3.0)};
    const T* table[4] = {srcs[0].data(), nullptr, srcs[1].data(), srcs[2].data()};
    std::vector<T> block(static_cast<std::size_t>(nrows * len), T(7));
    for (Index i = 0; i < nrows * len; ++i) kern::gather_at(i, table, len, block.data());
    bool ok = true;
    for (Index r = 0; r < nrows; ++r)
      for (Index j = 0; j < len; ++j) {
        const T want = table[r] != nullptr ? table[r][j] : T(0);
        ok = ok && std::memcmp(&block[static_cast<std::size_t>(r * len + j)], &want, sizeof(T)) == 0;
      }
    char what[96];
    std::snprintf(what, sizeof what, "gather<%s> 4 rows of %lld (row 1 a zero placeholder)",
                  type, static_cast<long long>(len));
    report(ok, what);
  }
}

// Reference norm: a plain sum in long double, then sqrt.
template <class T>
double reference_norm(const std::vector<T>& row) {
  long double s = 0.0L;
  for (T v : row) s += static_cast<long double>(v) * static_cast<long double>(v);
  return static_cast<double>(std::sqrt(s));
}

// The order the kernel sums in, spelled out independently: thread t's elements
// t, t+256, ... left to right, then pairs (t, t+s) for s = 128, 64, ..., 1.
template <class T>
double kernel_order_norm(const std::vector<T>& row) {
  std::vector<double> parts(kern::kNormThreads, 0.0);
  for (std::size_t j = 0; j < row.size(); ++j) {
    const double v = static_cast<double>(row[j]);
    parts[j % kern::kNormThreads] += v * v;
  }
  for (int s = kern::kNormThreads / 2; s > 0; s /= 2)
    for (int t = 0; t < s; ++t) parts[static_cast<std::size_t>(t)] += parts[static_cast<std::size_t>(t + s)];
  return std::sqrt(parts[0]);
}

template <class T>
void test_norms(const char* type) {
  for (Index len : {Index(1), Index(2), Index(3), Index(255), Index(256), Index(257), Index(1001),
                    Index(4096)}) {
    const std::vector<T> row = values<T>(len, 0.25);
    const double got = kern::row_norm_host(row.data(), len);
    const double ref = reference_norm(row);
    char what[128];
    std::snprintf(what, sizeof what, "row norm<%s> len=%lld: %.17g vs %.17g", type,
                  static_cast<long long>(len), got, ref);
    report(std::fabs(got - ref) <= 1e-14 * ref, what);
    std::snprintf(what, sizeof what, "row norm<%s> len=%lld in the kernel's fixed order", type,
                  static_cast<long long>(len));
    report(got == kernel_order_norm(row), what);
  }
  // Exact cases: zero rows, a 3-4-5 row, ones (sqrt(n) exact for squares).
  const std::vector<T> zeros(300, T(0));
  report(kern::row_norm_host(zeros.data(), 300) == 0.0, std::string("row norm<") + type + "> of a zero row");
  report(kern::row_norm_host(zeros.data(), 0) == 0.0, std::string("row norm<") + type + "> of an empty row");
  const std::vector<T> tri = {T(3), T(0), T(-4)};
  report(kern::row_norm_host(tri.data(), 3) == 5.0, std::string("row norm<") + type + "> of (3, 0, -4)");
  const std::vector<T> ones(1024, T(1));
  report(kern::row_norm_host(ones.data(), 1024) == 32.0, std::string("row norm<") + type + "> of 1024 ones");
  // One row's norm does not depend on the other rows of a launch (each row is
  // its own block): rows of a stacked block give each row's own norm.
  std::vector<T> block = values<T>(3 * 77, 0.9);
  bool ok = true;
  for (int r = 0; r < 3; ++r) {
    std::vector<T> alone(block.begin() + r * 77, block.begin() + (r + 1) * 77);
    ok = ok && kern::row_norm_host(block.data() + r * 77, 77) == kern::row_norm_host(alone.data(), 77);
  }
  report(ok, std::string("row norms<") + type + "> of a block's rows are the rows' own");
  // float rows accumulate in double: no float rounding of the squares.
  if (sizeof(T) == 4) {
    const std::vector<T> big(4096, static_cast<T>(1.0000001));
    const double want = std::sqrt(4096.0 * static_cast<double>(big[0]) * static_cast<double>(big[0]));
    report(std::fabs(kern::row_norm_host(big.data(), 4096) - want) <= 1e-15 * want,
           "row norm<float> accumulates in double");
  }
}

// ------------------------------------------------------- direct convolutions (conv_direct.hpp)

struct ConvCase {
  Index m, N, C, H, W, k;
};

// The convolution at (iv, n, o, y, x), written from the definition with 5-d indices: taps
// over c, dy, dx ascending, a tap outside the plane as K * 0 (the kernels' documented
// order, so the kernels must give these bits).
template <class T>
T reference_conv(const std::vector<T>& X, const std::vector<T>& K, const ConvCase& c, Index iv,
                 Index n, Index o, Index y, Index x) {
  const Index p = c.k / 2;
  T acc = T(0);
  for (Index ci = 0; ci < c.C; ++ci)
    for (Index dy = 0; dy < c.k; ++dy)
      for (Index dx = 0; dx < c.k; ++dx) {
        const Index yy = y + dy - p, xx = x + dx - p;
        const bool in = yy >= 0 && yy < c.H && xx >= 0 && xx < c.W;
        const T v = in ? X[static_cast<std::size_t>((((iv * c.N + n) * c.C + ci) * c.H + yy) * c.W + xx)] : T(0);
        acc = acc + K[static_cast<std::size_t>((((iv * c.C + o) * c.C + ci) * c.k + dy) * c.k + dx)] * v;
      }
  return acc;
}

// The transpose (input VJP) at input channel ci: sum over o, then the taps (dy, dx) from
// the last to the first, of K[o, ci, dy, dx] * G[o, y - dy + p, x - dx + p] (each output
// the tap fed, as the scatter form of conv^T reads; documented order).
template <class T>
T reference_transpose(const std::vector<T>& G, const std::vector<T>& K, const ConvCase& c,
                      Index iv, Index n, Index ci, Index y, Index x) {
  const Index p = c.k / 2;
  T acc = T(0);
  for (Index o = 0; o < c.C; ++o)
    for (Index dy = c.k - 1; dy >= 0; --dy)
      for (Index dx = c.k - 1; dx >= 0; --dx) {
        const Index yy = y - dy + p, xx = x - dx + p;
        const bool in = yy >= 0 && yy < c.H && xx >= 0 && xx < c.W;
        const T g = in ? G[static_cast<std::size_t>((((iv * c.N + n) * c.C + o) * c.H + yy) * c.W + xx)] : T(0);
        acc = acc + K[static_cast<std::size_t>((((iv * c.C + o) * c.C + ci) * c.k + dy) * c.k + dx)] * g;
      }
  return acc;
}

// Mode `mode` of a family on the host: the element functions, or the tiled or wide
// kernels' block-by-block emulation. X is U (G for the transpose).
template <class T>
std::vector<T> conv_family_run(int family, int mode, int act, const std::vector<T>& X,
                               const std::vector<T>& K, const std::vector<T>& Wa,
                               const std::vector<T>& b, const std::vector<T>& h,
                               const kern::ConvDims& d) {
  std::vector<T> out(X.size(), T(-7));
  const T* U = mode == kern::kConvTransposeAdd ? nullptr : X.data();
  if (family == kern::kConvTiled)
    kern::conv_tiled_host(mode, X.data(), K.data(), d, U, Wa.data(), b.data(), h.data(), act,
                          out.data());
  else if (family == kern::kConvWide)
    kern::conv_wide_host(mode, X.data(), K.data(), d, U, Wa.data(), b.data(), h.data(), act,
                         out.data());
  else
    for (Index i = 0; i < d.size(); ++i) {
      if (mode == kern::kConvStep)
        kern::conv_step_at(i, X.data(), K.data(), b.data(), h.data(), act, d, out.data());
      else if (mode == kern::kConvG)
        kern::conv_step_g_at(i, Wa.data(), X.data(), K.data(), b.data(), h.data(), act, d,
                             out.data());
      else kern::conv_transpose_add_at(i, Wa.data(), X.data(), K.data(), d, out.data());
    }
  return out;
}

// The reference of a mode: the sums above and the epilogue's operations written out.
template <class T>
std::vector<T> conv_reference_run(int mode, int act, const std::vector<T>& X,
                                  const std::vector<T>& K, const std::vector<T>& Wa,
                                  const std::vector<T>& b, const std::vector<T>& h,
                                  const ConvCase& c) {
  std::vector<T> out(X.size());
  std::size_t i = 0;
  for (Index iv = 0; iv < c.m; ++iv)
    for (Index n = 0; n < c.N; ++n)
      for (Index ch = 0; ch < c.C; ++ch)
        for (Index y = 0; y < c.H; ++y)
          for (Index x = 0; x < c.W; ++x, ++i) {
            const T bias = b[static_cast<std::size_t>(iv * c.C + ch)], hv = h[static_cast<std::size_t>(iv)];
            if (mode == kern::kConvTransposeAdd) {
              out[i] = Wa[i] + reference_transpose(X, K, c, iv, n, ch, y, x);
              continue;
            }
            const T z = reference_conv(X, K, c, iv, n, ch, y, x) + bias;
            if (mode == kern::kConvStep) out[i] = X[i] + hv * kern::activate(act, z);
            else out[i] = hv * (Wa[i] * kern::activate_derivative(act, z));
          }
  return out;
}

const char* const kConvModeNames[] = {"step", "g", "transpose_add"};
const char* const kConvFamilyNames[] = {"element", "tiled", "wide"};

// The wide kernels (and, where they fit, the tiled ones) give the element functions' bits
// and the reference's, in every mode: C not a multiple of the chunk or the group, planes
// over several tiles with partial ones, k = 3, 5, 7, several intervals and samples.
template <class T>
void test_conv_families(const char* type) {
  const ConvCase cases[] = {{1, 1, 16, 9, 9, 3},  {2, 1, 24, 17, 20, 3}, {1, 2, 33, 7, 9, 5},
                            {1, 1, 64, 5, 6, 3},  {1, 1, 18, 4, 3, 7},   {2, 1, 8, 17, 5, 3},
                            {1, 1, 5, 6, 7, 5}};
  for (const ConvCase& c : cases) {
    const kern::ConvDims d{c.m, c.N, c.C, c.H, c.W, c.k};
    const Index n = d.size();
    const std::vector<T> U = values<T>(n, 0.3), Wa = values<T>(n, 1.9),
                         b = values<T>(c.m * c.C, 2.2), h = values<T>(c.m, 0.7);
    std::vector<T> K = values<T>(c.m * c.C * c.C * c.k * c.k, 0.8);
    for (T& w : K) w = w / static_cast<T>(c.C * c.k);
    for (int mode : {kern::kConvStep, kern::kConvG, kern::kConvTransposeAdd})
      for (int act : {kern::kActTanh, kern::kActRelu, kern::kActSmoothRelu}) {
        if (mode == kern::kConvTransposeAdd && act != kern::kActTanh) continue;
        const std::vector<T> want = conv_reference_run(mode, act, U, K, Wa, b, h, c);
        for (int family : {kern::kConvElement, kern::kConvTiled, kern::kConvWide}) {
          if (family == kern::kConvTiled && !kern::conv_tiled(d, sizeof(T))) continue;
          const std::vector<T> got = conv_family_run(family, mode, act, U, K, Wa, b, h, d);
          char what[160];
          std::snprintf(what, sizeof what,
                        "conv %s<%s> %s act %d (m, N, C, H, W, k) = (%lld, %lld, %lld, %lld, "
                        "%lld, %lld): the reference's bits",
                        kConvFamilyNames[family], type, kConvModeNames[mode], act,
                        static_cast<long long>(c.m), static_cast<long long>(c.N),
                        static_cast<long long>(c.C), static_cast<long long>(c.H),
                        static_cast<long long>(c.W), static_cast<long long>(c.k));
          report(bit_equal(got, want), what);
        }
      }
  }
}

// Which family a shape takes: documented in conv_direct.hpp ("tiled where conv_tiled
// holds, else wide where conv_wide holds, else element"), from dims and itemsize only.
void test_conv_family_choice() {
  struct Choice {
    kern::ConvDims d;
    Index itemsize;
    int family;
  };
  const Index big = Index(1) << 29;  // intervals enough for a grid of 2^31 blocks
  const Choice choices[] = {
      {{4, 32, 8, 28, 28, 3}, 8, kern::kConvTiled},     // 8 channels: tiled
      {{4, 32, 16, 28, 28, 3}, 4, kern::kConvTiled},    // 16 channels 3x3 float32 fits
      {{4, 32, 16, 28, 28, 3}, 8, kern::kConvWide},     // ... float64 does not (59904 B)
      {{4, 32, 8, 28, 28, 7}, 8, kern::kConvWide},      // 8 channels 7x7 float64
      {{4, 32, 17, 28, 28, 3}, 4, kern::kConvWide},     // over kTileMaxC
      {{1, 128, 32, 32, 32, 5}, 8, kern::kConvWide},
      {{1, 128, 64, 32, 32, 7}, 8, kern::kConvWide},    // the largest slice: 40576 B
      {{64, 1, 64, 28, 28, 5}, 4, kern::kConvWide},
      {{big, 1, 8, 16, 16, 3}, 8, kern::kConvTiled},    // 2^29 tile blocks
      {{big, 1, 64, 16, 16, 3}, 8, kern::kConvElement}, // 4 groups: 2^31 wide blocks
      {{4 * big, 1, 8, 16, 16, 3}, 8, kern::kConvElement}};
  for (const Choice& c : choices) {
    char what[160];
    const int got = kern::conv_family(c.d, c.itemsize);
    std::snprintf(what, sizeof what, "conv family of C=%lld k=%lld m=%lld itemsize %lld: %s",
                  static_cast<long long>(c.d.C), static_cast<long long>(c.d.k),
                  static_cast<long long>(c.d.m), static_cast<long long>(c.itemsize),
                  kConvFamilyNames[got]);
    report(got == c.family, what);
  }
  bool fits = true;
  for (Index C = 1; C <= 256; ++C)
    for (Index k = 1; k <= kern::kConvMaxK; k += 2)
      fits = fits && kern::conv_wide(kern::ConvDims{1, 1, C, 28, 28, k}, 8);
  report(fits, "conv wide kernels take every C up to 256 and k up to 7 in float64");
}

// The weight gradient written from the definition: entry (iv, o, c, dy, dx) sums
// G[iv, n, o, y, x] * U[iv, n, c, y + dy - p, x + dx - p] over the positions q = (n*H + y)*W
// + x inside the plane into partial q % kConvThreads, ascending, in double, then the tree
// s = 128 ... 1 (the reductions' documented order: both kernels must give these bits).
template <class T>
std::vector<T> reference_wgrad(const std::vector<T>& G, const std::vector<T>& U,
                               const ConvCase& c) {
  std::vector<T> dK(static_cast<std::size_t>(c.m * c.C * c.C * c.k * c.k));
  const Index p = c.k / 2, hw = c.H * c.W;
  std::size_t i = 0;
  for (Index iv = 0; iv < c.m; ++iv)
    for (Index o = 0; o < c.C; ++o)
      for (Index ch = 0; ch < c.C; ++ch)
        for (Index dy = 0; dy < c.k; ++dy)
          for (Index dx = 0; dx < c.k; ++dx, ++i) {
            std::vector<double> parts(kern::kConvThreads, 0.0);
            for (Index n = 0; n < c.N; ++n)
              for (Index y = 0; y < c.H; ++y)
                for (Index x = 0; x < c.W; ++x) {
                  const Index yy = y + dy - p, xx = x + dx - p;
                  if (yy < 0 || yy >= c.H || xx < 0 || xx >= c.W) continue;
                  const Index gi = ((iv * c.N + n) * c.C + o) * hw + y * c.W + x;
                  const Index ui = ((iv * c.N + n) * c.C + ch) * hw + yy * c.W + xx;
                  const Index q = n * hw + y * c.W + x;
                  const double g = G[static_cast<std::size_t>(gi)];
                  const double u = U[static_cast<std::size_t>(ui)];
                  double& part = parts[static_cast<std::size_t>(q % kern::kConvThreads)];
                  part = part + g * u;
                }
            for (int s = kern::kConvThreads / 2; s > 0; s >>= 1)
              for (int t = 0; t < s; ++t) parts[t] = parts[t] + parts[t + s];
            dK[i] = static_cast<T>(parts[0]);
          }
  return dK;
}

// The row and the grouped weight-gradient kernels (host twins, block by block) give the
// reference's bits: C = 1 ... 64, multiples of the groups or not, k 1 to 7, odd planes,
// N 1 and several, and cases with 3 or more positions per thread (so that a changed sum
// order changes bits). dK is followed by sentinels that neither may overwrite.
template <class T>
void test_conv_wgrad(const char* type) {
  std::vector<ConvCase> cases;
  for (Index C : {1, 3, 8, 16, 17, 32, 64})
    for (Index k : {1, 3, 5, 7}) cases.push_back({2, C == 17 ? 1 : 2, C, 5, 7, k});
  cases.push_back({1, 5, 8, 13, 15, 3});   // 975 positions
  cases.push_back({2, 4, 17, 13, 15, 5});  // 780
  cases.push_back({2, 6, 9, 13, 11, 7});   // 858: k 7's two tree passes
  cases.push_back({3, 4, 18, 13, 15, 1});
  for (const ConvCase& c : cases) {
    const kern::ConvDims d{c.m, c.N, c.C, c.H, c.W, c.k};
    const std::vector<T> G = values<T>(d.size(), 0.4), U = values<T>(d.size(), 1.3);
    const std::vector<T> want = reference_wgrad(G, U, c);
    const T sentinel = static_cast<T>(-12345.5);
    for (int family : {kern::kWgradRows, kern::kWgradGrouped}) {
      // room for every write a missing channel guard would make past the end
      const Index room = (kern::kWgradOut * c.C + 16) * c.k * c.k;
      std::vector<T> dK(want.size() + static_cast<std::size_t>(room), sentinel);
      if (family == kern::kWgradGrouped)
        kern::conv_wgrad_grouped_host(G.data(), U.data(), d, dK.data());
      else kern::conv_wgrad_rows_host(G.data(), U.data(), d, dK.data());
      bool untouched = true;
      for (std::size_t j = want.size(); j < dK.size(); ++j)
        untouched = untouched && dK[j] == sentinel;
      dK.resize(want.size());
      char what[200];
      std::snprintf(what, sizeof what,
                    "conv wgrad %s<%s> (m, N, C, H, W, k) = (%lld, %lld, %lld, %lld, %lld, %lld): "
                    "the reference's bits, nothing past dK",
                    family == kern::kWgradGrouped ? "grouped" : "rows", type,
                    static_cast<long long>(c.m), static_cast<long long>(c.N),
                    static_cast<long long>(c.C), static_cast<long long>(c.H),
                    static_cast<long long>(c.W), static_cast<long long>(c.k));
      report(bit_equal(dK, want) && untouched, what);
    }
  }
}

// Which weight-gradient kernel a shape takes (conv_direct.hpp: grouped where C >= 16), its
// blocks, and grids under CUDA's 2^31 blocks (the kernels loop over the rest).
void test_conv_wgrad_choice() {
  bool rule = true;
  for (Index C = 1; C <= 80; ++C)
    for (Index k = 1; k <= kern::kConvMaxK; k += 2)
      rule = rule && kern::conv_wgrad_family(kern::ConvDims{3, 2, C, 28, 28, k}) ==
                         (C >= 16 ? kern::kWgradGrouped : kern::kWgradRows);
  report(rule, "conv wgrad family: grouped exactly where C >= 16");
  const kern::ConvDims wide{64, 32, 64, 28, 28, 3};
  report(kern::conv_wgrad_group_blocks(wide) == 64 * 16 * 32 * 3,
         "conv wgrad grouped blocks of C=64 k=3: m * 16 output groups * 32 input groups * k");
  report(kern::conv_wgrad_group_blocks(kern::ConvDims{2, 1, 17, 5, 5, 7}) == 2 * 5 * 17 * 7,
         "conv wgrad grouped blocks of C=17 k=7: partial output group counted");
  const Index big = Index(1) << 29;
  const kern::ConvDims huge{big, 1, 64, 4, 4, 3};
  report(kern::conv_reduction_grid(kern::conv_wgrad_group_blocks(huge)) == kern::kConvMaxGrid &&
             kern::conv_reduction_grid(huge.m * huge.C * huge.C * huge.k) == kern::kConvMaxGrid &&
             kern::conv_reduction_grid(12288) == 12288 && kern::kConvMaxGrid == 2147483647,
         "conv wgrad grids of 2^31 blocks or more capped at 2^31 - 1 (the kernels loop)");
}

}  // namespace

int main() {
  test_axpby<double>("double");
  test_axpby<float>("float");
  test_axpby_rows<double>("double");
  test_axpby_rows<float>("float");
  test_gather<double>("double");
  test_gather<float>("float");
  test_step_epilogue<double>("double");
  test_step_epilogue<float>("float");
  test_dense_elements<double>("double");
  test_dense_elements<float>("float");
  test_dense_finish<double>("double");
  test_dense_finish<float>("float");
  test_norms<double>("double");
  test_norms<float>("float");
  test_conv_families<double>("double");
  test_conv_families<float>("float");
  test_conv_family_choice();
  test_conv_wgrad<double>("double");
  test_conv_wgrad<float>("float");
  test_conv_wgrad_choice();
  std::printf("%s: %d failed\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
