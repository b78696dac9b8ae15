// Callback trampolines: counters, timers and error capture live here only.
#include "py_ops.hpp"

#include <cstdio>

#include "array_fast.hpp"
#include "device_path.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace braidpy {

namespace {

using Clock = std::chrono::steady_clock;

PyObject* get_method(PyObject* app, const char* name) {
  PyObject* m = PyObject_GetAttrString(app, name);
  if (m == nullptr) throw pybind11::error_already_set();
  return m;
}

// Python's immutable scalars may be shared by identity (1.0 in a function body is
// one constant); sharing them is harmless, so init's identity check skips them.
bool immutable_scalar(PyObject* o) {
  return PyFloat_CheckExact(o) || PyLong_CheckExact(o) || PyComplex_CheckExact(o) ||
         PyTuple_CheckExact(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) ||
         PyBool_Check(o);
}

// Our own Python code failed (not a user callback): propagate it as is.
[[noreturn]] void throw_python_error() { throw pybind11::error_already_set(); }

}  // namespace

const char* callback_name(int which) {
  static const char* names[kNumCallbacks] = {
      "init", "step", "clone", "sum", "norm", "access", "bufpack", "bufunpack", "step_batch",
      "sync", "residual", "coarsen", "refine", "init_basis", "inner_prod"};
  if (which >= 0 && which < kNumCallbacks) return names[which];
  if (which == kProgress) return "progress output";
  if (which == kInterrupt) return "the solver";
  return "";  // kCommunication
}

PyOps::PyOps(PyObject* app, PyObject* status, PyObject* progress, bool timings, bool batch,
             bool residual, bool step_ustop, bool full_rnorm, bool delta)
    : timings_(timings) {
  if (delta) {
    init_basis_ = get_method(app, "init_basis");
    inner_prod_ = get_method(app, "inner_prod");
  }
  if (residual) {
    residual_ = get_method(app, "residual");
    step_kwnames_ = step_ustop ? Py_BuildValue("(ss)", "fstop", "ustop")
                               : Py_BuildValue("(s)", "fstop");
    if (step_kwnames_ == nullptr) throw pybind11::error_already_set();
  }
  if (full_rnorm) {
    PyObject* f = PyObject_GetAttrString(app, "full_residual");  // optional
    if (f != nullptr && PyCallable_Check(f)) full_residual_ = f;
    else Py_XDECREF(f);
    PyErr_Clear();
    if (full_residual_ == nullptr) full_residual_ = get_method(app, "residual");
  }
  if (batch) {
    step_batch_ = get_method(app, "step_batch");
    // App's default step_batch only forwards a stacked block to step_stacked (and
    // copies a returned array back, which step_batch below does too): skip it.
    if (uses_app_default(app, "step_batch")) {
      PyObject* k = PyObject_GetAttrString(app, "step_stacked");
      if (k != nullptr && PyCallable_Check(k)) step_stacked_ = k;
      else Py_XDECREF(k);
      PyErr_Clear();
    }
    PyObject* into = PyObject_GetAttrString(app, "step_stacked_into");  // optional
    if (into != nullptr && PyCallable_Check(into)) step_stacked_into_ = into;
    else Py_XDECREF(into);
    PyErr_Clear();
  }
  init_ = get_method(app, "init");
  step_ = get_method(app, "step");
  clone_ = get_method(app, "clone");
  sum_ = get_method(app, "sum");
  norm_ = get_method(app, "norm");
  access_ = get_method(app, "access");
  bufpack_ = get_method(app, "bufpack");
  bufunpack_ = get_method(app, "bufunpack");
  PyObject* sync = PyObject_GetAttrString(app, "sync");  // optional
  if (sync != nullptr && PyCallable_Check(sync)) sync_ = sync;
  else Py_XDECREF(sync);
  PyErr_Clear();
  // Spatial coarsening: both methods or neither (the Python layer has said so already).
  PyObject* coarsen = PyObject_GetAttrString(app, "coarsen");
  PyObject* refine = PyObject_GetAttrString(app, "refine");
  PyErr_Clear();
  if (coarsen != nullptr && refine != nullptr && PyCallable_Check(coarsen) &&
      PyCallable_Check(refine)) {
    coarsen_ = coarsen;
    refine_ = refine;
    kind_.ignore_shape();  // each level's states have their own shape
  } else {
    Py_XDECREF(coarsen);
    Py_XDECREF(refine);
  }
  Py_INCREF(status);
  status_ = status;
  fast_clone_ = uses_app_default(app, "clone");
  fast_sum_ = uses_app_default(app, "sum");
  fast_norm_ = uses_app_default(app, "norm");
  noop_access_ = uses_app_default(app, "access");
  if (progress != Py_None) {
    Py_INCREF(progress);
    progress_ = progress;
  }
}

