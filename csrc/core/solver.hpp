// The MGRIT solver: FAS V/F-cycles over a time-grid hierarchy, following
// XBraid's algorithm (docs/conventions.md). One file per phase implements it:
// relax.cpp, restrict.cpp, interp.cpp, norm.cpp, drive.cpp.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <memory>

#include "delta.hpp"
#include "grid.hpp"
#include "interfaces.hpp"
#include "options.hpp"
#include "refine.hpp"

namespace braid {

// Thrown on every rank once the ranks have agreed that a callback failed.
struct CallbackFailure : std::runtime_error {
  CallbackFailure() : std::runtime_error("a user callback failed") {}
};

// Thrown on every rank when the residual norm is not finite.
struct Divergence : std::runtime_error {
  Divergence(int iteration, int level, double value)
      : std::runtime_error("non-finite residual norm"),
        iteration(iteration), level(level), value(value) {}
  int iteration, level;
  double value;
};

class Solver {
 public:
  Solver(Ops& ops, Comm& comm, Options opts, std::vector<double> fine_times);
  ~Solver();
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;

  // Runs MGRIT until the halting test fires. A second call warm-starts from
  // the previous solution unless reset_guess() was called. final_sweep false: when
  // the last fine point is a C-point (and storage is not "all"), the final F-sweep is
  // left out: the solve yields its final value and C-points only, calls no access,
  // and keeps no F-point (for a caller that needs the final state alone, such as a
  // line search's objective: the sweep's steps would be thrown away).
  void solve(bool final_sweep = true);

  // Next solve starts from init() again.
  void reset_guess();
  // Frees every stored vector (after a failed solve); next solve is cold.
  void discard();
  // Replaces the value at t_0 (takes ownership of u; collective-free).
  void set_initial_condition(Vec u);

  int nlevels() const { return static_cast<int>(levels_.size()); }
  int iterations() const { return iterations_; }
  // (iteration k, ||r_k||) for every iteration whose norm was computed.
  const std::vector<std::pair<int, double>>& residuals() const { return rnorms_; }
  // Options::full_rnorm: (iteration k, full ||r_k||) as residuals(), and the full norm
  // after the last iteration (-1 if none).
  const std::vector<std::pair<int, double>>& full_residuals() const { return full_rnorms_; }
  double final_full_residual() const { return full_final_; }
  // The app's residual drives the FAS (Ops::has_residual).
  bool user_residual() const { return residual_; }
  const Level& level(int l) const { return levels_.at(l); }
  // Options::est_error: the error estimate at fine point i (owned) from the latest
  // restriction of the fine level in this solve; -1 if none (richardson.cpp).
  double error_estimate(Index i) const;
  // This rank's estimates at own.lo..own.hi; empty before the first one of a solve.
  const std::vector<double>& error_estimates() const { return estimates_; }
  const Options& options() const { return opts_; }
  Index ntime() const { return levels_[0].n; }
  const std::vector<double>& fine_times() const { return levels_[0].t; }
  Range owned() const { return levels_[0].own; }

  // New vector holding the fine solution at owned point i (recomputed from its
  // C-point when F-points are not stored). Null if not owned.
  Vec solution(Index i);
  Vec solution_at(Index i);  // solution() as a core vector
  // Borrowed handle of the stored fine value at i: an owned stored point, or
  // own.lo-1 (received in the final sweep). Null otherwise.
  Vec stored(Index i) const;
  // Borrowed handle of the value at the final time (owner rank only).
  Vec final_value() const { return delta_ ? DeltaOps::user(final_) : final_; }
  // Options::lyapunov_exponents: the Lyapunov exponents of the last solve (sum of the
  // local exponents over the fine C-points / (t_n - t_0), on every rank); else empty.
  const std::vector<double>& lyapunov_exponents() const { return lyapunov_; }
  bool solved() const { return solved_; }

  CallInfo& info() { return info_; }
  // Options::refine: rebuilds of the fine grid so far (all solves of this Solver), and
  // the iteration at which the limits stopped refinement (-1: not stopped).
  int refinements() const { return nrefine_; }
  int refine_stopped() const { return refine_stopped_; }

