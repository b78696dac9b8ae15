// braidpy._core._host_dense: the elementwise half of a dense residual step on the host,
// fused. braidpy.nn.dense computes the product u @ K^T with NumPy's matmul (BLAS) and
// hands the result here; one pass over it adds the bias, applies the activation (or
// its derivative) and finishes the step (or scales the adjoint), in place: over the
// product, or (dense_step_update) over the step's input U, which MGRIT's batched
// relaxation advances in its block without a copy back. Before,
// those operations made up to ten full-size NumPy temporaries per call, which at
// Peaks' 5000 samples fall out of cache and cost several times the product itself.
// The element functions are csrc/cuda/kernels.hpp's, shared with the GPU kernels.
// Layers up to 32 wide take dense_rows.hpp's one-pass kernels instead (product
// included; dense_rows_* below); this pass serves wider ones and the GPU path's tests.
#include "host_dense.hpp"

#include <pybind11/numpy.h>

#include "same_dtype.hpp"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../cuda/kernels.hpp"
#include "dense_rows.hpp"

namespace py = pybind11;

namespace braidpy {

namespace {

using kern::Index;

// Z's shape read as (m, rows, width): a 2-D Z is one interval (m = 1).
struct Dims {
  Index m, rows, width;
};

py::array as_array(const char* where, const char* name, py::handle x) {
  if (!py::isinstance<py::array>(x))
    throw py::type_error(std::string(where) + ": " + name + " must be a NumPy array");
  py::array a = py::reinterpret_borrow<py::array>(x);
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(where) + ": " + name + " must be C-contiguous");
  return a;
}

// Checks the shapes and dtypes of Z, X (U or W: Z's shape), b and h:
// b (width,) and h a number for a 2-D Z, b (m, width) and h (m,) for a 3-D Z.
// zname: what the caller calls Z in its messages.
Dims check(const char* where, const py::array& Z, const py::array& X, const py::array& b,
           py::handle h, bool& f64, const std::string& zname = "Z") {
  const py::dtype dt = Z.dtype();
  f64 = same_dtype(dt, py::dtype::of<double>());
  if (!f64 && !same_dtype(dt, py::dtype::of<float>()))
    throw py::type_error(std::string(where) + ": float64 or float32 arrays expected");
  for (const py::array* a : {&X, &b})
    if (!same_dtype(a->dtype(), dt)) throw py::value_error(std::string(where) + ": dtypes differ");
  const Index nd = Z.ndim();
  if (nd != 2 && nd != 3)
    throw py::value_error(std::string(where) + ": " + zname + " must be 2-D or 3-D");
  if (X.ndim() != nd) throw py::value_error(std::string(where) + ": shapes differ");
  for (Index k = 0; k < nd; ++k)
    if (X.shape(k) != Z.shape(k)) throw py::value_error(std::string(where) + ": shapes differ");
  Dims d{nd == 3 ? Z.shape(0) : 1, Z.shape(nd - 2), Z.shape(nd - 1)};
  const bool b_ok = nd == 3 ? (b.ndim() == 2 && b.shape(0) == d.m && b.shape(1) == d.width)
                            : (b.ndim() == 1 && b.shape(0) == d.width);
  if (!b_ok) throw py::value_error(std::string(where) + ": b does not match " + zname);
  if (nd == 3) {
    py::array hs = as_array(where, "h", h);
    if (!same_dtype(hs.dtype(), dt) || hs.ndim() != 1 || hs.shape(0) != d.m)
      throw py::value_error(std::string(where) + ": h must be " + zname +
                            "'s dtype, shaped (m,)");
  }
  return d;
}

// The step sizes as T: one number for a 2-D Z (rounded to T, as NumPy's weak
// scalars are), else h's m values.
template <class T>
std::vector<T> steps(py::handle h, Index m, bool stacked) {
  if (!stacked) return {static_cast<T>(py::cast<double>(h))};
  py::array hs = py::reinterpret_borrow<py::array>(h);
  const T* p = static_cast<const T*>(hs.data());
  return std::vector<T>(p, p + m);
}

// The loops are compiled twice: for the baseline x86-64 (SSE2) that the wheels target,
// and for AVX2, chosen at run time where the processor has it (simd()). With SSE2 only,
// smooth_relu's selects cost three logic operations each and its division works on two
// lanes: a (5000, 8) forward update took 90 us against 23 us with AVX2 (the product
// itself 22 us). Both compile the same operations without FMA contraction
// (-ffp-contract=off), so the two give the same bits; the tests compare them.
#if defined(__GNUC__)
#define BRAIDPY_INLINE_BODY inline __attribute__((always_inline))
#define BRAIDPY_NOINLINE __attribute__((noinline))
#else
#define BRAIDPY_INLINE_BODY inline
#define BRAIDPY_NOINLINE
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#define BRAIDPY_HOST_AVX2 1
#define BRAIDPY_AVX2_CLONE __attribute__((noinline, target("avx2")))
#else
#define BRAIDPY_HOST_AVX2 0
#endif

// The instruction sets the loops were compiled for.
enum class Simd : int { kBaseline = 0, kAvx2 = 1 };

bool cpu_has_avx2() {
#if BRAIDPY_HOST_AVX2
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// The loops in use: AVX2 where the processor has it, unless BRAIDPY_HOST_SIMD=baseline.
Simd initial_simd() {
  const char* env = std::getenv("BRAIDPY_HOST_SIMD");
  if (env != nullptr && std::string(env) == "baseline") return Simd::kBaseline;
  return cpu_has_avx2() ? Simd::kAvx2 : Simd::kBaseline;
}

Simd g_simd = initial_simd();

// Z <- U + h * act(Z + b), or Z <- (act'(Z + b) * W) * h; the activation a compile-time
// constant so that the per-element branch goes away.
template <class T, int A, bool Slope>
BRAIDPY_INLINE_BODY void finish_body(T* Z, const T* X, const T* b, const T* h, const Dims& d) {
  for (Index iv = 0; iv < d.m; ++iv) {
    const T hv = h[iv];
    const T* bv = b + iv * d.width;
    const Index base = iv * d.rows * d.width;
    for (Index r = 0; r < d.rows; ++r) {
      T* z = Z + base + r * d.width;
      const T* x = X + base + r * d.width;
      for (Index j = 0; j < d.width; ++j)
        z[j] = Slope ? kern::dense_slope_value(A, x[j], z[j], bv[j], hv)
                     : kern::dense_step_value(A, x[j], z[j], bv[j], hv);
    }
  }
}

// U <- U + h * act(Z + b): the forward value written over the step's input (MGRIT's
// batched relaxation steps its block in place, with no copy back).
template <class T, int A>
BRAIDPY_INLINE_BODY void update_body(const T* Z, T* U, const T* b, const T* h, const Dims& d) {
  for (Index iv = 0; iv < d.m; ++iv) {
    const T hv = h[iv];
    const T* bv = b + iv * d.width;
    const Index base = iv * d.rows * d.width;
    for (Index r = 0; r < d.rows; ++r) {
      const T* z = Z + base + r * d.width;
      T* u = U + base + r * d.width;
      for (Index j = 0; j < d.width; ++j) u[j] = kern::dense_step_value(A, u[j], z[j], bv[j], hv);
    }
  }
}

// Each loop is a function of its own: inlined side by side into finish_act, the forward
// pass spilled a register inside its loop and ran 40 % slower (GCC 12).
template <class T, int A, bool Slope>
BRAIDPY_NOINLINE void finish(T* Z, const T* X, const T* b, const T* h, const Dims& d) {
  finish_body<T, A, Slope>(Z, X, b, h, d);
}

template <class T, int A>
BRAIDPY_NOINLINE void update(const T* Z, T* U, const T* b, const T* h, const Dims& d) {
  update_body<T, A>(Z, U, b, h, d);
}

#if BRAIDPY_HOST_AVX2
template <class T, int A, bool Slope>
BRAIDPY_AVX2_CLONE void finish_avx2(T* Z, const T* X, const T* b, const T* h, const Dims& d) {
  finish_body<T, A, Slope>(Z, X, b, h, d);
}

template <class T, int A>
BRAIDPY_AVX2_CLONE void update_avx2(const T* Z, T* U, const T* b, const T* h, const Dims& d) {
  update_body<T, A>(Z, U, b, h, d);
}
#endif

// One loop for the activation A, in the instruction set in use.
template <class T, int A, bool Slope, bool IntoX>
void finish_simd(T* Z, T* X, const T* b, const T* h, const Dims& d) {
#if BRAIDPY_HOST_AVX2
  if (g_simd == Simd::kAvx2)
    return IntoX ? update_avx2<T, A>(Z, X, b, h, d) : finish_avx2<T, A, Slope>(Z, X, b, h, d);
#endif
  return IntoX ? update<T, A>(Z, X, b, h, d) : finish<T, A, Slope>(Z, X, b, h, d);
}

// finish (into Z) or, with IntoX, update (into X) for the activation code act.
template <class T, bool Slope, bool IntoX>
void finish_act(int act, T* Z, T* X, const T* b, const T* h, const Dims& d) {
  switch (act) {
    case kern::kActTanh:
      return finish_simd<T, kern::kActTanh, Slope, IntoX>(Z, X, b, h, d);
    case kern::kActRelu:
      return finish_simd<T, kern::kActRelu, Slope, IntoX>(Z, X, b, h, d);
    default:
      return finish_simd<T, kern::kActSmoothRelu, Slope, IntoX>(Z, X, b, h, d);
  }
}

template <bool Slope, bool IntoX = false>
void run(const char* where, py::handle Zh, py::handle Xh, py::handle bh, py::handle h, int act) {
  if (act != kern::kActTanh && act != kern::kActRelu && act != kern::kActSmoothRelu)
    throw py::value_error(std::string(where) +
                          ": act must be 1 (tanh), 2 (relu) or 3 (smooth_relu), got " +
                          std::to_string(act));
  py::array Z = as_array(where, "Z", Zh);
  py::array X = as_array(where, Slope ? "W" : "U", Xh);
  py::array b = as_array(where, "b", bh);
  bool f64 = true;
  const Dims d = check(where, Z, X, b, h, f64);
  if (!IntoX && !Z.writeable())
    throw py::value_error(std::string(where) + ": Z must be writable");
  if (IntoX) {
    if (!X.writeable()) throw py::value_error(std::string(where) + ": U must be writable");
    const auto* z0 = static_cast<const char*>(Z.data());
    const auto* x0 = static_cast<const char*>(X.data());
    if (z0 < x0 + X.nbytes() && x0 < z0 + Z.nbytes())
      throw py::value_error(std::string(where) + ": Z and U must not share memory");
  }
  const bool stacked = Z.ndim() == 3;
  // The array written: X (U) with IntoX, else Z; the other one is only read.
  void* zp = IntoX ? const_cast<void*>(Z.data()) : Z.mutable_data();
  void* xp = IntoX ? X.mutable_data() : const_cast<void*>(X.data());
  if (f64) {
    const std::vector<double> hs = steps<double>(h, d.m, stacked);
    finish_act<double, Slope, IntoX>(act, static_cast<double*>(zp), static_cast<double*>(xp),
                                     static_cast<const double*>(b.data()), hs.data(), d);
  } else {
    const std::vector<float> hs = steps<float>(h, d.m, stacked);
    finish_act<float, Slope, IntoX>(act, static_cast<float*>(zp), static_cast<float*>(xp),
                                    static_cast<const float*>(b.data()), hs.data(), d);
  }
}

// ------------------------------------------------------------------ product included
// dense_rows.hpp's one-pass kernels, compiled like the loops above: baseline and AVX2,
// the same operations in the same order (the tests compare the bits), unrolled for the
// common widths and a loop for the others up to kMaxWidth.
using dense_rows::Job;

template <class T, int A, int N, int M>
BRAIDPY_NOINLINE void rows_baseline(const Job<T>& job) {
  dense_rows::run_job<T, A, N, M>(job);
}

#if BRAIDPY_HOST_AVX2
template <class T, int A, int N, int M>
BRAIDPY_AVX2_CLONE void rows_avx2(const Job<T>& job) {
  dense_rows::run_job<T, A, N, M>(job);
}
#endif

template <class T, int A, int N, int M>
void rows_simd(const Job<T>& job) {
#if BRAIDPY_HOST_AVX2
  if (g_simd == Simd::kAvx2) return rows_avx2<T, A, N, M>(job);
#endif
  rows_baseline<T, A, N, M>(job);
}

template <class T, int A, int M>
void rows_width(const Job<T>& job) {
  switch (job.width) {
    case 2: return rows_simd<T, A, 2, M>(job);
    case 4: return rows_simd<T, A, 4, M>(job);
    case 8: return rows_simd<T, A, 8, M>(job);
    case 16: return rows_simd<T, A, 16, M>(job);
    case 32: return rows_simd<T, A, 32, M>(job);
    default: return rows_simd<T, A, 0, M>(job);
  }
}

template <class T, int M>
void rows_act(int act, const Job<T>& job) {
  if (act == kern::kActRelu) return rows_width<T, kern::kActRelu, M>(job);
  rows_width<T, kern::kActSmoothRelu, M>(job);
}

template <class T>
void rows_mode(int mode, int act, const Job<T>& job) {
  switch (mode) {
    case dense_rows::kForward: return rows_act<T, dense_rows::kForward>(act, job);
    case dense_rows::kAdjoint: return rows_act<T, dense_rows::kAdjoint>(act, job);
    case dense_rows::kGradient: return rows_act<T, dense_rows::kGradient>(act, job);
    case dense_rows::kAdjointKeep: return rows_act<T, dense_rows::kAdjointKeep>(act, job);
    case dense_rows::kAdjointGiven: return rows_act<T, dense_rows::kAdjointGiven>(act, job);
    case dense_rows::kGradientGiven: return rows_act<T, dense_rows::kGradientGiven>(act, job);
    default: return rows_act<T, dense_rows::kAdjointGradient>(act, job);
  }
}

// A state operand of the one-pass kernels: C-contiguous, or a 3-D stack whose intervals
// are C-contiguous (rows, width) states at any distance apart, in either direction: a
// strided view such as every cf-th state of a stored trajectory, which the adjoint's
// batched steps read (copying it cost as much as the step).
py::array as_states(const char* where, const char* name, py::handle x) {
  if (!py::isinstance<py::array>(x))
    throw py::type_error(std::string(where) + ": " + name + " must be a NumPy array");
  py::array a = py::reinterpret_borrow<py::array>(x);
  if (a.flags() & py::array::c_style) return a;
  const py::ssize_t item = a.itemsize();
  if (a.ndim() == 3 && (a.shape(2) <= 1 || a.strides(2) == item) &&
      (a.shape(1) <= 1 || a.strides(1) == a.shape(2) * item) && a.strides(0) % item == 0)
    return a;
  throw py::value_error(std::string(where) + ": " + name +
                        " must be C-contiguous, or a 3-D stack of C-contiguous states");
}

// The distance between a state operand's intervals, in elements.
Index interval_stride(const py::array& a, const Dims& d) {
  if (a.ndim() != 3 || d.m <= 1) return d.rows * d.width;
  return static_cast<Index>(a.strides(0) / a.itemsize());
}

// [lowest, highest) byte addresses that a's elements occupy, for strides of any sign.
std::pair<const char*, const char*> extent(const py::array& a) {
  const char* lo = static_cast<const char*>(a.data());
  const char* hi = lo;
  if (a.size() == 0) return {lo, hi};
  for (py::ssize_t k = 0; k < a.ndim(); ++k) {
    const py::ssize_t reach = (a.shape(k) - 1) * a.strides(k);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + a.itemsize()};
}

bool overlap(const py::array& a, const py::array& b) {
  const auto ea = extent(a), eb = extent(b);
  return ea.first < eb.second && eb.first < ea.second;
}

bool same_layout(const py::array& a, const py::array& b) {
  if (a.data() != b.data() || a.ndim() != b.ndim()) return false;
  for (py::ssize_t k = 0; k < a.ndim(); ++k)
    if (a.shape(k) > 1 && a.strides(k) != b.strides(k)) return false;
  return true;
}

// The arrays of one product-included call, checked; gradient: fresh dK (K's shape) and
// db (b's shape).
struct RowsCall {
  py::array U, W, K, b, out, dK, db, D;
  Dims d;
  bool f64 = true;
};

bool adjoint_mode(int mode) {
  return mode == dense_rows::kAdjoint || mode == dense_rows::kAdjointGradient ||
         mode == dense_rows::kAdjointKeep || mode == dense_rows::kAdjointGiven;
}

bool gradient_mode(int mode) {
  return mode == dense_rows::kGradient || mode == dense_rows::kAdjointGradient ||
         mode == dense_rows::kGradientGiven;
}

// The slopes D of the modes that keep or read them: U's shape and dtype; kept ones
// written (apart from every other operand), given ones apart from out.
void check_slopes(const std::string& w, int mode, RowsCall& c, py::handle Dh) {
  c.D = as_states(w.c_str(), "D", Dh);
  bool ok = same_dtype(c.D.dtype(), c.U.dtype()) && c.D.ndim() == c.U.ndim();
  for (py::ssize_t k = 0; ok && k < c.U.ndim(); ++k) ok = c.D.shape(k) == c.U.shape(k);
  if (!ok) throw py::value_error(w + ": D must have U's shape and dtype");
  if (mode == dense_rows::kAdjointKeep) {
    if (!c.D.writeable()) throw py::value_error(w + ": D must be writable");
    for (const py::array* a : {&c.U, &c.W, &c.K, &c.b, &c.out})
      if (overlap(c.D, *a))
        throw py::value_error(w + ": D must share no memory with the other arrays");
  } else if (mode == dense_rows::kAdjointGiven && overlap(c.D, c.out)) {
    throw py::value_error(w + ": D must share no memory with out");
  }
}

RowsCall check_rows(const char* where, int mode, py::handle Uh, py::handle Wh, py::handle Kh,
                    py::handle bh, py::handle h, int act, py::handle outh,
                    py::handle Dh = py::none()) {
  const std::string w(where);
  if (act != kern::kActRelu && act != kern::kActSmoothRelu)
    throw py::value_error(w + ": act must be 2 (relu) or 3 (smooth_relu), got " +
                          std::to_string(act));
  const bool backward = mode != dense_rows::kForward;
  const bool adjoint = adjoint_mode(mode);
  const bool gradient = gradient_mode(mode);
  const bool writes = !backward || adjoint;
  RowsCall c;
  c.U = as_states(where, "U", Uh);
  c.W = backward ? as_states(where, "W", Wh) : c.U;
  c.K = as_array(where, "K", Kh);
  c.b = as_array(where, "b", bh);
  c.d = check(where, c.U, c.W, c.b, h, c.f64, "U");
  const Index nd = c.U.ndim();
  if (c.d.width > dense_rows::kMaxWidth)
    throw py::value_error(w + ": width " + std::to_string(c.d.width) + " exceeds " +
                          std::to_string(dense_rows::kMaxWidth) +
                          " (wider layers take BLAS's product)");
  const bool K_ok = same_dtype(c.K.dtype(), c.U.dtype()) && c.K.ndim() == nd &&
                    (nd == 2 || c.K.shape(0) == c.d.m) && c.K.shape(nd - 2) == c.d.width &&
                    c.K.shape(nd - 1) == c.d.width;
  if (!K_ok)
    throw py::value_error(w + ": K must be U's dtype, shaped " +
                          (nd == 3 ? "(m, width, width)" : "(width, width)"));
  if (writes) {
    c.out = as_states(where, "out", outh);
    if (!c.out.writeable()) throw py::value_error(w + ": out must be writable");
    if (!same_dtype(c.out.dtype(), c.U.dtype()) || c.out.ndim() != nd)
      throw py::value_error(w + ": out must have U's shape and dtype");
    for (Index k = 0; k < nd; ++k)
      if (c.out.shape(k) != c.U.shape(k))
        throw py::value_error(w + ": out must have U's shape and dtype");
    // out may be the array it replaces (U forward, W backward: each row is read whole
    // before it is written), or lie apart from every input.
    const py::array& own = backward ? c.W : c.U;
    const bool same = same_layout(c.out, own);
    for (const py::array* a : {&c.U, &c.W, &c.K, &c.b})
      if (!(same && a->data() == own.data()) && overlap(c.out, *a))
        throw py::value_error(w + ": out must be " + (backward ? "W" : "U") +
                              " itself or share no memory with the inputs");
  }
  if (gradient) {
    const py::dtype dt = c.U.dtype();
    std::vector<py::ssize_t> ks(c.K.shape(), c.K.shape() + nd);
    std::vector<py::ssize_t> bs(c.b.shape(), c.b.shape() + c.b.ndim());
    c.dK = py::array(dt, ks);
    c.db = py::array(dt, bs);
  }
  if (mode >= dense_rows::kAdjointKeep) check_slopes(w, mode, c, Dh);
  return c;
}

template <class T>
void run_rows_typed(int mode, int act, RowsCall& c, py::handle h) {
  const std::vector<T> hs = steps<T>(h, c.d.m, c.U.ndim() == 3);
  const bool writes = mode == dense_rows::kForward || adjoint_mode(mode);
  const bool gradient = gradient_mode(mode);
  Job<T> job{static_cast<const T*>(c.U.data()),
             static_cast<const T*>(c.W.data()),
             static_cast<const T*>(c.K.data()),
             static_cast<const T*>(c.b.data()),
             hs.data(),
             writes ? static_cast<T*>(c.out.mutable_data()) : nullptr,
             gradient ? static_cast<T*>(c.dK.mutable_data()) : nullptr,
             gradient ? static_cast<T*>(c.db.mutable_data()) : nullptr,
             c.d.m,
             c.d.rows,
             c.d.width,
             interval_stride(c.U, c.d),
             interval_stride(c.W, c.d),
             writes ? interval_stride(c.out, c.d) : 0};
  if (mode >= dense_rows::kAdjointKeep) {  // the modes with slopes: checked by check_slopes
    // Given slopes are only read (D may be a read-only view); kept ones were checked
    // writable.
    job.D = mode == dense_rows::kAdjointKeep
                ? static_cast<T*>(c.D.mutable_data())
                : const_cast<T*>(static_cast<const T*>(c.D.data()));
    job.sd = interval_stride(c.D, c.d);
  }
  rows_mode<T>(mode, act, job);
}

// One product-included call; returns (dK, db) for the gradient modes, else None.
py::object run_rows(const char* where, int mode, py::handle U, py::handle W, py::handle K,
                    py::handle b, py::handle h, int act, py::handle out,
                    py::handle D = py::none()) {
  RowsCall c = check_rows(where, mode, U, W, K, b, h, act, out, D);
  if (c.f64) {
    run_rows_typed<double>(mode, act, c, h);
  } else {
    run_rows_typed<float>(mode, act, c, h);
  }
  if (gradient_mode(mode)) return py::make_tuple(c.dK, c.db);
  return py::none();
}

// ------------------------------------------------------------------ whole sweeps
// Serial propagation through N layers in one call: the forward sweep S[n + 1] <- step(S[n])
// and the backward sweep w <- adjoint(w, S[n]) with (dK[n], db[n]), n descending. Each
// layer is the job a single dense_rows_step / dense_rows_adjoint_gradient call runs, so
// the bits are theirs; what goes is the Python between the calls (about 3 us a layer)
// and the fresh state a call returns.

// The layers' weights of a sweep: K (N, width, width), b (N, width) and h (N,), C-contiguous,
// of the states' dtype.
struct SweepWeights {
  py::array K, b, h;
  Index layers;
};

SweepWeights check_sweep_weights(const std::string& w, const py::dtype& dt, Index width,
                                 py::handle Kh, py::handle bh, py::handle hh) {
  SweepWeights s{as_array(w.c_str(), "K", Kh), as_array(w.c_str(), "b", bh),
                 as_array(w.c_str(), "h", hh), 0};
  for (const py::array* a : {&s.K, &s.b, &s.h})
    if (!same_dtype(a->dtype(), dt))
      throw py::value_error(w + ": K, b and h must have the states' dtype");
  s.layers = s.h.ndim() == 1 ? static_cast<Index>(s.h.shape(0)) : -1;
  const bool ok = s.layers >= 0 && s.K.ndim() == 3 && s.K.shape(0) == s.layers &&
                  s.K.shape(1) == width && s.K.shape(2) == width && s.b.ndim() == 2 &&
                  s.b.shape(0) == s.layers && s.b.shape(1) == width;
  if (!ok)
    throw py::value_error(w + ": expected K (N, width, width), b (N, width) and h (N,)");
  return s;
}

// A writable C-contiguous float64 or float32 array of the given rank; f64 set.
py::array sweep_operand(const std::string& w, const char* name, py::handle x, int ndim,
                        bool& f64) {
  py::array a = as_array(w.c_str(), name, x);
  f64 = same_dtype(a.dtype(), py::dtype::of<double>());
  if (!f64 && !same_dtype(a.dtype(), py::dtype::of<float>()))
    throw py::type_error(w + ": float64 or float32 arrays expected");
  if (a.ndim() != ndim)
    throw py::value_error(w + ": " + name + " must be " + std::to_string(ndim) + "-D");
  if (!a.writeable()) throw py::value_error(w + ": " + name + " must be writable");
  return a;
}

void check_act_width(const std::string& w, int act, Index width) {
  if (act != kern::kActRelu && act != kern::kActSmoothRelu)
    throw py::value_error(w + ": act must be 2 (relu) or 3 (smooth_relu), got " +
                          std::to_string(act));
  if (width > dense_rows::kMaxWidth)
    throw py::value_error(w + ": width " + std::to_string(width) + " exceeds " +
                          std::to_string(dense_rows::kMaxWidth) +
                          " (wider layers take BLAS's product)");
}

void check_apart(const std::string& w, const char* name, const py::array& a,
                 std::initializer_list<const py::array*> others) {
  for (const py::array* o : others)
    if (overlap(a, *o)) throw py::value_error(w + ": " + name + " shares memory with an input");
}

// S (N + 1, rows, width): S[0] given, the others written; S (rows, width): in place, the
// last state only. One job over the N layers: layer n reads S[n], which layer n - 1 wrote.
template <class T>
void sweep_forward_typed(py::array& S, const SweepWeights& s, int act) {
  const bool keep = S.ndim() == 3;
  const Index rows = S.shape(S.ndim() - 2), width = S.shape(S.ndim() - 1);
  T* states = static_cast<T*>(S.mutable_data());
  const Index stride = keep ? rows * width : 0;
  Job<T> job{states, states, static_cast<const T*>(s.K.data()),
             static_cast<const T*>(s.b.data()), static_cast<const T*>(s.h.data()),
             states + stride, nullptr, nullptr, s.layers, rows, width, stride, stride, stride};
  if (s.layers > 0) rows_mode<T>(dense_rows::kForward, act, job);
}

void sweep_forward(py::handle Sh, py::handle Kh, py::handle bh, py::handle hh, int act) {
  const std::string w("dense_rows_sweep_forward");
  bool f64 = true;
  py::array S = as_array(w.c_str(), "S", Sh);
  if (S.ndim() != 2 && S.ndim() != 3)
    throw py::value_error(w + ": S must be (N + 1, rows, width) or (rows, width)");
  S = sweep_operand(w, "S", S, static_cast<int>(S.ndim()), f64);
  const Index width = S.shape(S.ndim() - 1);
  check_act_width(w, act, width);
  const SweepWeights s = check_sweep_weights(w, S.dtype(), width, Kh, bh, hh);
  if (S.ndim() == 3 && S.shape(0) != s.layers + 1)
    throw py::value_error(w + ": S must hold N + 1 = " + std::to_string(s.layers + 1) +
                          " states, got " + std::to_string(S.shape(0)));
  check_apart(w, "S", S, {&s.K, &s.b, &s.h});
  if (f64) {
    sweep_forward_typed<double>(S, s, act);
  } else {
    sweep_forward_typed<float>(S, s, act);
  }
}

// W (rows, width) in place from w_N to w_0; S[n] (n < N) the states the layers started
// from; dK (N, width, width) and db (N, width) written. A job per layer, n descending.
template <class T>
void sweep_backward_typed(py::array& W, const py::array& S, const SweepWeights& s, int act,
                          py::array& dK, py::array& db) {
  const Index rows = W.shape(0), width = W.shape(1);
  T* w = static_cast<T*>(W.mutable_data());
  const T* states = static_cast<const T*>(S.data());
  const T* K = static_cast<const T*>(s.K.data());
  const T* b = static_cast<const T*>(s.b.data());
  const T* h = static_cast<const T*>(s.h.data());
  T* gK = static_cast<T*>(dK.mutable_data());
  T* gb = static_cast<T*>(db.mutable_data());
  for (Index n = s.layers - 1; n >= 0; --n) {
    Job<T> job{states + n * rows * width, w, K + n * width * width, b + n * width, h + n,
               w, gK + n * width * width, gb + n * width, 1, rows, width,
               rows * width, rows * width, rows * width};
    rows_mode<T>(dense_rows::kAdjointGradient, act, job);
  }
}

void sweep_backward(py::handle Wh, py::handle Sh, py::handle Kh, py::handle bh, py::handle hh,
                    int act, py::handle dKh, py::handle dbh) {
  const std::string w("dense_rows_sweep_backward");
  bool f64 = true, same = true;
  py::array W = sweep_operand(w, "W", Wh, 2, f64);
  py::array S = as_array(w.c_str(), "S", Sh);
  const Index rows = W.shape(0), width = W.shape(1);
  check_act_width(w, act, width);
  const SweepWeights s = check_sweep_weights(w, W.dtype(), width, Kh, bh, hh);
  if (!same_dtype(S.dtype(), W.dtype()) || S.ndim() != 3 || S.shape(0) < s.layers ||
      S.shape(1) != rows || S.shape(2) != width)
    throw py::value_error(w + ": S must be W's dtype, shaped (at least N, rows, width)");
  py::array dK = sweep_operand(w, "dK", dKh, 3, same);
  py::array db = sweep_operand(w, "db", dbh, 2, same);
  if (!same_dtype(dK.dtype(), W.dtype()) || !same_dtype(db.dtype(), W.dtype()) ||
      dK.shape(0) != s.layers || dK.shape(1) != width || dK.shape(2) != width ||
      db.shape(0) != s.layers || db.shape(1) != width)
    throw py::value_error(w + ": dK and db must be K's and b's shape and dtype");
  check_apart(w, "W", W, {&S, &s.K, &s.b, &s.h, &dK, &db});
  check_apart(w, "dK", dK, {&S, &s.K, &s.b, &s.h, &db});
  check_apart(w, "db", db, {&S, &s.K, &s.b, &s.h});
  if (f64) {
    sweep_backward_typed<double>(W, S, s, act, dK, db);
  } else {
    sweep_backward_typed<float>(W, S, s, act, dK, db);
  }
}

}  // namespace

void bind_host_dense(py::module_& core) {
  py::module_ m = core.def_submodule(
      "_host_dense", "The elementwise half of dense residual steps, fused, in place.");
  m.def("dense_step_finish", [](py::handle Z, py::handle U, py::handle b, py::handle h,
                                int act) { run<false>("dense_step_finish", Z, U, b, h, act); },
        py::arg("Z"), py::arg("U"), py::arg("b"), py::arg("h"), py::arg("act"),
        "Z <- U + h * act(Z + b), in place (Z: the product U @ K^T).");
  m.def("dense_step_update",
        [](py::handle Z, py::handle U, py::handle b, py::handle h, int act) {
          run<false, true>("dense_step_update", Z, U, b, h, act);
        },
        py::arg("Z"), py::arg("U"), py::arg("b"), py::arg("h"), py::arg("act"),
        "U <- U + h * act(Z + b), in place (Z: the product U @ K^T, read only): the "
        "step written over its input.");
  m.def("dense_slope", [](py::handle Z, py::handle W, py::handle b, py::handle h,
                          int act) { run<true>("dense_slope", Z, W, b, h, act); },
        py::arg("Z"), py::arg("W"), py::arg("b"), py::arg("h"), py::arg("act"),
        "Z <- (act'(Z + b) * W) * h, in place (Z: the product U @ K^T).");
  m.def("dense_rows_step",
        [](py::handle U, py::handle K, py::handle b, py::handle h, int act, py::handle out) {
          run_rows("dense_rows_step", dense_rows::kForward, U, U, K, b, h, act, out);
        },
        py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"),
        py::arg("out"),
        "out <- U + h * act(U @ K^T + b), the product included, one pass per row (width "
        "<= 32; out may be U).");
  m.def("dense_rows_adjoint",
        [](py::handle W, py::handle U, py::handle K, py::handle b, py::handle h, int act,
           py::handle out) {
          run_rows("dense_rows_adjoint", dense_rows::kAdjoint, U, W, K, b, h, act, out);
        },
        py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"),
        py::arg("out"),
        "out <- W + (h * W * act'(U @ K^T + b)) @ K, one pass per row (out may be W).");
  m.def("dense_rows_gradient",
        [](py::handle W, py::handle U, py::handle K, py::handle b, py::handle h, int act) {
          return run_rows("dense_rows_gradient", dense_rows::kGradient, U, W, K, b, h, act,
                          py::none());
        },
        py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"),
        "(g^T @ U, g summed over the rows) with g = h * W * act'(U @ K^T + b), new arrays; "
        "rows accumulated in ascending order.");
  m.def("dense_rows_adjoint_gradient",
        [](py::handle W, py::handle U, py::handle K, py::handle b, py::handle h, int act,
           py::handle out) {
          return run_rows("dense_rows_adjoint_gradient", dense_rows::kAdjointGradient, U, W,
                          K, b, h, act, out);
        },
        py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"),
        py::arg("out"),
        "dense_rows_adjoint into out and dense_rows_gradient's (dK, db), g formed once.");
  // The two adjoints with slopes: the same arguments, one keeping D, one reading it.
  struct WithSlopes {
    const char* name;
    int mode;
    const char* doc;
  };
  for (const WithSlopes& a :
       {WithSlopes{"dense_rows_adjoint_keep", dense_rows::kAdjointKeep,
                   "dense_rows_adjoint into out, keeping the slopes act'(U @ K^T + b) in D "
                   "(U's shape; D apart from every other array)."},
        WithSlopes{"dense_rows_adjoint_given", dense_rows::kAdjointGiven,
                   "out <- W + ((D * W) * h) @ K with the slopes D that "
                   "dense_rows_adjoint_keep kept for these U, K, b: dense_rows_adjoint's bits "
                   "without its product U @ K^T."}})
    m.def(a.name,
          [a](py::handle W, py::handle U, py::handle K, py::handle b, py::handle h, int act,
              py::handle out, py::handle D) {
            run_rows(a.name, a.mode, U, W, K, b, h, act, out, D);
          },
          py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"),
          py::arg("act"), py::arg("out"), py::arg("D"), a.doc);
  m.def("dense_rows_gradient_given",
        [](py::handle W, py::handle U, py::handle K, py::handle b, py::handle h, int act,
           py::handle D) {
          return run_rows("dense_rows_gradient_given", dense_rows::kGradientGiven, U, W, K, b,
                          h, act, py::none(), D);
        },
        py::arg("W"), py::arg("U"), py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"),
        py::arg("D"),
        "dense_rows_gradient's (dK, db) with the kept slopes D: its bits without the "
        "product U @ K^T.");
  m.def("dense_rows_sweep_forward", &sweep_forward, py::arg("S"), py::arg("K"), py::arg("b"),
        py::arg("h"), py::arg("act"),
        "Serial forward sweep through N layers: S[n + 1] <- S[n] + h[n] * act(S[n] @ "
        "K[n]^T + b[n]) for S (N + 1, rows, width) from S[0], or in place for S (rows, "
        "width); dense_rows_step's bits layer by layer.");
  m.def("dense_rows_sweep_backward", &sweep_backward, py::arg("W"), py::arg("S"),
        py::arg("K"), py::arg("b"), py::arg("h"), py::arg("act"), py::arg("dK"), py::arg("db"),
        "Serial backward sweep: for n = N - 1 down to 0, (W, dK[n], db[n]) <- "
        "dense_rows_adjoint_gradient(W, S[n], K[n], b[n], h[n]), W in place.");
  m.def("simd", []() { return g_simd == Simd::kAvx2 ? "avx2" : "baseline"; },
        "The instruction set of the loops in use: 'avx2' or 'baseline' (x86-64's SSE2, "
        "or the compiler's default elsewhere); BRAIDPY_HOST_SIMD=baseline at import "
        "chooses the baseline.");
  m.def("_use_simd",
        [](const std::string& name) {
          const std::string before = g_simd == Simd::kAvx2 ? "avx2" : "baseline";
          if (name == "baseline") {
            g_simd = Simd::kBaseline;
          } else if (name == "avx2") {
            if (!cpu_has_avx2())
              throw py::value_error("_use_simd: this processor (or build) has no AVX2 loops");
            g_simd = Simd::kAvx2;
          } else {
            throw py::value_error("_use_simd: 'avx2' or 'baseline' expected, got '" + name +
                                  "'");
          }
          return before;
        },
        py::arg("name"), "For tests: use the 'avx2' or 'baseline' loops; returns the previous.");
}

}  // namespace braidpy
