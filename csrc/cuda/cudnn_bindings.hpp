// What braidpy._cuda's two binding files share: the failure of a CUDA runtime
// call (turned into braidpy.NoGPUError / CudaError by module.cpp's translator),
// and the cuDNN entry points (cudnn_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

namespace braidpy {

// A failed CUDA call: its code and the entry point that made it.
struct CudaFailure : std::exception {
  int code;
  std::string where;
  CudaFailure(int c, std::string w) : code(c), where(std::move(w)) {}
  const char* what() const noexcept override { return where.c_str(); }
};

inline void check(int code, const char* where) {
  if (code != 0) throw CudaFailure(code, where);
}

// Adds cudnn_info, conv_plan, cudnn_describe, conv_workspace, conv_measured,
// conv_measure_workspace, conv_measure, conv_forward, conv_backward_data,
// conv_backward_filter, conv_backward_bias and cudnn_cache to the module, and the translation of cuDNN failures to braidpy.CudnnError.
void bind_cudnn(pybind11::module_& m);

}  // namespace braidpy
