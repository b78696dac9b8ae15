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

void Solver::step_batch_on(Level& L, int l, Vec block, Index first, Vec* ws, const Index* pts,
                           Index n, bool with_tau) {
  items_.resize(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) {
    const Index i = pts[k];
    BatchItem& it = items_[static_cast<std::size_t>(k)];
    it.t0 = L.t[i - 1];
    it.t1 = L.t[i];
    it.index = i - 1;
    it.fine_index = (i - 1) * L.fine_stride;
  }
  // Scalar fields describe the first item.
  info_.t = info_.t0 = items_[0].t0;
  info_.t1 = items_[0].t1;
  info_.level = l;
  info_.index = items_[0].index;
  info_.fine_index = items_[0].fine_index;
  info_.batch = items_.data();
  info_.batch_size = n;
  ops_.step_batch(block, first, ws, n, items_.data(), info_);
  info_.batch = nullptr;
  info_.batch_size = 0;
  if (with_tau && L.has_tau)
    for (Index k = 0; k < n; ++k) ops_.sum(1.0, L.tau[L.slot(pts[k])], 1.0, ws[k]);
}

bool Solver::batch_sweep(const Level& L, bool recv_left) const {
  if (!ops_.batched() || L.own.empty()) return false;
  const Index c_first = L.c_at_or_after(L.own.lo);
  const Index chains = (c_first < L.own.hi ? (L.own.hi - 1 - c_first) / L.cf + 1 : 0) +
                       (recv_left ? 1 : 0);
  return chains >= 2;
}

// The lock-step loop of f_relax_batched and final_relax_batched: the chains
// are the rows of one block (row 0: the chain from the left neighbour's value,
// if recv_left; then one per owned C-point c < hi). At position k = 1..cf-1
// every chain that has an F-point c+k takes that step in one step_batch call;
// the active rows are always a contiguous range (only row 0 joins late, only
// the last row stops early). The left neighbour's value is received when row 0
// first needs it (keep_left: a copy goes to left_boundary_). on_step sees each
// new value before it is sent right; on_done sees the block before it is freed.
void Solver::lockstep_chains(int l, int tag, bool send_right, bool recv_left, bool with_tau,
                             bool keep_left, const PointHook& on_step,
                             const ChainsHook& on_done) {
  Level& L = levels_[l];
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;

  if (send_right && L.is_c(hi)) comm_.send(L.right, tag, L.u[L.slot(hi)]);

  // Chain r steps through base[r]+k for first[r] <= k <= last[r]; ends at base[r]+cf.
  std::vector<Index> base, kfirst, klast;
  std::vector<Vec> srcs;
  auto add = [&](Index s, Vec src) {
    const Index b = (s / cf) * cf;
    base.push_back(b);
    kfirst.push_back(s - b + 1);
    klast.push_back(std::min(b + cf - 1, hi) - b);
    srcs.push_back(src);
  };
  if (recv_left) add(lo - 1, nullptr);
  for (Index c = L.c_at_or_after(lo); c < hi; c += cf) add(c, L.u[L.slot(c)]);
  const Index m = static_cast<Index>(srcs.size());
  std::vector<Vec> rows(static_cast<std::size_t>(m), nullptr);
  Vec block = ops_.clone_block(srcs.data(), m, rows.data());
  bool received = !recv_left;
  auto receive = [&]() {
    Vec w = comm_.recv(L.left, tag);
    if (keep_left) left_boundary_ = ops_.clone(w);
    if (block != nullptr) {
      if (w != nullptr && rows[0] != nullptr) ops_.copy_into(w, rows[0]);
      ops_.free(w);
    } else {
      ops_.free(rows[0]);
      rows[0] = w;
    }
    received = true;
  };

  std::vector<Index> pts(static_cast<std::size_t>(m));
  const Index kmax = m > 0 ? *std::max_element(klast.begin(), klast.end()) : 0;
  for (Index k = 1; k <= kmax; ++k) {
    Index a = m, b = 0;
    for (Index r = 0; r < m; ++r)
      if (kfirst[r] <= k && k <= klast[r]) {
        if (a == m) a = r;
        b = r + 1;
      }
    if (a == m) continue;
    if (!received && a == 0) receive();
    for (Index r = a; r < b; ++r) pts[r] = base[r] + k;
    step_batch_on(L, l, block, a, &rows[a], &pts[a], b - a, with_tau);
    for (Index r = a; r < b; ++r) {
      const Index i = pts[r];
      on_step(i, rows[r]);
      if (send_right && i == hi && !L.is_c(hi)) comm_.send(L.right, tag, rows[r]);
    }
  }
  if (!received) receive();

  if (on_done) on_done(block, rows.data(), base.data(), m);
  for (Vec w : rows) ops_.free(w);
  ops_.free(block);
}

