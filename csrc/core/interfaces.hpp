// The two seams between the MGRIT core and the outside world: user vector
// callbacks (Ops) and inter-rank communication (Comm). The core knows nothing
// about Python or MPI; the bindings implement both interfaces.
#pragma once

#include <cstdint>

namespace braid {

using Index = std::int64_t;

// An opaque user vector. The core only stores, passes and frees handles.
using Vec = void*;

struct RefineRequests;  // refine.hpp

// One state of a batched step: advance from t0 to t1; index/fine_index of t0.
struct BatchItem {
  double t0 = 0.0, t1 = 0.0;
  Index index = 0, fine_index = 0;
};

// What a callback is told about the call it serves (XBraid's status objects).
// The core owns one instance and updates it before each call.
struct CallInfo {
  double t = 0.0;        // access: time of the point
  double t0 = 0.0;       // step: start time
  double t1 = 0.0;       // step: end time
  int level = 0;         // grid level of the call
  Index index = 0;       // time index on that level (of t0 for step, of t for access)
  Index fine_index = 0;  // the same point's index on the fine grid
  int iteration = 0;     // current MGRIT iteration
  int nlevels = 0;       // levels in the hierarchy
  bool done = false;     // the solve has stopped (final relaxation/access)
  double tol = 0.0;      // absolute halting tolerance
  double rnorm = -1.0;   // latest fine residual norm, -1 if none yet
  int phase = 0;         // see Phase
  int caller = -1;       // XBraid's calling-function code (Caller), -1 none
  // Ops::coarsen/refine only (XBraid's CoarsenRefStatus): the times before and after
  // the point t on the fine and on the coarse level (t itself at either end of the grid).
  double f_tprior = 0.0, f_tstop = 0.0, c_tprior = 0.0, c_tstop = 0.0;
  // During Ops::step_batch only: the items of the batch (else null / 0).
  const BatchItem* batch = nullptr;
  Index batch_size = 0;
  // Options::refine: where the fine level's steps ask for their interval to be refined
  // (XBraid's StepStatusSetRFactor); null without refinement.
  RefineRequests* refine = nullptr;
  // Delta correction only (Options::delta_rank): the basis vectors a step propagates, or
  // an access sees (basis_rank of them; null / 0 otherwise), and at a fine C-point of the
  // final access its local Lyapunov exponents (null if none).
  Vec* basis = nullptr;
  int basis_rank = 0;
  const double* lyapunov = nullptr;

