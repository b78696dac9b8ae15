// The driver (XBraid drive.c): initial guess, V/F-cycles, halting, the final
// F-sweep, and the agreement points where ranks stop together on failure.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "solver.hpp"

namespace braid {

Solver::Solver(Ops& ops, Comm& comm, Options opts, std::vector<double> fine_times)
    : delta_(opts.delta_rank > 0 ? std::make_unique<DeltaOps>(ops, opts.delta_rank) : nullptr),
      delta_comm_(delta_ ? std::make_unique<DeltaComm>(comm, *delta_) : nullptr),
      ops_(delta_ ? static_cast<Ops&>(*delta_) : ops),
      comm_(delta_comm_ ? static_cast<Comm&>(*delta_comm_) : comm),
      opts_(std::move(opts)) {
  check_options(opts_, fine_times, comm_.size(), comm_.rank());
  levels_ = build_hierarchy(fine_times, opts_, comm_.size(), comm_.rank());
  if (delta_) delta_left_.assign(levels_.size(), nullptr);
  lyap_relax_ = opts_.lyapunov_relax;
  info_.nlevels = nlevels();
  info_.tol = opts_.abs_tol;
  residual_ = ops_.has_residual();
  if (opts_.refine) {
    if (nlevels() < 2)
      throw std::invalid_argument(
          "refine: the hierarchy has one level (ntime " + std::to_string(levels_[0].n) +
          ", min_coarse " + std::to_string(opts_.min_coarse) + ", max_levels " +
          std::to_string(opts_.max_levels) + "); temporal refinement needs two or more");
    rf_.reset(levels_[0].own.lo, levels_[0].own.hi);
    info_.refine = &rf_;
  }
}

Solver::~Solver() {
  for (int l = 0; l < nlevels(); ++l) free_level(l);
  ops_.free(left_boundary_);
  ops_.free(final_);
  ops_.free(new_u0_);
}

void Solver::set_slot(std::vector<Vec>& slots, Index s, Vec u) {
  Vec& slot = slots[static_cast<std::size_t>(s)];
  if (slot != nullptr) ops_.free(slot);
  slot = u;
}

void Solver::free_level(int l) {
  Level& L = levels_[l];
  for (auto* slots : {&L.u, &L.v, &L.tau})
    for (Vec& s : *slots) {
      if (s != nullptr) ops_.free(s);
      s = nullptr;
    }
  if (delta_) {
    ops_.free(delta_left_[static_cast<std::size_t>(l)]);
    delta_left_[static_cast<std::size_t>(l)] = nullptr;
  }
}

void Solver::reset_guess() { have_guess_ = false; }

void Solver::discard() {
  for (int l = 0; l < nlevels(); ++l) clean(l);
  for (Vec* v : {&left_boundary_, &final_, &new_u0_}) {
    ops_.free(*v);
    *v = nullptr;
  }
  rnorm_measured_ = false;
  have_guess_ = false;
  solved_ = false;
}

void Solver::set_initial_condition(Vec u) {
  if (opts_.periodic) {
    ops_.free(u);
    throw std::invalid_argument("a periodic problem has no initial condition to set");
  }
  ops_.free(new_u0_);
  new_u0_ = u;
  if (delta_) {  // with its basis from init_basis at t_0
    info_.t = info_.t0 = info_.t1 = levels_[0].t[0];
    info_.index = info_.fine_index = 0;
    info_.level = 0;
    new_u0_ = delta_->wrap(u, info_);
  }
}

void Solver::agree() {
  comm_.finish_sends();
  double failed = ops_.failed() ? 1.0 : 0.0;
  comm_.allreduce(&failed, 1, ReduceOp::kMax);
  if (failed > 0.0) throw CallbackFailure();
}

void Solver::sync(int phase) {
  if (!ops_.has_sync()) return;
  info_.phase = phase;
  info_.level = 0;
  info_.caller = phase == kPhaseInit     ? kCallerDriveAfterInit
                 : phase == kPhaseRefine ? kCallerFRefineAfterInitHier
                                         : kCallerDriveTopCycle;
  ops_.sync(info_);
  agree();
}

// Fine C-points from init() (cold start) or from the previous solve (warm).
void Solver::init_guess() {
  Level& L = levels_[0];
  cold_ = !have_guess_;
  info_.phase = kPhaseInit;
  info_.level = 0;
  if (cold_) {
    // Periodic: point n is point 0 again, never initialised (XBraid has no point n).
    const Index last = opts_.periodic ? std::min(L.own.hi, L.n - 1) : L.own.hi;
    for (Index c = L.c_at_or_after(L.own.lo); c <= last; c += L.cf) {
      info_.t = info_.t0 = info_.t1 = L.t[c];
      info_.index = info_.fine_index = c;
      set_slot(L.u, L.slot(c), ops_.init(info_));
    }
    have_guess_ = true;
    wrap(0, false);
  }
  if (new_u0_ != nullptr) {
    // Into the present value where it is alike: that may be a row of the C-points'
    // block (gather_c_points), which a new vector in its slot would split.
    if (!L.owns(0)) {
      ops_.free(new_u0_);
    } else if (!cold_ && L.u[0] != nullptr && ops_.copy_alike(new_u0_, L.u[0])) {
      ops_.free(new_u0_);
    } else {
      set_slot(L.u, 0, new_u0_);
    }
    new_u0_ = nullptr;
  }
  if (opts_.seq_soln && cold_) {
    // Sequential stepping through all fine points, keeping the C-values:
    // one F-sweep over a level whose only C-point is 0.
    const Index cf = L.cf;
    L.cf = L.n + 1;
    info_.caller = kCallerInitGuess;
    f_relax(
        0, kPhaseInit,
        [&](Vec* ws, const Index* pts, Index n) {
          for (Index k = 0; k < n; ++k)
            if (pts[k] % cf == 0) set_slot(L.u, L.slot(pts[k]), ops_.clone(ws[k]));
        },
        nullptr);
    L.cf = cf;
  }
  if (cold_) gather_c_points();
}

// The fine C-points as rows of one block (clone_block; the same values): updated in
// place from here on (interpolation), or replaced by the rows of a lock-step block
// (C-relaxation), they stay evenly spaced rows of one block, which the adjoint's and the
// gradients' batched calls then read in place (braidpy's Core.stored_view) instead of
// gathering them at every call.
// Only for batched apps (whose batched calls could read them so) whose vectors form
// blocks; otherwise nothing changes.
void Solver::gather_c_points() {
  Level& L = levels_[0];
  if (!ops_.batched()) return;
  std::vector<Vec> cs;
  std::vector<Index> at;
  for (Index c = L.c_at_or_after(L.own.lo); c <= L.own.hi; c += L.cf) {
    cs.push_back(L.u[L.slot(c)]);
    at.push_back(c);
  }
  const Index n = static_cast<Index>(cs.size());
  if (n < 2 || std::find(cs.begin(), cs.end(), nullptr) != cs.end()) return;
  std::vector<Vec> rows(cs.size(), nullptr);
  Vec block = ops_.clone_block(cs.data(), n, rows.data());
  if (block == nullptr) {  // independent copies: no block to read from
    for (Vec r : rows) ops_.free(r);
    return;
  }
  ops_.free(block);  // the rows keep it alive
  for (Index k = 0; k < n; ++k) set_slot(L.u, L.slot(at[k]), rows[k]);
}

void Solver::down(int l) {
  relax(l);
  restrict_to(l);
  // Access level 3 tells the sweeps after the restriction from level 0 its new norm, as
  // XBraid (which reduces it there) does.
  if (l == 0 && access_all() && rnorm_measured_) info_.rnorm = reduce_norm(pending_rnorm_);
  if (l == 0 && opts_.full_rnorm) {  // XBraid: right after the restriction from level 0
    pending_full_ = full_rnorm_part();
    full_measured_ = true;
  }
}

void Solver::up(int l) { interp_from(l); }

void Solver::cycle(bool skip_down, bool fcycle) {
  const int L = nlevels();
  if (skip_down) {
    inject_all();
  } else {
    for (int l = 0; l < L - 1; ++l) down(l);
  }
  if (!fcycle) {
    for (int l = L - 1; l >= 1; --l) up(l);
    return;
  }
  // F-cycle: after the coarsest solve, V-cycles starting on each level l
  // from L-2 up to 1 before interpolating to l-1.
  up(L - 1);
  for (int l = L - 2; l >= 1; --l) {
    for (int v = 0; v < opts_.fmg_vcycles; ++v) {
      for (int m = l; m < L - 1; ++m) down(m);
      for (int m = L - 1; m > l; --m) up(m);
    }
    up(l);
  }
}

// End of iteration k: agree on failure, combine the residual norm, test.
bool Solver::top(int k) {
  comm_.finish_sends();
  // The non-finite flag travels beside the norm: an MPI MAX reduction may drop a
  // NaN (max(nan, x) is x in some orders), and halting must see it on any rank.
  const double part = rnorm_measured_ ? pending_rnorm_ : 0.0;
  const double fpart = full_measured_ ? pending_full_ : 0.0;
  const int nvals = opts_.full_rnorm ? 5 : 3;
  double vals[5] = {ops_.failed() ? 1.0 : 0.0, std::isfinite(part) ? part : 0.0,
                    std::isfinite(part) ? 0.0 : 1.0, std::isfinite(fpart) ? fpart : 0.0,
                    std::isfinite(fpart) ? 0.0 : 1.0};
  comm_.allreduce(vals, nvals, opts_.tnorm == 0 ? ReduceOp::kMax : ReduceOp::kSum);
  if (vals[0] > 0.0) throw CallbackFailure();
  const bool has = rnorm_measured_;
  const double r = vals[2] > 0.0 ? NAN : opts_.tnorm == 2 ? std::sqrt(vals[1]) : vals[1];
  rnorm_measured_ = false;
  if (has) {
    rnorms_.emplace_back(k, r);
    info_.rnorm = r;
  }
  // XBraid halts on the full norm where it measures one (drive.c).
  const bool has_test = opts_.full_rnorm ? full_measured_ : has;
  double test = r;
  if (opts_.full_rnorm) {
    test = vals[4] > 0.0 ? NAN : opts_.tnorm == 2 ? std::sqrt(vals[3]) : vals[3];
    if (full_measured_) full_rnorms_.emplace_back(k, test);
    full_measured_ = false;
  }
  if (has_test && rnorm0_ < 0.0) rnorm0_ = test;
  sync(kPhaseCycle);  // as XBraid's top-of-cycle sync: after the norm, before the test
  RefineOutcome refined = kUnrefined;
  if (opts_.refine) {  // XBraid: the iteration's access, then the refinement, then its line
    if (opts_.access_level >= 2) access_iterate();
    refined = refine_grid(k);
  }
  refined_ = refined == kRefined;
  ops_.progress(k, r, has);
  if (opts_.full_rnorm && has_test) ops_.progress_full(k, test);
  if (refined != kUnrefined) ops_.refinement(k, ntime(), nrefine_, refined == kStopped);
  if (refined_) return false;  // the iteration runs again on the new grid
  if (has && !std::isfinite(r)) throw Divergence(k, 0, r);
  if (has_test && !std::isfinite(test)) throw Divergence(k, 0, test);
  const bool converged =
      has_test &&
      (test < opts_.abs_tol || (opts_.rel_tol > 0.0 && test < opts_.rel_tol * rnorm0_));
  return converged || k == opts_.max_iter - 1;
}

void Solver::solve(bool final_sweep) {
  rnorms_.clear();
  estimates_.clear();
  full_rnorms_.clear();
  full_measured_ = false;
  full_final_ = -1.0;
  iterations_ = 0;
  rnorm0_ = -1.0;
  rnorm_measured_ = false;
  solved_ = false;
  info_ = CallInfo{};
  if (opts_.refine) info_.refine = &rf_;
  info_.nlevels = nlevels();
  info_.tol = opts_.abs_tol;
  ops_.free(left_boundary_);
  ops_.free(final_);
  left_boundary_ = final_ = nullptr;

  init_guess();
  agree();
  if (cold_) sync(kPhaseInit);  // XBraid syncs after a first (not a warm) initialisation
  const int L = nlevels();
  if (L == 1 && (opts_.max_levels > 1 || opts_.relax_only_cg)) {
    // XBraid: a single level that could have been more (or is "relaxed only")
    // is solved by stepping in one iteration whose residual is set to 0.
    iterations_ = 1;
    // XBraid's one FC sweep of the single level (its stepping, the same values) is
    // visible only to access level 3.
    if (access_all() && !opts_.relax_only_cg) fc_relax(0);
    rnorms_.emplace_back(0, 0.0);
    info_.rnorm = 0.0;
    sync(kPhaseCycle);
    ops_.progress(0, 0.0, true);
    if (access_all()) access_sweep();
  } else if (L > 1) {
    for (int k = 0, cycles = 0;; ++cycles) {
      info_.iteration = k;
      // Access level 3 shows XBraid's status norm: this iteration's, none until measured.
      if (access_all()) info_.rnorm = -1.0;
      const bool skip_down = cycles == 0 && opts_.skip && cold_ && !opts_.seq_soln;
      const bool fcycle = opts_.fmg && opts_.nfmg != k;
      cycle(skip_down, fcycle);
      const bool stop = top(k);
      iterations_ = k + 1;
      if (opts_.access_level >= 2 && !opts_.refine) access_iterate();
      if (refined_) continue;  // iteration k again, on the refined grid
      if (stop) break;
      ++k;
    }
  }
  if (opts_.full_rnorm) {  // XBraid: once more after the last iteration, done set
    info_.iteration = iterations_;
    info_.done = true;
    full_final_ = reduce_norm(full_rnorm_part());
  }
  final_relax(final_sweep);
  solved_ = true;
}

void Solver::access_iterate() {
  if (access_all()) {
    access_sweep();
    return;
  }
  const Level& F = levels_[0];
  info_.phase = kPhaseRelax;
  for (Index c = F.c_at_or_after(F.own.lo); c <= F.own.hi; c += F.cf)
    access_fine(c, F.u[F.slot(c)]);
}

void Solver::access_fine(Index i, Vec u) {
  const Level& F = levels_[0];
  info_.t = info_.t0 = info_.t1 = F.t[i];
  info_.level = 0;
  info_.index = info_.fine_index = i;
  info_.caller = kCallerFAccess;
  if (delta_ && u != nullptr) {  // the basis, and the final C-points' local exponents
    info_.basis = DeltaOps::of(u)->basis.data();
    info_.basis_rank = delta_->rank();
    if (!local_lyap_.empty() && F.is_c(i) && F.owns(i))
      info_.lyapunov = &local_lyap_[static_cast<std::size_t>(F.slot(i) * delta_->rank())];
  }
  ops_.access(u, info_);
  info_.basis = nullptr;
  info_.basis_rank = 0;
  info_.lyapunov = nullptr;
}

void Solver::access_at(int l, Index i, Vec u, int caller) {
  const Level& L = levels_[l];
  const CallInfo saved = info_;
  info_.t = info_.t0 = info_.t1 = L.t[i];
  info_.level = l;
  info_.index = i;
  info_.fine_index = i * L.fine_stride;
  info_.caller = caller;
  info_.batch = nullptr;
  info_.batch_size = 0;
  ops_.access(u, info_);
  info_ = saved;
}

void Solver::access_sweep() {
  Level& L = levels_[0];
  info_.caller = kCallerFAccess;
  f_relax(
      0, kPhaseRelax,
      [&](Vec* ws, const Index* pts, Index n) {
        for (Index k = 0; k < n; ++k) access_at(0, pts[k], ws[k], kCallerFAccess);
      },
      nullptr);
  for (Index c = L.c_at_or_after(L.own.lo); c <= L.own.hi; c += L.cf)
    access_at(0, c, L.u[L.slot(c)], kCallerFAccess);
}

void Solver::visit_final(Index i, Vec w) {
  if (i == levels_[0].n) final_ = ops_.clone(w);
  if (opts_.access_level >= 1) access_fine(i, w);
}

// Final F-sweep on level 0, visiting points in time order (access, storage,
// final value).
void Solver::final_relax(bool sweep) {
  info_.done = true;
  info_.iteration = iterations_;
  info_.caller = kCallerFAccess;
  local_lyap_.clear();
  if (delta_ && opts_.lyapunov_exponents) delta_final_relax();
  else if (opts_.final_fc_relax) fc_relax(0);
  caller_ = kByFinal;
  info_.caller = kCallerFAccess;
  Level& L = levels_[0];
  info_.phase = kPhaseFinal;
  // Every rank decides alike (the same argument, grid and options): no message of the
  // sweep is left waiting. A single level has cf = n + 1: its sweep is the solve.
  if (!sweep && L.is_c(L.n) && !opts_.store_all) final_value_only();
  else if (batch_sweep(L, L.left >= 0)) final_lockstep();
  else if (!L.own.empty()) final_chains();
  agree();
}

void Solver::final_value_only() {
  Level& L = levels_[0];
  if (store_final_f())  // not the previous solve's F-values: stored() says none
    for (Index i = L.own.lo; i <= L.own.hi; ++i)
      if (!L.is_c(i)) set_slot(L.u, L.slot(i), nullptr);
  if (L.owns(L.n)) final_ = ops_.clone(L.u[L.slot(L.n)]);
}

// Chain by chain in time order. The interval that reaches the last owned point
// is computed ahead, once more, so that the right neighbour never waits for our
// left one.
void Solver::final_chains() {
  Level& L = levels_[0];
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;
  const int tag = msg_tag(0, kMsgRelax) + 1000;
  const bool send_right = L.right >= 0;
  const Index c_first = L.c_at_or_after(lo);
  const Index c_last = (hi / cf) * cf;
  bool sent = false;
  if (send_right && L.is_c(hi)) {
    comm_.send(L.right, tag, L.u[L.slot(hi)]);
    sent = true;
  }
  if (send_right && !sent && c_last >= lo && (L.left >= 0 || c_first < c_last)) {
    Vec w = ops_.clone(L.u[L.slot(c_last)]);
    for (Index i = c_last + 1; i <= hi; ++i) step_on(L, 0, w, i, false);
    comm_.send(L.right, tag, w);
    ops_.free(w);
    sent = true;
  }
  auto chain = [&](Index s, Vec w) {
    const Index stop = std::min((s / cf + 1) * cf - 1, hi);
    for (Index i = s + 1; i <= stop; ++i) {
      step_on(L, 0, w, i, false);
      if (store_final_f()) set_slot(L.u, L.slot(i), ops_.clone(w));
      visit_final(i, w);
    }
    if (send_right && !sent && stop == hi) {
      comm_.send(L.right, tag, w);
      sent = true;
    }
    ops_.free(w);
  };
  if (L.left >= 0) {
    Vec w = comm_.recv(L.left, tag);
    left_boundary_ = ops_.clone(w);
    if (!L.is_c(lo)) chain(lo - 1, w);
    else ops_.free(w);
  }
  for (Index c = c_first; c <= hi; c += cf) {
    visit_final(c, L.u[L.slot(c)]);
    if (c < hi) chain(c, ops_.clone(L.u[L.slot(c)]));
  }
}

// All chains in lock-step (relax.cpp's lockstep_chains); the F-values that
// access or the final value need are kept until the sweep ends and then
// visited in time order. Where the sweep stores its F-values anyway, the visits
// read the stored ones (as they read the C-points') instead of second copies.
void Solver::final_lockstep() {
  Level& L = levels_[0];
  const Index lo = L.own.lo, hi = L.own.hi, n = L.n;
  const bool stored = store_final_f();
  const bool keep = opts_.access_level >= 1 && !stored;
  std::vector<Vec> kept(static_cast<std::size_t>(hi - lo + 1), nullptr);
  const Exchange x{msg_tag(0, kMsgRelax) + 1000, L.right >= 0, L.left >= 0};
  auto keep_rows = [&](Vec* rows, const Index* pts, Index m) {
    if (!keep) return;
    std::vector<Vec> copies(static_cast<std::size_t>(m), nullptr);
    clone_rows(rows, m, copies.data());
    for (Index k = 0; k < m; ++k) kept[pts[k] - lo] = copies[k];
  };
  lockstep_chains(
      0, x, false, true, stored, keep_rows,
      [&](Index i, Vec& w) {
        if (!keep && !stored && i == n) kept[i - lo] = ops_.clone(w);
      },
      nullptr);

  info_.phase = kPhaseFinal;
  for (Index i = lo; i <= hi; ++i) {
    Vec w = L.is_c(i) || stored ? L.u[L.slot(i)] : kept[i - lo];
    if (w != nullptr) visit_final(i, w);  // null: an F-point nobody needs (or a failed solve)
  }
  for (Vec w : kept) ops_.free(w);
}

Vec Solver::stored(Index i) const {
  const Level& L = levels_[0];
  if (L.owns(i)) return delta_ ? DeltaOps::user(L.u[L.slot(i)]) : L.u[L.slot(i)];
  if (!L.own.empty() && i == L.own.lo - 1)
    return delta_ ? DeltaOps::user(left_boundary_) : left_boundary_;
  return nullptr;
}

Vec Solver::solution(Index i) {
  if (!delta_) return solution_at(i);
  return delta_->release(solution_at(i));  // the state alone
}

Vec Solver::solution_at(Index i) {
  Level& L = levels_[0];
  if (!L.owns(i)) return nullptr;
  const Vec stored = L.u[L.slot(i)];
  if (L.is_c(i) || (opts_.store_all && stored != nullptr)) return ops_.clone(stored);
  // Recompute the F-point from its C-point (or the left neighbour's value).
  const Index c = (i / L.cf) * L.cf;
  Index s = c;
  Vec w = nullptr;
  if (c >= L.own.lo) {
    w = ops_.clone(L.u[L.slot(c)]);
  } else {
    s = L.own.lo - 1;
    if (left_boundary_ == nullptr) return nullptr;  // the last solve skipped its final sweep
    w = ops_.clone(left_boundary_);
  }
  info_.phase = kPhaseFinal;
  info_.done = true;
  caller_ = kByFinal;
  info_.caller = kCallerFAccess;
  for (Index k = s + 1; k <= i; ++k) step_on(L, 0, w, k, false);
  return w;
}

}  // namespace braid
