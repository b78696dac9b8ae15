// braidpy._core._host_dense (host_dense.cpp): the fused elementwise half of dense steps.
#pragma once

#include <pybind11/pybind11.h>

namespace braidpy {

void bind_host_dense(pybind11::module_& core);

}  // namespace braidpy
