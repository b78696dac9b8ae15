// pybind11 bindings of the MGRIT core: braidpy._core.Solver and Status.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "../core/solver.hpp"
#include "array_fast.hpp"
#include "py_ops.hpp"

namespace py = pybind11;

namespace braidpy {

// Read-only view of the core's CallInfo, handed to every callback.
struct Status {
  const braid::CallInfo* info = nullptr;
};

namespace {

const char* phase_name(int phase) {
  switch (phase) {
    case braid::kPhaseInit: return "init";
    case braid::kPhaseRelax: return "relax";
    case braid::kPhaseResidual: return "residual";
    default: return "final";
  }
}

braid::Options parse_options(const py::dict& d) {
  braid::Options o;
  auto get = [&](const char* key, auto& field) {
    if (d.contains(key)) field = d[key].cast<std::decay_t<decltype(field)>>();
  };
  get("max_levels", o.max_levels);
  get("min_coarse", o.min_coarse);
  get("cfactor", o.cfactor);
  get("cfactor_level", o.cfactor_level);
  get("nrelax", o.nrelax);
  get("nrelax_level", o.nrelax_level);
  get("max_iter", o.max_iter);
  get("abs_tol", o.abs_tol);
  get("rel_tol", o.rel_tol);
  get("tnorm", o.tnorm);
  get("skip", o.skip);
  get("fmg", o.fmg);
  get("nfmg", o.nfmg);
  get("fmg_vcycles", o.fmg_vcycles);
  get("store_all", o.store_all);
  get("store_final", o.store_final);
  get("seq_soln", o.seq_soln);
  get("final_fc_relax", o.final_fc_relax);
  get("relax_only_cg", o.relax_only_cg);
  get("access_level", o.access_level);
  get("residual_computation", o.residual_computation);
  get("timings", o.timings);
  get("fine_ranges", o.fine_ranges);
  return o;
}

}  // namespace

py::object batch_indices(const braid::CallInfo& info, bool fine) {
  if (info.batch == nullptr) return py::none();
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(info.batch_size));
  auto* p = out.mutable_data();
  for (braid::Index k = 0; k < info.batch_size; ++k)
    p[k] = fine ? info.batch[k].fine_index : info.batch[k].index;
  return std::move(out);
}

class PySolver {
 public:
  PySolver(py::object app, py::object comm_adapter, int rank, int size, const py::dict& options,
           std::vector<double> times, py::object progress) {
    const braid::Options opts = parse_options(options);
    status_ = py::cast(Status{});
    const bool batch = options.contains("batch") && options["batch"].cast<bool>();
    ops_ = std::make_unique<PyOps>(app.ptr(), status_.ptr(), progress.ptr(), opts.timings, batch);
    if (comm_adapter.is_none()) {
      comm_ = std::make_unique<braid::SerialComm>();
    } else {
      auto c = std::make_unique<PyComm>(comm_adapter.ptr(), rank, size, *ops_);
      pycomm_ = c.get();
      comm_ = std::move(c);
    }
    solver_ = std::make_unique<braid::Solver>(*ops_, *comm_, opts, std::move(times));
    status_.cast<Status&>().info = &solver_->info();
  }

  // Returns ("ok", None), ("failed", exception-or-None, callback name) or
  // ("diverged", iteration, level, value). Failures leave the solver cold.
  py::tuple solve() {
    ops_->reset_counters();
    try {
      solver_->solve();
      return py::make_tuple("ok", py::none());
    } catch (const braid::CallbackFailure&) {
      return failure();
    } catch (const braid::Divergence& e) {
      solver_->discard();
      return py::make_tuple("diverged", e.iteration, e.level, e.value);
    }
  }

  // Fine solution at owned index i: ("ok", vector or None) or a failure tuple.
  py::tuple solution(braid::Index i) {
    Vec u = solver_->solution(i);
    if (ops_->failed()) {
      if (u != nullptr) ops_->free(u);
      return failure();
    }
    if (u == nullptr) return py::make_tuple("ok", py::none());
    return py::make_tuple("ok", py::reinterpret_steal<py::object>(static_cast<PyObject*>(u)));
  }

