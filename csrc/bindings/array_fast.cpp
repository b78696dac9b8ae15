// Fast paths of the default array operations (see array_fast.hpp).
#include "array_fast.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace braidpy {

namespace {

namespace pyd = pybind11::detail;

struct F64View {
  double* data = nullptr;
  Py_ssize_t size = 0;
  bool writable = false;
};

bool as_f64(PyObject* o, F64View& v) {
  auto& api = pyd::npy_api::get();
  if (Py_TYPE(o) != api.PyArray_Type_) return false;
  auto* a = pyd::array_proxy(o);
  auto* d = pyd::array_descriptor_proxy(a->descr);
  const int need = pyd::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | pyd::npy_api::NPY_ARRAY_ALIGNED_;
  if (d->type_num != pyd::npy_api::NPY_DOUBLE_ || d->byteorder == '>' ||
      (a->flags & need) != need)
    return false;
  Py_ssize_t n = 1;
  for (int i = 0; i < a->nd; ++i) n *= a->dimensions[i];
  v.data = reinterpret_cast<double*>(a->data);
  v.size = n;
  v.writable = (a->flags & pyd::npy_api::NPY_ARRAY_WRITEABLE_) != 0;
  return true;
}

// Whether o is a float64 array (as_f64) shaped like fa.
bool f64_like(PyObject* o, const pyd::PyArray_Proxy* fa) {
  F64View v;
  if (!as_f64(o, v)) return false;
  auto* a = pyd::array_proxy(o);
  if (a->nd != fa->nd) return false;
  for (int d = 0; d < a->nd; ++d)
    if (a->dimensions[d] != fa->dimensions[d]) return false;
  return true;
}

// *block = u (a new reference, taken over) and rows[k] = u[k], k < n (views); false (u
// released) if a row cannot be taken, which cannot happen for an ndarray.
bool with_row_views(PyObject* u, Py_ssize_t n, PyObject** block, PyObject** rows) {
  for (Py_ssize_t k = 0; k < n; ++k) {
    rows[k] = PySequence_GetItem(u, k);
    if (rows[k] == nullptr) {
      for (Py_ssize_t j = 0; j < k; ++j) Py_DECREF(rows[j]);
      Py_DECREF(u);
      PyErr_Clear();
      return false;
    }
  }
  *block = u;
  return true;
}

// Uninitialised float64 array of shape (n, *fa's shape).
pybind11::array_t<double> new_rows(Py_ssize_t n, const pyd::PyArray_Proxy* fa) {
  std::vector<pybind11::ssize_t> shape{static_cast<pybind11::ssize_t>(n)};
  for (int d = 0; d < fa->nd; ++d) shape.push_back(fa->dimensions[d]);
  return pybind11::array_t<double>(shape);
}

}  // namespace

bool fast_clone(PyObject* u, PyObject** out) {
  auto& api = pyd::npy_api::get();
  if (Py_TYPE(u) != api.PyArray_Type_) return false;
  *out = api.PyArray_NewCopy_(u, 0 /* NPY_CORDER, as ndarray.copy() */);
  return true;
}

