// Richardson extrapolation and error estimates on the fine level (XBraid's
// braid_SetRichardsonEstimation: relax.c, restrict.c and hierarchy.c's GetDtk).
//
// With local order k, fine steps dt_i and the coarse step DT_c = t_c - t_{c-cf} of the
// fine interval (c - cf, c], let dtk_c = sum_i dt_i^k and DTK_c = DT_c^k.
// - Extrapolation (richardson), in every FC sweep of the fine level after iteration 0:
//   u_c <- a u_c + b Phi(u_{c-cf}; t_{c-cf} -> t_c), with u_c the C-relaxed value, the
//   second term one step over the whole interval from the value before the sweep, and
//   a = DTK/(DTK - dtk), b = -dtk/(DTK - dtk).
// - In the restriction from the fine level the coarse right-hand side becomes
//   tau_j = f (g_j + r_{j cf}), f = DTK/(DTK - dtk), g_j = v_j - Phi_c(v_{j-1}), and the
//   residual norm is measured on tau_j - g_j instead of r (richardson).
// - Error estimate (est_error) of the fine interval ending at c: ||tau_j|| / DTK * dtk
//   with richardson, else ||tau_j|| / (DTK - dtk) * dtk; every fine point of (c - cf, c]
//   carries its interval's value, points after the last C-point the last interval's,
//   point 0 the value 0.
#include <algorithm>
#include <cmath>

#include "solver.hpp"

namespace braid {

namespace {

// The C-point an interval's coarse step starts from, sent to the rank owning the
// interval's end (odd: never one of msg_tag's even tags).
constexpr int kRichardsonTag = 7001;

int owner_of(const Level& L, Index i) {
  for (std::size_t p = 0; p < L.ranges.size(); ++p)
    if (i >= L.ranges[p].lo && i <= L.ranges[p].hi) return static_cast<int>(p);
  return -1;
}

// ys[k] <- w[k] xs[k] + v[k] ys[k], one sums call per run of equal weights (one call on
// a uniform grid).
void weighted_sums(Ops& ops, const std::vector<double>& w, const Vec* xs,
                   const std::vector<double>& v, const Vec* ys, Index n) {
  for (Index a = 0; a < n;) {
    Index b = a + 1;
    while (b < n && w[b] == w[a] && v[b] == v[a]) ++b;
    ops.sums(w[a], xs + a, v[a], ys + a, b - a);
    a = b;
  }
}

}  // namespace

double Solver::dtk(Index c) const {
  const Level& L = levels_[0];
  const double k = static_cast<double>(opts_.local_order);
  double s = 0.0;  // in time order, as XBraid accumulates it across ranks
  for (Index i = c - L.cf + 1; i <= c; ++i) s += std::pow(L.t[i] - L.t[i - 1], k);
  return s;
}

// XBraid extrapolates on the fine level of a multilevel solve, from iteration 1 on
// (or after a refinement: iter + nrefine > 0).
bool Solver::extrapolates(int l) const {
  return l == 0 && opts_.richardson && nlevels() > 1 && info_.iteration + nrefine_ > 0;
}

void Solver::extrapolate(std::vector<Vec>& updated) {
  Level& L = levels_[0];
  if (L.own.empty()) return;
  const Index cf = L.cf, lo = L.own.lo, hi = L.own.hi;
  // The last owned C-point starts the next interval's coarse step; its end may lie on
  // another rank (sent before this rank waits for its own).
  const Index c_last = (hi / cf) * cf;
  if (c_last >= lo && c_last + cf <= L.n && !L.owns(c_last + cf))
    comm_.send(owner_of(L, c_last + cf), kRichardsonTag, L.u[L.slot(c_last)]);

  std::vector<Index> cs;
  std::vector<Vec> srcs, news;
  Vec received = nullptr;
  for (Index c = std::max<Index>(L.c_at_or_after(lo), cf); c <= hi; c += cf) {
    if (L.owns(c - cf)) {
      srcs.push_back(L.u[L.slot(c - cf)]);
    } else {
      received = comm_.recv(owner_of(L, c - cf), kRichardsonTag);
      srcs.push_back(received);
    }
    cs.push_back(c);
    news.push_back(updated[static_cast<std::size_t>(L.slot(c))]);
  }
  const Index n = static_cast<Index>(cs.size());
  if (n == 0) return;

  // The coarse steps t_{c-cf} -> t_c on level 0 (relax phase), in one batch where the
  // app batches; a user residual's step gets the C-relaxed value as ustop.
  std::vector<BatchItem> items(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) {
    const Index s = cs[k] - cf;
    items[k] = BatchItem{L.t[s], L.t[cs[k]], s, s};
  }
  std::vector<Vec> bigs(static_cast<std::size_t>(n), nullptr);
  info_.level = 0;
  Vec block = nullptr;
  if (ops_.batched() && !residual_ && n >= 2) {
    block = ops_.clone_block(srcs.data(), n, bigs.data());
    info_.set_step(items[0]);
    info_.batch = items.data();
    info_.batch_size = n;
    comm_.advance_sends();
    ops_.step_batch(block, 0, bigs.data(), n, items.data(), info_);
    end_batch();
  } else {
    for (Index k = 0; k < n; ++k) {
      bigs[k] = ops_.clone(srcs[k]);
      info_.set_step(items[k]);
      comm_.advance_sends();
      if (residual_) ops_.step_rhs(bigs[k], news[k], nullptr, info_);
      else ops_.step(bigs[k], info_);
    }
  }
  ops_.free(received);

  // big <- a u_c + b big (XBraid's order), which becomes the C-value.
  std::vector<double> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) {
    const double d = dtk(cs[k]);
    const double D = std::pow(L.t[cs[k]] - L.t[cs[k] - cf], static_cast<double>(opts_.local_order));
    a[k] = D / (D - d);
    b[k] = -d / (D - d);
  }
  weighted_sums(ops_, a, news.data(), b, bigs.data(), n);
  for (Index k = 0; k < n; ++k) {
    Vec& slot = updated[static_cast<std::size_t>(L.slot(cs[k]))];
    ops_.free(slot);
    slot = bigs[k];
  }
  ops_.free(block);  // the rows keep it alive
}

