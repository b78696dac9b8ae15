// Device paths of App's defaults for CUDA arrays (see device_path.hpp).
#include "device_path.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "../cuda/device_ops.hpp"
#include "../cuda/kernels.hpp"
#include "cuda_array.hpp"

namespace braidpy {

namespace {

// ------------------------------------------------------------ the provider

enum class Choice { kDefault, kGiven, kNone };
Choice choice = Choice::kDefault;
const DeviceOps* given = nullptr;
PyObject* given_capsule = nullptr;  // owned while given
bool looked_up = false;
const DeviceOps* loaded = nullptr;  // braidpy._cuda's (its capsule is kept alive)

const DeviceOps* from_capsule(PyObject* capsule) {
  auto* ops = static_cast<const DeviceOps*>(PyCapsule_GetPointer(capsule, kDeviceOpsCapsule));
  if (ops == nullptr || ops->abi != kDeviceOpsAbi) {
    PyErr_Clear();
    return nullptr;
  }
  return ops;
}

const DeviceOps* load_module_ops() {
  PyObject* mod = PyImport_ImportModule("braidpy._cuda");
  if (mod == nullptr) {  // not compiled: CUDA arrays take the Python defaults
    PyErr_Clear();
    return nullptr;
  }
  PyObject* capsule = PyObject_CallMethod(mod, "device_ops", nullptr);
  Py_DECREF(mod);
  if (capsule == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const DeviceOps* ops = from_capsule(capsule);
  if (ops == nullptr) Py_DECREF(capsule);  // else kept for the process's life
  return ops;
}

// braidpy.NoGPUError (no driver, no device) or braidpy.CudaError, naming the operation.
void set_cuda_error(const DeviceOps* ops, int code, const char* what) {
  const bool no_gpu = code == kCudaNoDriver || code == kCudaNoDevice;
  PyObject* errors = PyImport_ImportModule("braidpy._errors");
  PyObject* cls = errors ? PyObject_GetAttrString(errors, no_gpu ? "NoGPUError" : "CudaError")
                         : nullptr;
  Py_XDECREF(errors);
  if (cls == nullptr) return;  // the import's error stays set
  const std::string name = ops->error_name(code);
  const std::string text = ops->error_string(code);
  std::string msg = std::string(what) + ": ";
  msg += no_gpu ? "no usable GPU (" + name + ", CUDA error " + std::to_string(code) + ": " +
                      text + "); braidpy.cuda_info() shows what was found"
                : "CUDA error " + std::to_string(code) + " (" + name + ": " + text + ")";
  PyObject* exc = PyObject_CallFunction(cls, "si", msg.c_str(), code);
  Py_DECREF(cls);
  if (exc == nullptr) return;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
}

DevicePath done(const DeviceOps* ops, int code, const char* what) {
  if (code == 0) return DevicePath::kDone;
  set_cuda_error(ops, code, what);
  return DevicePath::kFailed;
}

// A new array of u's kind and dtype with the given shape, from
// braidpy.backends.cupy.new_array (CuPy's memory pool for CuPy arrays).
PyObject* new_array(PyObject* like, const std::vector<std::int64_t>& shape) {
  PyObject* mod = PyImport_ImportModule("braidpy.backends.cupy");
  if (mod == nullptr) return nullptr;
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(shape.size()));
  for (std::size_t d = 0; d < shape.size(); ++d)
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(d), PyLong_FromLongLong(shape[d]));
  PyObject* out = PyObject_CallMethod(mod, "new_array", "OO", like, t);
  Py_DECREF(t);
  Py_DECREF(mod);
  return out;
}

// Whether new_array can allocate like u: braidpy.backends.cupy.can_allocate_like, asked
// once per type (the last type is kept, as has_cuda_array_interface does). Other CUDA
// arrays (e.g. PyTorch's tensors) take the Python paths.
bool allocatable_like(PyObject* u) {
  static PyTypeObject* last = nullptr;  // owned, so that its address is not reused
  static bool last_ok = false;
  PyTypeObject* type = Py_TYPE(u);
  if (type == last) return last_ok;
  PyObject* mod = PyImport_ImportModule("braidpy.backends.cupy");
  PyObject* r = mod ? PyObject_CallMethod(mod, "can_allocate_like", "O", u) : nullptr;
  const int ok = r ? PyObject_IsTrue(r) : -1;
  Py_XDECREF(r);
  Py_XDECREF(mod);
  if (ok < 0) {  // cannot tell: the Python paths, and ask again next time
    PyErr_Clear();
    return false;
  }
  Py_INCREF(reinterpret_cast<PyObject*>(type));
  Py_XDECREF(reinterpret_cast<PyObject*>(last));
  last = type;
  last_ok = ok == 1;
  return last_ok;
}

bool same_layout(const CudaArrayView& a, const CudaArrayView& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

// ------------------------------------------------------------ host provider

HostOpCalls host_calls;  // what the host provider was asked to "launch"

template <class T>
void host_sum_t(double a, const void* x, double b, void* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    kern::axpby_at(i, static_cast<T>(a), static_cast<const T*>(x), static_cast<T>(b),
                   static_cast<T*>(y));
}

int host_sum(int dtype, double a, const void* x, double b, void* y, std::int64_t n,
             std::uintptr_t) {
  ++host_calls.sum;
  if (dtype == kDeviceF64) host_sum_t<double>(a, x, b, y, n);
  else host_sum_t<float>(a, x, b, y, n);
  return 0;
}

template <class T>
void host_sum_rows_t(double a, const void* const* xs, double b, void* const* ys,
                     std::int64_t nrows, std::int64_t len) {
  for (std::int64_t i = 0; i < nrows * len; ++i)
    kern::axpby_rows_at(i, static_cast<T>(a), reinterpret_cast<const T* const*>(xs),
                        static_cast<T>(b), reinterpret_cast<T* const*>(ys), len);
}

int host_sum_rows(int dtype, double a, const void* const* xs, double b, void* const* ys,
                  std::int64_t nrows, std::int64_t len, std::uintptr_t) {
  ++host_calls.sum_rows;
  if (dtype == kDeviceF64) host_sum_rows_t<double>(a, xs, b, ys, nrows, len);
  else host_sum_rows_t<float>(a, xs, b, ys, nrows, len);
  return 0;
}

template <class T>
void host_gather_t(const void* const* srcs, std::int64_t nrows, std::int64_t len, void* block) {
  for (std::int64_t i = 0; i < nrows * len; ++i)
    kern::gather_at(i, reinterpret_cast<const T* const*>(srcs), len, static_cast<T*>(block));
}

int host_gather(int dtype, const void* const* srcs, std::int64_t nrows, std::int64_t len,
                void* block, std::uintptr_t) {
  ++host_calls.gather;
  if (dtype == kDeviceF64) host_gather_t<double>(srcs, nrows, len, block);
  else host_gather_t<float>(srcs, nrows, len, block);
  return 0;
}

int host_copy(const void* src, void* dst, std::int64_t bytes, std::uintptr_t) {
  ++host_calls.copy;
  if (src != dst) std::memmove(dst, src, static_cast<std::size_t>(bytes));
  return 0;
}

int host_row_norms(int dtype, const void* const* rows, std::int64_t nrows, std::int64_t len,
                   double* out, std::uintptr_t) {
  ++host_calls.row_norms;
  for (std::int64_t r = 0; r < nrows; ++r)
    out[r] = dtype == kDeviceF64 ? kern::row_norm_host(static_cast<const double*>(rows[r]), len)
                                 : kern::row_norm_host(static_cast<const float*>(rows[r]), len);
  return 0;
}

const char* host_error_name(int) { return "hostError"; }
const char* host_error_string(int) { return "host device ops do not fail"; }

const DeviceOps kHostOps = {kDeviceOpsAbi,   host_sum,        host_sum_rows,
                            host_gather,     host_copy,       host_row_norms,
                            host_error_name, host_error_string};

}  // namespace

const DeviceOps* device_ops() {
  if (choice == Choice::kGiven) return given;
  if (choice == Choice::kNone) return nullptr;
  if (!looked_up) {
    looked_up = true;
    loaded = load_module_ops();
  }
  return loaded;
}

bool set_device_ops(PyObject* c) {
  host_calls = HostOpCalls{};
  Py_XDECREF(given_capsule);
  given_capsule = nullptr;
  given = nullptr;
  if (c == Py_None) {
    choice = Choice::kDefault;
  } else if (c == Py_False) {
    choice = Choice::kNone;
  } else {
    given = from_capsule(c);
    if (given == nullptr) {
      choice = Choice::kDefault;
      return false;
    }
    Py_INCREF(c);
    given_capsule = c;
    choice = Choice::kGiven;
  }
  return true;
}

HostOpCalls& host_device_op_calls() { return host_calls; }

PyObject* host_device_ops_capsule() {
  return PyCapsule_New(const_cast<DeviceOps*>(&kHostOps), kDeviceOpsCapsule, nullptr);
}

DevicePath device_clone(PyObject* u, PyObject** out) {
  CudaArrayView U, V;
  const DeviceOps* ops;
  if (!cuda_array_view(u, U) || (ops = device_ops()) == nullptr || !allocatable_like(u))
    return DevicePath::kNo;
  PyObject* v = new_array(u, U.shape);
  if (v == nullptr) return DevicePath::kFailed;
  if (!cuda_array_view(v, V) || !same_layout(U, V) || V.readonly) {
    Py_DECREF(v);
    return DevicePath::kNo;
  }
  const DevicePath r = done(ops, ops->copy(U.data, V.data, U.size * U.itemsize(), V.stream),
                            "clone");
  if (r == DevicePath::kDone) *out = v;
  else Py_DECREF(v);
  return r;
}

DevicePath device_sum(double a, PyObject* x, double b, PyObject* y) {
  CudaArrayView X, Y;
  const DeviceOps* ops;
  if (!cuda_array_view(y, Y) || Y.readonly) return DevicePath::kNo;
  if (x == y) X = Y;
  else if (!cuda_array_view(x, X)) return DevicePath::kNo;
  if (X.dtype != Y.dtype || X.size != Y.size) return DevicePath::kNo;
  const auto* xs = static_cast<const char*>(X.data);
  const auto* ys = static_cast<const char*>(Y.data);
  const std::int64_t bytes = Y.size * Y.itemsize();
  if (xs != ys && xs < ys + bytes && ys < xs + bytes) return DevicePath::kNo;  // overlap
  if ((ops = device_ops()) == nullptr) return DevicePath::kNo;
  return done(ops, ops->sum(Y.dtype, a, X.data, b, Y.data, Y.size, Y.stream), "sum");
}

DevicePath device_sums(double a, PyObject* const* xs, double b, PyObject* const* ys,
                       Py_ssize_t n) {
  if (n < 1) return DevicePath::kNo;
  std::vector<const void*> xp(static_cast<std::size_t>(n));
  std::vector<void*> yp(static_cast<std::size_t>(n));
  CudaArrayView first, X, Y;
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (xs[k] == nullptr || ys[k] == nullptr || !cuda_array_view(ys[k], Y) || Y.readonly)
      return DevicePath::kNo;
    if (xs[k] == ys[k]) X = Y;
    else if (!cuda_array_view(xs[k], X)) return DevicePath::kNo;
    if (k == 0) first = Y;
    if (X.dtype != first.dtype || Y.dtype != first.dtype || X.size != first.size ||
        Y.size != first.size)
      return DevicePath::kNo;
    const auto* xb = static_cast<const char*>(X.data);
    const auto* yb = static_cast<const char*>(Y.data);
    const std::int64_t bytes = Y.size * Y.itemsize();
    if (xb != yb && xb < yb + bytes && yb < xb + bytes) return DevicePath::kNo;  // overlap
    xp[static_cast<std::size_t>(k)] = X.data;
    yp[static_cast<std::size_t>(k)] = Y.data;
  }
  const DeviceOps* ops = device_ops();
  if (ops == nullptr) return DevicePath::kNo;
  return done(ops, ops->sum_rows(first.dtype, a, xp.data(), b, yp.data(), n, first.size,
                                 first.stream),
              "sum");
}

