// Whether two NumPy dtypes describe the same numbers (NumPy's PyArray_EquivTypes), not
// whether they are the same descriptor object: an unpickled array (a state received
// from another rank) carries its own float64 descriptor, and must be accepted like a
// local one, or a call's path, and so its bits, would depend on where the array came from.
#pragma once

#include <pybind11/numpy.h>

namespace braidpy {

inline bool same_dtype(const pybind11::dtype& a, const pybind11::dtype& b) {
  return pybind11::detail::npy_api::get().PyArray_EquivTypes_(a.ptr(), b.ptr());
}

}  // namespace braidpy
