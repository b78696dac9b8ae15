// State kind checks at the gateway (see state_kind.hpp). The NumPy case costs a
// few field reads; other array types cost two attribute look-ups, and only
// where a callback hands back a new object (an in-place step costs nothing).
#include "state_kind.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace braidpy {

namespace {

namespace pyd = pybind11::detail;

bool is_numpy_array(PyObject* o) {
  auto* array_type = pyd::npy_api::get().PyArray_Type_;
  return Py_TYPE(o) == array_type || PyType_IsSubtype(Py_TYPE(o), array_type);
}

// repr(o.attr) or "?" (error path only).
std::string attr_repr(PyObject* o, const char* attr) {
  PyObject* v = PyObject_GetAttrString(o, attr);
  if (v == nullptr) {
    PyErr_Clear();
    return "?";
  }
  PyObject* s = PyObject_Str(v);
  Py_DECREF(v);
  if (s == nullptr) {
    PyErr_Clear();
    return "?";
  }
  const char* text = PyUnicode_AsUTF8(s);
  std::string out = text ? text : "?";
  Py_DECREF(s);
  if (text == nullptr) PyErr_Clear();
  return out;
}

// 1: equal, 0: not equal (or the comparison failed; error cleared).
int equal(PyObject* a, PyObject* b) {
  if (a == b) return 1;
  const int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) {
    PyErr_Clear();
    return 0;
  }
  return r;
}

}  // namespace

std::string StateKind::describe(PyObject* u) {
  std::string out = Py_TYPE(u)->tp_name;
  if (PyObject_HasAttrString(u, "shape"))
    out += " of shape " + attr_repr(u, "shape") + ", dtype " + attr_repr(u, "dtype");
  return out;
}

StateKind::~StateKind() {
  Py_XDECREF(reinterpret_cast<PyObject*>(type_));
  Py_XDECREF(shape_);
  Py_XDECREF(dtype_);
}

bool StateKind::learn(PyObject* u, const char* what) {
  first_ = describe(u);
  type_ = Py_TYPE(u);
  Py_INCREF(reinterpret_cast<PyObject*>(type_));
  numpy_ = is_numpy_array(u);
  if (numpy_) {
    auto* a = pyd::array_proxy(u);
    if (!(a->flags & pyd::npy_api::NPY_ARRAY_WRITEABLE_)) return read_only(u, what);
    dims_.assign(a->dimensions, a->dimensions + a->nd);
    type_num_ = pyd::array_descriptor_proxy(a->descr)->type_num;
    return true;
  }
  // Other arrays (array API, CuPy, torch): compare .shape and .dtype if they have them.
  shape_ = PyObject_GetAttrString(u, "shape");
  if (shape_ == nullptr) PyErr_Clear();
  dtype_ = PyObject_GetAttrString(u, "dtype");
  if (dtype_ == nullptr) PyErr_Clear();
  return true;
}

bool StateKind::check(PyObject* u, const char* what) {
  if (type_ == nullptr) return learn(u, what);
  if (Py_TYPE(u) != type_) return mismatch(u, what, false);
  if (numpy_) {
    auto* a = pyd::array_proxy(u);
    bool same_shape = ignore_shape_ || a->nd == static_cast<int>(dims_.size());
    for (int d = 0; same_shape && !ignore_shape_ && d < a->nd; ++d)
      same_shape = a->dimensions[d] == dims_[d];
    if (!same_shape) return mismatch(u, what, true);
    if (pyd::array_descriptor_proxy(a->descr)->type_num != type_num_)
      return mismatch(u, what, false);
    if (!(a->flags & pyd::npy_api::NPY_ARRAY_WRITEABLE_)) return read_only(u, what);
    return true;
  }
  for (auto [attr, known] : {std::pair{"shape", shape_}, std::pair{"dtype", dtype_}}) {
    if (known == nullptr || (ignore_shape_ && known == shape_)) continue;
    PyObject* v = PyObject_GetAttrString(u, attr);
    if (v == nullptr) PyErr_Clear();
    const bool same = v != nullptr && equal(v, known) == 1;
    Py_XDECREF(v);
    if (!same) return mismatch(u, what, known == shape_);
  }
  return true;
}

bool StateKind::check_in_place(PyObject* u, const char* what) {
  if (!numpy_ || ignore_shape_ || Py_TYPE(u) != type_) return true;
  auto* a = pyd::array_proxy(u);
  bool same_shape = a->nd == static_cast<int>(dims_.size());
  for (int d = 0; same_shape && d < a->nd; ++d) same_shape = a->dimensions[d] == dims_[d];
  if (same_shape) return true;
  PyErr_Format(PyExc_ValueError,
               "%s changed the shape of u in place (u is now %s); this Core's states are "
               "%s (learnt from the first state it saw): a step must keep u's shape, or "
               "return a new state of that shape",
               what, describe(u).c_str(), first_.c_str());
  return false;
}

bool StateKind::read_only(PyObject* u, const char* what) {
  PyErr_Format(PyExc_ValueError,
               "%s returned a read-only NumPy array (%s, flags.writeable is False); "
               "braidpy updates states in place (sum, step), so every state must be "
               "writeable: return a copy",
               what, describe(u).c_str());
  return false;
}

bool StateKind::mismatch(PyObject* u, const char* what, bool shape_differs) {
  PyErr_Format(shape_differs ? PyExc_ValueError : PyExc_TypeError,
               "%s returned %s; this Core's states are %s (learnt from the first state it "
               "saw): all states must have one type, shape and dtype",
               what, describe(u).c_str(), first_.c_str());
  return false;
}

bool StateKind::same_array(PyObject* r, PyObject* block, const char* what) {
  if (!is_numpy_array(r) || !is_numpy_array(block)) return true;
  auto* a = pyd::array_proxy(r);
  auto* b = pyd::array_proxy(block);
  bool same = a->nd == b->nd;
  for (int d = 0; same && d < a->nd; ++d) same = a->dimensions[d] == b->dimensions[d];
  if (same) return true;
  PyErr_Format(PyExc_ValueError, "%s returned an array of shape %s for a stack of shape %s",
               what, attr_repr(r, "shape").c_str(), attr_repr(block, "shape").c_str());
  return false;
}

}  // namespace braidpy