  py::object stored(braid::Index i) const {
    Vec u = solver_->stored(i);
    if (u == nullptr) return py::none();
    return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(u));
  }

  // The stored vectors at start, start + step, ... (before stop), stacked into one
  // new float64 array; None when one is missing or they are not all float64 NumPy
  // arrays of one shape (the caller then gathers them itself).
  py::object stored_block(braid::Index start, braid::Index stop, braid::Index step) const {
    if (step == 0) throw py::value_error("step must not be zero");
    std::vector<PyObject*> srcs;
    for (braid::Index i = start; step > 0 ? i < stop : i > stop; i += step) {
      Vec u = solver_->stored(i);
      if (u == nullptr) return py::none();
      srcs.push_back(static_cast<PyObject*>(u));
    }
    PyObject* out = nullptr;
    if (!fast_stack(srcs.data(), static_cast<Py_ssize_t>(srcs.size()), &out)) return py::none();
    return py::reinterpret_steal<py::object>(out);
  }

  py::object final_value() const {
    Vec u = solver_->final_value();
    if (u == nullptr) return py::none();
    return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(u));
  }

  void set_initial_condition(py::object u) {
    solver_->set_initial_condition(u.release().ptr());
  }

  py::list residuals() const {
    py::list out;
    for (const auto& [k, r] : solver_->residuals()) out.append(py::make_tuple(k, r));
    return out;
  }

  py::list levels() const {
    py::list out;
    for (int l = 0; l < solver_->nlevels(); ++l) {
      const auto& L = solver_->level(l);
      py::dict d;
      d["n"] = L.n;
      d["cfactor"] = L.cf;
      d["nrelax"] = L.nrelax;
      d["fine_stride"] = L.fine_stride;
      d["lo"] = L.own.lo;
      d["hi"] = L.own.hi;
      out.append(d);
    }
    return out;
  }

  py::dict counts() const {
    py::dict d;
    for (int k = 0; k < kNumCallbacks; ++k) d[callback_name(k)] = ops_->count(k);
    d["step_batch_items"] = ops_->batch_items();
    return d;
  }

  py::dict timings() const {
    py::dict d;
    for (int k = 0; k < kNumCallbacks; ++k) d[callback_name(k)] = ops_->seconds(k);
    d["communication"] = pycomm_ ? pycomm_->seconds() : 0.0;
    return d;
  }

  py::array_t<double> times() const {
    const auto& t = solver_->fine_times();
    return py::array_t<double>(static_cast<py::ssize_t>(t.size()), t.data());
  }

  braid::Solver& core() { return *solver_; }

 private:
  py::tuple failure() {
    solver_->discard();
    PyObject* err = ops_->first_error();
    py::object e = err ? py::reinterpret_borrow<py::object>(err) : py::none();
    const char* name = ops_->error_callback() >= 0 ? callback_name(ops_->error_callback()) : "";
    py::tuple out = py::make_tuple("failed", e, name);
    ops_->reset_failure();
    return out;
  }

  py::object status_;
  std::unique_ptr<PyOps> ops_;
  std::unique_ptr<braid::Comm> comm_;
  PyComm* pycomm_ = nullptr;
  std::unique_ptr<braid::Solver> solver_;  // destroyed first: it frees vectors via ops_
};

}  // namespace braidpy