PyOps::~PyOps() {
  for (PyObject* p : {init_, step_, clone_, sum_, norm_, access_, bufpack_, bufunpack_, sync_,
                      step_batch_, step_stacked_, step_stacked_into_, status_, progress_,
                      error_, residual_, full_residual_, step_kwnames_, coarsen_, refine_,
                      init_basis_, inner_prod_})
    Py_XDECREF(p);
}

PyObject* PyOps::call(int which, PyObject* fn, PyObject* const* args, size_t nargs,
                       PyObject* kwnames) {
  counted(which);
  PyObject* r;
  const bool outer = in_callback_;
  in_callback_ = true;
  if (timings_) {
    const auto start = Clock::now();
    r = PyObject_Vectorcall(fn, args, nargs, kwnames);
    seconds_[which] += std::chrono::duration<double>(Clock::now() - start).count();
  } else {
    r = PyObject_Vectorcall(fn, args, nargs, kwnames);
  }
  in_callback_ = outer;
  if (r == nullptr) capture_current_error(which);
  return r;
}

bool PyOps::checked(PyObject* r, int which, const char* what) {
  if (kind_.check(r, what)) return true;
  capture_current_error(which);
  return false;
}

bool PyOps::interrupt() {
  if (in_callback_) return true;
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  capture_current_error(kInterrupt);
  return false;
}

void PyOps::start_solve() {
  reset_counters();
  init_results_.clear();
}

