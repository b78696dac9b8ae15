// The one place that calls user Python code (XBraid's base.c): callback
// trampolines with counters, optional timers and error capture, and the
// communicator that moves packed vectors through a Python (mpi4py) adapter.
#pragma once

#include <Python.h>

#include <array>
#include <chrono>
#include <string>
#include <unordered_set>

#include "../core/interfaces.hpp"
#include "state_kind.hpp"

namespace braidpy {

using braid::CallInfo;
using braid::Vec;

enum Callback : int {
  kInit, kStep, kClone, kSum, kNorm, kAccess, kBufpack, kBufunpack, kStepBatch, kSync,
  kResidual, kCoarsen, kRefine, kInitBasis, kInnerProd,
  kNumCallbacks
};
// Failures that are not a counted callback's (Outcome.callback names them too).
constexpr int kCommunication = -1;  // our MPI adapter
constexpr int kProgress = -2;       // the progress output (print_level >= 1)
constexpr int kInterrupt = -3;      // Ctrl-C while the core was in its own code
const char* callback_name(int which);

// Counts, optional timers and the first captured exception of user callbacks.
// After a failure every callback becomes a no-op returning null vectors.
class PyOps final : public braid::Ops {
 public:
  // app: the user's app; status: the Python Status object handed to
  // callbacks; progress: callable(k, rnorm, has_rnorm) or None.
  // batch: the core uses app.step_batch where steps are independent.
  // residual: app.residual drives the FAS, and step gets fstop= (and ustop= where
  // step_ustop); full_rnorm: app.full_residual (else app.residual) serves the full
  // residual norm.
  PyOps(PyObject* app, PyObject* status, PyObject* progress, bool timings, bool batch,
        bool residual = false, bool step_ustop = false, bool full_rnorm = false,
        bool delta = false);
  ~PyOps() override;

  Vec init(const CallInfo& info) override;
  void step(Vec& u, const CallInfo& info) override;
  Vec clone(Vec u) override;
  void sum(double a, Vec x, double b, Vec y) override;
  double norm(Vec u) override;
  // app.coarsen / app.refine, where the app has both (XBraid's spatial coarsening).
  bool spatial() const override { return coarsen_ != nullptr; }
  Vec coarsen(Vec u, const CallInfo& info) override;
  Vec refine(Vec u, const CallInfo& info) override;
  void norms(const Vec* us, braid::Index n, double* out) override;
  void access(Vec u, const CallInfo& info) override;
  bool has_residual() const override { return residual_ != nullptr; }
  void step_rhs(Vec& u, Vec ustop, Vec fstop, const CallInfo& info) override;
  void residual(Vec ustop, Vec& r, const CallInfo& info) override;
  void full_residual(Vec ustop, Vec& r, const CallInfo& info) override;
  void free(Vec u) override { Py_XDECREF(static_cast<PyObject*>(u)); }
  void sums(double a, const Vec* xs, double b, const Vec* ys, braid::Index n) override;
  bool fused_sums(double a1, const Vec* xs, double b1, const Vec* ys, double a2, double b2,
                  const Vec* zs, braid::Index n) override;
  // u itself (a new reference) for writable float64 NumPy states under App's default
  // clone and sum, whose fused_sums are the compiled loop; else null.
  Vec share(Vec u) override;
  void progress(int iteration, double rnorm, bool has_rnorm) override;
  // app.sync(status), where the app defines one (App has none).
  bool has_sync() const override { return sync_ != nullptr; }
  void sync(const CallInfo& info) override;
  void progress_full(int iteration, double rnorm) override;
  void refinement(int iteration, braid::Index ntime, int nrefine, bool stopped) override;
  void progress_norms(int iteration, const double* norms, braid::Index n,
                      braid::Index cf) override;
  bool failed() const override { return failed_; }
  void raise_error(const char* message) override;
  // app.init_basis(t, index) and app.inner_prod(u, v) (Delta correction).
  Vec init_basis(const CallInfo& info, int index) override;
  double inner_prod(Vec u, Vec v) override;
  bool has_delta() const { return init_basis_ != nullptr; }

  bool batched() const override { return step_batch_ != nullptr; }
  // A user residual with step_stacked (which then takes fstop=/ustop= as its step does).
  bool batched_rhs() const override {
    return residual_ != nullptr && step_stacked_ != nullptr;
  }
  void step_batch_rhs(Vec block, braid::Index first, Vec* us, braid::Index n,
                      const braid::BatchItem* items, const Vec* ustops, const Vec* fstops,
                      CallInfo& info) override;
  Vec clone_block(const Vec* srcs, braid::Index n, Vec* out) override;
  void copy_into(Vec src, Vec dst) override;
  bool copy_alike(Vec src, Vec dst) override;
  void step_batch(Vec block, braid::Index first, Vec* us, braid::Index n,
                  const braid::BatchItem* items, CallInfo& info) override;
  // app.step_stacked_into for float64 NumPy states under App's default clone (read in
  // place where they are evenly spaced rows of one block), into a new block; else false.
  // The new states are blocks' rows, as App's default clone would make them.
  bool steps_to() const override { return step_stacked_into_ != nullptr && fast_clone_; }
  bool step_batch_to(const Vec* us, braid::Index n, braid::Index first, braid::Index rows,
                     const braid::BatchItem* items, CallInfo& info, Vec* new_block,
                     Vec* out) override;
  long long batch_items() const { return batch_items_; }