PYBIND11_MODULE(_core, m) {
  using braidpy::PySolver;
  using braidpy::Status;
  m.doc() = "braidpy's compiled MGRIT core (private; use the braidpy package).";

  py::class_<Status>(m, "Status", "Read-only facts about the current callback call.")
      .def_property_readonly("t", [](const Status& s) { return s.info->t; },
                             "Time of the point (access).")
      .def_property_readonly("t0", [](const Status& s) { return s.info->t0; }, "Step start time.")
      .def_property_readonly("t1", [](const Status& s) { return s.info->t1; }, "Step end time.")
      .def_property_readonly("level", [](const Status& s) { return s.info->level; },
                             "Grid level (0 = fine).")
      .def_property_readonly("index", [](const Status& s) { return s.info->index; },
                             "Time index on the level (of t0 for step, of t for access/init).")
      .def_property_readonly("fine_index", [](const Status& s) { return s.info->fine_index; },
                             "The same point's index on the fine grid.")
      .def_property_readonly("iteration", [](const Status& s) { return s.info->iteration; },
                             "Current MGRIT iteration.")
      .def_property_readonly("nlevels", [](const Status& s) { return s.info->nlevels; },
                             "Number of levels in the hierarchy.")
      .def_property_readonly("done", [](const Status& s) { return s.info->done; },
                             "True during the final sweep after the solve stopped.")
      .def_property_readonly("tol", [](const Status& s) { return s.info->tol; },
                             "Absolute halting tolerance.")
      .def_property_readonly(
          "rnorm",
          [](const Status& s) -> py::object {
            if (s.info->rnorm < 0) return py::none();
            return py::float_(s.info->rnorm);
          },
          "Latest fine residual norm, or None before the first one.")
      .def_property_readonly("phase", [](const Status& s) { return braidpy::phase_name(s.info->phase); },
                             "'init', 'relax', 'residual' or 'final'.")
      .def_property_readonly("batch_size", [](const Status& s) { return s.info->batch_size; },
                             "Number of states in the current step_batch call (0 outside one).")
      .def_property_readonly(
          "fine_indices",
          [](const Status& s) -> py::object {
            return braidpy::batch_indices(*s.info, true);
          },
          "step_batch: fine-grid index of each state's t0 (int64 array); None outside.")
      .def_property_readonly(
          "indices",
          [](const Status& s) -> py::object {
            return braidpy::batch_indices(*s.info, false);
          },
          "step_batch: index of each state's t0 on the level (int64 array); None outside.")
      .def_property_readonly(
          "fine_slice",
          [](const Status& s) -> py::object {
            const auto* b = s.info->batch;
            const braid::Index n = s.info->batch_size;
            if (b == nullptr || n < 1) return py::none();
            const braid::Index d = n > 1 ? b[1].fine_index - b[0].fine_index : 1;
            if (d <= 0) return py::none();
            for (braid::Index k = 1; k < n; ++k)
              if (b[k].fine_index - b[k - 1].fine_index != d) return py::none();
            return py::reinterpret_steal<py::object>(
                PySlice_New(py::int_(b[0].fine_index).ptr(),
                            py::int_(b[n - 1].fine_index + 1).ptr(), py::int_(d).ptr()));
          },
          "step_batch: fine_indices as slice(start, stop, step) when they are evenly spaced "
          "and increasing (always, for the core's batches), else None; lets weights be "
          "taken as a strided view instead of a gather.")
      .def("__repr__", [](const Status& s) {
        const auto* i = s.info;
        return "<braidpy.Status level=" + std::to_string(i->level) +
               " index=" + std::to_string(i->index) +
               " iteration=" + std::to_string(i->iteration) +
               " phase=" + braidpy::phase_name(i->phase) + (i->done ? " done" : "") + ">";
      });

  py::class_<PySolver>(m, "Solver")
      .def(py::init<py::object, py::object, int, int, const py::dict&, std::vector<double>,
                    py::object>(),
           py::arg("app"), py::arg("comm_adapter"), py::arg("rank"), py::arg("size"),
           py::arg("options"), py::arg("times"), py::arg("progress"))
      .def("solve", &PySolver::solve)
      .def("solution", &PySolver::solution, py::arg("index"))
      .def("final_value", &PySolver::final_value)
      .def("stored", &PySolver::stored, py::arg("index"))
      .def("stored_block", &PySolver::stored_block, py::arg("start"), py::arg("stop"),
           py::arg("step") = 1)
      .def("set_initial_condition", &PySolver::set_initial_condition, py::arg("u"))
      .def("reset_guess", [](PySolver& s) { s.core().reset_guess(); })
      .def("residuals", &PySolver::residuals)
      .def("levels", &PySolver::levels)
      .def("counts", &PySolver::counts)
      .def("timings", &PySolver::timings)
      .def("times", &PySolver::times)
      .def_property_readonly("iterations", [](PySolver& s) { return s.core().iterations(); })
      .def_property_readonly("nlevels", [](PySolver& s) { return s.core().nlevels(); })
      .def_property_readonly("owned", [](PySolver& s) {
        const auto r = s.core().owned();
        return py::make_tuple(r.lo, r.hi);
      });
}