void PyOps::capture_current_error(int which) {
  failed_ = true;
  if (error_ != nullptr) {  // keep the first one only
    PyErr_Clear();
    return;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  error_ = value;
  error_callback_ = which;
}

void PyOps::reset_failure() {
  failed_ = false;
  Py_XDECREF(error_);
  error_ = nullptr;
  error_callback_ = -1;
}

void PyOps::reset_counters() {
  batch_items_ = 0;
  counts_.fill(0);
  seconds_.fill(0.0);
}

Vec PyOps::init(const CallInfo& info) {
  if (failed_) return nullptr;
  PyObject* t = PyFloat_FromDouble(info.t);
  PyObject* args[1] = {t};
  PyObject* r = call(kInit, init_, args, 1);
  Py_DECREF(t);
  Vec u = new_vector(r, kInit, "init(t)");
  if (u == nullptr) return nullptr;
  auto* o = static_cast<PyObject*>(u);
  if (!immutable_scalar(o) && !init_results_.insert(o).second) {  // two C-points would share one vector
    Py_DECREF(o);
    PyErr_SetString(PyExc_TypeError,
                    "init(t) returned the same object as an earlier init call; it must "
                    "return a new vector each time");
    capture_current_error(kInit);
    return nullptr;
  }
  if (!checked(o, kInit, "init(t)")) {
    init_results_.erase(o);
    Py_DECREF(o);
    return nullptr;
  }
  return u;
}

void PyOps::raise_error(const char* message) {
  if (failed_) return;
  PyErr_SetString(PyExc_ValueError, message);
  capture_current_error(kStep);
}

Vec PyOps::init_basis(const CallInfo& info, int index) {
  if (failed_) return nullptr;
  PyObject* t = PyFloat_FromDouble(info.t);
  PyObject* k = PyLong_FromLong(index);
  PyObject* args[2] = {t, k};
  PyObject* r = call(kInitBasis, init_basis_, args, 2);
  Py_DECREF(t);
  Py_DECREF(k);
  if (r == nullptr) return nullptr;
  Vec u = new_vector(r, kInitBasis, "init_basis(t, index)");
  if (u == nullptr) return nullptr;
  if (!checked(static_cast<PyObject*>(u), kInitBasis, "init_basis(t, index)")) {
    Py_DECREF(static_cast<PyObject*>(u));
    return nullptr;
  }
  return u;
}

double PyOps::inner_prod(Vec u, Vec v) {
  if (failed_ || u == nullptr || v == nullptr) return 0.0;
  PyObject* args[2] = {static_cast<PyObject*>(u), static_cast<PyObject*>(v)};
  PyObject* r = call(kInnerProd, inner_prod_, args, 2);
  if (r == nullptr) return 0.0;
  const double p = PyFloat_AsDouble(r);
  Py_DECREF(r);
  if (p == -1.0 && PyErr_Occurred()) {
    capture_current_error(kInnerProd);
    return 0.0;
  }
  return p;
}

Vec PyOps::new_vector(PyObject* r, int which, const char* what) {
  if (r != Py_None) return r;
  Py_DECREF(r);
  PyErr_Format(PyExc_TypeError, "%s returned None; it must return a new vector", what);
  capture_current_error(which);
  return nullptr;
}

void PyOps::step(Vec& u, const CallInfo& info) {
  if (failed_) return;
  PyObject* t0 = PyFloat_FromDouble(info.t0);
  PyObject* t1 = PyFloat_FromDouble(info.t1);
  PyObject* args[4] = {static_cast<PyObject*>(u), t0, t1, status_};
  PyObject* r = call(kStep, step_, args, 4);
  Py_DECREF(t0);
  Py_DECREF(t1);
  if (r == nullptr) return;
  const bool in_place = r == Py_None || r == u;
  replace_state(u, r, kStep, "step(u, t0, t1, status)");
  if (in_place && !kind_.check_in_place(static_cast<PyObject*>(u), "step(u, t0, t1, status)"))
    capture_current_error(kStep);
}

void PyOps::replace_state(Vec& u, PyObject* r, int which, const char* what) {
  if (r != Py_None && r != u) {  // a returned new state replaces the old one
    if (!checked(r, which, what)) {
      Py_DECREF(r);
      return;
    }
    Py_DECREF(static_cast<PyObject*>(u));
    u = r;
  } else {
    Py_DECREF(r);
  }
}

// step(u, t0, t1, status, fstop=..., ustop=...): keywords, so that the app's
// signature says what it takes (braidpy checks it when the Core is made).
void PyOps::step_rhs(Vec& u, Vec ustop, Vec fstop, const CallInfo& info) {
  if (failed_) return;
  PyObject* t0 = PyFloat_FromDouble(info.t0);
  PyObject* t1 = PyFloat_FromDouble(info.t1);
  PyObject* f = fstop != nullptr ? static_cast<PyObject*>(fstop) : Py_None;
  PyObject* g = ustop != nullptr ? static_cast<PyObject*>(ustop) : Py_None;
  PyObject* args[6] = {static_cast<PyObject*>(u), t0, t1, status_, f, g};
  PyObject* r = call(kStep, step_, args, 4, step_kwnames_);
  Py_DECREF(t0);
  Py_DECREF(t1);
  if (r == nullptr) return;
  replace_state(u, r, kStep, "step(u, t0, t1, status, fstop=...)");
}

void PyOps::call_residual(PyObject* fn, Vec ustop, Vec& r) {
  if (failed_ || ustop == nullptr || r == nullptr) return;
  PyObject* args[3] = {static_cast<PyObject*>(ustop), static_cast<PyObject*>(r), status_};
  PyObject* out = call(kResidual, fn, args, 3);
  if (out == nullptr) return;
  replace_state(r, out, kResidual, "residual(ustop, r, status)");
}

void PyOps::residual(Vec ustop, Vec& r, const CallInfo& info) {
  (void)info;
  call_residual(residual_, ustop, r);
}

void PyOps::full_residual(Vec ustop, Vec& r, const CallInfo& info) {
  (void)info;
  call_residual(full_residual_ != nullptr ? full_residual_ : residual_, ustop, r);
}

Vec PyOps::clone(Vec u) {
  if (failed_ || u == nullptr) return nullptr;
  PyObject* fast = nullptr;
  if (fast_clone_ && fast_clone(static_cast<PyObject*>(u), &fast)) {
    counted(kClone);
    if (fast == nullptr) capture_current_error(kClone);
    return fast;
  }
  if (fast_clone_) {
    const DevicePath p = device_clone(static_cast<PyObject*>(u), &fast);
    if (p != DevicePath::kNo) {
      counted(kClone);
      if (p == DevicePath::kFailed) capture_current_error(kClone);
      return p == DevicePath::kDone ? fast : nullptr;
    }
  }
  PyObject* args[1] = {static_cast<PyObject*>(u)};
  Vec r = new_vector(call(kClone, clone_, args, 1), kClone, "clone(u)");
  if (r != nullptr && r == u) {  // the "copy" would alias the state: silently wrong
    Py_DECREF(static_cast<PyObject*>(r));
    PyErr_SetString(PyExc_TypeError,
                    "clone(u) returned u itself; it must return an independent copy");
    capture_current_error(kClone);
    return nullptr;
  }
  if (r != nullptr && !checked(static_cast<PyObject*>(r), kClone, "clone(u)")) {
    Py_DECREF(static_cast<PyObject*>(r));
    return nullptr;
  }
  return r;
}

void PyOps::sum(double a, Vec x, double b, Vec y) {
  if (failed_) return;
  if (fast_sum_ && fast_sum(a, static_cast<PyObject*>(x), b, static_cast<PyObject*>(y))) {
    counted(kSum);
    return;
  }
  if (fast_sum_) {
    const DevicePath p = device_sum(a, static_cast<PyObject*>(x), b, static_cast<PyObject*>(y));
    if (p != DevicePath::kNo) {
      counted(kSum);
      if (p == DevicePath::kFailed) capture_current_error(kSum);
      return;
    }
  }
  PyObject* pa = PyFloat_FromDouble(a);
  PyObject* pb = PyFloat_FromDouble(b);
  PyObject* args[4] = {pa, static_cast<PyObject*>(x), pb, static_cast<PyObject*>(y)};
  PyObject* r = call(kSum, sum_, args, 4);
  Py_DECREF(pa);
  Py_DECREF(pb);
  Py_XDECREF(r);
}

void PyOps::sums(double a, const Vec* xs, double b, const Vec* ys, braid::Index n) {
  if (failed_) return;
  if (fast_sum_ && n > 1) {  // CUDA states: every pair in one kernel
    const DevicePath p = device_sums(a, reinterpret_cast<PyObject* const*>(xs), b,
                                     reinterpret_cast<PyObject* const*>(ys),
                                     static_cast<Py_ssize_t>(n));
    if (p != DevicePath::kNo) {
      counted(kSum, n);
      if (p == DevicePath::kFailed) capture_current_error(kSum);
      return;
    }
  }
  for (braid::Index k = 0; k < n; ++k) sum(a, xs[k], b, ys[k]);
}

// One pass per pair for float64 NumPy states with App's sum, counted as the two sums it
// replaces; anything else (a device's states: one kernel per sum over all points) is
// left to the caller.
Vec PyOps::share(Vec u) {
  // Only where fused_sums runs the compiled loop, which takes ys[k] identical to zs[k].
  auto* o = static_cast<PyObject*>(u);
  if (failed_ || !fast_sum_ || !fast_clone_ || o == nullptr || !fast_shareable(o))
    return nullptr;
  Py_INCREF(o);
  return u;
}

bool PyOps::fused_sums(double a1, const Vec* xs, double b1, const Vec* ys, double a2, double b2,
                       const Vec* zs, braid::Index n) {
  if (failed_ || !fast_sum_ || n < 1) return false;
  if (!fast_chained_sums(a1, reinterpret_cast<PyObject* const*>(xs), b1,
                         reinterpret_cast<PyObject* const*>(ys), a2, b2,
                         reinterpret_cast<PyObject* const*>(zs), static_cast<Py_ssize_t>(n)))
    return false;
  counted(kSum, 2 * n);
  return true;
}

double PyOps::norm(Vec u) {
  if (failed_) return 0.0;
  double value = 0.0;
  if (fast_norm_ && (fast_norm(static_cast<PyObject*>(u), &value) ||
                     fast_norm_vdot(static_cast<PyObject*>(u), &value))) {
    counted(kNorm);
    return value;
  }
  if (fast_norm_) {
    PyObject* one = static_cast<PyObject*>(u);
    const DevicePath p = device_norms(&one, 1, &value);
    if (p != DevicePath::kNo) {
      counted(kNorm);
      if (p == DevicePath::kFailed) capture_current_error(kNorm);
      return p == DevicePath::kDone ? value : 0.0;
    }
  }
  PyObject* args[1] = {static_cast<PyObject*>(u)};
  PyObject* r = call(kNorm, norm_, args, 1);
  if (r == nullptr) return 0.0;
  value = PyFloat_AsDouble(r);
  if (value == -1.0 && PyErr_Occurred()) {  // a str or None: say which callback
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "norm must return a real number, got %.200s",
                 Py_TYPE(r)->tp_name);
    Py_DECREF(r);
    capture_current_error(kNorm);
    return 0.0;
  }
  Py_DECREF(r);
  if (value < 0.0) {  // NaN passes: the halting test reports it as divergence
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", value);
    PyErr_Format(PyExc_ValueError, "norm(u) returned %s; a norm is >= 0", text);
    capture_current_error(kNorm);
    return 0.0;
  }
  return value;
}