// Same values as f_relax, computed in lock-step (lockstep_chains).
void Solver::f_relax_batched(int l, const PointHook& on_point, const EndsHook& on_ends,
                             int phase) {
  Level& L = levels_[l];
  info_.phase = phase;
  const Index hi = L.own.hi, cf = L.cf;
  const bool want_end = static_cast<bool>(on_ends);
  const bool send_right =
      L.right >= 0 && (!L.is_c(L.ranges[L.right].lo) || want_end);
  const bool recv_left = L.left >= 0 && (!L.is_c(L.own.lo) || want_end);
  const bool store_f = l == 0 && opts_.store_all;

  auto after_step = [&](Index i, Vec& w) {
    if (store_f) set_slot(L.u, L.slot(i), ops_.clone(w));
    if (on_point) on_point(i, w);
  };
  // The chains that reach an owned C-point (a contiguous range of rows) end together.
  auto ends = [&](Vec block, Vec* rows, const Index* base, Index m) {
    Index e0 = m, e1 = 0;
    for (Index r = 0; r < m; ++r)
      if (base[r] + cf <= hi) {
        if (e0 == m) e0 = r;
        e1 = r + 1;
      }
    if (e0 < e1) {
      std::vector<Index> cs(static_cast<std::size_t>(m));
      for (Index r = e0; r < e1; ++r) cs[r] = base[r] + cf;
      on_ends(block, e0, &rows[e0], &cs[e0], e1 - e0);
    }
  };
  lockstep_chains(l, msg_tag(l, kMsgRelax), send_right, recv_left, true, false, after_step,
                  want_end ? ChainsHook(ends) : ChainsHook());
}

// One F-sweep followed by a Jacobi C-sweep: every C-point c > 0 becomes the
// step of the F-point before it, all computed from the pre-sweep C-values.
void Solver::fc_relax(int l) {
  Level& L = levels_[l];
  std::vector<Vec> updated(L.u.size(), nullptr);
  const bool recv_left = L.left >= 0;  // want_end: always receive
  if (batch_sweep(L, recv_left)) {
    f_relax_batched(
        l, nullptr,
        [&](Vec block, Index first, Vec* ws, const Index* cs, Index n) {
          step_batch_on(L, l, block, first, ws, cs, n, true);
          for (Index k = 0; k < n; ++k) {
            updated[L.slot(cs[k])] = ws[k];
            ws[k] = nullptr;
          }
        },
        kPhaseRelax);
  } else {
    f_relax(
      l, nullptr,
      [&](Index c, Vec& w) {
        step_on(L, l, w, c, true);
        updated[L.slot(c)] = w;
        w = nullptr;
      },
      kPhaseRelax);
  }
  for (std::size_t s = 0; s < updated.size(); ++s)
    if (updated[s] != nullptr) set_slot(L.u, static_cast<Index>(s), updated[s]);
}

void Solver::relax(int l) {
  for (int k = 0; k < levels_[l].nrelax; ++k) fc_relax(l);
}

}  // namespace braid
