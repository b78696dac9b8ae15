// braidpy._core._host_dense: the elementwise half of a dense residual step on the host,
// fused. braidpy.nn.dense computes the product u @ K^T with NumPy's matmul (BLAS) and
// hands the result here; one pass over it adds the bias, applies the activation (or
// its derivative) and finishes the step (or scales the adjoint), in place: over the
// product, or (dense_step_update) over the step's input U, which MGRIT's batched
// relaxation advances in its block without a copy back. Before,
// those operations made up to ten full-size NumPy temporaries per call, which at
// Peaks' 5000 samples fall out of cache and cost several times the product itself.
// The element functions are csrc/cuda/kernels.hpp's, shared with the GPU kernels.
#include "host_dense.hpp"

#include <pybind11/numpy.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../cuda/kernels.hpp"

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
Dims check(const char* where, const py::array& Z, const py::array& X, const py::array& b,
           py::handle h, bool& f64) {
  const py::dtype dt = Z.dtype();
  f64 = dt.is(py::dtype::of<double>());
  if (!f64 && !dt.is(py::dtype::of<float>()))
    throw py::type_error(std::string(where) + ": float64 or float32 arrays expected");
  for (const py::array* a : {&X, &b})
    if (!a->dtype().is(dt)) throw py::value_error(std::string(where) + ": dtypes differ");
  const Index nd = Z.ndim();
  if (nd != 2 && nd != 3)
    throw py::value_error(std::string(where) + ": Z must be 2-D or 3-D");
  if (X.ndim() != nd) throw py::value_error(std::string(where) + ": shapes differ");
  for (Index k = 0; k < nd; ++k)
    if (X.shape(k) != Z.shape(k)) throw py::value_error(std::string(where) + ": shapes differ");
  Dims d{nd == 3 ? Z.shape(0) : 1, Z.shape(nd - 2), Z.shape(nd - 1)};
  const bool b_ok = nd == 3 ? (b.ndim() == 2 && b.shape(0) == d.m && b.shape(1) == d.width)
                            : (b.ndim() == 1 && b.shape(0) == d.width);
  if (!b_ok) throw py::value_error(std::string(where) + ": b does not match Z");
  if (nd == 3) {
    py::array hs = as_array(where, "h", h);
    if (!hs.dtype().is(dt) || hs.ndim() != 1 || hs.shape(0) != d.m)
      throw py::value_error(std::string(where) + ": h must be Z's dtype, shaped (m,)");
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
