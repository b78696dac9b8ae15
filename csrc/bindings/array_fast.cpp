// Fast paths of the default array operations (see array_fast.hpp).
#include "array_fast.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
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

bool fast_sum(double a, PyObject* x, double b, PyObject* y) {
  F64View X, Y;
  if (!as_f64(x, X) || !as_f64(y, Y) || !Y.writable || X.size != Y.size) return false;
  const bool same = X.data == Y.data;
  if (!same && X.data < Y.data + Y.size && Y.data < X.data + X.size) return false;  // overlap
  double* yp = Y.data;
  const double* xp = X.data;
  const Py_ssize_t n = Y.size;
  // Same cases and operation order as braidpy._arrays.array_sum.
  if (a == 0.0) {
    if (b != 1.0)
      for (Py_ssize_t i = 0; i < n; ++i) yp[i] *= b;
  } else if (b == 1.0) {
    for (Py_ssize_t i = 0; i < n; ++i) yp[i] += a * xp[i];
  } else {
    for (Py_ssize_t i = 0; i < n; ++i) yp[i] = b * yp[i] + a * xp[i];
  }
  return true;
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
  PyObject* u = U.release().ptr();
  for (Py_ssize_t k = 0; k < n; ++k) {
    rows[k] = PySequence_GetItem(u, k);
    if (rows[k] == nullptr) {  // cannot happen for an ndarray; be safe
      for (Py_ssize_t j = 0; j < k; ++j) Py_DECREF(rows[j]);
      Py_DECREF(u);
      PyErr_Clear();
      return false;
    }
  }
  (void)api;
  *block = u;
  return true;
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

bool fast_copy(PyObject* src, PyObject* dst) {
  F64View S, D;
  if (!as_f64(src, S) || !as_f64(dst, D) || !D.writable || S.size != D.size) return false;
  if (S.data != D.data) std::memmove(D.data, S.data, static_cast<std::size_t>(S.size) * sizeof(double));
  return true;
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
