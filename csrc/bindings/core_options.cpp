// braidpy._core.CoreOptions: one table binds every field and lists it in __repr__.
#include "core_options.hpp"

#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace braidpy {

namespace {

using Getter = std::function<py::object(const CoreOptions&)>;
using Fields = std::vector<std::pair<const char*, Getter>>;

// Binds fields read-write on cls and records them (in order) for __repr__.
class FieldTable {
 public:
  explicit FieldTable(py::class_<CoreOptions>& cls)
      : cls_(cls), fields_(std::make_shared<Fields>()) {}

  template <class T, class Base>
  FieldTable& field(const char* name, T Base::*member, const char* doc) {
    cls_.def_readwrite(name, member, doc);
    fields_->emplace_back(name, [member](const CoreOptions& o) { return py::cast(o.*member); });
    return *this;
  }

  // "CoreOptions(name=value, ...)" in table order (evaluates back to equal options).
  void def_repr() {
    cls_.def("__repr__", [fields = fields_](const CoreOptions& o) {
      std::string out = "CoreOptions(";
      for (std::size_t k = 0; k < fields->size(); ++k) {
        const auto& [name, get] = (*fields)[k];
        out += (k ? ", " : "") + std::string(name) + "=" + py::repr(get(o)).cast<std::string>();
      }
      return out + ")";
    });
  }

 private:
  py::class_<CoreOptions>& cls_;
  std::shared_ptr<Fields> fields_;
};

// CoreOptions(**fields): defaults, then each keyword set as an attribute
// (so a misspelled name raises AttributeError like an assignment does).
std::unique_ptr<CoreOptions> from_kwargs(const py::kwargs& kwargs) {
  auto opts = std::make_unique<CoreOptions>();
  py::object view = py::cast(opts.get(), py::return_value_policy::reference);
  for (const auto& [name, value] : kwargs) py::setattr(view, name, value);
  return opts;
}

}  // namespace

void bind_core_options(py::module_& m) {
  using O = braid::Options;
  py::class_<CoreOptions> cls(m, "CoreOptions",
                              "Options of one core Solver (built by braidpy.Options.to_core; "
                              "values are checked again by the Solver constructor).");
  cls.def(py::init(&from_kwargs));
  FieldTable(cls)
      .field("max_levels", &O::max_levels, "Most levels in the hierarchy (>= 1).")
      .field("min_coarse", &O::min_coarse, "Smallest number of intervals of a coarse level.")
      .field("cfactor", &O::cfactor, "Default coarsening factor (>= 2).")
      .field("cfactor_level", &O::cfactor_level, "{level: cfactor} overrides (assign a dict).")
      .field("nrelax", &O::nrelax, "Default FC sweeps before restriction (>= 0).")
      .field("nrelax_level", &O::nrelax_level, "{level: nrelax} overrides (assign a dict).")
      .field("crelax_weight", &O::crelax_weight,
             "Default C-relaxation weight (> 0; 1 = unweighted).")
      .field("crelax_weight_level", &O::crelax_weight_level,
             "{level: weight} overrides (assign a dict).")
      .field("max_iter", &O::max_iter, "Most iterations (>= 1).")
      .field("abs_tol", &O::abs_tol, "Absolute halting tolerance.")
      .field("rel_tol", &O::rel_tol, "Relative halting tolerance (0 disables it).")
      .field("tnorm", &O::tnorm, "Norm over time: 1, 2, or 0 for the infinity norm.")
      .field("skip", &O::skip, "No down-sweep in a cold first iteration.")
      .field("fmg", &O::fmg, "F-cycles instead of V-cycles.")
      .field("nfmg", &O::nfmg, "Iteration k is an F-cycle iff nfmg != k (with fmg).")
      .field("fmg_vcycles", &O::fmg_vcycles, "V-cycles per level inside an F-cycle.")
      .field("store_all", &O::store_all, "Store every fine point, not only C-points.")
      .field("store_final", &O::store_final, "Keep the final sweep's fine F-points.")
      .field("storage", &O::storage,
             "XBraid's storage number for the coarse levels (>= it keep F-points; -1 none).")
      .field("seq_soln", &O::seq_soln, "Initial guess = sequential solution.")
      .field("final_fc_relax", &O::final_fc_relax, "One more FC sweep before the final F.")
      .field("relax_only_cg", &O::relax_only_cg, "Relax the coarsest level instead of solving.")
      .field("periodic", &O::periodic, "Time-periodic: u(tstop) = u(tstart).")
      .field("access_level", &O::access_level,
             "0 no access, 1 at the end, 2 every iteration, 3 inside every sweep.")
      .field("print_norms", &O::print_norms,
             "Print level 3: every fine C-point's residual norm each iteration.")
      .field("residual_computation", &O::residual_computation,
             "False: no residual norm, run max_iter iterations.")
      .field("timings", &O::timings, "Time user callbacks and communication.")
      .field("full_rnorm", &O::full_rnorm, "Also measure the full fine residual norm.")
      .field("refine", &O::refine, "Temporal refinement from the steps' requests.")
      .field("max_refinements", &O::max_refinements, "Most rebuilds of the fine grid.")
      .field("tpoints_cutoff", &O::tpoints_cutoff,
             "No refinement once the fine grid has this many intervals.")
      .field("incr_max_levels", &O::incr_max_levels, "max_levels + 1 with each refinement.")
      .field("delta_rank", &O::delta_rank, "Delta correction's rank (0 = off).")
      .field("delta_defer_level", &O::delta_defer_level, "Delta from this level on.")
      .field("delta_defer_iter", &O::delta_defer_iter, "Delta from this iteration on.")
      .field("lyapunov_estimate", &O::lyapunov_estimate,
             "Propagate the basis in the coarsest solve and the interpolation.")
      .field("lyapunov_relax", &O::lyapunov_relax, "Propagate the basis in FC-relaxation.")
      .field("lyapunov_exponents", &O::lyapunov_exponents,
             "Lyapunov exponents from a final FC-relaxation.")
      .field("richardson", &O::richardson, "Richardson extrapolation on the fine level.")
      .field("est_error", &O::est_error, "Richardson error estimates at fine points.")
      .field("local_order", &O::local_order, "Local order of the stepper (>= 2 when used).")
      .field("fine_ranges", &O::fine_ranges,
             "Fine (lo, hi) of every rank in rank order; [] = block distribution.")
      .field("batch", &CoreOptions::batch, "Use app.step_batch where steps are independent.")
      .field("residual", &CoreOptions::residual,
             "app.residual drives the FAS; step takes fstop=.")
      .field("step_ustop", &CoreOptions::step_ustop, "With residual: step also takes ustop=.")
      .def_repr();
}

}  // namespace braidpy
