// __cuda_array_interface__ reader (see cuda_array.hpp).
#include "cuda_array.hpp"

#include <cstring>

#include "../cuda/device_ops.hpp"

namespace braidpy {

namespace {

bool as_int64(PyObject* o, std::int64_t& out) {
  if (o == nullptr || !PyLong_Check(o)) return false;
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = v;
  return true;
}

bool parse(PyObject* cai, CudaArrayView& v) {
  if (!PyDict_Check(cai)) return false;
  PyObject* typestr = PyDict_GetItemString(cai, "typestr");
  PyObject* shape = PyDict_GetItemString(cai, "shape");
  PyObject* data = PyDict_GetItemString(cai, "data");
  PyObject* strides = PyDict_GetItemString(cai, "strides");
  PyObject* mask = PyDict_GetItemString(cai, "mask");
  PyObject* stream = PyDict_GetItemString(cai, "stream");
  if (typestr == nullptr || shape == nullptr || data == nullptr) return false;
  if (mask != nullptr && mask != Py_None) return false;
  const char* t = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8(typestr) : nullptr;
  if (t == nullptr) {
    PyErr_Clear();
    return false;
  }
  if (std::strcmp(t, "<f8") == 0) v.dtype = kDeviceF64;
  else if (std::strcmp(t, "<f4") == 0) v.dtype = kDeviceF32;
  else return false;
  if (!PyTuple_Check(shape) || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) return false;
  std::int64_t ptr = 0;
  if (!as_int64(PyTuple_GET_ITEM(data, 0), ptr)) return false;
  v.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  const int ro = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
  if (ro < 0) {
    PyErr_Clear();
    return false;
  }
  v.readonly = ro == 1;
  v.shape.clear();
  v.size = 1;
  for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); ++d) {
    std::int64_t n = 0;
    if (!as_int64(PyTuple_GET_ITEM(shape, d), n) || n < 0) return false;
    v.shape.push_back(n);
    v.size *= n;
  }
  if (strides != nullptr && strides != Py_None) {  // must be C order
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(shape))
      return false;
    std::int64_t expect = v.itemsize();
    for (Py_ssize_t d = PyTuple_GET_SIZE(strides) - 1; d >= 0; --d) {
      std::int64_t s = 0;
      if (!as_int64(PyTuple_GET_ITEM(strides, d), s)) return false;
      if (v.shape[d] > 1 && s != expect) return false;
      expect *= v.shape[d];
    }
  }
  v.stream = 0;
  if (stream != nullptr && stream != Py_None) {
    std::int64_t s = 0;
    if (!as_int64(stream, s) || s <= 0) return false;  // 0 is forbidden by the protocol
    v.stream = static_cast<std::uintptr_t>(s);
  }
  if (v.data == nullptr && v.size > 0) return false;
  return true;
}

}  // namespace

bool has_cuda_array_interface(PyObject* o) {
  static PyTypeObject* last = nullptr;  // owned, so that its address is not reused
  static bool last_has = false;
  PyTypeObject* type = Py_TYPE(o);
  if (type == last) return last_has;
  Py_INCREF(reinterpret_cast<PyObject*>(type));
  Py_XDECREF(reinterpret_cast<PyObject*>(last));
  PyObject* attr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type),
                                          "__cuda_array_interface__");
  last_has = attr != nullptr;
  Py_XDECREF(attr);
  PyErr_Clear();
  last = type;
  return last_has;
}

bool cuda_array_view(PyObject* o, CudaArrayView& v) {
  if (!has_cuda_array_interface(o)) return false;
  PyObject* cai = PyObject_GetAttrString(o, "__cuda_array_interface__");
  if (cai == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool ok = parse(cai, v);
  Py_DECREF(cai);
  if (!ok) PyErr_Clear();
  return ok;
}

}  // namespace braidpy