// restrict_to(0)'s injection and coarse right-hand sides, as restrict.cpp's but with
// g_j = v_j - Phi_c(v_{j-1}) (A_c(v_j, v_{j-1}) with a user residual) kept apart from
// r_{j cf} (in C.tau) until the Richardson factor scales both.
void Solver::richardson_rhs() {
  Level& L = levels_[0];
  Level& C = levels_[1];
  const bool measure = opts_.richardson && opts_.residual_computation;
  const double order = static_cast<double>(opts_.local_order);
  std::vector<double> norms(measure ? C.u.size() : 0, 0.0);
  std::vector<double> est(C.own.empty() ? 0 : static_cast<std::size_t>(C.own.hi - C.own.lo + 1),
                          0.0);
  if (!C.own.empty()) {
    inject(0);
    info_.phase = kPhaseResidual;
    const int tag = msg_tag(1, kMsgInject);
    if (C.right >= 0) comm_.send(C.right, tag, C.v[C.slot(C.own.hi)]);
    Vec left = C.left >= 0 ? comm_.recv(C.left, tag) : nullptr;
    std::vector<Index> js;
    std::vector<Vec> srcs, vs, taus;
    for (Index j = std::max<Index>(C.own.lo, 1); j <= C.own.hi; ++j) {
      js.push_back(j);
      srcs.push_back(j == C.own.lo ? left : C.v[C.slot(j - 1)]);
      vs.push_back(C.v[C.slot(j)]);
      taus.push_back(C.tau[C.slot(j)]);
    }
    const Index n = static_cast<Index>(js.size());
    std::vector<Vec> gs(static_cast<std::size_t>(n), nullptr);
    Vec block = nullptr;
    if (residual_) {
      for (Index k = 0; k < n; ++k) {
        gs[k] = ops_.clone(srcs[k]);
        info_.level = 1;
        info_.set_step(C.step_to(js[k]));
        ops_.residual(vs[k], gs[k], info_);
      }
    } else if (ops_.batched() && n >= 2) {
      block = step_batch_from(C, 1, srcs.data(), n, gs.data(), js.data());
    } else {
      for (Index k = 0; k < n; ++k) {
        gs[k] = ops_.clone(srcs[k]);
        step_on(C, 1, gs[k], js[k], false);
      }
    }
    ops_.free(left);
    if (!residual_ && n > 0) ops_.sums(1.0, vs.data(), -1.0, gs.data(), n);

    std::vector<double> f(static_cast<std::size_t>(n), 1.0), D(f), d(f);
    for (Index k = 0; k < n; ++k) {
      const Index c = js[k] * L.cf;
      d[k] = dtk(c);
      D[k] = std::pow(C.t[js[k]] - C.t[js[k] - 1], order);
      if (opts_.richardson) f[k] = D[k] / (D[k] - d[k]);
    }
    if (n > 0) weighted_sums(ops_, f, gs.data(), f, taus.data(), n);  // tau <- f g + f tau
    if (measure && n > 0) {  // the norm of tau - g
      ops_.sums(1.0, taus.data(), -1.0, gs.data(), n);
      std::vector<double> values(static_cast<std::size_t>(n));
      ops_.norms(gs.data(), n, values.data());
      for (Index k = 0; k < n; ++k) norms[C.slot(js[k])] = values[k];
    }
    if (opts_.est_error && n > 0) {
      std::vector<double> values(static_cast<std::size_t>(n));
      ops_.norms(taus.data(), n, values.data());
      for (Index k = 0; k < n; ++k)
        est[C.slot(js[k])] = values[k] / (opts_.richardson ? D[k] : D[k] - d[k]);
    }
    for (Vec g : gs) ops_.free(g);
    ops_.free(block);
    info_.phase = kPhaseRelax;
  }
  C.has_tau = true;
  if (measure) pending_rnorm_ = combine_norms(norms);
  if (opts_.est_error) finalize_estimates(est);
}

