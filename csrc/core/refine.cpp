// Temporal refinement (XBraid refine.c, _braid_FRefine): at the top of an iteration the
// fine grid is rebuilt from the refinement factors the fine level's steps asked for, the
// new grid is block-distributed over the ranks, and its C-points start from the old
// solution carried over (docs/conventions.md, "Temporal refinement").
#include <algorithm>
#include <cstddef>

#include "solver.hpp"

namespace braid {

Solver::RefineOutcome Solver::refine_grid(int k) {
  if (!opts_.refine || refine_stopped_ >= 0) return kUnrefined;
  Level& F = levels_[0];
  const Index n = F.n;
  if (!(nrefine_ < opts_.max_refinements && n < opts_.tpoints_cutoff)) {
    refine_stopped_ = k;
    return kStopped;
  }
  const int nranks = comm_.size(), rank = comm_.rank();

  // 1. Every point's factor on every rank (exact integers in a sum with zeros), the new
  //    index of each old point, and the new times.
  std::vector<double> factors(static_cast<std::size_t>(n + 1), 0.0);
  for (Index i = F.own.lo; i <= F.own.hi; ++i)
    factors[static_cast<std::size_t>(i)] =
        static_cast<double>(i == 0 ? 1 : rf_.factor[static_cast<std::size_t>(i - rf_.lo)]);
  comm_.allreduce(factors.data(), static_cast<int>(n + 1), ReduceOp::kSum);
  std::vector<Index> image(static_cast<std::size_t>(n + 1));  // old point i -> new index
  Index total = 0;
  for (Index i = 0; i <= n; ++i) {
    total += static_cast<Index>(factors[static_cast<std::size_t>(i)]);
    image[static_cast<std::size_t>(i)] = total - 1;
  }
  const Index fn = total - 1;
  if (fn == n) return kUnrefined;  // every factor 1: the requests stay as they are

  // XBraid's new times of interval (t_{i-1}, t_i] split in r: t_{i-1} + (j/r) dt, or the
  // given step sizes summed from t_{i-1}; the last point is t_i itself.
  std::vector<double> newt(static_cast<std::size_t>(fn + 1), 0.0);
  for (Index i = F.own.lo; i <= F.own.hi; ++i) {
    const Index at = image[static_cast<std::size_t>(i)];
    newt[static_cast<std::size_t>(at)] = F.t[i];
    if (i == 0) continue;
    const Index r = at - image[static_cast<std::size_t>(i - 1)];
    const double t0 = F.t[i - 1], dt = F.t[i] - F.t[i - 1];
    auto given = rf_.dts.find(i);
    double prev = t0;
    for (Index j = 1; j < r; ++j) {
      const double tj = given != rf_.dts.end()
                            ? prev + given->second[static_cast<std::size_t>(j - 1)]
                            : t0 + (static_cast<double>(j) / static_cast<double>(r)) * dt;
      newt[static_cast<std::size_t>(at - r + j)] = tj;
      prev = tj;
    }
  }
  comm_.allreduce(newt.data(), static_cast<int>(fn + 1), ReduceOp::kSum);

  // 2. The old fine values at every owned old point: C-points as they are, F-points from
  //    an F-relaxation of the old grid.
  std::vector<Vec> old(static_cast<std::size_t>(F.own.empty() ? 0 : F.own.hi - F.own.lo + 1),
                       nullptr);
  info_.level = 0;
  info_.caller = kCallerFRefine;
  f_relax(
      0, kPhaseRefine,
      [&](Vec* ws, const Index* pts, Index m) {
        std::vector<Vec> copies(static_cast<std::size_t>(m), nullptr);
        clone_rows(ws, m, copies.data());
        for (Index j = 0; j < m; ++j)
          old[static_cast<std::size_t>(pts[j] - F.own.lo)] = copies[j];
      },
      nullptr);
  for (Index c = F.c_at_or_after(F.own.lo); c <= F.own.hi; c += F.cf)
    old[static_cast<std::size_t>(c - F.own.lo)] = ops_.clone(F.u[F.slot(c)]);
  agree();

  // 3. Each old value to the owner of its new index (XBraid's block distribution).
  std::vector<Range> fresh(static_cast<std::size_t>(nranks));
  for (int p = 0; p < nranks; ++p)
    fresh[static_cast<std::size_t>(p)] = block_range(fn + 1, nranks, p);
  auto owner = [](const std::vector<Range>& rs, Index i) {
    for (std::size_t p = 0; p < rs.size(); ++p)
      if (i >= rs[p].lo && i <= rs[p].hi) return static_cast<int>(p);
    return -1;
  };
  const Range mine = fresh[static_cast<std::size_t>(rank)];
  std::vector<Vec> vals;     // the old values whose new index is mine, increasing
  std::vector<Index> at;     // their new indices
  for (Index i = F.own.lo; i <= F.own.hi; ++i) {
    Vec& v = old[static_cast<std::size_t>(i - F.own.lo)];
    const int q = owner(fresh, image[static_cast<std::size_t>(i)]);
    if (q != rank) {
      comm_.send(q, kMsgRefineTag, v);
      ops_.free(v);
      v = nullptr;
    }
  }
  if (!mine.empty()) {
    const auto first = std::lower_bound(image.begin(), image.end(), mine.lo);
    for (auto it = first; it != image.end() && *it <= mine.hi; ++it) {
      const Index i = static_cast<Index>(it - image.begin());
      at.push_back(*it);
      if (F.owns(i)) {
        vals.push_back(old[static_cast<std::size_t>(i - F.own.lo)]);
        old[static_cast<std::size_t>(i - F.own.lo)] = nullptr;
      } else {
        vals.push_back(comm_.recv(owner(F.ranges, i), kMsgRefineTag));
      }
    }
  }
  comm_.finish_sends();

  // 4. The new hierarchy (XBraid syncs right after building it).
  for (int l = 0; l < nlevels(); ++l) free_level(l);
  opts_.fine_ranges.clear();
  if (opts_.incr_max_levels) ++opts_.max_levels;
  levels_ = build_hierarchy(newt, opts_, nranks, rank);
  estimates_.clear();  // Richardson estimates belong to the old grid (XBraid frees them)
  info_.nlevels = nlevels();
  ++nrefine_;
  rf_.reset(levels_[0].own.lo, levels_[0].own.hi);
  sync(kPhaseRefine);

  // 5. The new fine C-points.
  carry_over(vals, at, image);
  for (Vec v : vals) ops_.free(v);
  agree();
  gather_c_points();
  return kRefined;
}

// Left to right over the owned new points: the value at the latest old point (or the
// left neighbour's, for C-points before the first old point) is stepped on through the
// new grid up to the last C-point before the next old point, as XBraid does; the right
// neighbour gets the value at own.hi when its first C-point comes before its first old
// point.
void Solver::carry_over(std::vector<Vec>& vals, const std::vector<Index>& at,
                        const std::vector<Index>& images) {
  Level& L = levels_[0];
  if (L.own.empty()) return;
  const bool store_f = opts_.stores_f_at(0);
  // The first old point at or after x (n + 1 past the last).
  auto next_old = [&](Index x) {
    auto it = std::lower_bound(images.begin(), images.end(), x);
    return it == images.end() ? L.n + 1 : *it;
  };
  auto prior_c = [&](Index x) { return (x / L.cf) * L.cf; };
  const bool recv_left = L.left >= 0 && next_old(L.own.lo) > L.c_at_or_after(L.own.lo);
  const bool send_right = L.right >= 0 && next_old(L.own.hi + 1) > L.c_at_or_after(L.own.hi + 1);
  info_.phase = kPhaseRefine;
  info_.level = 0;
  info_.caller = kCallerFRefine;

  Vec u = nullptr;  // the value at pos
  Index pos = L.own.lo - 1;
  if (recv_left) u = comm_.recv(L.left, kMsgCarryTag);
  std::size_t j = 0;
  for (Index x = L.own.lo; x <= L.own.hi; ++x) {
    if (j < at.size() && at[j] == x) {
      ops_.free(u);
      u = vals[j];
      vals[j] = nullptr;
      pos = x;
      ++j;
    } else {
      // Only as far as the last new C-point before the next old point (or own.hi).
      if (u == nullptr || x > prior_c(next_old(x) - 1)) continue;
      step_on(L, 0, u, x, false);
      pos = x;
    }
    if (L.is_c(x) || store_f) set_slot(L.u, L.slot(x), ops_.clone(u));
  }
  if (send_right && u != nullptr && pos == L.own.hi) comm_.send(L.right, kMsgCarryTag, u);
  ops_.free(u);
}

}  // namespace braid
