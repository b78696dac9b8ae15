// F- and C-relaxation (XBraid relax.c), including the boundary exchange with
// the left neighbour that every F-sweep needs.
#include <algorithm>

#include "solver.hpp"

namespace braid {

void Solver::step_on(Level& L, int l, Vec& u, Index i, bool with_tau) {
  info_.t = info_.t0 = L.t[i - 1];
  info_.t1 = L.t[i];
  info_.level = l;
  info_.index = i - 1;
  info_.fine_index = (i - 1) * L.fine_stride;
  ops_.step(u, info_);
  // Coarse FAS step: Phi(u) + tau (XBraid adds tau after the user step).
  if (with_tau && L.has_tau) ops_.sum(1.0, L.tau[L.slot(i)], 1.0, u);
}

// Steps every owned F-point from the C-point on its left. on_point sees each
// new F-point value; on_end(c, w) sees u at c-1 for every owned C-point c > 0
// and may take w (set it to null). Ranks exchange u at their first point - 1.
// Order: the interval that reaches the last owned point runs first so that the
// right neighbour is served early; the interval needing the left neighbour's
// value runs last.
void Solver::f_relax(int l, const PointHook& on_point, const EndHook& on_end, int phase) {
  Level& L = levels_[l];
  if (L.own.empty()) return;
  info_.phase = phase;
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;
  const bool want_end = static_cast<bool>(on_end);
  const int tag = msg_tag(l, kMsgRelax);
  const bool send_right =
      L.right >= 0 && (!L.is_c(L.ranges[L.right].lo) || want_end);
  const bool recv_left = L.left >= 0 && (!L.is_c(lo) || want_end);
  const bool store_f = l == 0 && opts_.store_all;

  if (send_right && L.is_c(hi)) comm_.send(L.right, tag, L.u[L.slot(hi)]);

  // w holds u at point s; step it through the F-points after s that we own.
  auto run_chain = [&](Index s, Vec w) {
    const Index next_c = (s / cf + 1) * cf;
    const Index stop = std::min(next_c - 1, hi);
    for (Index i = s + 1; i <= stop; ++i) {
      step_on(L, l, w, i, true);
      if (store_f) set_slot(L.u, L.slot(i), ops_.clone(w));
      if (on_point) on_point(i, w);
    }
    if (send_right && stop == hi && !L.is_c(hi)) comm_.send(L.right, tag, w);
    if (want_end && next_c <= hi) on_end(next_c, w);
    ops_.free(w);
  };

  const Index c_first = L.c_at_or_after(lo);
  const Index c_last = (hi / cf) * cf;
  const bool last_first = c_last >= lo && c_last < hi;
  if (last_first) run_chain(c_last, ops_.clone(L.u[L.slot(c_last)]));
  for (Index c = c_first; c < hi; c += cf) {
    if (last_first && c == c_last) continue;
    run_chain(c, ops_.clone(L.u[L.slot(c)]));
  }
  if (recv_left) {
    Vec w = comm_.recv(L.left, tag);
    if (!L.is_c(lo)) {
      run_chain(lo - 1, w);
    } else {
      on_end(lo, w);
      ops_.free(w);
    }
  }
}

// One F-sweep followed by a Jacobi C-sweep: every C-point c > 0 becomes the
// step of the F-point before it, all computed from the pre-sweep C-values.
void Solver::fc_relax(int l) {
  Level& L = levels_[l];
  std::vector<Vec> updated(L.u.size(), nullptr);
  f_relax(
      l, nullptr,
      [&](Index c, Vec& w) {
        step_on(L, l, w, c, true);
        updated[L.slot(c)] = w;
        w = nullptr;
      },
      kPhaseRelax);
  for (std::size_t s = 0; s < updated.size(); ++s)
    if (updated[s] != nullptr) set_slot(L.u, static_cast<Index>(s), updated[s]);
}

void Solver::relax(int l) {
  for (int k = 0; k < levels_[l].nrelax; ++k) fc_relax(l);
}

}  // namespace braid
