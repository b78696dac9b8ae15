// The options that cross from Python into the core: braid::Options plus the
// bindings' own flags, bound as braidpy._core.CoreOptions.
#pragma once

#include <pybind11/pybind11.h>

#include "../core/options.hpp"

namespace braidpy {

struct CoreOptions : braid::Options {
  bool batch = false;  // advance independent states with app.step_batch
  bool residual = false;    // app.residual drives the FAS; step takes fstop=
  bool step_ustop = false;  // with residual: step also takes ustop=
};

// Adds CoreOptions to m: every field read-write by name, unknown names raise
// AttributeError, keyword constructor, __repr__ listing every field.
void bind_core_options(pybind11::module_& m);

}  // namespace braidpy
