// braidpy._core._host_conv (host_conv.cpp): the direct conv steps' host twins.
#pragma once

#include <pybind11/pybind11.h>

namespace braidpy {

void bind_host_conv(pybind11::module_& core);

}  // namespace braidpy