// Every fine point gets the estimate of the interval it ends or lies in (times dtk, as
// XBraid's FinalizeErrorEstimates); the values of intervals ending on another rank come
// from one reduction of each rank's first and last interval (collective).
void Solver::finalize_estimates(const std::vector<double>& est) {
  const Level& L = levels_[0];
  const Level& C = levels_[1];
  const int nranks = comm_.size(), me = comm_.rank();
  const Index cf = L.cf, last_c = (L.n / cf) * cf;
  auto value = [&](Index c) { return c == 0 ? 0.0 : est[C.slot(c / cf)] * dtk(c); };
  std::vector<double> ends(2 * static_cast<std::size_t>(nranks), 0.0);
  const Index c_first = L.c_at_or_after(L.own.lo), c_last = (L.own.hi / cf) * cf;
  if (!L.own.empty() && c_first <= c_last) {
    ends[2 * me] = value(c_first);
    ends[2 * me + 1] = value(c_last);
  }
  if (nranks > 1) {
    comm_.finish_sends();
    comm_.allreduce(ends.data(), 2 * nranks, ReduceOp::kSum);
  }
  if (L.own.empty()) return;
  estimates_.assign(static_cast<std::size_t>(L.own.hi - L.own.lo + 1), -1.0);
  for (Index i = L.own.lo; i <= L.own.hi; ++i) {
    const Index c = std::min(L.c_at_or_after(i), last_c);
    double e;
    if (L.owns(c)) {
      e = value(c);
    } else {
      const int p = owner_of(L, c);
      // after own.hi: the owner's first interval; before own.lo (trailing points): its last
      e = ends[2 * static_cast<std::size_t>(p) + (c > L.own.hi ? 0 : 1)];
    }
    estimates_[static_cast<std::size_t>(L.slot(i))] = e;
  }
}

double Solver::error_estimate(Index i) const {
  const Level& L = levels_[0];
  if (estimates_.empty() || !L.owns(i)) return -1.0;
  return estimates_[static_cast<std::size_t>(L.slot(i))];
}

}  // namespace braid