void PyOps::norms(const Vec* us, braid::Index n, double* out) {
  if (failed_) {
    std::fill(out, out + n, 0.0);
    return;
  }
  // CUDA states: the rows' norms in one kernel, one copy back (same values as
  // norm() of each, whose kernel is the same per row).
  if (fast_norm_ && n > 1) {
    const DevicePath p = device_norms(reinterpret_cast<PyObject* const*>(us),
                                      static_cast<Py_ssize_t>(n), out);
    if (p != DevicePath::kNo) {
      counted(kNorm, n);
      if (p == DevicePath::kFailed) {
        capture_current_error(kNorm);
        std::fill(out, out + n, 0.0);
      }
      return;
    }
  }
  for (braid::Index k = 0; k < n; ++k) out[k] = norm(us[k]);
}

Vec PyOps::space_result(PyObject* r, Vec u, int which, const char* what) {
  Vec v = new_vector(r, which, what);
  if (v == nullptr) return nullptr;
  if (v == u) {  // the coarse (fine) value would alias the value it came from
    Py_DECREF(r);
    PyErr_Format(PyExc_TypeError, "%s returned u itself; it must return a new state", what);
    capture_current_error(which);
    return nullptr;
  }
  if (!checked(r, which, what)) {
    Py_DECREF(r);
    return nullptr;
  }
  return v;
}

Vec PyOps::coarsen(Vec u, const CallInfo& info) {
  (void)info;  // status_ shows it
  if (failed_ || u == nullptr) return nullptr;
  PyObject* args[2] = {static_cast<PyObject*>(u), status_};
  PyObject* r = call(kCoarsen, coarsen_, args, 2);
  return r == nullptr ? nullptr : space_result(r, u, kCoarsen, "coarsen(u, status)");
}

