// pybind11 bindings of the MGRIT core: braidpy._core.Solver, Status, Outcome,
// CoreOptions (core_options.cpp) and STATUS_FIELDS.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "../core/solver.hpp"
#include "array_fast.hpp"
#include "core_options.hpp"
#include "device_path.hpp"
#include "host_conv.hpp"
#include "host_dense.hpp"
#include "py_ops.hpp"

namespace py = pybind11;

namespace braidpy {

// Read-only view of the core's CallInfo, handed to every callback; the solver
// answers the questions about the grid and the residual history.
struct Status {
  const braid::CallInfo* info = nullptr;
  const braid::Solver* solver = nullptr;

  const braid::Level& level(int l) const {
    if (l < 0 || l >= solver->nlevels())
      throw py::value_error("level must be in 0.." + std::to_string(solver->nlevels() - 1) +
                            ", got " + std::to_string(l));
    return solver->level(l);
  }
};

// What solve() or solution() came to; read-only in Python. Holds its own
// references (released with it): the exception, the vector.
struct Outcome {
  enum Kind { kOk, kFailed, kDiverged };
  Kind kind = kOk;
  py::object error = py::none();   // failed: the first exception (traceback attached) or None
  std::string callback;            // failed: the callback that raised ('' for communication)
  int iteration = -1, level = -1;  // diverged (else -1, -1, NaN)
  double value = std::nan("");
  py::object vector = py::none();  // solution(i): the new vector, or None
  bool interrupted = false;        // ok, but a Ctrl-C came after the last agreement point

  static Outcome ok(py::object vector = py::none()) {
    Outcome o;
    o.vector = std::move(vector);
    return o;
  }
  static Outcome failed(py::object error, std::string callback) {
    Outcome o;
    o.kind = kFailed;
    o.error = std::move(error);
    o.callback = std::move(callback);
    return o;
  }
  static Outcome diverged(const braid::Divergence& d) {
    Outcome o;
    o.kind = kDiverged;
    o.iteration = d.iteration;
    o.level = d.level;
    o.value = d.value;
    return o;
  }
  const char* kind_name() const {
    return kind == kOk ? "ok" : kind == kFailed ? "failed" : "diverged";
  }
};

namespace {

// XBraid's calling-function names (braid_ASCaller_*, without the prefix), None if none.
py::object caller_name(int caller) {
  switch (caller) {
    case braid::kCallerFInterp: return py::str("FInterp");
    case braid::kCallerFRestrict: return py::str("FRestrict");
    case braid::kCallerFRefine: return py::str("FRefine");
    case braid::kCallerFRefineAfterInitHier: return py::str("FRefine_AfterInitHier");
    case braid::kCallerFAccess: return py::str("FAccess");
    case braid::kCallerDriveTopCycle: return py::str("Drive_TopCycle");
    case braid::kCallerFCRelax: return py::str("FCRelax");
    case braid::kCallerDriveAfterInit: return py::str("Drive_AfterInit");
    case braid::kCallerComputeFullRNorm: return py::str("ComputeFullRNorm");
    case braid::kCallerFASResidual: return py::str("FASResidual");
    case braid::kCallerResidual: return py::str("Residual");
    case braid::kCallerInitGuess: return py::str("InitGuess");
    default: return py::none();
  }
}

const char* phase_name(int phase) {
  switch (phase) {
    case braid::kPhaseInit: return "init";
    case braid::kPhaseRelax: return "relax";
    case braid::kPhaseResidual: return "residual";
    case braid::kPhaseCycle: return "cycle";
    case braid::kPhaseRefine: return "refine";
    default: return "final";
  }
}

// step_batch: the index of each state's t0 (fine grid or its level) as an
// int64 array; None outside step_batch.
py::object batch_indices(const braid::CallInfo& info, bool fine) {
  if (info.batch == nullptr) return py::none();
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(info.batch_size));
  auto* p = out.mutable_data();
  for (braid::Index k = 0; k < info.batch_size; ++k)
    p[k] = fine ? info.batch[k].fine_index : info.batch[k].index;
  return std::move(out);
}

// step_batch: the fine indices as slice(start, stop, step) when evenly spaced and
// increasing (always, for the core's batches), else None.
py::object batch_fine_slice(const braid::CallInfo& info) {
  const auto* b = info.batch;
  const braid::Index n = info.batch_size;
  if (b == nullptr || n < 1) return py::none();
  const braid::Index d = n > 1 ? b[1].fine_index - b[0].fine_index : 1;
  if (d <= 0) return py::none();
  for (braid::Index k = 1; k < n; ++k)
    if (b[k].fine_index - b[k - 1].fine_index != d) return py::none();
  return py::reinterpret_steal<py::object>(PySlice_New(
      py::int_(b[0].fine_index).ptr(), py::int_(b[n - 1].fine_index + 1).ptr(), py::int_(d).ptr()));
}

// A refinement factor from Python: an int >= 1.
braid::Index rfactor_arg(const py::handle& r) {
  if (PyBool_Check(r.ptr()) || !PyIndex_Check(r.ptr()))
    throw py::type_error("rfactor must be an int >= 1, got " + py::repr(r).cast<std::string>());
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(r.ptr()));
  if (!index) throw py::error_already_set();
  const long long v = index.cast<long long>();
  if (v < 1) throw py::value_error("rfactor must be an int >= 1, got " + std::to_string(v));
  return static_cast<braid::Index>(v);
}

