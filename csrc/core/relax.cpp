// F- and C-relaxation (XBraid relax.c), including the boundary exchange with
// the left neighbour that every F-sweep needs.
#include <algorithm>

#include "solver.hpp"

namespace braid {

void Solver::step_on(Level& L, int l, Vec& u, Index i, bool with_tau) {
  if (delta_) return delta_step(L, l, u, i, with_tau);
  info_.level = l;
  info_.set_step(L.step_to(i));
  comm_.advance_sends();
  if (residual_) {  // the right-hand side goes into the user's step (XBraid step.c)
    Vec f = with_tau && L.has_tau ? L.tau[L.slot(i)] : nullptr;
    ops_.step_rhs(u, guess_at(L, l, i, u), f, info_);
    return;
  }
  ops_.step(u, info_);
  if (with_tau) add_tau(L, &i, &u, 1);
}

Vec Solver::guess_at(const Level& L, int l, Index i, Vec u) const {
  if (!L.owns(i)) return u;
  const auto s = static_cast<std::size_t>(L.slot(i));
  if (s < L.u.size() && L.u[s] != nullptr) return L.u[s];
  if (l > 0 && s < L.v.size() && L.v[s] != nullptr) return L.v[s];
  return u;
}

void Solver::add_tau(const Level& L, const Index* pts, Vec* us, Index n) {
  if (!L.has_tau) return;
  if (n == 1) {  // a sequential sweep's step: no table
    ops_.sum(1.0, L.tau[L.slot(pts[0])], 1.0, us[0]);
    return;
  }
  std::vector<Vec> taus(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) taus[static_cast<std::size_t>(k)] = L.tau[L.slot(pts[k])];
  ops_.sums(1.0, taus.data(), 1.0, us, n);
}

void Solver::begin_batch(Level& L, int l, const Index* pts, Index n) {
  items_.resize(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) items_[static_cast<std::size_t>(k)] = L.step_to(pts[k]);
  info_.level = l;
  info_.set_step(items_[0]);  // scalar fields describe the first item
  info_.batch = items_.data();
  info_.batch_size = n;
  comm_.advance_sends();
}

void Solver::end_batch() {
  info_.batch = nullptr;
  info_.batch_size = 0;
}

void Solver::step_batch_on(Level& L, int l, Vec block, Index first, Vec* ws, const Index* pts,
                           Index n, bool with_tau) {
  begin_batch(L, l, pts, n);
  if (residual_) {  // as step_on: the right-hand sides and guesses go into the step
    std::vector<Vec> ustops(static_cast<std::size_t>(n)), fstops;
    for (Index k = 0; k < n; ++k) ustops[k] = guess_at(L, l, pts[k], ws[k]);
    if (with_tau && L.has_tau)
      for (Index k = 0; k < n; ++k) fstops.push_back(L.tau[L.slot(pts[k])]);
    ops_.step_batch_rhs(block, first, ws, n, items_.data(), ustops.data(),
                        fstops.empty() ? nullptr : fstops.data(), info_);
    end_batch();
    return;
  }
  ops_.step_batch(block, first, ws, n, items_.data(), info_);
  end_batch();
  if (with_tau) add_tau(L, pts, ws, n);
}

bool Solver::step_out_of_place(Level& L, int l, const Vec* srcs, Index first, Index n,
                               const Index* pts, bool with_tau, Index rows, Vec* block,
                               Vec* outs) {
  if (!ops_.steps_to() || residual_) return false;
  begin_batch(L, l, pts, n);
  const bool done =
      ops_.step_batch_to(srcs, n, first, rows, items_.data(), info_, block, outs);
  end_batch();
  if (done && with_tau) add_tau(L, pts, outs + first, n);
  return done;
}

Vec Solver::step_batch_from(Level& L, int l, const Vec* srcs, Index n, Vec* ws,
                            const Index* pts) {
  Vec block = nullptr;
  if (step_out_of_place(L, l, srcs, 0, n, pts, false, n, &block, ws)) return block;
  block = ops_.clone_block(srcs, n, ws);
  step_batch_on(L, l, block, 0, ws, pts, n, false);
  return block;
}

bool Solver::step_to_new_block(Level& L, int l, const Vec* from, Index a, Index b,
                               const Index* pts, bool with_tau, bool store, SweepRows& sw) {
  const Index m = static_cast<Index>(sw.rows.size());
  std::vector<Vec> outs(sw.rows.size(), nullptr);
  Vec next = nullptr;
  if (!step_out_of_place(L, l, from, a, b - a, pts + a, with_tau, m, &next, outs.data()))
    return false;
  for (Index r = 0; r < m; ++r) {
    if (!sw.stored[r]) ops_.free(sw.rows[r]);
    sw.rows[r] = outs[r];
    sw.stored[r] = 0;
  }
  if (store)  // level 0 keeps them; the sweep reads them on (never in place)
    for (Index r = a; r < b; ++r) {
      set_slot(L.u, L.slot(pts[r]), sw.rows[r]);
      sw.stored[r] = 1;
    }
  ops_.free(sw.block);
  sw.block = next;
  return true;
}

// Ranks exchange u at their first point - 1: only where the receiver has an
// F-point there, or wants every chain end (end).
void Solver::f_relax(int l, int phase, const RowsHook& on_points, const ChainEnd* end) {
  Level& L = levels_[l];
  if (L.own.empty()) return;
  info_.phase = phase;
  const bool want_end = end != nullptr;
  Exchange x;
  x.tag = msg_tag(l, kMsgRelax);
  x.send_right = L.right >= 0 && (!L.is_c(L.ranges[L.right].lo) || want_end);
  x.recv_left = L.left >= 0 && (!L.is_c(L.own.lo) || want_end);
  if (batch_sweep(L, x.recv_left)) lockstep(l, x, on_points, end);
  else chains(l, x, on_points, end);
}

inline void Solver::end_chain(Level& L, int l, const ChainEnd& end, Index c, Vec& w) {
  const int phase = info_.phase, caller = info_.caller;
  info_.phase = end.phase;
  if (end.caller >= 0) info_.caller = end.caller;
  if (end.delta_fas) {
    delta_fas_residual(L, l, c, w);
  } else if (end.residual) {
    info_.level = l;
    info_.set_step(L.step_to(c));
    ops_.residual(L.u[L.slot(c)], w, info_);
  } else {
    step_on(L, l, w, c, end.with_tau);
  }
  end.take(&w, &c, 1);
  info_.phase = phase;
  info_.caller = caller;
}

// One chain at a time. Order: the interval that reaches the last owned point
// runs first so that the right neighbour is served early; the interval needing
// the left neighbour's value runs last. One working vector at a time.
void Solver::chains(int l, const Exchange& x, const RowsHook& on_points, const ChainEnd* end) {
  Level& L = levels_[l];
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;
  const bool store_f = opts_.stores_f_at(l);

  if (x.send_right && L.is_c(hi)) comm_.send(L.right, x.tag, L.u[L.slot(hi)]);

  // w holds u at point s; step it through the F-points after s that we own.
  auto run_chain = [&](Index s, Vec w) {
    const Index next_c = (s / cf + 1) * cf;
    const Index stop = std::min(next_c - 1, hi);
    for (Index i = s + 1; i <= stop; ++i) {
      step_on(L, l, w, i, true);
      if (store_f) set_slot(L.u, L.slot(i), ops_.clone(w));
      if (on_points) on_points(&w, &i, 1);
    }
    if (x.send_right && stop == hi && !L.is_c(hi)) comm_.send(L.right, x.tag, w);
    if (end != nullptr && next_c <= hi) end_chain(L, l, *end, next_c, w);
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
  if (x.recv_left) {
    Vec w = comm_.recv(L.left, x.tag);
    if (!L.is_c(lo)) {
      run_chain(lo - 1, w);
    } else {  // only the chain end (end != nullptr: see f_relax)
      end_chain(L, l, *end, lo, w);
      ops_.free(w);
    }
  }
}

bool Solver::batch_sweep(const Level& L, bool recv_left) const {
  if (!ops_.batched() || (residual_ && !ops_.batched_rhs()) || L.own.empty()) return false;
  const Index c_first = L.c_at_or_after(L.own.lo);
  const Index chains = (c_first < L.own.hi ? (L.own.hi - 1 - c_first) / L.cf + 1 : 0) +
                       (recv_left ? 1 : 0);
  return chains >= 2;
}

// The lock-step loop of lockstep() and final_lockstep(): the chains
// are the rows of one block (row 0: the chain from the left neighbour's value,
// if recv_left; then one per owned C-point c < hi). At position k = 1..cf-1
// every chain that has an F-point c+k takes that step in one step_batch call;
// the active rows are always a contiguous range (only row 0 joins late, only
// the last row stops early). The left neighbour's value is received when row 0
// first needs it (keep_left: a copy goes to left_boundary_).
// The block is made by the first batch of steps: written out of place from the
// chains' sources where the app can (Ops::step_batch_to: no copy of the C-points), else
// copies of the sources (clone_block) stepped in place. store (level 0): every new
// value becomes the stored value of its point, the steps writing out of place straight
// into a new block where the app can, else copied (store_rows); stored rows are read
// by the next step, never stepped in place, so store comes without on_done (which may
// step the rows). on_rows sees each batch's rows after storage, on_step each new value
// before it is sent right, on_done the block before it is freed.
void Solver::lockstep_chains(int l, const Exchange& x, bool with_tau, bool keep_left,
                             bool store, const RowsHook& on_rows, const PointHook& on_step,
                             const ChainsHook& on_done) {
  Level& L = levels_[l];
  const Index lo = L.own.lo, hi = L.own.hi, cf = L.cf;

  if (x.send_right && L.is_c(hi)) comm_.send(L.right, x.tag, L.u[L.slot(hi)]);

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
  if (x.recv_left) add(lo - 1, nullptr);
  for (Index c = L.c_at_or_after(lo); c < hi; c += cf) add(c, L.u[L.slot(c)]);
  const Index m = static_cast<Index>(srcs.size());
  SweepRows sw;
  sw.rows.assign(static_cast<std::size_t>(m), nullptr);
  sw.stored.assign(static_cast<std::size_t>(m), 0);
  bool started = false;      // the rows exist
  Vec left_value = nullptr;  // received before they did: srcs[0]
  auto start_in_place = [&]() {
    sw.block = ops_.clone_block(srcs.data(), m, sw.rows.data());
    started = true;
  };
  bool received = !x.recv_left;
  auto receive = [&]() {
    Vec w = comm_.recv(L.left, x.tag);
    if (keep_left) left_boundary_ = ops_.clone(w);
    if (!started) {
      srcs[0] = left_value = w;
    } else if (sw.block != nullptr) {
      if (w != nullptr && sw.rows[0] != nullptr) ops_.copy_into(w, sw.rows[0]);
      ops_.free(w);
    } else {
      ops_.free(sw.rows[0]);
      sw.rows[0] = w;
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
    bool stepped = false;
    if (!started) {
      stepped = step_to_new_block(L, l, &srcs[a], a, b, pts.data(), with_tau, store, sw);
      if (stepped) started = true;
      else start_in_place();
    } else if (store && sw.block != nullptr) {
      stepped = step_to_new_block(L, l, &sw.rows[a], a, b, pts.data(), with_tau, true, sw);
    }
    if (!stepped) {  // (after a failed callback every step is a no-op: stored rows stay)
      step_batch_on(L, l, sw.block, a, &sw.rows[a], &pts[a], b - a, with_tau);
      if (store) store_rows(l, &sw.rows[a], &pts[a], b - a);
    }
    if (on_rows) on_rows(&sw.rows[a], &pts[a], b - a);
    for (Index r = a; r < b; ++r) {
      const Index i = pts[r];
      if (on_step) on_step(i, sw.rows[r]);
      if (x.send_right && i == hi && !L.is_c(hi)) comm_.send(L.right, x.tag, sw.rows[r]);
    }
  }
  if (!received) receive();
  if (!started) start_in_place();  // no F-point: the chains' ends only
  ops_.free(left_value);

  if (on_done) on_done(sw.block, sw.rows.data(), base.data(), m);
  for (Index r = 0; r < m; ++r)
    if (!sw.stored[r]) ops_.free(sw.rows[r]);
  ops_.free(sw.block);
}

// Same values as chains(), every chain advanced in lock-step, one step_batch
// per F-step position (lockstep_chains); the chain ends are stepped together.
// Holds one working vector per chain, and serves the right neighbour only once
// every chain has reached the last position: chain by chain stays the default.
void Solver::lockstep(int l, const Exchange& x, const RowsHook& on_points, const ChainEnd* end) {
  Level& L = levels_[l];
  const Index hi = L.own.hi, cf = L.cf;
  const bool store_f = opts_.stores_f_at(l);

  // The chains that reach an owned C-point (a contiguous range of rows) end together.
  auto ends = [&](Vec block, Vec* rows, const Index* base, Index m) {
    Index e0 = m, e1 = 0;
    for (Index r = 0; r < m; ++r)
      if (base[r] + cf <= hi) {
        if (e0 == m) e0 = r;
        e1 = r + 1;
      }
    if (e0 >= e1) return;
    std::vector<Index> cs(static_cast<std::size_t>(m));
    for (Index r = e0; r < e1; ++r) cs[r] = base[r] + cf;
    const int phase = info_.phase, caller = info_.caller;  // as end_chain, in one step_batch
    info_.phase = end->phase;
    if (end->caller >= 0) info_.caller = end->caller;
    if (end->residual) {  // the user's residuals A(u_c, u_{c-1}), one call each
      for (Index r = e0; r < e1; ++r) {
        info_.level = l;
        info_.set_step(L.step_to(cs[r]));
        ops_.residual(L.u[L.slot(cs[r])], rows[r], info_);
      }
    } else {
      step_batch_on(L, l, block, e0, &rows[e0], &cs[e0], e1 - e0, end->with_tau);
    }
    end->take(&rows[e0], &cs[e0], e1 - e0);
    info_.phase = phase;
    info_.caller = caller;
  };
  RowsHook on_rows = on_points;
  if (store_f)  // copies: the chains' ends step the rows in place
    on_rows = [&](Vec* rows, const Index* pts, Index n) {
      store_rows(l, rows, pts, n);
      if (on_points) on_points(rows, pts, n);
    };
  lockstep_chains(l, x, true, false, false, on_rows, PointHook(),
                  end != nullptr ? ChainsHook(ends) : ChainsHook());
}

void Solver::clone_rows(Vec* rows, Index n, Vec* out) {
  if (std::find(rows, rows + n, nullptr) != rows + n) {  // a failed solve's null rows
    for (Index k = 0; k < n; ++k) out[k] = ops_.clone(rows[k]);
    return;
  }
  ops_.free(ops_.clone_block(rows, n, out));  // the copies keep their block alive
}

void Solver::store_rows(int l, Vec* rows, const Index* pts, Index n) {
  Level& L = levels_[l];
  std::vector<Vec> copies(static_cast<std::size_t>(n), nullptr);
  clone_rows(rows, n, copies.data());
  for (Index k = 0; k < n; ++k) set_slot(L.u, L.slot(pts[k]), copies[k]);
}

// One F-sweep followed by a Jacobi C-sweep: every C-point c > 0 becomes the
// step of the F-point before it, all computed from the pre-sweep C-values.
// Weighted (L.cweight = w != 1, XBraid's C-relaxation weight): the new value is
// (1-w) u_c + w Phi(u_{c-1}), as the user's sum y <- (1-w) x + w y with x the
// pre-sweep u_c (still stored) and y the step; one sums call per chain end or batch.
// Access level 3: access sees every new F- and C-value (XBraid's FCRelax).
void Solver::fc_relax(int l) {
  Level& L = levels_[l];
  std::vector<Vec> updated(L.u.size(), nullptr);
  const double w = L.cweight;
  std::vector<Vec> olds;
  info_.caller = kCallerFCRelax;
  auto keep = [&](Vec* ws, const Index* cs, Index n) {
    if (w != 1.0) {
      olds.resize(static_cast<std::size_t>(n));
      for (Index k = 0; k < n; ++k) olds[static_cast<std::size_t>(k)] = L.u[L.slot(cs[k])];
      ops_.sums(1.0 - w, olds.data(), w, ws, n);
    }
    for (Index k = 0; k < n; ++k) {
      if (access_all()) access_at(l, cs[k], ws[k], kCallerFCRelax);
      updated[L.slot(cs[k])] = ws[k];
      ws[k] = nullptr;
    }
  };
  RowsHook seen;
  if (access_all())
    seen = [&](Vec* ws, const Index* pts, Index n) {
      for (Index k = 0; k < n; ++k) access_at(l, pts[k], ws[k], kCallerFCRelax);
    };
  const ChainEnd end{kPhaseRelax, true, keep};
  caller_ = kByRelax;
  f_relax(l, kPhaseRelax, seen, &end);
  if (extrapolates(l)) extrapolate(updated);
  for (std::size_t s = 0; s < updated.size(); ++s)
    if (updated[s] != nullptr) set_slot(L.u, static_cast<Index>(s), updated[s]);
  wrap(l, true);  // periodic: point 0 was relaxed as point n
}

void Solver::wrap(int l, bool to_start) {
  if (!opts_.periodic) return;
  Level& L = levels_[l];
  auto owner = [&](Index i) {
    for (int p = 0; p < static_cast<int>(L.ranges.size()); ++p)
      if (i >= L.ranges[p].lo && i <= L.ranges[p].hi) return p;
    return -1;
  };
  const Index from = to_start ? L.n : 0, to = to_start ? 0 : L.n;
  const int src = owner(from), dst = owner(to), me = comm_.rank();
  auto put = [&](Vec u, bool owned) {  // into the present vector where alike (a block row)
    Vec& slot = L.u[L.slot(to)];
    if (slot != nullptr && u != nullptr && ops_.copy_alike(u, slot)) {
      if (owned) ops_.free(u);
    } else {
      set_slot(L.u, L.slot(to), owned ? u : ops_.clone(u));
    }
  };
  if (src == dst) {
    if (me == src) put(L.u[L.slot(from)], false);
    return;
  }
  const int tag = msg_tag(l, kMsgWrap);
  if (me == src) comm_.send(dst, tag, L.u[L.slot(from)]);
  if (me == dst) put(comm_.recv(src, tag), true);
}

void Solver::relax(int l) {
  for (int k = 0; k < levels_[l].nrelax; ++k) fc_relax(l);
}

}  // namespace braid