Vec PyOps::refine(Vec u, const CallInfo& info) {
  (void)info;
  if (failed_ || u == nullptr) return nullptr;
  PyObject* args[2] = {static_cast<PyObject*>(u), status_};
  PyObject* r = call(kRefine, refine_, args, 2);
  return r == nullptr ? nullptr : space_result(r, u, kRefine, "refine(u, status)");
}

void PyOps::access(Vec u, const CallInfo& info) {
  if (failed_) return;
  if (noop_access_) {  // App.access does nothing: count the call, skip it
    counted(kAccess);
    return;
  }
  PyObject* args[2] = {static_cast<PyObject*>(u), status_};
  Py_XDECREF(call(kAccess, access_, args, 2));
}

void PyOps::sync(const CallInfo& info) {
  (void)info;  // the status object reads it
  if (failed_ || sync_ == nullptr) return;
  PyObject* args[1] = {status_};
  Py_XDECREF(call(kSync, sync_, args, 1));
}

// Rank 0's progress output: its failure (a closed stdout, Ctrl-C) is captured
// like a callback's, so every rank stops at the next agreement point.
void PyOps::progress(int iteration, double rnorm, bool has_rnorm) {
  if (progress_ == nullptr || failed_) return;
  const bool outer = in_callback_;
  in_callback_ = true;
  PyObject* r = PyObject_CallFunction(progress_, "idO", iteration, rnorm,
                                      has_rnorm ? Py_True : Py_False);
  in_callback_ = outer;
  if (r == nullptr) capture_current_error(kProgress);
  Py_XDECREF(r);
}

// progress(*args, **kwargs) with the argument tuple and keywords built here (each a new
// reference or null after a failed build); both released, a failure captured.
void PyOps::progress_call(PyObject* args, PyObject* kwargs) {
  const bool outer = in_callback_;
  in_callback_ = true;
  PyObject* r = args != nullptr && kwargs != nullptr ? PyObject_Call(progress_, args, kwargs)
                                                     : nullptr;
  Py_XDECREF(args);
  Py_XDECREF(kwargs);
  in_callback_ = outer;
  if (r == nullptr) capture_current_error(kProgress);
  Py_XDECREF(r);
}

// The full residual norm's line: progress(k, rnorm, True, full=True).
void PyOps::progress_full(int iteration, double rnorm) {
  if (progress_ == nullptr || failed_) return;
  progress_call(Py_BuildValue("(idO)", iteration, rnorm, Py_True),
                Py_BuildValue("{s:O}", "full", Py_True));
}

// Temporal refinement's line: progress(k, ntime, False, refined=(nrefine, stopped)).
void PyOps::refinement(int iteration, braid::Index ntime, int nrefine, bool stopped) {
  if (progress_ == nullptr || failed_) return;
  progress_call(Py_BuildValue("(idO)", iteration, static_cast<double>(ntime), Py_False),
                Py_BuildValue("{s:(iO)}", "refined", nrefine, stopped ? Py_True : Py_False));
}

// Print level 3's C-point norms: progress(k, 0.0, True, norms=[...], cfactor=cf).
void PyOps::progress_norms(int iteration, const double* norms, braid::Index n,
                           braid::Index cf) {
  if (progress_ == nullptr || failed_) return;
  const bool outer = in_callback_;
  in_callback_ = true;
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(n));
  for (braid::Index k = 0; list != nullptr && k < n; ++k)
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(k), PyFloat_FromDouble(norms[k]));
  PyObject* args = Py_BuildValue("(idO)", iteration, 0.0, Py_True);
  PyObject* kwargs = list == nullptr ? nullptr
                                     : Py_BuildValue("{s:O,s:L}", "norms", list, "cfactor",
                                                     static_cast<long long>(cf));
  PyObject* r = args != nullptr && kwargs != nullptr ? PyObject_Call(progress_, args, kwargs)
                                                     : nullptr;
  Py_XDECREF(list);
  Py_XDECREF(args);
  Py_XDECREF(kwargs);
  in_callback_ = outer;
  if (r == nullptr) capture_current_error(kProgress);
  Py_XDECREF(r);
}