 private:
  using PointHook = std::function<void(Index, Vec&)>;  // after each F-point
  // After a step of one chain or a batch of chains: rows[k] now holds the value at
  // point pts[k], k < n (one call per batch, so that a hook can batch its own work).
  using RowsHook = std::function<void(Vec* rows, const Index* pts, Index n)>;
  // How an F-sweep ends each chain that reaches an owned C-point c > 0: u at c-1
  // is stepped to c (adding tau if with_tau) in `phase`, then handed to `take`
  // (rows[k]: u at C-point pts[k]; take may take it, setting rows[k] to null).
  // residual: instead of the step, u at c-1 becomes the user's residual
  // A(u_c, u_{c-1}) (Ops::residual).
  struct ChainEnd {
    int phase;
    bool with_tau;
    RowsHook take;
    bool residual = false;
    bool delta_fas = false;  // Delta correction: u at c-1 becomes the FAS residual at c
    int caller = -1;  // the end's calling-function code (-1: the sweep's)
  };
  // Who an F-sweep talks to: send u at own.hi right, receive u at own.lo-1.
  struct Exchange {
    int tag;
    bool send_right, recv_left;
  };
  // Lock-step chains at the end: rows[r] (row r of block) is chain r, from C-point base[r].
  using ChainsHook = std::function<void(Vec block, Vec* rows, const Index* base, Index m)>;