DevicePath device_norms(PyObject* const* us, Py_ssize_t n, double* out) {
  if (n < 1) return DevicePath::kNo;
  std::vector<const void*> rows(static_cast<std::size_t>(n));
  CudaArrayView first, v;
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (us[k] == nullptr || !cuda_array_view(us[k], k == 0 ? first : v)) return DevicePath::kNo;
    if (k > 0 && (v.dtype != first.dtype || v.size != first.size)) return DevicePath::kNo;
    rows[static_cast<std::size_t>(k)] = k == 0 ? first.data : v.data;
  }
  const DeviceOps* ops = device_ops();
  if (ops == nullptr) return DevicePath::kNo;
  return done(ops, ops->row_norms(first.dtype, rows.data(), n, first.size, out, first.stream),
              "norm");
}

DevicePath device_stack(PyObject* const* srcs, Py_ssize_t n, PyObject** block) {
  PyObject* first = nullptr;
  for (Py_ssize_t k = 0; k < n && first == nullptr; ++k) first = srcs[k];
  CudaArrayView F, v;
  if (first == nullptr || !cuda_array_view(first, F) || F.shape.empty() ||
      !allocatable_like(first))
    return DevicePath::kNo;
  std::vector<const void*> ptrs(static_cast<std::size_t>(n), nullptr);
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (srcs[k] == nullptr) continue;
    if (!cuda_array_view(srcs[k], v) || !same_layout(v, F)) return DevicePath::kNo;
    ptrs[static_cast<std::size_t>(k)] = v.data;
  }
  const DeviceOps* ops = device_ops();
  if (ops == nullptr) return DevicePath::kNo;
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
  shape.insert(shape.end(), F.shape.begin(), F.shape.end());
  PyObject* B = new_array(first, shape);
  if (B == nullptr) return DevicePath::kFailed;
  CudaArrayView BV;
  if (!cuda_array_view(B, BV) || BV.readonly || BV.dtype != F.dtype || BV.shape != shape) {
    Py_DECREF(B);
    return DevicePath::kNo;
  }
  const DevicePath r =
      done(ops, ops->gather(F.dtype, ptrs.data(), n, F.size, BV.data, BV.stream), "clone");
  if (r != DevicePath::kDone) {
    Py_DECREF(B);
    return r;
  }
  *block = B;
  return DevicePath::kDone;
}