// The step a request is about: (its t0's fine index, t0, t1), the row's in a batch.
struct StepOf {
  braid::Index fine_index;
  double t0, t1;
};
StepOf step_of(const braid::CallInfo& info, const py::object& row) {
  if (info.batch == nullptr) {
    if (!row.is_none()) throw py::value_error("row is only for step_batch's status");
    return {info.fine_index, info.t0, info.t1};
  }
  if (row.is_none()) {
    if (info.batch_size != 1)
      throw py::value_error("in step_batch, give row=k (or one rfactor per row)");
    return {info.batch[0].fine_index, info.batch[0].t0, info.batch[0].t1};
  }
  const auto k = row.cast<long long>();
  if (k < 0 || k >= info.batch_size)
    throw py::value_error("row must be in 0.." + std::to_string(info.batch_size - 1) +
                          ", got " + std::to_string(k));
  const auto& b = info.batch[k];
  return {b.fine_index, b.t0, b.t1};
}

void request(const Status& s, const StepOf& st, braid::Index r, std::vector<double> dts) {
  if (s.info->refine != nullptr && s.info->level == 0)
    s.info->refine->set(st.fine_index + 1, r, std::move(dts));
}

void set_rfactor(const Status& s, const py::object& r, const py::object& row) {
  const auto* info = s.info;
  if (info->batch != nullptr && row.is_none() && py::isinstance<py::sequence>(r) &&
      !py::isinstance<py::str>(r)) {
    const auto rs = r.cast<py::sequence>();
    if (static_cast<braid::Index>(py::len(rs)) != info->batch_size)
      throw py::value_error("set_rfactor: " + std::to_string(py::len(rs)) + " factors for " +
                            std::to_string(info->batch_size) + " rows");
    std::vector<braid::Index> vals;
    for (const auto& x : rs) vals.push_back(rfactor_arg(x));
    for (braid::Index k = 0; k < info->batch_size; ++k)
      request(s, {info->batch[k].fine_index, info->batch[k].t0, info->batch[k].t1}, vals[k], {});
    return;
  }
  const braid::Index v = rfactor_arg(r);
  request(s, step_of(*info, row), v, {});
}

void set_refinement_dt_values(const Status& s, const py::object& r, const py::object& dts,
                              const py::object& row) {
  const braid::Index v = rfactor_arg(r);
  const StepOf st = step_of(*s.info, row);
  std::vector<double> sizes;
  for (const auto& x : dts.cast<py::sequence>()) sizes.push_back(x.cast<double>());
  if (static_cast<braid::Index>(sizes.size()) != v - 1)
    throw py::value_error("set_refinement_dt_values: rfactor " + std::to_string(v) +
                          " needs rfactor - 1 = " + std::to_string(v - 1) + " dts, got " +
                          std::to_string(sizes.size()));
  double sum = 0.0;
  for (double d : sizes) {
    if (!std::isfinite(d) || !(d > 0.0))
      throw py::value_error("set_refinement_dt_values: dts must be finite and > 0, got " +
                            std::to_string(d));
    sum += d;
  }
  if (!(st.t0 + sum < st.t1))
    throw py::value_error("set_refinement_dt_values: the dts sum to " + std::to_string(sum) +
                          ", not less than the step's t1 - t0 = " +
                          std::to_string(st.t1 - st.t0));
  request(s, st, v, v > 1 ? std::move(sizes) : std::vector<double>{});
}

