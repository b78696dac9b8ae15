// The kind of state a Core works with, learnt from the first state a callback
// hands back: its Python type and, for arrays, shape and dtype. Every later
// state from init, clone, step (a returned new object), bufunpack and
// step_batch must be of the same kind: a state of another shape or dtype would
// otherwise flow through sum() and norm() and give a silently wrong answer.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace braidpy {

class StateKind {
 public:
  StateKind() = default;
  ~StateKind();
  StateKind(const StateKind&) = delete;
  StateKind& operator=(const StateKind&) = delete;

  // True when u is of the kind (the first call learns it). Otherwise sets a
  // Python TypeError/ValueError that names `what` (the callback as the user
  // wrote it, e.g. "step(u, t0, t1, status)") and returns false.
  bool check(PyObject* u, const char* what);
  // From now on shapes are not compared (spatial coarsening: a shape per level).
  void ignore_shape() { ignore_shape_ = true; }
  // After a step that worked in place on u (returned None or u): for NumPy
  // states, u must still have the learnt shape (a few field reads; other array
  // types are not looked at). Sets a ValueError naming `what` otherwise.
  bool check_in_place(PyObject* u, const char* what);
  // For step_stacked: whether r (a returned stacked array) has the shape and
  // dtype of the block it was given; sets a ValueError/TypeError otherwise.
  static bool same_array(PyObject* r, PyObject* block, const char* what);

 private:
  bool learn(PyObject* u, const char* what);
  bool mismatch(PyObject* u, const char* what, bool shape_differs);
  // A NumPy state that cannot be written (sum and step update states in place).
  static bool read_only(PyObject* u, const char* what);
  // "numpy.ndarray of shape (4,), dtype float64" (for messages).
  static std::string describe(PyObject* u);

  PyTypeObject* type_ = nullptr;  // owned reference once learnt
  bool numpy_ = false;            // NumPy array: shape and dtype compared in C
  std::vector<Py_ssize_t> dims_;
  int type_num_ = -1;
  PyObject* shape_ = nullptr;     // other arrays: their .shape and .dtype (owned)
  PyObject* dtype_ = nullptr;
  std::string first_;             // describe() of the first state
  bool ignore_shape_ = false;
};

}  // namespace braidpy