DevicePath device_clone_block(PyObject* const* srcs, Py_ssize_t n, PyObject** block,
                              PyObject** rows) {
  PyObject* B = nullptr;
  const DevicePath r = device_stack(srcs, n, &B);
  if (r != DevicePath::kDone) return r;
  for (Py_ssize_t k = 0; k < n; ++k) {  // B[k] (any type's __getitem__, not sq_item)
    PyObject* index = PyLong_FromSsize_t(k);
    rows[k] = index ? PyObject_GetItem(B, index) : nullptr;
    Py_XDECREF(index);
    if (rows[k] == nullptr) {
      for (Py_ssize_t j = 0; j < k; ++j) Py_DECREF(rows[j]);
      Py_DECREF(B);
      return DevicePath::kFailed;
    }
  }
  *block = B;
  return DevicePath::kDone;
}

DevicePath device_copy(PyObject* src, PyObject* dst) {
  CudaArrayView S, D;
  if (!cuda_array_view(dst, D) || D.readonly || !cuda_array_view(src, S) ||
      S.dtype != D.dtype || S.size != D.size)
    return DevicePath::kNo;
  const DeviceOps* ops = device_ops();
  if (ops == nullptr) return DevicePath::kNo;
  return done(ops, ops->copy(S.data, D.data, S.size * S.itemsize(), D.stream), "copy");
}

const char* default_path(PyObject* u) {
  if (std::strcmp(Py_TYPE(u)->tp_name, "numpy.ndarray") == 0) return "numpy";
  CudaArrayView v;
  if (!cuda_array_view(u, v) || device_ops() == nullptr) return "python";
  return v.dtype == kDeviceF64 ? "device-f64" : "device-f32";
}

}  // namespace braidpy