  // Packing for the communicator (user callbacks too).
  PyObject* bufpack(Vec u);              // new reference or null on failure
  Vec bufunpack(PyObject* buf);          // new vector or null on failure
  // Records an exception raised by our own Python code (MPI adapter).
  void capture_current_error(int which);
  // A neighbour sent a poisoned message: stop computing, raise nothing here.
  void mark_remote_failure() { failed_ = true; }
  void reset_failure();
  // SIGINT arrived (braidpy.parallel.interrupts): true when a callback is running,
  // so that the caller raises KeyboardInterrupt inside it (captured as that
  // callback's failure); else recorded here as a failure, so the ranks stop
  // together at the next agreement point instead of one rank leaving mid-cycle.
  bool interrupt();
  // True while a user callback (or the progress output) runs.
  bool in_callback() const { return in_callback_; }

  PyObject* first_error() const { return error_; }  // borrowed, may be null
  int error_callback() const { return error_callback_; }
  long long count(int which) const { return counts_[which]; }
  double seconds(int which) const { return seconds_[which]; }
  void reset_counters();
  // Start of a solve: counters to zero, init's identity check reset.
  void start_solve();

 private:
  // The gateway: every call of a user callback goes through call(), which
  // counts it, times it (timings) and captures its exception; returns a new
  // reference, or null after capturing. A C++ stand-in for App's default
  // (array_fast) that did a callback's work instead is counted by counted(),
  // the same way, untimed.
  void progress_call(PyObject* args, PyObject* kwargs);
  PyObject* call(int which, PyObject* fn, PyObject* const* args, size_t nargs,
                 PyObject* kwnames = nullptr);
  void counted(int which, long long n = 1) { counts_[which] += n; }
  // r (a callback's result, maybe null) as a new vector; None is captured as a
  // TypeError naming `what`.
  Vec new_vector(PyObject* r, int which, const char* what);
  // r (a callback's result) replaces u where it is a new state (checked); false
  // after capturing a failure.
  void replace_state(Vec& u, PyObject* r, int which, const char* what);
  void call_residual(PyObject* fn, Vec ustop, Vec& r);
  // r (a new state from callback `which`) checked against the Core's state kind;
  // false after capturing the mismatch.
  bool checked(PyObject* r, int which, const char* what);
  // coarsen's and refine's result: a new vector of the Core's type (and dtype).
  Vec space_result(PyObject* r, Vec u, int which, const char* what);

  PyObject* init_ = nullptr;
  PyObject* step_ = nullptr;
  PyObject* clone_ = nullptr;
  PyObject* sum_ = nullptr;
  PyObject* norm_ = nullptr;
  PyObject* access_ = nullptr;
  PyObject* bufpack_ = nullptr;
  PyObject* bufunpack_ = nullptr;
  PyObject* sync_ = nullptr;        // null: the app has no sync
  PyObject* init_basis_ = nullptr;  // both null: no Delta correction
  PyObject* inner_prod_ = nullptr;
  PyObject* coarsen_ = nullptr;  // both null: no spatial coarsening
  PyObject* refine_ = nullptr;
  PyObject* step_batch_ = nullptr;  // null: no batching
  PyObject* residual_ = nullptr;       // null: no user residual
  PyObject* full_residual_ = nullptr;  // null: no full residual norm
  PyObject* step_kwnames_ = nullptr;   // ("fstop",) or ("fstop", "ustop")
  PyObject* step_stacked_ = nullptr;  // App.step_batch's kernel, called directly on a block
  PyObject* step_stacked_into_ = nullptr;  // its out-of-place twin (optional)
  PyObject* status_ = nullptr;
  PyObject* progress_ = nullptr;
  bool timings_ = false;
  // App's default clone/sum/norm in C++ for float64 NumPy arrays (array_fast.hpp)
  // and float64/float32 CUDA arrays (device_path.hpp).
  bool fast_clone_ = false, fast_sum_ = false, fast_norm_ = false, noop_access_ = false;
  bool failed_ = false;
  bool in_callback_ = false;
  StateKind kind_;
  // init's results in this solve: the core keeps them all alive until the first
  // cycle, so a repeated address is init returning one object twice.
  std::unordered_set<PyObject*> init_results_;
  PyObject* error_ = nullptr;  // the first exception instance (traceback attached)
  int error_callback_ = -1;
  std::array<long long, kNumCallbacks> counts_{};
  std::array<double, kNumCallbacks> seconds_{};
  long long batch_items_ = 0;  // states advanced by step_batch calls
};

// Communicator backed by a Python adapter object with methods
//   post(dest, tag, buf_or_None)   non-blocking send (None: poisoned message)
//   receive(src, tag) -> buf|None  blocking receive
//   finish()                       complete posted sends
//   advance() -> bool              test posted sends; True when all are complete
//   allreduce(list, is_max) -> list
class PyComm final : public braid::Comm {
 public:
  PyComm(PyObject* adapter, int rank, int size, PyOps& ops);
  ~PyComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dest, int tag, Vec u) override;
  Vec recv(int src, int tag) override;
  void finish_sends() override;
  void advance_sends() override;
  void allreduce(double* values, int n, braid::ReduceOp op) override;
  double seconds() const { return seconds_; }

 private:
  PyObject* adapter_;
  int rank_, size_;
  PyOps& ops_;
  double seconds_ = 0.0;
  bool sends_open_ = false;  // a send posted and not yet seen complete
};

}  // namespace braidpy
