// C++ versions of braidpy.App's default clone/sum/norm for plain float64 NumPy
// arrays, bitwise equal to the Python defaults (braidpy/_arrays.py). They skip
// two Python frames and several NumPy calls per operation, which dominate
// MGRIT on small states. Each returns false when it does not apply.
#pragma once

#include <Python.h>

namespace braidpy {

// *out = u.copy() for an exact ndarray.
bool fast_clone(PyObject* u, PyObject** out);
// y <- a*x + b*y for C-contiguous aligned float64 arrays of equal size, y
// writable, x and y identical or disjoint.
bool fast_sum(double a, PyObject* x, double b, PyObject* y);
// zs[k] <- a2*(a1*xs[k] + b1*ys[k]) + b2*zs[k], k < n, as fast_sum twice would compute
// it (ys untouched unless zs[k] is ys[k]), for a1 = 1, b1 = -1, a2 = b2 = 1 (the core's
// pairs): every array as fast_sum's, zs[k] sharing no memory with xs[k], and with ys[k]
// none or all of it (the same array: each element is read before it is written). False
// (nothing written) when one pair does not qualify.
bool fast_chained_sums(double a1, PyObject* const* xs, double b1, PyObject* const* ys,
                       double a2, double b2, PyObject* const* zs, Py_ssize_t n);
// Whether u is an array that fast_chained_sums takes as ys and zs alike (a writable,
// C-contiguous, aligned float64 ndarray).
bool fast_shareable(PyObject* u);
// *out = sqrt(u*u) for a one-element float64 array.
bool fast_norm(PyObject* u, double* out);
// Stacked copies of n float64 arrays of one shape (C-contiguous, >= 1-D; null
// entries give zeroed placeholder rows): *block = U of shape (n, *shape),
// rows[k] = U[k] (views). False (nothing allocated) when it does not apply.
bool fast_clone_block(PyObject* const* srcs, Py_ssize_t n, PyObject** block, PyObject** rows);
// An uninitialised float64 array of shape (n, *like's shape), like float64 and
// C-contiguous: *block, and rows[k] = block[k] (views). False (nothing allocated) when
// it does not apply.
bool fast_new_block(PyObject* like, Py_ssize_t n, PyObject** block, PyObject** rows);
// dst[...] = src for equal-size float64 C-contiguous arrays (memcpy).
bool fast_copy(PyObject* src, PyObject* dst);

// App.norm of a float64 C-contiguous array with more than one element, by the same
// numpy.vdot call as braidpy._arrays.array_norm (same bits); false otherwise or on error.
bool fast_norm_vdot(PyObject* u, double* out);

// srcs (float64, C-contiguous, one shape) stacked into a new array; false otherwise.
bool fast_stack(PyObject* const* srcs, Py_ssize_t n, PyObject** out);
// A read-only view stacking srcs without a copy, when they are whole rows (float64,
// C-contiguous, one shape) of one C-contiguous block (their common base: the rows of
// fast_clone_block), evenly spaced in either direction; false otherwise.
bool fast_stack_view(PyObject* const* srcs, Py_ssize_t n, PyObject** out);
// The same into `out`: a writable float64 C-contiguous array of shape (n, *shape) that
// shares no memory with any source; false (nothing written) otherwise.
bool fast_stack_into(PyObject* const* srcs, Py_ssize_t n, PyObject* out);
// fast_copy for arrays of one shape only (float64, C-contiguous, dst writable).
bool fast_copy_alike(PyObject* src, PyObject* dst);
// True when the app's class inherits method `name` from braidpy.App.
bool uses_app_default(PyObject* app, const char* name);

}  // namespace braidpy