// Options::est_error: this rank's estimates as a new array, or None before the first.
py::object error_estimates(const braid::Solver& solver) {
  const auto& e = solver.error_estimates();
  if (e.empty()) return py::none();
  return py::array_t<double>(static_cast<py::ssize_t>(e.size()), e.data());
}

// Binds Status' read-only properties and STATUS_FIELDS from one list, in order
// (braidpy.adjoint builds its own status class from STATUS_FIELDS). Getters keep
// their C++ return types: pybind11 converts them faster than a py::object.
void bind_status(py::module_& m) {
  py::class_<Status> cls(m, "Status", "Read-only facts about the current callback call.");
  py::list names;
  auto field = [&](const char* name, auto get, const char* doc) {
    cls.def_property_readonly(name, get, doc);
    names.append(name);
  };
  field("t", [](const Status& s) { return s.info->t; }, "Time of the point (access).");
  field("t0", [](const Status& s) { return s.info->t0; }, "Step start time.");
  field("t1", [](const Status& s) { return s.info->t1; }, "Step end time.");
  field("level", [](const Status& s) { return s.info->level; }, "Grid level (0 = fine).");
  field("index", [](const Status& s) { return s.info->index; },
        "Time index on the level (of t0 for step, of t for access/init).");
  field("fine_index", [](const Status& s) { return s.info->fine_index; },
        "The same point's index on the fine grid.");
  field("iteration", [](const Status& s) { return s.info->iteration; },
        "Current MGRIT iteration.");
  field("nlevels", [](const Status& s) { return s.info->nlevels; },
        "Number of levels in the hierarchy.");
  field("done", [](const Status& s) { return s.info->done; },
        "True during the final sweep after the solve stopped.");
  field("tol", [](const Status& s) { return s.info->tol; }, "Absolute halting tolerance.");
  field("rnorm",
        [](const Status& s) -> py::object {
          if (s.info->rnorm < 0) return py::none();
          return py::float_(s.info->rnorm);
        },
        "Latest fine residual norm, or None before the first one.");
  field("f_tprior", [](const Status& s) { return s.info->f_tprior; },
        "coarsen/refine: the fine level's time before t (t itself at the start).");
  field("f_tstop", [](const Status& s) { return s.info->f_tstop; },
        "coarsen/refine: the fine level's time after t (t itself at the end).");
  field("c_tprior", [](const Status& s) { return s.info->c_tprior; },
        "coarsen/refine: the coarse level's time before t (t itself at the start).");
  field("c_tstop", [](const Status& s) { return s.info->c_tstop; },
        "coarsen/refine: the coarse level's time after t (t itself at the end).");
  field("phase", [](const Status& s) { return phase_name(s.info->phase); },
        "'init', 'relax', 'residual' or 'final'; in sync 'init' (after the initial guess) "
        "or 'cycle' (top of an iteration).");
  field("caller", [](const Status& s) { return caller_name(s.info->caller); },
        "The XBraid routine the call comes from (GetCallingFunction's code as its "
        "name, without the braid_ASCaller prefix): 'FCRelax', 'FRestrict', "
        "'FASResidual', 'Residual', 'FInterp', 'FAccess', 'FRefine', 'ComputeFullRNorm', "
        "'InitGuess', 'Drive_AfterInit', 'Drive_TopCycle', 'FRefine_AfterInitHier'; None "
        "where XBraid has none (init, and the spatial coarsen and refine).");
  field("caller_code", [](const Status& s) { return s.info->caller; },
        "XBraid's code of caller, the braid_ASCaller number (-1 for None).");
  field("batch_size", [](const Status& s) { return s.info->batch_size; },
        "Number of states in the current step_batch call (0 outside one).");
  field("fine_indices", [](const Status& s) { return batch_indices(*s.info, true); },
        "step_batch: fine-grid index of each state's t0 (int64 array); None outside.");
  field("indices", [](const Status& s) { return batch_indices(*s.info, false); },
        "step_batch: index of each state's t0 on the level (int64 array); None outside.");
  field("fine_slice", [](const Status& s) { return batch_fine_slice(*s.info); },
        "step_batch: fine_indices as slice(start, stop, step) when they are evenly spaced "
        "and increasing (always, for the core's batches), else None; lets weights be "
        "taken as a strided view instead of a gather.");
  // Temporal refinement (Options.refine).
  field("nrefine", [](const Status& s) { return s.solver->refinements(); },
        "Rebuilds of the fine grid by temporal refinement so far (XBraid's GetNRefine).");
  field("ntime", [](const Status& s) { return s.solver->ntime(); },
        "Intervals of the present fine grid (XBraid's GetNTPoints).");
  cls.def("set_rfactor", &set_rfactor, py::arg("rfactor"), py::arg("row") = py::none(),
          "step: ask that the step's interval (t0, t1] be split into rfactor >= 1 equal "
          "intervals at the next refinement (XBraid's StepStatusSetRFactor). Heeded on "
          "the fine level with Options.refine, ignored elsewhere; the latest request of an "
          "interval wins. In step_batch: one int per row (a sequence), or row=k.");
  cls.def("set_refinement_dt_values", &set_refinement_dt_values, py::arg("rfactor"),
          py::arg("dts"), py::arg("row") = py::none(),
          "step: as set_rfactor, with the first rfactor - 1 new step sizes from t0 (their "
          "sum < t1 - t0) instead of an even split (XBraid's "
          "StatusSetRefinementDtValues). In step_batch: row=k.");
  // Delta correction (Options.delta_rank): the basis a step propagates or an access sees.
  field(
      "delta_rank", [](const Status& s) { return s.info->basis_rank; },
      "Number of basis vectors this call carries (XBraid's GetDeltaRank); 0 when the step "
      "need not propagate any.");
  field(
      "basis",
      [](const Status& s) {
        py::list out;
        for (int k = 0; k < s.info->basis_rank; ++k) {
          auto* b = static_cast<PyObject*>(s.info->basis[k]);
          out.append(b ? py::reinterpret_borrow<py::object>(b) : py::none());
        }
        return out;
      },
      "The basis vectors at t0 (step: to propagate with the step's Jacobian, in place or "
      "through set_basis) or at t (access); [] when none (XBraid's GetBasisVec).");
  cls.def(
      "set_basis",
      [](const Status& s, int k, py::object v) {
        if (k < 0 || k >= s.info->basis_rank)
          throw py::index_error("basis index " + std::to_string(k) + " out of range 0.." +
                                std::to_string(s.info->basis_rank - 1));
        if (v.is_none()) throw py::type_error("set_basis: the new basis vector is None");
        auto* old = static_cast<PyObject*>(s.info->basis[k]);
        s.info->basis[k] = v.release().ptr();
        Py_XDECREF(old);
      },
      py::arg("index"), py::arg("vector"),
      "Replaces basis vector `index` by `vector` (a step that returns new objects).");
  field(
      "lyapunov_exponents",
      [](const Status& s) -> py::object {
        if (s.info->lyapunov == nullptr) return py::none();
        py::list out;
        for (int k = 0; k < s.info->basis_rank; ++k) out.append(s.info->lyapunov[k]);
        return out;
      },
      "Final access at a fine C-point with Options.lyapunov_exponents: the local Lyapunov "
      "exponents there (log of the basis norms before the orthonormalization); else None.");
  // Methods, not fields: STATUS_FIELDS (the adjoint's status) lists the fields only.
  cls.def(
      "rnorms",
      [](const Status& s) {
        py::list out;
        for (const auto& [k, r] : s.solver->residuals()) out.append(r);
        return out;
      },
      "The fine residual norms of this solve so far, oldest first (Result.residuals; "
      "XBraid's GetRNorms).");
  cls.def(
      "error_estimate",
      [](const Status& s) -> py::object {
        const auto* i = s.info;
        if (i->level != 0) return py::none();
        braid::Index at = i->fine_index;  // a step's end point, else the point itself
        if (i->t1 > i->t0) {
          const auto& t = s.solver->fine_times();
          at = std::lower_bound(t.begin(), t.end(), i->t1) - t.begin();
        }
        const double e = s.solver->error_estimate(at);
        if (e < 0) return py::none();
        return py::float_(e);
      },
      "With est_error=True on the fine level: the Richardson error estimate at the end of "
      "the step (step), at the point (access); None elsewhere or before the first one "
      "(XBraid's GetSingleErrorEstStep/Access).");
  cls.def(
      "error_estimates",
      [](const Status& s) { return error_estimates(*s.solver); },
      "With est_error=True: this rank's fine error estimates, one per owned point in "
      "order (owned(0)), as a new float64 array; None before the first one (XBraid's "
      "GetAllErrorEst).");
  cls.def(
      "cfactor", [](const Status& s, int l) { return s.level(l).cf; }, py::arg("level"),
      "Coarsening factor of a level (the coarsest, solved level: its intervals + 1).");
  cls.def(
      "owned",
      [](const Status& s, int l) {
        const auto& r = s.level(l).own;
        return py::module_::import("builtins").attr("range")(r.lo, r.hi + 1);
      },
      py::arg("level"),
      "This rank's time indices on a level as a range (XBraid's GetTIUL; empty if none).");
  cls.def(
      "proc",
      [](const Status& s, int l, long long i) {
        const auto& L = s.level(l);
        if (s.solver->options().periodic && i == L.n) i = 0;  // point n is point 0
        for (std::size_t r = 0; r < L.ranges.size(); ++r)
          if (i >= L.ranges[r].lo && i <= L.ranges[r].hi) return static_cast<int>(r);
        return -1;
      },
      py::arg("level"), py::arg("index"),
      "The rank that owns time index `index` of a level, -1 outside the level (XBraid's "
      "GetProc).");
  cls.def(
      "times",
      [](const Status& s, int l) {
        const auto& L = s.level(l);
        const auto n = static_cast<py::ssize_t>(L.own.empty() ? 0 : L.own.hi - L.own.lo + 1);
        py::array_t<double> out(n);
        for (py::ssize_t k = 0; k < n; ++k) out.mutable_data()[k] = L.t[L.own.lo + k];
        return out;
      },
      py::arg("level"), "Times of this rank's points on a level (XBraid's GetTimeValues).");
  cls.def("__repr__", [](const Status& s) {
    const auto* i = s.info;
    return "<braidpy.Status level=" + std::to_string(i->level) +
           " index=" + std::to_string(i->index) + " iteration=" + std::to_string(i->iteration) +
           " phase=" + phase_name(i->phase) + (i->done ? " done" : "") + ">";
  });
  m.attr("STATUS_FIELDS") = py::tuple(names);
}