  // Describes the step of item it (times and indices; level is left alone).
  void set_step(const BatchItem& it) {
    t = t0 = it.t0;
    t1 = it.t1;
    index = it.index;
    fine_index = it.fine_index;
  }
};

enum Phase : int {
  kPhaseInit = 0,
  kPhaseRelax = 1,     // F/C relaxation and the coarsest solve
  kPhaseResidual = 2,  // residual and FAS right-hand side evaluation
  kPhaseFinal = 3,     // final F-relaxation / access after the solve
  kPhaseCycle = 4,     // sync at the top of an iteration (after its cycle)
  kPhaseRefine = 5,    // temporal refinement: the old and the new fine grid's steps, sync
};

// Which of XBraid's routines a call comes from (its braid_ASCaller_* codes, the value of
// GetCallingFunction): set with the phase, read by the status.
enum Caller : int {
  kCallerFInterp = 0,          // interpolation's F-sweep and corrections
  kCallerFRestrict = 1,        // restriction's F-sweep
  kCallerFRefine = 2,          // temporal refinement's steps
  kCallerFAccess = 3,          // an access sweep (the final one, access_level >= 2)
  kCallerFRefineAfterInitHier = 4,  // sync after a refinement's new hierarchy
  kCallerDriveTopCycle = 5,    // sync at the top of an iteration
  kCallerFCRelax = 6,          // FC-relaxation
  kCallerDriveAfterInit = 7,   // sync after the initial guess
  kCallerComputeFullRNorm = 9, // the full residual norm
  kCallerFASResidual = 10,     // a fine residual at a C-point (restriction)
  kCallerResidual = 11,        // a coarse FAS right-hand side
  kCallerInitGuess = 12,       // the sequential initial guess (seq_soln)
};

// User callbacks. After a callback fails, implementations must turn every
// further call into a cheap no-op (returning null vectors) until the core
// stops at the next agreement point; the core never inspects vector contents.
class Ops {
 public:
  virtual ~Ops() = default;
  virtual Vec init(const CallInfo& info) = 0;
  // Advances u from info.t0 to info.t1; may replace the handle.
  virtual void step(Vec& u, const CallInfo& info) = 0;
  virtual Vec clone(Vec u) = 0;
  // y <- a*x + b*y, in place; x may be y.
  virtual void sum(double a, Vec x, double b, Vec y) = 0;
  // ys[k] <- a*xs[k] + b*ys[k], k < n: independent pairs (no ys[k] is another pair's
  // x or y), so one call may do them all (one kernel for a device's states).
  virtual void sums(double a, const Vec* xs, double b, const Vec* ys, Index n) {
    for (Index k = 0; k < n; ++k) sum(a, xs[k], b, ys[k]);
  }
  // zs[k] <- a2*ys'[k] + b2*zs[k] with ys'[k] = a1*xs[k] + b1*ys[k], k < n, in one pass
  // per pair where the implementation can: two sums chained (the coarse right-hand
  // side's and the coarse correction's pairs), the same values as sums(a1, xs, b1, ys)
  // then sums(a2, ys, b2, zs), ys left untouched. False: nothing was done, and the
  // caller does the two sums its own way (a device batches each over all points).
  virtual bool fused_sums(double a1, const Vec* xs, double b1, const Vec* ys, double a2,
                          double b2, const Vec* zs, Index n) {
    (void)a1, (void)xs, (void)b1, (void)ys, (void)a2, (void)b2, (void)zs, (void)n;
    return false;
  }
  // A second handle to u itself (no copy), freed separately; null where the ops cannot
  // share vectors. The core shares a fine C-point as the coarse level's injected value v
  // (which nobody writes into) and then corrects the fine C-point by u - v with
  // fused_sums(..., ys = zs): an ops that shares must take ys[k] identical to zs[k] there
  // (each element read before it is written).
  virtual Vec share(Vec u) {
    (void)u;
    return nullptr;
  }
  // --- Spatial coarsening (optional; XBraid's braid_SetSpatialCoarsen/Refine) ---
  // True: coarse levels hold states of their own size. The core then makes a coarse
  // level's values with coarsen() (the injected C-values and the restricted residuals)
  // and corrects a fine C-point by refine(u - v) instead of u - v.
  virtual bool spatial() const { return false; }
  // A new vector: u (a state of level info.level) on level info.level + 1; info.index
  // is the coarse index, info.t the point's time.
  virtual Vec coarsen(Vec u, const CallInfo& info) {
    (void)info;
    return clone(u);
  }
  // A new vector: u (a correction on level info.level + 1) on level info.level.
  virtual Vec refine(Vec u, const CallInfo& info) {
    (void)info;
    return clone(u);
  }
  virtual double norm(Vec u) = 0;
  // out[k] = norm(us[k]), k < n: the residual norms of one evaluation in one
  // call (a device block's row norms in one kernel). Same values as norm().
  virtual void norms(const Vec* us, Index n, double* out) {
    for (Index k = 0; k < n; ++k) out[k] = norm(us[k]);
  }
  virtual void access(Vec u, const CallInfo& info) = 0;
  virtual void free(Vec u) = 0;
  // Called at the top of each iteration on every rank (progress output).
  virtual void progress(int iteration, double rnorm, bool has_rnorm) = 0;
  // The user's sync (XBraid's braid_SetSync), if any: called on every rank after a cold
  // start's initial guess (info.phase kPhaseInit) and at the top of every iteration
  // (kPhaseCycle). has_sync() false: never called, and the core adds no agreement.
  virtual bool has_sync() const { return false; }
  virtual void sync(const CallInfo& info) { (void)info; }
  // Options::refine, after progress(): the fine grid now has ntime intervals after
  // nrefine refinements (stopped false), or the limits stopped refining (stopped true).
  virtual void refinement(int iteration, Index ntime, int nrefine, bool stopped) {
    (void)iteration, (void)ntime, (void)nrefine, (void)stopped;
  }
  // Options::print_norms: this iteration's residual norm at every fine C-point j*cf,
  // j < n, in time order (0 where none was measured), called on every rank before
  // progress() (XBraid's print level 3).
  virtual void progress_norms(int iteration, const double* norms, Index n, Index cf) {
    (void)iteration, (void)norms, (void)n, (void)cf;
  }
  // Options::full_rnorm: the full residual norm of the iteration, after progress().
  virtual void progress_full(int iteration, double rnorm) {
    (void)iteration;
    (void)rnorm;
  }
  // True once a callback on this rank (or a poisoned message) has failed.
  virtual bool failed() const = 0;
  // Records a failure the core found in the user's data (as if a callback had raised
  // ValueError(message)); the ranks stop at the next agreement point.
  virtual void raise_error(const char* message) { (void)message; }