  // relax.cpp
  void step_on(Level& L, int l, Vec& u, Index i, bool with_tau);  // u: t_{i-1} -> t_i
  // With a user residual: the value step_rhs gets as ustop for the step into point i
  // (XBraid's GetUInit): the stored value at i, else on a coarse level the injected v,
  // else u itself.
  Vec guess_at(const Level& L, int l, Index i, Vec u) const;
  // Batched step: ws[k]: t_{pts[k]-1} -> t_{pts[k]} in one call.
  void step_batch_on(Level& L, int l, Vec block, Index first, Vec* ws, const Index* pts,
                     Index n, bool with_tau);
  // info_ and items_ for a batch of steps into pts[0..n) (then end_batch).
  void begin_batch(Level& L, int l, const Index* pts, Index n);
  void end_batch();
  // srcs[0..n) (the values at pts - 1) stepped out of place (Ops::step_batch_to) into
  // rows first..first+n-1 of a new block of `rows` rows (*block, its rows outs), adding
  // tau if with_tau. False: nothing done.
  bool step_out_of_place(Level& L, int l, const Vec* srcs, Index first, Index n,
                         const Index* pts, bool with_tau, Index rows, Vec* block, Vec* outs);
  // ws[k] <- the step of srcs[k] into pts[k] (srcs unchanged), k < n, in one batch:
  // out of place where the app can (Ops::step_batch_to), else on copies. Returns the
  // block of the ws, for the caller to free with them.
  Vec step_batch_from(Level& L, int l, const Vec* srcs, Index n, Vec* ws, const Index* pts);
  // A lock-step sweep's chains: rows[r] (of block, null for independent vectors);
  // stored[r]: rows[r] is level 0's stored value of its point (not freed by the sweep).
  struct SweepRows {
    Vec block = nullptr;
    std::vector<Vec> rows;
    std::vector<char> stored;
  };
  // from[0..b-a), the values at pts[a..b) - 1, stepped out of place (Ops::step_batch_to)
  // into rows a..b-1 of a new block, which replaces sw's rows and block (store: level 0
  // keeps rows a..b-1 as the stored values of pts[a..b)). False: the app has no such
  // step for these states (or failed); nothing changed.
  bool step_to_new_block(Level& L, int l, const Vec* from, Index a, Index b, const Index* pts,
                         bool with_tau, bool store, SweepRows& sw);
  // Coarse FAS steps: Phi(u) + tau (XBraid adds tau after the user step); us[k] is
  // the value at point pts[k], all n sums in one call.
  void add_tau(const Level& L, const Index* pts, Vec* us, Index n);
  // F-relaxation on level l in `phase`: steps every owned F-point from the C-point
  // on its left; on_points sees the new F-values (one chain's, or one lock-step
  // batch's); end (if any) ends each chain.
  // Runs chain by chain (chains()), or in lock-step (lockstep()) when the app
  // batches and there are two chains or more.
  void f_relax(int l, int phase, const RowsHook& on_points, const ChainEnd* end);
  void chains(int l, const Exchange& x, const RowsHook& on_points, const ChainEnd* end);
  // Ends a chain at C-point c: steps w (u at c-1) on to c, then end.take(w at c).
  void end_chain(Level& L, int l, const ChainEnd& end, Index c, Vec& w);
  void lockstep(int l, const Exchange& x, const RowsHook& on_points, const ChainEnd* end);
  // Whether level l's F-sweep has at least two independent chains to batch.
  bool batch_sweep(const Level& L, bool recv_left) const;
  // The chain loop both lock-step sweeps share (relax.cpp).
  // on_rows (may be empty) sees each batch's rows before on_step sees them one by one.
  void lockstep_chains(int l, const Exchange& x, bool with_tau, bool keep_left, bool store,
                       const RowsHook& on_rows, const PointHook& on_step,
                       const ChainsHook& on_done);
  // Independent copies out[k] of rows[k], k < n, made in one clone_block call (for
  // array states one new block whose row views the copies are, not n allocations).
  void clone_rows(Vec* rows, Index n, Vec* out);
  // Level 0 keeps rows[k] (copied) as the stored value of fine point pts[k].
  void store_rows(int l, Vec* rows, const Index* pts, Index n);  // copies into level l's u
  void fc_relax(int l);
  void relax(int l);
  // Periodic: level l's point n is point 0 again. Copies u_n into u_0 (to_start) or u_0
  // into u_n, between their owners; every rank calls it (no-op unless periodic).
  void wrap(int l, bool to_start);
  // restrict.cpp
  void restrict_to(int l);  // level l -> l+1, computes ||r|| on level 0
  void inject_all();        // skipped first down-sweep
  // Options::print_norms: level 0's C-point residual norms (norms: by coarse slot) to
  // Ops::progress_norms, gathered over ranks (collective).
  void print_norms(const std::vector<double>& norms);
  void inject(int l);       // level l's C-values to level l+1 (v, and u at its C-points)
  // Spatial coarsening (Ops::spatial): u, a value at coarse point j's fine point on level
  // l, coarsened to level l+1 (refine: a correction at coarse point j of level l+1,
  // refined to level l). info_ describes the point during the call only.
  Vec coarsen_at(int l, Index j, Vec u);
  Vec refine_at(int l, Index j, Vec e);
  void set_space_info(int l, Index j);
  // richardson.cpp (Options::richardson, est_error; fine level only)
  // Whether fc_relax(l) extrapolates its new C-values.
  bool extrapolates(int l) const;
  // updated[s]: the new value of fine C-point at slot s (null: none), becomes
  // a u_c + b Phi_big(u_{c-cf}) with u_{c-cf} the value before the sweep.
  void extrapolate(std::vector<Vec>& updated);
  // restrict_to(0) from the injection on: the coarse right-hand sides with the
  // Richardson factor, the residual norm (richardson) and the error estimates.
  void richardson_rhs();
  // Sum of (t_i - t_{i-1})^local_order over the fine interval (c - cf, c].
  double dtk(Index c) const;
  // Fine point i's estimate from the coarse estimates est (by coarse slot).
  void finalize_estimates(const std::vector<double>& est);
  // interp.cpp
  void interp_from(int l);  // level l -> l-1
  void clean(int l);
  // norm.cpp
  double combine_norms(const std::vector<double>& local_from_right);
  // This rank's part of the full residual norm of level 0 (every point i > 0).
  double full_rnorm_part();
  // The temporal norm over all ranks of the parts; throws CallbackFailure if a
  // callback failed on any rank (collective).
  double reduce_norm(double part);
  // drive.cpp
  void init_guess();
  void gather_c_points();  // fine C-points as rows of one block
  void down(int l);
  void up(int l);
  void cycle(bool skip_down, bool fcycle);
  bool top(int k);
  void final_relax(bool sweep);  // final F-sweep in time order: access, storage, final value
  // final_relax without its sweep (solve(false)): the final value from the C-point at
  // the last fine point; the F-points a storing sweep would keep are dropped.
  void final_value_only();
  void final_chains();    // final_relax chain by chain
  void final_lockstep();  // final_relax in lock-step
  bool store_final_f() const { return opts_.store_all || opts_.store_final; }
  // Final sweep's visit of fine point i (in time order): final value, access.
  void visit_final(Index i, Vec w);
  // The one place the core calls access: fine point i holding u.
  void access_fine(Index i, Vec u);
  // access_level 3: point i of level l holding u, for the routine `caller` (XBraid's
  // access inside its sweeps); the status describes the point during the call only.
  void access_at(int l, Index i, Vec u, int caller);
  bool access_all() const { return opts_.access_level >= 3; }
  // access_level 3, after every iteration: an F-sweep on level 0 with access at every
  // owned fine point (XBraid's FAccess at the top of a cycle, done false).
  void access_sweep();
  void agree();  // collective: stops every rank if any callback failed
  // The user's sync on level 0 in `phase` (kPhaseInit or kPhaseCycle), then an agreement
  // so that its failure on one rank stops every rank; nothing without a sync.
  void sync(int phase);

