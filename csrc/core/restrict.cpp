// Restriction by injection with FAS right-hand sides (XBraid restrict.c and
// residual.c); the fine residual norm is measured here on level 0.
#include <algorithm>

#include "solver.hpp"

namespace braid {

void Solver::restrict_to(int l) {
  Level& L = levels_[l];
  Level& C = levels_[l + 1];
  // (Richardson measures the norm on the coarse right-hand sides: richardson_rhs.)
  const bool measure =
      l == 0 && (opts_.residual_computation || opts_.print_norms) && !opts_.richardson;
  info_.caller = kCallerFRestrict;
  std::vector<double> norms(measure ? C.u.size() : 0, 0.0);
  std::vector<Index> measured;  // slots whose residual is measured, in order

  // 1. F-sweep; each chain is stepped on to its C-point c > 0 (bare step Phi,
  //    "residual" phase) and turned into the residual
  //    r_c = tau_c - (u_c - Phi(u_{c-1}))   (tau absent: -(u_c - Phi(u_{c-1})))
  //    parked in the coarse tau slot of c/cf.
  //    The chains that end together (one lock-step batch) do each sum in one call.
  //    With a user residual, ws hold A(u_c, u_{c-1}) instead, and
  //    r_c = tau_c - A   (tau absent: -A, as 0*A - A).
  auto residuals = [&](Vec* ws, const Index* cs, Index n) {
    std::vector<Vec> ucs(static_cast<std::size_t>(n)), taus;
    for (Index k = 0; k < n; ++k) ucs[static_cast<std::size_t>(k)] = L.u[L.slot(cs[k])];
    if (delta_) {  // ws hold the FAS residuals already (delta_fas_residual)
    } else if (residual_) {
      if (L.has_tau) {
        for (Index k = 0; k < n; ++k) taus.push_back(L.tau[L.slot(cs[k])]);
        ops_.sums(1.0, taus.data(), -1.0, ws, n);
      } else {
        ops_.sums(0.0, ws, -1.0, ws, n);
      }
    } else if (L.has_tau) {
      ops_.sums(1.0, ucs.data(), -1.0, ws, n);
      for (Index k = 0; k < n; ++k) taus.push_back(L.tau[L.slot(cs[k])]);
      ops_.sums(1.0, taus.data(), -1.0, ws, n);
    } else {
      ops_.sums(-1.0, ucs.data(), 1.0, ws, n);
    }
    if (ops_.spatial()) {  // the norms of the fine residuals, then each one coarsened
      if (measure) {
        std::vector<double> values(static_cast<std::size_t>(n));
        ops_.norms(ws, n, values.data());
        for (Index k = 0; k < n; ++k) norms[C.slot(cs[k] / L.cf)] = values[k];
      }
      for (Index k = 0; k < n; ++k) {
        const Index j = cs[k] / L.cf;
        Vec r = coarsen_at(l, j, ws[k]);
        ops_.free(ws[k]);
        ws[k] = nullptr;
        set_slot(C.tau, C.slot(j), r);
      }
      return;
    }
    for (Index k = 0; k < n; ++k) {
      const Index s = C.slot(cs[k] / L.cf);
      if (measure) measured.push_back(s);
      set_slot(C.tau, s, ws[k]);
      ws[k] = nullptr;
    }
  };
  ChainEnd end{kPhaseResidual, false, residuals, residual_};
  end.delta_fas = delta_ != nullptr;
  end.caller = kCallerFASResidual;
  caller_ = kByRestrict;
  RowsHook seen;  // access level 3: every new F-value, then every owned C-point
  if (access_all())
    seen = [&](Vec* ws, const Index* pts, Index n) {
      for (Index k = 0; k < n; ++k) access_at(l, pts[k], ws[k], kCallerFRestrict);
    };
  f_relax(l, kPhaseRelax, seen, &end);
  if (access_all())
    for (Index c = L.c_at_or_after(L.own.lo); c <= L.own.hi; c += L.cf)
      access_at(l, c, L.u[L.slot(c)], kCallerFRestrict);
  if (!measured.empty()) {  // all residual norms of this evaluation in one call
    std::vector<Vec> rs;
    std::vector<double> values(measured.size());
    for (Index s : measured) rs.push_back(C.tau[s]);
    ops_.norms(rs.data(), static_cast<Index>(rs.size()), values.data());
    for (std::size_t k = 0; k < measured.size(); ++k) norms[measured[k]] = values[k];
  }
  if (l == 0) {
    rnorm_measured_ = opts_.residual_computation;
    pending_rnorm_ = measure ? combine_norms(norms) : 0.0;
    if (opts_.print_norms) print_norms(norms);
    if (opts_.richardson || opts_.est_error) return richardson_rhs();
  }

  // 2. Inject C-points: v_j = u_{j*cf} (coarsened in space where the app coarsens); the
  //    coarse guess is v at C-points.
  if (C.own.empty()) { C.has_tau = true; return; }
  inject(l);

  // 3. tau_j = (v_j - Phi_c(v_{j-1})) + r_{j*cf}, v_{lo-1} from the left; with a user
  //    residual tau_j = A_c(v_j, v_{j-1}) + r_{j*cf}.
  info_.phase = kPhaseResidual;
  info_.caller = kCallerResidual;
  const int tag = msg_tag(l + 1, kMsgInject);
  if (C.right >= 0) comm_.send(C.right, tag, C.v[C.slot(C.own.hi)]);
  // g = Phi_c(v_{j-1}): tau_j += v_j - g (g is used up).
  auto add_coarse_part = [&](Index j, Vec g) {
    const Index s = C.slot(j);
    if (!ops_.fused_sums(1.0, &C.v[s], -1.0, &g, 1.0, 1.0, &C.tau[s], 1)) {
      ops_.sum(1.0, C.v[s], -1.0, g);
      ops_.sum(1.0, g, 1.0, C.tau[s]);
    }
    ops_.free(g);
  };
  const Index nparts = C.own.hi - C.own.lo + (C.left >= 0 ? 1 : 0);
  if (delta_) {
    delta_coarse_rhs(l, tag);
  } else if (residual_) {
    auto residual_part = [&](Index j, Vec g) {
      info_.level = l + 1;
      info_.set_step(C.step_to(j));
      ops_.residual(C.v[C.slot(j)], g, info_);
      ops_.sum(1.0, g, 1.0, C.tau[C.slot(j)]);
      ops_.free(g);
    };
    for (Index j = C.own.hi; j > C.own.lo; --j)
      residual_part(j, ops_.clone(C.v[C.slot(j - 1)]));
    if (C.left >= 0) residual_part(C.own.lo, comm_.recv(C.left, tag));
  } else if (ops_.batched() && nparts >= 2) {
    // All coarse steps in one call: rows j = lo (from the left) or lo+1 .. hi.
    Vec left = C.left >= 0 ? comm_.recv(C.left, tag) : nullptr;
    const Index j0 = C.left >= 0 ? C.own.lo : C.own.lo + 1;
    std::vector<Vec> srcs, gs(static_cast<std::size_t>(nparts), nullptr);
    std::vector<Index> js;
    for (Index j = j0; j <= C.own.hi; ++j) {
      srcs.push_back(j == C.own.lo ? left : C.v[C.slot(j - 1)]);
      js.push_back(j);
    }
    Vec block = step_batch_from(C, l + 1, srcs.data(), nparts, gs.data(), js.data());
    ops_.free(left);
    // add_coarse_part for every part: its two sums in one pass, else each in one call
    std::vector<Vec> vs, taus;
    for (Index j : js) {
      vs.push_back(C.v[C.slot(j)]);
      taus.push_back(C.tau[C.slot(j)]);
    }
    if (!ops_.fused_sums(1.0, vs.data(), -1.0, gs.data(), 1.0, 1.0, taus.data(), nparts)) {
      ops_.sums(1.0, vs.data(), -1.0, gs.data(), nparts);
      ops_.sums(1.0, gs.data(), 1.0, taus.data(), nparts);
    }
    for (Vec g : gs) ops_.free(g);
    ops_.free(block);
  } else {
    // From the right, so that the left neighbour's message is waited for last.
    auto step_part = [&](Index j, Vec g) {
      step_on(C, l + 1, g, j, false);
      add_coarse_part(j, g);
    };
    for (Index j = C.own.hi; j > C.own.lo; --j) step_part(j, ops_.clone(C.v[C.slot(j - 1)]));
    if (C.left >= 0) step_part(C.own.lo, comm_.recv(C.left, tag));
  }
  C.has_tau = true;
  info_.phase = kPhaseRelax;
}

// XBraid's print level 3 (norm.c, PrintSpatialNorms): every rank's C-point norms of
// level 0 gathered in time order, ceil(n / cf) + 1 of them (XBraid's count: one more,
// 0, when cf does not divide n; point 0 has no residual, 0 too), for rank 0 to print.
// A sum over ranks of arrays that are 0 outside each rank's part: the same bits.
void Solver::print_norms(const std::vector<double>& norms) {
  const Level& L = levels_[0];
  const Level& C = levels_[1];
  std::vector<double> all(static_cast<std::size_t>((L.n + L.cf - 1) / L.cf + 1), 0.0);
  for (Index j = std::max<Index>(C.own.lo, 1); j <= C.own.hi; ++j)
    all[static_cast<std::size_t>(j)] = norms[static_cast<std::size_t>(C.slot(j))];
  comm_.allreduce(all.data(), static_cast<int>(all.size()), ReduceOp::kSum);
  ops_.progress_norms(info_.iteration, all.data(), static_cast<Index>(all.size()), L.cf);
}

// Skipped first down-sweep: fine C-values injected level by level, no tau.
void Solver::inject_all() {
  for (int l = 0; l + 1 < nlevels(); ++l) {
    levels_[l + 1].has_tau = false;
    inject(l);
  }
}

// v_j = u_{j*cf} for every owned coarse point j, and u_j = v_j at coarse C-points: two
// clone_block calls (one block each for array states) instead of a clone per point.
// v is the fine C-values themselves where the ops can share them (Ops::share): nothing
// writes into a fine C-point until interp_from(l+1) corrects it by u - v, and the coarse
// level's v is freed right after (clean).
void Solver::inject(int l) {
  Level& L = levels_[l];
  Level& C = levels_[l + 1];
  std::vector<Vec> from, copies;
  std::vector<Index> js;
  for (Index j = C.own.lo; j <= C.own.hi; ++j) {
    from.push_back(L.u[L.slot(j * L.cf)]);
    js.push_back(j);
  }
  const auto copy_to = [&](std::vector<Vec>& slots) {
    copies.assign(from.size(), nullptr);
    clone_rows(from.data(), static_cast<Index>(from.size()), copies.data());
    for (std::size_t k = 0; k < js.size(); ++k) set_slot(slots, C.slot(js[k]), copies[k]);
  };
  if (ops_.spatial()) {  // v_j = coarsen(u_{j*cf}): vectors of the coarse level's own size
    C.v_shared = false;
    for (std::size_t k = 0; k < js.size(); ++k)
      set_slot(C.v, C.slot(js[k]), coarsen_at(l, js[k], from[k]));
  } else {
    std::vector<Vec> shared;
    for (Vec u : from) {
      Vec s = ops_.share(u);
      if (s == nullptr) break;
      shared.push_back(s);
    }
    C.v_shared = shared.size() == from.size();
    if (C.v_shared) {
      for (std::size_t k = 0; k < js.size(); ++k) set_slot(C.v, C.slot(js[k]), shared[k]);
    } else {
      for (Vec s : shared) ops_.free(s);
      copy_to(C.v);
    }
  }
  from.clear();
  js.erase(std::remove_if(js.begin(), js.end(), [&](Index j) { return !C.is_c(j); }),
           js.end());
  for (Index j : js) from.push_back(C.v[C.slot(j)]);
  if (!js.empty()) copy_to(C.u);
}

// XBraid's CoarsenRefStatus for coarse point j of level l+1 (fine point j*cf of level l).
void Solver::set_space_info(int l, Index j) {
  const Level& F = levels_[l];
  const Level& C = levels_[l + 1];
  const Index i = j * F.cf;
  info_.level = l;
  info_.index = j;
  info_.fine_index = j * C.fine_stride;
  info_.t = info_.t0 = info_.t1 = F.t[i];
  info_.f_tprior = F.t[i > 0 ? i - 1 : 0];
  info_.f_tstop = F.t[i < F.n ? i + 1 : F.n];
  info_.c_tprior = C.t[j > 0 ? j - 1 : 0];
  info_.c_tstop = C.t[j < C.n ? j + 1 : C.n];
  info_.batch = nullptr;
  info_.batch_size = 0;
}

Vec Solver::coarsen_at(int l, Index j, Vec u) {
  const CallInfo saved = info_;
  set_space_info(l, j);
  Vec c = ops_.coarsen(u, info_);
  info_ = saved;
  return c;
}

Vec Solver::refine_at(int l, Index j, Vec e) {
  const CallInfo saved = info_;
  set_space_info(l, j);
  Vec f = ops_.refine(e, info_);
  info_ = saved;
  return f;
}

}  // namespace braid