Vec PyOps::clone_block(const Vec* srcs, braid::Index n, Vec* out) {
  if (failed_) {
    for (braid::Index k = 0; k < n; ++k) out[k] = nullptr;
    return nullptr;
  }
  PyObject* block = nullptr;
  if (fast_clone_ && fast_clone_block(reinterpret_cast<PyObject* const*>(srcs), n, &block,
                                      reinterpret_cast<PyObject**>(out))) {
    // As many clones as the fallback makes: null sources are placeholder rows.
    counted(kClone, n - std::count(srcs, srcs + n, nullptr));
    return block;
  }
  if (fast_clone_) {
    const DevicePath p = device_clone_block(reinterpret_cast<PyObject* const*>(srcs),
                                            static_cast<Py_ssize_t>(n), &block,
                                            reinterpret_cast<PyObject**>(out));
    if (p != DevicePath::kNo) {
      counted(kClone, n - std::count(srcs, srcs + n, nullptr));
      if (p == DevicePath::kDone) return block;
      capture_current_error(kClone);
      for (braid::Index k = 0; k < n; ++k) out[k] = nullptr;
      return nullptr;
    }
  }
  return braid::Ops::clone_block(srcs, n, out);  // independent clones
}

void PyOps::copy_into(Vec src, Vec dst) {
  if (failed_ || src == nullptr || dst == nullptr) return;
  auto* s = static_cast<PyObject*>(src);
  auto* d = static_cast<PyObject*>(dst);
  if (fast_copy(s, d)) return;
  const DevicePath p = device_copy(s, d);
  if (p == DevicePath::kDone) return;
  if (p == DevicePath::kFailed) {
    capture_current_error(kClone);
    return;
  }
  if (PyObject_SetItem(d, Py_Ellipsis, s) < 0) capture_current_error(kClone);
}

bool PyOps::copy_alike(Vec src, Vec dst) {
  if (failed_ || src == nullptr || dst == nullptr || !fast_clone_) return false;
  return fast_copy_alike(static_cast<PyObject*>(src), static_cast<PyObject*>(dst));
}

namespace {

// The items' start and end times as two float64 arrays (step_batch's t0s, t1s).
std::pair<pybind11::array_t<double>, pybind11::array_t<double>> batch_times(
    const braid::BatchItem* items, braid::Index n) {
  const auto nn = static_cast<pybind11::ssize_t>(n);
  pybind11::array_t<double> t0s(nn), t1s(nn);
  double* p0 = t0s.mutable_data();
  double* p1 = t1s.mutable_data();
  for (braid::Index k = 0; k < n; ++k) {
    p0[k] = items[k].t0;
    p1[k] = items[k].t1;
  }
  return {std::move(t0s), std::move(t1s)};
}

// Rows first..first+n-1 of block B: B itself when that is all of it, else B[first:first+n]
// (new reference; null with a Python error set on failure).
PyObject* block_rows(PyObject* B, braid::Index first, braid::Index n) {
  if (first == 0 && PyObject_Length(B) == n) {
    Py_INCREF(B);
    return B;
  }
  PyObject* lo = PyLong_FromLongLong(first);
  PyObject* hi = PyLong_FromLongLong(first + n);
  PyObject* slice = PySlice_New(lo, hi, nullptr);
  PyObject* rows = PyObject_GetItem(B, slice);
  Py_DECREF(lo);
  Py_DECREF(hi);
  Py_DECREF(slice);
  return rows;
}

}  // namespace

bool PyOps::step_batch_to(const Vec* us, braid::Index n, braid::Index first,
                          braid::Index rows, const braid::BatchItem* items, CallInfo& info,
                          Vec* new_block, Vec* out) {
  (void)info;
  if (failed_ || !steps_to() || n < 1) return false;
  // The states as they lie (evenly spaced rows of one block, read-only), else stacked
  // into a new array: a copy, as the in-place step's would be, in the same single call.
  PyObject* from = nullptr;
  const auto* srcs = reinterpret_cast<PyObject* const*>(us);
  if (!fast_stack_view(srcs, n, &from) && !fast_stack(srcs, n, &from)) return false;
  PyObject* next = nullptr;
  auto** views = reinterpret_cast<PyObject**>(out);
  if (!fast_new_block(static_cast<PyObject*>(us[0]), rows, &next, views)) {
    Py_DECREF(from);
    return false;
  }
  auto [t0s, t1s] = batch_times(items, n);
  PyObject* to = block_rows(next, first, n);
  PyObject* r = nullptr;
  if (to != nullptr) {
    PyObject* args[5] = {from, to, t0s.ptr(), t1s.ptr(), status_};
    r = call(kStepBatch, step_stacked_into_, args, 5);
    batch_items_ += n;
    Py_DECREF(to);
  } else {
    capture_current_error(kStepBatch);
  }
  Py_DECREF(from);
  if (r != nullptr && r != Py_None) {
    PyErr_Format(PyExc_TypeError,
                 "step_stacked_into(U, out, t0s, t1s, status) must write into out and "
                 "return None, got %.200s",
                 Py_TYPE(r)->tp_name);
    capture_current_error(kStepBatch);
  }
  const bool done = r == Py_None;
  Py_XDECREF(r);
  if (!done) {
    for (braid::Index k = 0; k < rows; ++k) Py_CLEAR(views[k]);
    Py_DECREF(next);
    return false;
  }
  *new_block = next;
  return true;
}