void bind_outcome(py::module_& m) {
  py::class_<Outcome>(m, "Outcome", "What Solver.solve() or Solver.solution(i) came to.")
      .def_property_readonly("kind", &Outcome::kind_name, "'ok', 'failed' or 'diverged'.")
      .def_readonly("error", &Outcome::error,
                    "failed: the first exception raised by a callback on this rank (its "
                    "traceback attached), or None if it failed elsewhere.")
      .def_readonly("callback", &Outcome::callback,
                    "failed: name of the callback that raised ('' if none here or in "
                    "communication).")
      .def_readonly("iteration", &Outcome::iteration, "diverged: the iteration (else -1).")
      .def_readonly("level", &Outcome::level, "diverged: the level (else -1).")
      .def_readonly("value", &Outcome::value,
                    "diverged: the non-finite residual norm (else NaN).")
      .def_readonly("interrupted", &Outcome::interrupted,
                    "ok, but a Ctrl-C arrived after the last agreement point (deliver it "
                    "at the next one).")
      .def_readonly("vector", &Outcome::vector,
                    "solution(i): the new vector (None if not owned); None otherwise.")
      .def("__repr__", [](const Outcome& o) {
        std::string out = std::string("<braidpy._core.Outcome ") + o.kind_name();
        if (o.kind == Outcome::kFailed)
          out += " in '" + o.callback + "': " + py::repr(o.error).cast<std::string>();
        if (o.kind == Outcome::kDiverged)
          out += " at iteration " + std::to_string(o.iteration) + ", level " +
                 std::to_string(o.level) + ": " + std::to_string(o.value);
        return out + ">";
      });
}

}  // namespace