namespace {

#if defined(__GNUC__)
// Two doubles (GCC/Clang vector extension: SSE2 on x86-64, NEON on arm64). The sums
// below take two elements per operation: the core's sums run over whole states (the
// residuals, the FAS right-hand sides, the coarse corrections: a thousand per one-shot
// step of Peaks), and -O2 does not vectorize a loop of unknown length. Per element the
// operations and their order are the scalar loop's (no FMA: -ffp-contract=off), so the
// bits are the same.
typedef double Pair __attribute__((vector_size(16)));

inline Pair load(const double* p) {
  Pair v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(double* p, Pair v) { std::memcpy(p, &v, sizeof v); }

// The pairs of y <- a*x + b*y, in array_sum's cases; returns the elements done (the
// caller finishes the odd one). x may be y: each pair is read, then written.
Py_ssize_t sum_pairs(double a, const double* xp, double b, double* yp, Py_ssize_t n) {
  const Pair va = {a, a}, vb = {b, b};
  const Py_ssize_t even = n - n % 2;
  if (a == 0.0) {
    if (b != 1.0)
      for (Py_ssize_t i = 0; i < even; i += 2) store(yp + i, load(yp + i) * vb);
  } else if (b == 1.0) {
    for (Py_ssize_t i = 0; i < even; i += 2) store(yp + i, load(yp + i) + va * load(xp + i));
  } else {
    for (Py_ssize_t i = 0; i < even; i += 2)
      store(yp + i, vb * load(yp + i) + va * load(xp + i));
  }
  return even;
}
#else
Py_ssize_t sum_pairs(double, const double*, double, double*, Py_ssize_t) { return 0; }
#endif

}  // namespace

bool fast_sum(double a, PyObject* x, double b, PyObject* y) {
  F64View X, Y;
  if (!as_f64(x, X) || !as_f64(y, Y) || !Y.writable || X.size != Y.size) return false;
  const bool same = X.data == Y.data;
  if (!same && X.data < Y.data + Y.size && Y.data < X.data + X.size) return false;  // overlap
  double* yp = Y.data;
  const double* xp = X.data;
  const Py_ssize_t n = Y.size;
  // Same cases and operation order as braidpy._arrays.array_sum.
  const Py_ssize_t done = sum_pairs(a, xp, b, yp, n);
  if (a == 0.0) {
    if (b != 1.0)
      for (Py_ssize_t i = done; i < n; ++i) yp[i] *= b;
  } else if (b == 1.0) {
    for (Py_ssize_t i = done; i < n; ++i) yp[i] += a * xp[i];
  } else {
    for (Py_ssize_t i = done; i < n; ++i) yp[i] = b * yp[i] + a * xp[i];
  }
  return true;
}

bool fast_chained_sums(double a1, PyObject* const* xs, double b1, PyObject* const* ys,
                       double a2, double b2, PyObject* const* zs, Py_ssize_t n) {
  // Only the core's pattern: (-1)*y + 1*x (array_sum's general case), then z + 1*e.
  if (a1 != 1.0 || b1 != -1.0 || a2 != 1.0 || b2 != 1.0) return false;
  std::vector<F64View> views(static_cast<std::size_t>(3 * n));
  for (Py_ssize_t k = 0; k < n; ++k) {  // all pairs qualify, or none is done
    F64View& X = views[3 * k];
    F64View& Y = views[3 * k + 1];
    F64View& Z = views[3 * k + 2];
    if (!as_f64(xs[k], X) || !as_f64(ys[k], Y) || !as_f64(zs[k], Z) || !Z.writable ||
        X.size != Y.size || Z.size != Y.size)
      return false;
    // z may be y itself (a shared vector: each element read before it is written), else
    // neither input may overlap it
    const bool y_is_z = Y.data == Z.data;
    for (const F64View* v : {&X, &Y})
      if (!(v == &Y && y_is_z) && v->data < Z.data + Z.size && Z.data < v->data + Z.size)
        return false;  // overlap
  }
  for (Py_ssize_t k = 0; k < n; ++k) {
    const double* xp = views[3 * k].data;
    const double* yp = views[3 * k + 1].data;
    double* zp = views[3 * k + 2].data;
    const Py_ssize_t size = views[3 * k + 2].size;
    Py_ssize_t i = 0;
#if defined(__GNUC__)
    const Pair one = {1.0, 1.0}, minus = {-1.0, -1.0};
    for (; i + 2 <= size; i += 2) {
      const Pair e = minus * load(yp + i) + one * load(xp + i);
      store(zp + i, load(zp + i) + one * e);
    }
#endif
    for (; i < size; ++i) {
      const double e = -1.0 * yp[i] + 1.0 * xp[i];
      zp[i] += 1.0 * e;
    }
  }
  return true;
}

bool fast_shareable(PyObject* u) {
  F64View v;
  return as_f64(u, v) && v.writable;
}

bool fast_norm(PyObject* u, double* out) {
  F64View U;
  if (!as_f64(u, U) || U.size != 1) return false;
  *out = std::sqrt(U.data[0] * U.data[0]);
  return true;
}

bool fast_clone_block(PyObject* const* srcs, Py_ssize_t n, PyObject** block, PyObject** rows) {
  auto& api = pyd::npy_api::get();
  PyObject* first = nullptr;
  for (Py_ssize_t k = 0; k < n && first == nullptr; ++k) first = srcs[k];
  if (first == nullptr) return false;
  F64View ref;
  if (!as_f64(first, ref)) return false;
  auto* fa = pyd::array_proxy(first);
  if (fa->nd < 1) return false;
  for (Py_ssize_t k = 0; k < n; ++k)
    if (srcs[k] != nullptr && !f64_like(srcs[k], fa)) return false;
  pybind11::array_t<double> U = new_rows(n, fa);
  double* data = U.mutable_data();
  const std::size_t bytes = static_cast<std::size_t>(ref.size) * sizeof(double);
  for (Py_ssize_t k = 0; k < n; ++k) {
    double* row = data + k * ref.size;
    if (srcs[k] != nullptr) {
      std::memcpy(row, pyd::array_proxy(srcs[k])->data, bytes);
    } else {
      std::memset(row, 0, bytes);
    }
  }
  (void)api;
  return with_row_views(U.release().ptr(), n, block, rows);
}

bool fast_new_block(PyObject* like, Py_ssize_t n, PyObject** block, PyObject** rows) {
  F64View ref;
  if (n < 1 || !as_f64(like, ref)) return false;
  return with_row_views(new_rows(n, pyd::array_proxy(like)).release().ptr(), n, block, rows);
}

bool fast_norm_vdot(PyObject* u, double* out) {
  F64View U;
  if (!as_f64(u, U) || U.size < 2) return false;
  static PyObject* vdot = nullptr;  // numpy.vdot, looked up once (never released)
  if (vdot == nullptr) {
    PyObject* np = PyImport_ImportModule("numpy");
    vdot = np ? PyObject_GetAttrString(np, "vdot") : nullptr;
    Py_XDECREF(np);
    if (vdot == nullptr) {
      PyErr_Clear();
      return false;
    }
  }
  // array_norm: math.sqrt(float(np.vdot(flat, flat).real)); vdot flattens u itself
  // (a view for a C-contiguous array), so the BLAS call and its result are the same.
  PyObject* args[2] = {u, u};
  PyObject* r = PyObject_Vectorcall(vdot, args, 2, nullptr);
  if (r == nullptr) {
    PyErr_Clear();
    return false;
  }
  const double d = PyFloat_AsDouble(r);
  Py_DECREF(r);
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = std::sqrt(d);
  return true;
}

bool fast_stack(PyObject* const* srcs, Py_ssize_t n, PyObject** out) {
  if (n < 1) return false;
  F64View ref;
  if (!as_f64(srcs[0], ref)) return false;
  auto* fa = pyd::array_proxy(srcs[0]);
  for (Py_ssize_t k = 1; k < n; ++k)
    if (!f64_like(srcs[k], fa)) return false;
  pybind11::array_t<double> U = new_rows(n, fa);
  double* data = U.mutable_data();
  const std::size_t bytes = static_cast<std::size_t>(ref.size) * sizeof(double);
  for (Py_ssize_t k = 0; k < n; ++k)
    std::memcpy(data + k * ref.size, pyd::array_proxy(srcs[k])->data, bytes);
  *out = U.release().ptr();
  return true;
}

bool fast_stack_view(PyObject* const* srcs, Py_ssize_t n, PyObject** out) {
  if (n < 1) return false;
  F64View ref;
  if (!as_f64(srcs[0], ref) || ref.size < 1) return false;
  auto* fa = pyd::array_proxy(srcs[0]);
  PyObject* block = fa->base;
  auto& api = pyd::npy_api::get();
  if (block == nullptr || Py_TYPE(block) != api.PyArray_Type_) return false;
  // Every source a whole row of one C-contiguous block, evenly spaced (either way).
  F64View B;
  if (!as_f64(block, B)) return false;
  // Addresses as integers: the checks below must not form pointers outside the block.
  const auto lo = reinterpret_cast<std::intptr_t>(B.data);
  const auto hi = lo + static_cast<std::intptr_t>(B.size * sizeof(double));
  const auto first = reinterpret_cast<std::intptr_t>(fa->data);
  const auto bytes = static_cast<std::intptr_t>(ref.size * sizeof(double));
  if (n > 1 && Py_TYPE(srcs[1]) != api.PyArray_Type_) return false;
  const std::intptr_t gap =
      n > 1 ? reinterpret_cast<std::intptr_t>(pyd::array_proxy(srcs[1])->data) - first : bytes;
  if (gap == 0 || gap % bytes != 0) return false;
  const std::intptr_t last = first + (n - 1) * gap;
  if (std::min(first, last) < lo || std::max(first, last) + bytes > hi) return false;
  // Row by row only what a row of that block must show (a call may ask for thousands
  // of small states): an array whose base is the block, at the row's place, of the
  // first row's shape (the block's dtype and layout then follow).
  for (Py_ssize_t k = 1; k < n; ++k) {
    if (Py_TYPE(srcs[k]) != api.PyArray_Type_) return false;
    auto* a = pyd::array_proxy(srcs[k]);
    if (a->base != block || reinterpret_cast<std::intptr_t>(a->data) != first + k * gap ||
        a->nd != fa->nd)
      return false;
    for (int d = 0; d < a->nd; ++d)
      if (a->dimensions[d] != fa->dimensions[d] || a->strides[d] != fa->strides[d])
        return false;
  }
  std::vector<pybind11::ssize_t> shape{static_cast<pybind11::ssize_t>(n)};
  std::vector<pybind11::ssize_t> strides{static_cast<pybind11::ssize_t>(gap)};
  for (int d = 0; d < fa->nd; ++d) {
    shape.push_back(fa->dimensions[d]);
    strides.push_back(fa->strides[d]);
  }
  pybind11::array view(pybind11::dtype::of<double>(), shape, strides,
                       reinterpret_cast<const double*>(fa->data),
                       pybind11::reinterpret_borrow<pybind11::object>(block));
  // Read-only: the rows stay the Core's stored values.
  pyd::array_proxy(view.ptr())->flags &= ~pyd::npy_api::NPY_ARRAY_WRITEABLE_;
  *out = view.release().ptr();
  return true;
}

bool fast_stack_into(PyObject* const* srcs, Py_ssize_t n, PyObject* out) {
  if (n < 1) return false;
  F64View ref, O;
  if (!as_f64(srcs[0], ref) || !as_f64(out, O) || !O.writable) return false;
  auto* fa = pyd::array_proxy(srcs[0]);
  auto* oa = pyd::array_proxy(out);
  if (oa->nd != fa->nd + 1 || oa->dimensions[0] != n) return false;
  for (int d = 0; d < fa->nd; ++d)
    if (oa->dimensions[d + 1] != fa->dimensions[d]) return false;
  const double* lo = O.data;
  const double* hi = O.data + O.size;
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (k > 0 && !f64_like(srcs[k], fa)) return false;
    const auto* p = reinterpret_cast<const double*>(pyd::array_proxy(srcs[k])->data);
    if (p < hi && lo < p + ref.size) return false;  // a source inside out
  }
  const std::size_t bytes = static_cast<std::size_t>(ref.size) * sizeof(double);
  for (Py_ssize_t k = 0; k < n; ++k)
    std::memcpy(O.data + k * ref.size, pyd::array_proxy(srcs[k])->data, bytes);
  return true;
}

