// Temporal norm of the fine residual (XBraid norm.c): this rank's part,
// accumulated from the right-most C-point to the left; ranks are combined in
// top() by one reduction together with the failure flag.
#include <algorithm>
#include <cmath>

#include "solver.hpp"

namespace braid {

double Solver::combine_norms(const std::vector<double>& norms) {
  double acc = 0.0;
  for (auto it = norms.rbegin(); it != norms.rend(); ++it) {
    const double r = *it;
    if (opts_.tnorm == 2) acc += r * r;
    else if (opts_.tnorm == 1) acc += r;
    else acc = (std::isnan(r) || std::isnan(acc)) ? NAN : std::max(acc, r);
  }
  return acc;
}

}  // namespace braid

namespace braid {

// XBraid's full residual norm (norm.c, ComputeFullRNorm): every point i > 0 of level
// 0, F-points included. An F-point's residual is A(Phi(u_{i-1}), u_{i-1}), stepped
// from the C-point (or the left neighbour's value) on its left; a C-point's is
// A(u_c, u_{c-1}) with u_{c-1} so stepped. Combined in XBraid's order: intervals
// from the right, each one's points from the left (its F-points, then its C-point).
double Solver::full_rnorm_part() {
  Level& L = levels_[0];
  if (L.own.empty()) return 0.0;
  const int phase = info_.phase, caller = info_.caller;
  info_.phase = kPhaseResidual;
  info_.caller = kCallerComputeFullRNorm;
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;
  const int tag = msg_tag(0, kMsgFull);
  std::vector<double> norms(static_cast<std::size_t>(hi - lo + 1), 0.0);
  auto at = [&](Index i) -> double& { return norms[static_cast<std::size_t>(i - lo)]; };
  const bool send_right = L.right >= 0;
  if (send_right && L.is_c(hi)) comm_.send(L.right, tag, L.u[L.slot(hi)]);
  // w holds u at s: residuals at the owned points after s up to the next C-point.
  auto chain = [&](Index s, Vec w) {
    const Index next_c = (s / cf + 1) * cf;
    const Index stop = std::min(next_c - 1, hi);
    for (Index i = s + 1; i <= stop; ++i) {
      Vec r = ops_.clone(w);
      step_on(L, 0, w, i, false);
      ops_.full_residual(w, r, info_);
      at(i) = ops_.norm(r);
      ops_.free(r);
    }
    if (send_right && stop == hi && !L.is_c(hi)) comm_.send(L.right, tag, w);
    if (next_c <= hi) {
      Vec uc = ops_.clone(L.u[L.slot(next_c)]);
      info_.level = 0;
      info_.set_step(L.step_to(next_c));
      ops_.full_residual(uc, w, info_);
      at(next_c) = ops_.norm(w);
      ops_.free(uc);
    }
    ops_.free(w);
  };
  // The chain that reaches the last owned point first: the right neighbour waits on it.
  const Index c_last = (hi / cf) * cf;
  const bool last_first = c_last >= lo && c_last < hi;
  if (last_first) chain(c_last, ops_.clone(L.u[L.slot(c_last)]));
  for (Index c = L.c_at_or_after(lo); c < hi; c += cf)
    if (!(last_first && c == c_last)) chain(c, ops_.clone(L.u[L.slot(c)]));
  if (L.left >= 0) chain(lo - 1, comm_.recv(L.left, tag));
  info_.phase = phase;
  info_.caller = caller;

  std::vector<double> from_right;  // combine_norms reads it from the back
  const Index first = std::max<Index>(lo, 1);
  if (first > hi) return 0.0;
  const Index kmin = (first + cf - 1) / cf, kmax = (hi + cf - 1) / cf;
  for (Index k = kmin; k <= kmax; ++k)
    for (Index i = std::min(hi, k * cf); i >= std::max(first, (k - 1) * cf + 1); --i)
      from_right.push_back(at(i));
  // from_right now lists intervals from the left, each from its right end; reversed
  // reading gives intervals from the right, each from its left end.
  return combine_norms(from_right);
}

double Solver::reduce_norm(double part) {
  comm_.finish_sends();
  double vals[3] = {ops_.failed() ? 1.0 : 0.0, std::isfinite(part) ? part : 0.0,
                    std::isfinite(part) ? 0.0 : 1.0};
  comm_.allreduce(vals, 3, opts_.tnorm == 0 ? ReduceOp::kMax : ReduceOp::kSum);
  if (vals[0] > 0.0) throw CallbackFailure();
  if (vals[2] > 0.0) return NAN;
  return opts_.tnorm == 2 ? std::sqrt(vals[1]) : vals[1];
}

}  // namespace braid