class PySolver {
 public:
  PySolver(py::object app, py::object comm_adapter, int rank, int size,
           const CoreOptions& options, std::vector<double> times, py::object progress) {
    status_ = py::cast(Status{});
    ops_ = std::make_unique<PyOps>(app.ptr(), status_.ptr(), progress.ptr(), options.timings,
                                   options.batch, options.residual, options.step_ustop,
                                   options.full_rnorm, options.delta_rank > 0);
    if (comm_adapter.is_none()) {
      comm_ = std::make_unique<braid::SerialComm>();
    } else {
      auto c = std::make_unique<PyComm>(comm_adapter.ptr(), rank, size, *ops_);
      pycomm_ = c.get();
      comm_ = std::move(c);
    }
    // Throws std::invalid_argument (ValueError) on an impossible option.
    solver_ = std::make_unique<braid::Solver>(*ops_, *comm_, options, std::move(times));
    status_.cast<Status&>().info = &solver_->info();
    status_.cast<Status&>().solver = solver_.get();
  }

  // Failures and divergence leave the solver cold.
  Outcome solve(bool final_sweep) {
    Busy busy(*this);
    ops_->start_solve();
    try {
      solver_->solve(final_sweep);
      Outcome out = Outcome::ok();
      if (ops_->failed()) {
        // Only a Ctrl-C can be recorded after the last agreement (inside its
        // reduction): the ranks agreed on success, so it is handed back for the
        // next agreement point instead of failing this rank alone.
        out.interrupted = true;
        ops_->reset_failure();
      }
      return out;
    } catch (const braid::CallbackFailure&) {
      return failure();
    } catch (const braid::Divergence& e) {
      solver_->discard();
      return Outcome::diverged(e);
    }
  }