  // --- Delta correction (optional; XBraid's braid_SetDeltaCorrection) ---
  // A new basis vector number `index` at time info.t (XBraid's init_basis).
  virtual Vec init_basis(const CallInfo& info, int index) {
    (void)info;
    (void)index;
    return nullptr;
  }
  // The inner product <u, v> that defines the projection onto the basis.
  virtual double inner_prod(Vec u, Vec v) {
    (void)u;
    (void)v;
    return 0.0;
  }

  // --- User residual (optional; XBraid's braid_SetResidual) ---
  // True: the FAS residuals come from residual(), and a coarse step receives its
  // right-hand side as fstop in step_rhs() instead of having it added after step().
  virtual bool has_residual() const { return false; }
  // Advances u from info.t0 to info.t1 so that A(u_new, u_old) = fstop (null fstop:
  // = 0), where A is residual()'s operator; ustop is the best value at t1 the core
  // holds, a guess for implicit solvers, read-only (it may be u itself).
  virtual void step_rhs(Vec& u, Vec ustop, Vec fstop, const CallInfo& info) {
    (void)ustop;
    (void)fstop;
    step(u, info);
  }
  // r <- A(ustop, r): r holds the value at info.t0, ustop the one at info.t1; may
  // replace the handle.
  virtual void residual(Vec ustop, Vec& r, const CallInfo& info) {
    (void)ustop;
    (void)r;
    (void)info;
  }
  // True: step_batch_rhs batches steps that take fstop/ustop (a user residual with a
  // batched step); false: the core steps them one by one with step_rhs.
  virtual bool batched_rhs() const { return false; }
  // step_batch's batch with step_rhs's right-hand sides: us[k] advanced so that
  // A(us[k]_new, us[k]_old) = fstops[k] (fstops null: all 0), ustops[k] its guess at t1.
  virtual void step_batch_rhs(Vec block, Index first, Vec* us, Index n,
                              const BatchItem* items, const Vec* ustops, const Vec* fstops,
                              CallInfo& info) {
    (void)block;
    (void)first;
    const BatchItem* saved = info.batch;
    const Index saved_n = info.batch_size;
    info.batch = nullptr;
    info.batch_size = 0;
    for (Index k = 0; k < n; ++k) {
      info.set_step(items[k]);
      step_rhs(us[k], ustops[k], fstops != nullptr ? fstops[k] : nullptr, info);
    }
    info.batch = saved;
    info.batch_size = saved_n;
  }
  // The residual of the full residual norm (XBraid's braid_SetFullRNormRes); the
  // same contract as residual().
  virtual void full_residual(Vec ustop, Vec& r, const CallInfo& info) {
    residual(ustop, r, info);
  }