  // Options::level 2 access of the fine C-points after iteration k's cycle.
  void access_iterate();
  // refine.cpp: at the top of iteration k, the fine grid rebuilt from the steps'
  // refinement requests (collective). kRefined: a new hierarchy whose fine C-points hold
  // the old solution carried over; kStopped: the limits stopped refinement now.
  enum RefineOutcome { kUnrefined, kRefined, kStopped };
  RefineOutcome refine_grid(int k);
  // The new fine level's C-points from the old fine values: vals[j] is the value at new
  // point at[j] (this rank's, increasing); each C-point steps from the nearest to its left.
  void carry_over(std::vector<Vec>& vals, const std::vector<Index>& at,
                  const std::vector<Index>& images);

  void set_slot(std::vector<Vec>& slots, Index s, Vec u);
  void free_level(int l);

  // delta.cpp: Delta correction (Options::delta_rank > 0; docs/conventions.md). Which
  // phase a step serves (XBraid's calling function), set by each sweep.
  enum Caller : int { kByRelax, kByRestrict, kByInterp, kByResidual, kByFAS, kByFinal };
  bool do_delta(int l) const;   // Delta computed on level l this iteration
  bool use_delta(int l) const;  // Delta applied on level l this iteration
  // XBraid's _braid_Step with Delta correction (step_on's route).
  void delta_step(Level& L, int l, Vec& u, Index i, bool with_tau);
  // XBraid's _braid_Residual: r (u at i-1) <- ustop - Phi(r), its basis <- -Phi'(basis).
  void delta_residual(Level& L, int l, Index i, int caller, Vec ustop, Vec r);
  // The FAS residual at C-point c from w (u at c-1), in w (XBraid's _braid_FASResidual).
  void delta_fas_residual(Level& L, int l, Index c, Vec w);
  // Coarse right-hand sides tau_j with the low-rank Delta (restriction to level l+1).
  void delta_coarse_rhs(int l, int tag);
  // Basis at point i-1 of level l (v; from the left neighbour at own.lo - 1).
  Vec delta_v_prev(int l, Index i);
  void delta_final_relax();  // final FC-relaxation with the Lyapunov exponents

  int caller_ = kByRelax;
  std::unique_ptr<DeltaOps> delta_;       // null when Delta correction is off
  std::unique_ptr<DeltaComm> delta_comm_;
  bool lyap_relax_ = false;               // basis propagated in FC-relaxation now
  std::vector<Vec> delta_left_;           // per level: v at own.lo - 1 (coarse levels)
  std::vector<double> local_lyap_;        // local exponents per fine slot (rank each)
  std::vector<double> lyapunov_;

  Ops& ops_;
  Comm& comm_;
  Options opts_;
  std::vector<Level> levels_;
  CallInfo info_;
  std::vector<std::pair<int, double>> rnorms_;
  double pending_rnorm_ = -1.0;  // this rank's part of ||r_k||, or -1 if none
  bool rnorm_measured_ = false;
  bool cold_ = true;              // this solve started from init()
  bool residual_ = false;         // Ops::has_residual
  std::vector<std::pair<int, double>> full_rnorms_;
  double pending_full_ = 0.0;     // this rank's part of the full ||r_k||
  bool full_measured_ = false;
  double full_final_ = -1.0;
  double rnorm0_ = -1.0;         // reference for the relative tolerance
  int iterations_ = 0;
  bool have_guess_ = false;      // level 0 C-points hold a previous solution
  bool solved_ = false;
  Vec left_boundary_ = nullptr;  // fine u at own.lo-1 after the final F-sweep
  Vec final_ = nullptr;          // fine u at t_n (owner only)
  Vec new_u0_ = nullptr;         // pending initial condition
  std::vector<BatchItem> items_;  // scratch of step_batch_on
  RefineRequests rf_;             // Options::refine: the steps' requests
  int nrefine_ = 0;
  int refine_stopped_ = -1;
  bool refined_ = false;          // top(): this iteration rebuilt the fine grid
  std::vector<double> estimates_;  // Options::est_error: by fine slot (richardson.cpp)
};

// Message tags: one per (level, kind) so that mismatches cannot go unnoticed.
inline int msg_tag(int level, int kind) { return 2 * (level * 4 + kind) + 2; }
enum MsgKind : int { kMsgRelax = 0, kMsgInject = 1, kMsgWrap = 2, kMsgFull = 3 };
// Temporal refinement's messages (old fine values to their new owners, the carry-over).
constexpr int kMsgRefineTag = 1;
constexpr int kMsgCarryTag = 3;

}  // namespace braid