bool fast_copy(PyObject* src, PyObject* dst) {
  F64View S, D;
  if (!as_f64(src, S) || !as_f64(dst, D) || !D.writable || S.size != D.size) return false;
  if (S.data != D.data) std::memmove(D.data, S.data, static_cast<std::size_t>(S.size) * sizeof(double));
  return true;
}

bool fast_copy_alike(PyObject* src, PyObject* dst) {
  F64View D;
  if (!as_f64(dst, D) || !D.writable || !f64_like(src, pyd::array_proxy(dst))) return false;
  return fast_copy(src, dst);
}

bool uses_app_default(PyObject* app, const char* name) {
  PyObject* module = PyImport_ImportModule("braidpy._app");
  PyObject* base = module ? PyObject_GetAttrString(module, "App") : nullptr;
  PyObject* mine = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(app)), name);
  PyObject* theirs = base ? PyObject_GetAttrString(base, name) : nullptr;
  // The instance must not shadow the method either.
  PyObject* dict = PyObject_GenericGetDict(app, nullptr);
  const bool shadowed = dict != nullptr && PyDict_GetItemString(dict, name) != nullptr;
  const bool same = mine != nullptr && mine == theirs && !shadowed;
  for (PyObject* p : {module, base, mine, theirs, dict}) Py_XDECREF(p);
  PyErr_Clear();
  return same;
}

}  // namespace braidpy