void PyOps::step_batch(Vec block, braid::Index first, Vec* us, braid::Index n,
                       const braid::BatchItem* items, CallInfo& info) {
  (void)info;
  if (failed_) return;
  auto [t0s, t1s] = batch_times(items, n);
  PyObject* arg = nullptr;
  auto* B = static_cast<PyObject*>(block);
  if (B != nullptr) {
    arg = block_rows(B, first, n);
    if (arg == nullptr) {
      capture_current_error(kStepBatch);
      return;
    }
  } else {
    arg = PyList_New(static_cast<Py_ssize_t>(n));
    for (braid::Index k = 0; k < n; ++k) {
      auto* u = static_cast<PyObject*>(us[k]);
      Py_INCREF(u);
      PyList_SET_ITEM(arg, k, u);
    }
  }
  PyObject* args[4] = {arg, t0s.ptr(), t1s.ptr(), status_};
  PyObject* fn = (B != nullptr && step_stacked_ != nullptr) ? step_stacked_ : step_batch_;
  PyObject* r = call(kStepBatch, fn, args, 4);
  batch_items_ += n;
  if (r != nullptr) {
    if (B != nullptr) {
      // A returned stacked array is copied into the block (rows stay views).
      if (r != Py_None && r != arg &&
          (!StateKind::same_array(r, arg, "step_stacked(U, t0s, t1s, status)") ||
           PyObject_SetItem(arg, Py_Ellipsis, r) < 0))
        capture_current_error(kStepBatch);
    } else {
      // A list: returned (or updated in place) states replace the handles.
      PyObject* seq = PySequence_Fast(r == Py_None ? arg : r,
                                      "step_batch must return None or a sequence of states");
      if (seq == nullptr) {
        capture_current_error(kStepBatch);
      } else if (PySequence_Fast_GET_SIZE(seq) != static_cast<Py_ssize_t>(n)) {
        PyErr_Format(PyExc_ValueError, "step_batch returned %zd states for a batch of %lld",
                     PySequence_Fast_GET_SIZE(seq), static_cast<long long>(n));
        capture_current_error(kStepBatch);
      } else {
        for (braid::Index k = 0; k < n; ++k) {
          PyObject* item = PySequence_Fast_GET_ITEM(seq, k);
          if (item != us[k] && item != Py_None) {
            if (!checked(item, kStepBatch, "step_batch(us, t0s, t1s, status)")) break;
            Py_INCREF(item);
            Py_DECREF(static_cast<PyObject*>(us[k]));
            us[k] = item;
          }
        }
      }
      Py_XDECREF(seq);
    }
    Py_DECREF(r);
  }
  Py_DECREF(arg);
}

// step_stacked(U, t0s, t1s, status, fstop=F, ustop=US) with F and US the fstops and
// guesses stacked in U's row order (F None where there are none), for float64 states in a
// block; otherwise (or when they do not stack) one step_rhs per state, the same values.
void PyOps::step_batch_rhs(Vec block, braid::Index first, Vec* us, braid::Index n,
                           const braid::BatchItem* items, const Vec* ustops, const Vec* fstops,
                           CallInfo& info) {
  if (failed_) return;
  auto* B = static_cast<PyObject*>(block);
  PyObject *F = nullptr, *US = nullptr;
  const auto* gs = reinterpret_cast<PyObject* const*>(ustops);
  const auto* fs = reinterpret_cast<PyObject* const*>(fstops);
  const bool stacked = B != nullptr && step_stacked_ != nullptr && fast_stack(gs, n, &US) &&
                       (fstops == nullptr || fast_stack(fs, n, &F));
  if (!stacked) {
    Py_XDECREF(US);
    PyErr_Clear();
    const braid::BatchItem* saved = info.batch;
    const braid::Index saved_n = info.batch_size;
    info.batch = nullptr;
    info.batch_size = 0;
    for (braid::Index k = 0; k < n && !failed_; ++k) {
      info.set_step(items[k]);
      Vec u = us[k];
      Py_INCREF(static_cast<PyObject*>(u));
      step_rhs(u, ustops[k], fstops != nullptr ? fstops[k] : nullptr, info);
      if (u != us[k] && B != nullptr) {  // a block's row keeps its place: copied back
        if (PyObject_SetItem(static_cast<PyObject*>(us[k]), Py_Ellipsis,
                             static_cast<PyObject*>(u)) < 0)
          capture_current_error(kStep);
        Py_DECREF(static_cast<PyObject*>(u));
      } else if (u != us[k]) {
        Py_DECREF(static_cast<PyObject*>(us[k]));
        us[k] = u;
      } else {
        Py_DECREF(static_cast<PyObject*>(u));
      }
    }
    info.batch = saved;
    info.batch_size = saved_n;
    return;
  }
  auto [t0s, t1s] = batch_times(items, n);
  PyObject* arg = block_rows(B, first, n);
  if (arg == nullptr) {
    Py_XDECREF(F);
    Py_DECREF(US);
    capture_current_error(kStepBatch);
    return;
  }
  PyObject* args[6] = {arg, t0s.ptr(), t1s.ptr(), status_, F != nullptr ? F : Py_None, US};
  PyObject* r = call(kStepBatch, step_stacked_, args, 4, step_kwnames_);  // captures
  batch_items_ += n;
  Py_XDECREF(F);
  Py_DECREF(US);
  if (r != nullptr) {
    if (r != Py_None && r != arg &&  // a returned stacked array is copied into the block
        (!StateKind::same_array(r, arg, "step_stacked(U, t0s, t1s, status, fstop=...)") ||
         PyObject_SetItem(arg, Py_Ellipsis, r) < 0))
      capture_current_error(kStepBatch);
    Py_DECREF(r);
  }
  Py_DECREF(arg);
}