  // --- Batched relaxation (optional; docs/batching.md) ---
  // True: the core advances independent states with step_batch, n at a time.
  virtual bool batched() const { return false; }
  // Working copies out[k] of srcs[k], k < n (srcs[k] null: a placeholder row
  // to be filled by copy_into). Returns a new "block" handle whose rows are
  // out[0..n) in order (e.g. views of one stacked array), or null when the
  // copies are independent vectors. The caller frees rows and block.
  virtual Vec clone_block(const Vec* srcs, Index n, Vec* out) {
    for (Index k = 0; k < n; ++k) out[k] = srcs[k] != nullptr ? clone(srcs[k]) : nullptr;
    return nullptr;
  }
  // dst <- src, for a row dst of a block (never called without blocks).
  virtual void copy_into(Vec src, Vec dst) { sum(1.0, src, 0.0, dst); }
  // dst <- src where both are the same kind of vector (the same shape and type), which
  // keeps dst where it lies (a row of a block); false (nothing done) otherwise.
  virtual bool copy_alike(Vec src, Vec dst) {
    (void)src;
    (void)dst;
    return false;
  }
  // Advances us[k] from items[k].t0 to items[k].t1, k < n, all on level
  // info.level; us are rows first..first+n-1 of block (null: no block, and
  // handles may be replaced). info.batch/batch_size describe the items.
  virtual void step_batch(Vec block, Index first, Vec* us, Index n, const BatchItem* items,
                          CallInfo& info) {
    (void)block;
    (void)first;
    const BatchItem* saved = info.batch;
    const Index saved_n = info.batch_size;
    info.batch = nullptr;
    info.batch_size = 0;
    for (Index k = 0; k < n; ++k) {
      info.set_step(items[k]);
      step(us[k], info);
    }
    info.batch = saved;
    info.batch_size = saved_n;
  }
  // Out-of-place batched step (optional): us[0..n) stepped as step_batch would step
  // them, into rows first..first+n-1 of a new block of `rows` rows; us are left
  // unchanged. *new_block gets the block's handle, out[0..rows) its rows (those outside
  // first..first+n-1 hold unspecified values, for the caller to fill or drop). Saves
  // copies: a sweep starts from its C-points without copying them, and one that keeps
  // every new value (stored F-points) has each step write where the values are kept.
  // False: nothing was done (no such step for these states, or a callback failed). For
  // states of one kind the answer must not change except by a failure (after which
  // every callback is a no-op): a storing sweep's rows, once stored, are never stepped in
  // place. steps_to() false: the ops have no such step at all (the core does not ask).
  virtual bool steps_to() const { return false; }
  virtual bool step_batch_to(const Vec* us, Index n, Index first, Index rows,
                             const BatchItem* items, CallInfo& info, Vec* new_block,
                             Vec* out) {
    (void)us, (void)n, (void)first, (void)rows, (void)items, (void)info, (void)new_block;
    (void)out;
    return false;
  }
};

enum class ReduceOp { kSum, kMax };

// Point-to-point transfer of packed vectors and small reductions over the
// time communicator. Messages between a pair of ranks are matched in order.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Packs u and posts a non-blocking send (u may be freed right after).
  virtual void send(int dest, int tag, Vec u) = 0;
  // Blocks until the matching message arrives and returns a new vector.
  virtual Vec recv(int src, int tag) = 0;
  // Completes all posted sends.
  virtual void finish_sends() = 0;
  // Called before every step call: lets posted sends move on while this rank computes.
  // Some MPIs move a large message only inside an MPI call of its sender (Open MPI's
  // shared-memory rendezvous without single copy), so a receiver would otherwise wait
  // until the sender's next receive, a whole sweep later.
  virtual void advance_sends() {}
  virtual void allreduce(double* values, int n, ReduceOp op) = 0;
};

// Communicator of one rank; never sends.
class SerialComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void send(int, int, Vec) override {}
  Vec recv(int, int) override { return nullptr; }
  void finish_sends() override {}
  void allreduce(double*, int, ReduceOp) override {}
};

}  // namespace braid