  // SIGINT during solve(): true when the caller should raise KeyboardInterrupt
  // now (a callback is running); else the core records it (PyOps::interrupt).
  bool interrupt() { return ops_->interrupt(); }

  // Fine solution at owned index i (vector None if not owned), or a failure.
  Outcome solution(braid::Index i) {
    Busy busy(*this);
    Vec u = solver_->solution(i);
    if (ops_->failed()) {
      if (u != nullptr) ops_->free(u);
      return failure();
    }
    if (u == nullptr) return Outcome::ok();
    return Outcome::ok(py::reinterpret_steal<py::object>(static_cast<PyObject*>(u)));
  }

  py::object stored(braid::Index i) const {
    check_idle();
    Vec u = solver_->stored(i);
    if (u == nullptr) return py::none();
    return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(u));
  }

  // srcs <- the stored vectors at start, start + step, ... (before stop); false when
  // one is missing.
  bool stored_range(braid::Index start, braid::Index stop, braid::Index step,
                    std::vector<PyObject*>& srcs) const {
    check_idle();
    if (step == 0) throw py::value_error("step must not be zero");
    for (braid::Index i = start; step > 0 ? i < stop : i > stop; i += step) {
      Vec u = solver_->stored(i);
      if (u == nullptr) return false;
      srcs.push_back(static_cast<PyObject*>(u));
    }
    return true;
  }

  // The stored vectors at start, start + step, ... (before stop), stacked into one
  // new float64 array; None when one is missing or they are not all float64 NumPy
  // arrays of one shape (the caller then gathers them itself).
  py::object stored_block(braid::Index start, braid::Index stop, braid::Index step,
                          py::object into) const {
    std::vector<PyObject*> srcs;
    if (!stored_range(start, stop, step, srcs)) return py::none();
    PyObject* out = nullptr;
    const auto n = static_cast<Py_ssize_t>(srcs.size());
    // Into a given array (a buffer reused from solve to solve: no new pages to fault in
    // when the block is above malloc's mmap threshold); None when it does not fit.
    if (!into.is_none()) {
      if (!fast_stack_into(srcs.data(), n, into.ptr())) return py::none();
      return into;
    }
    if (fast_stack(srcs.data(), n, &out)) return py::reinterpret_steal<py::object>(out);
    if (n > 0) {  // CUDA arrays: one gather kernel
      const braidpy::DevicePath p = braidpy::device_stack(srcs.data(), n, &out);
      if (p == braidpy::DevicePath::kFailed) throw py::error_already_set();
      if (p == braidpy::DevicePath::kDone) return py::reinterpret_steal<py::object>(out);
    }
    return py::none();
  }

  // The stored vectors at start, start + step, ... (before stop) as one read-only view
  // without a copy, when they are evenly spaced rows of one block (as a lockstep sweep
  // stores them); None otherwise (stored_block copies).
  py::object stored_view(braid::Index start, braid::Index stop, braid::Index step) const {
    std::vector<PyObject*> srcs;
    PyObject* out = nullptr;
    if (!stored_range(start, stop, step, srcs) ||
        !fast_stack_view(srcs.data(), static_cast<Py_ssize_t>(srcs.size()), &out))
      return py::none();
    return py::reinterpret_steal<py::object>(out);
  }

  py::object final_value() const {
    check_idle();
    Vec u = solver_->final_value();
    if (u == nullptr) return py::none();
    return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(u));
  }

  void set_initial_condition(py::object u) {
    check_idle();
    solver_->set_initial_condition(u.release().ptr());
  }

  void reset_guess() {
    check_idle();
    solver_->reset_guess();
  }

  py::list residuals() const {
    check_idle();
    py::list out;
    for (const auto& [k, r] : solver_->residuals()) out.append(py::make_tuple(k, r));
    return out;
  }
  py::list full_residuals() const {
    py::list out;
    for (const auto& [k, r] : solver_->full_residuals()) out.append(py::make_tuple(k, r));
    return out;
  }
  double final_full_residual() const { return solver_->final_full_residual(); }
  py::object error_estimates() const { return braidpy::error_estimates(*solver_); }


  py::list levels() const {
    py::list out;
    for (int l = 0; l < solver_->nlevels(); ++l) {
      const auto& L = solver_->level(l);
      py::dict d;
      d["n"] = L.n;
      d["cfactor"] = L.cf;
      d["nrelax"] = L.nrelax;
      d["crelax_weight"] = L.cweight;
      d["fine_stride"] = L.fine_stride;
      d["lo"] = L.own.lo;
      d["hi"] = L.own.hi;
      out.append(d);
    }
    return out;
  }

  py::dict counts() const {
    py::dict d;
    for (int k = 0; k < kNumCallbacks; ++k)
      if (shown(k)) d[callback_name(k)] = ops_->count(k);
    d["step_batch_items"] = ops_->batch_items();
    return d;
  }

  py::dict timings() const {
    py::dict d;
    for (int k = 0; k < kNumCallbacks; ++k)
      if (shown(k)) d[callback_name(k)] = ops_->seconds(k);
    d["communication"] = pycomm_ ? pycomm_->seconds() : 0.0;
    return d;
  }

  py::array_t<double> times() const {
    const auto& t = solver_->fine_times();
    return py::array_t<double>(static_cast<py::ssize_t>(t.size()), t.data());
  }

  braid::Solver& core() { return *solver_; }

  // Options::lyapunov_exponents: the last solve's exponents (empty otherwise).
  std::vector<double> lyapunov_exponents() const { return solver_->lyapunov_exponents(); }

 private:
  // The core is not re-entrant: while solve() or solution() runs (its callbacks
  // may call back into Python, and other threads may run between bytecodes),
  // every stateful method refuses. The GIL is held throughout, so a plain flag
  // is race-free.
  struct Busy {
    explicit Busy(PySolver& s) : s_(s) {
      s_.check_idle();
      s_.busy_ = true;
    }
    ~Busy() { s_.busy_ = false; }
    PySolver& s_;
  };
  void check_idle() const {
    if (busy_)
      throw std::runtime_error(
          "this braidpy Core is busy: a solve is running (called from another thread, or "
          "from inside one of its own callbacks); a Core serves one call at a time");
  }
  bool busy_ = false;
  // The optional callbacks' counters appear only where the app uses them.
  bool shown(int k) const {
    if (k == kCoarsen || k == kRefine) return ops_->spatial();
    if (k == kInitBasis || k == kInnerProd) return ops_->has_delta();
    return true;
  }

  // The captured failure as an Outcome (which takes a reference to the
  // exception); the solver and the ops are then ready for the next solve.
  Outcome failure() {
    solver_->discard();
    PyObject* err = ops_->first_error();
    py::object e = err ? py::reinterpret_borrow<py::object>(err) : py::none();
    const char* name = callback_name(ops_->error_callback());
    Outcome out = Outcome::failed(std::move(e), name);
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
  m.doc() = "braidpy's compiled MGRIT core (private; use the braidpy package).";

  braidpy::bind_status(m);
  braidpy::bind_outcome(m);
  braidpy::bind_core_options(m);

  py::class_<PySolver>(m, "Solver")
      .def(py::init<py::object, py::object, int, int, const braidpy::CoreOptions&,
                    std::vector<double>, py::object>(),
           py::arg("app"), py::arg("comm_adapter"), py::arg("rank"), py::arg("size"),
           py::arg("options"), py::arg("times"), py::arg("progress"))
      .def("solve", &PySolver::solve, py::arg("final_sweep") = true)
      .def("solution", &PySolver::solution, py::arg("index"))
      .def("final_value", &PySolver::final_value)
      .def("stored", &PySolver::stored, py::arg("index"))
      .def("stored_block", &PySolver::stored_block, py::arg("start"), py::arg("stop"),
           py::arg("step") = 1, py::arg("out") = py::none())
      .def("stored_view", &PySolver::stored_view, py::arg("start"), py::arg("stop"),
           py::arg("step") = 1)
      .def("set_initial_condition", &PySolver::set_initial_condition, py::arg("u"))
      .def("reset_guess", &PySolver::reset_guess)
      .def("interrupt", &PySolver::interrupt)
      .def("residuals", &PySolver::residuals)
      .def("full_residuals", &PySolver::full_residuals)
      .def("final_full_residual", &PySolver::final_full_residual)
      .def("error_estimates", &PySolver::error_estimates)
      .def("levels", &PySolver::levels)
      .def("counts", &PySolver::counts)
      .def("timings", &PySolver::timings)
      .def("times", &PySolver::times)
      .def("lyapunov_exponents", &PySolver::lyapunov_exponents)
      .def_property_readonly("iterations", [](PySolver& s) { return s.core().iterations(); })
      .def_property_readonly("refinements", [](PySolver& s) { return s.core().refinements(); })
      .def_property_readonly("refine_stopped",
                             [](PySolver& s) { return s.core().refine_stopped(); })
      .def_property_readonly("nlevels", [](PySolver& s) { return s.core().nlevels(); })
      .def_property_readonly("owned", [](PySolver& s) {
        const auto r = s.core().owned();
        return py::make_tuple(r.lo, r.hi);
      });

  // Device paths (device_path.hpp): which one a state takes, and the provider
  // of their operations (tests run them on host memory with the host provider).
  m.def("_default_path", [](py::handle u) { return std::string(braidpy::default_path(u.ptr())); },
        py::arg("u"));
  m.def("_use_device_ops", [](py::handle choice) {
        if (!braidpy::set_device_ops(choice.ptr()))
          throw py::type_error("_use_device_ops: expected a device_ops capsule, None or False");
      }, py::arg("choice"));
  m.def("_host_device_op_calls", []() {
    const auto& c = braidpy::host_device_op_calls();
    py::dict d;
    d["sum"] = c.sum;
    d["sum_rows"] = c.sum_rows;
    d["gather"] = c.gather;
    d["copy"] = c.copy;
    d["row_norms"] = c.row_norms;
    return d;
  });
  m.def("_host_device_ops",
        []() { return py::reinterpret_steal<py::object>(braidpy::host_device_ops_capsule()); });
  braidpy::bind_host_conv(m);
  braidpy::bind_host_dense(m);
}