PyObject* PyOps::bufpack(Vec u) {
  if (failed_ || u == nullptr) return nullptr;
  PyObject* args[1] = {static_cast<PyObject*>(u)};
  PyObject* buf = call(kBufpack, bufpack_, args, 1);
  // Checked before it reaches MPI: a str or None failed inside the send, which was
  // then never posted, and the receiving rank waited for it forever.
  if (buf == nullptr) return nullptr;
  Py_buffer view;
  if (PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS) == 0) {
    PyBuffer_Release(&view);
    return buf;
  }
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError,
               "bufpack must return a bytes-like object (bytes, bytearray or a "
               "contiguous array), got %.200s",
               Py_TYPE(buf)->tp_name);
  Py_DECREF(buf);
  capture_current_error(kBufpack);
  return nullptr;
}

Vec PyOps::bufunpack(PyObject* buf) {
  if (failed_) return nullptr;
  PyObject* args[1] = {buf};
  PyObject* u = call(kBufunpack, bufunpack_, args, 1);
  if (u != nullptr && !checked(u, kBufunpack, "bufunpack(buf)")) {
    Py_DECREF(u);
    return nullptr;
  }
  return u;
}

// ---------------------------------------------------------------- PyComm

PyComm::PyComm(PyObject* adapter, int rank, int size, PyOps& ops)
    : adapter_(adapter), rank_(rank), size_(size), ops_(ops) {
  Py_INCREF(adapter_);
}

PyComm::~PyComm() { Py_XDECREF(adapter_); }

void PyComm::send(int dest, int tag, Vec u) {
  const auto start = Clock::now();
  PyObject* buf = ops_.bufpack(u);  // null when failed: send a poisoned message
  PyObject* r = PyObject_CallMethod(adapter_, "post", "iiO", dest, tag, buf ? buf : Py_None);
  Py_XDECREF(buf);
  if (r == nullptr) ops_.capture_current_error(kCommunication);
  Py_XDECREF(r);
  sends_open_ = true;
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

Vec PyComm::recv(int src, int tag) {
  const auto start = Clock::now();
  PyObject* buf = PyObject_CallMethod(adapter_, "receive", "ii", src, tag);
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  if (buf == nullptr) {
    ops_.capture_current_error(kCommunication);
    return nullptr;
  }
  if (buf == Py_None) {
    Py_DECREF(buf);
    ops_.mark_remote_failure();
    return nullptr;
  }
  Vec u = ops_.bufunpack(buf);
  Py_DECREF(buf);
  return u;
}

void PyComm::finish_sends() {
  PyObject* r = PyObject_CallMethod(adapter_, "finish", nullptr);
  if (r == nullptr) ops_.capture_current_error(kCommunication);
  Py_XDECREF(r);
  sends_open_ = false;
}

// Only while a send is open: one test after each send usually completes it, so a
// rank pays about one adapter call per message.
void PyComm::advance_sends() {
  if (!sends_open_) return;
  const auto start = Clock::now();
  PyObject* r = PyObject_CallMethod(adapter_, "advance", nullptr);
  if (r == nullptr) {
    ops_.capture_current_error(kCommunication);
    sends_open_ = false;  // the error ends the solve; finish() still waits for them
  } else {
    sends_open_ = PyObject_IsTrue(r) != 1;
    Py_DECREF(r);
  }
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void PyComm::allreduce(double* values, int n, braid::ReduceOp op) {
  const auto start = Clock::now();
  PyObject* list = PyList_New(n);
  for (int i = 0; i < n; ++i) PyList_SET_ITEM(list, i, PyFloat_FromDouble(values[i]));
  PyObject* r = PyObject_CallMethod(adapter_, "allreduce", "OO", list,
                                    op == braid::ReduceOp::kMax ? Py_True : Py_False);
  Py_DECREF(list);
  if (r == nullptr) throw_python_error();  // MPI itself failed: nothing to agree on
  for (int i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(r, i);
    values[i] = item ? PyFloat_AsDouble(item) : 0.0;
    Py_XDECREF(item);
  }
  Py_DECREF(r);
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace braidpy
