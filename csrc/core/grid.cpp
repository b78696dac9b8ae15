// Level construction and time-point distribution.
#include "grid.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace braid {

Range block_range(Index npoints, int nranks, int rank) {
  const Index quo = npoints / nranks;
  const Index rem = npoints % nranks;
  Range r;
  r.lo = rank * quo + std::min<Index>(rank, rem);
  r.hi = (rank + 1) * quo + std::min<Index>(rank + 1, rem) - 1;
  return r;
}

namespace {

// Coarse range of a fine range: the coarse points whose fine counterparts
// (multiples of cf) the rank owns.
Range coarsen(const Range& fine, Index cf) {
  if (fine.empty()) return Range{};
  Range r;
  r.lo = (fine.lo + cf - 1) / cf;
  r.hi = fine.hi / cf;
  return r;
}

void set_neighbours(Level& L, int rank) {
  L.left = L.right = -1;
  if (L.own.empty()) return;
  for (int p = rank - 1; p >= 0; --p)
    if (!L.ranges[p].empty()) { L.left = p; break; }
  for (int p = rank + 1; p < static_cast<int>(L.ranges.size()); ++p)
    if (!L.ranges[p].empty()) { L.right = p; break; }
}

}  // namespace

std::vector<Level> build_hierarchy(const std::vector<double>& fine_times,
                                   const Options& opts, int nranks, int rank) {
  std::vector<Level> levels(1);
  Level& fine = levels[0];
  fine.n = static_cast<Index>(fine_times.size()) - 1;
  fine.t = fine_times;
  fine.ranges.resize(nranks);
  for (int p = 0; p < nranks; ++p) {
    if (opts.fine_ranges.empty() && opts.periodic) {
      // XBraid distributes the n distinct points 0..n-1; point n (point 0 again)
      // goes with point n-1.
      fine.ranges[p] = block_range(fine.n, nranks, p);
      if (fine.ranges[p].hi == fine.n - 1) fine.ranges[p].hi = fine.n;
    } else if (opts.fine_ranges.empty()) {
      fine.ranges[p] = block_range(fine.n + 1, nranks, p);
    } else {
      fine.ranges[p].lo = opts.fine_ranges.at(p).first;
      fine.ranges[p].hi = opts.fine_ranges.at(p).second;
    }
  }

  // Coarsen while the next level is non-empty, at least min_coarse, and allowed.
  // Periodic: XBraid counts a level's distinct points 0..n-1, so its "intervals" are
  // n - 1 there, and a level must have cf | n (else XBraid itself hangs).
  const Index shift = opts.periodic ? 1 : 0;
  if (fine.n - shift > opts.min_coarse) {
    for (int l = 0;; ++l) {
      const Index cf = opts.cfactor_at(l);
      const Index nc = levels[l].n / cf;
      if (!(nc - shift > 0 && nc - shift >= opts.min_coarse && l + 1 < opts.max_levels))
        break;
      if (opts.periodic && levels[l].n % cf != 0)
        throw std::invalid_argument(
            "periodic: level " + std::to_string(l) + " has " + std::to_string(levels[l].n) +
            " intervals, not a multiple of its cfactor " + std::to_string(cf) +
            " (ntime must be a multiple of the product of the cfactors of the levels)");
      levels[l].cf = cf;
      Level coarse;
      coarse.n = nc;
      coarse.fine_stride = levels[l].fine_stride * cf;
      coarse.t.resize(nc + 1);
      for (Index j = 0; j <= nc; ++j) coarse.t[j] = levels[l].t[j * cf];
      coarse.ranges.resize(nranks);
      for (int p = 0; p < nranks; ++p) coarse.ranges[p] = coarsen(levels[l].ranges[p], cf);
      levels.push_back(std::move(coarse));
    }
  }

  const int nlevels = static_cast<int>(levels.size());
  Level& coarsest = levels.back();
  // The coarsest level is solved by stepping from point 0 unless it is only
  // relaxed (relax_only_cg), in which case it keeps its own cfactor.
  if (opts.periodic && nlevels < 2)
    throw std::invalid_argument(
        "periodic: the hierarchy has one level (ntime " + std::to_string(fine.n) +
        ", min_coarse " + std::to_string(opts.min_coarse) + ", max_levels " +
        std::to_string(opts.max_levels) + "); a periodic problem needs two or more");
  // Periodic: the coarsest level's C-points are 0 and n (point 0 again), so that one
  // FC sweep is a sequential sweep from u_0 that ends by relaxing point 0.
  coarsest.cf = (opts.relax_only_cg && nlevels > 1) ? opts.cfactor_at(nlevels - 1)
                : opts.periodic                    ? coarsest.n
                                                   : coarsest.n + 1;
  if (opts.periodic && coarsest.n % coarsest.cf != 0)
    throw std::invalid_argument("periodic: the coarsest level's " +
                                std::to_string(coarsest.n) +
                                " intervals are not a multiple of its cfactor " +
                                std::to_string(coarsest.cf));
  for (int l = 0; l < nlevels; ++l) {
    Level& L = levels[l];
    // XBraid relaxes a periodic coarsest level with the nrelax of level max_levels-1.
    L.nrelax = opts.periodic && l == nlevels - 1 ? opts.nrelax_at(opts.max_levels - 1)
                                                 : opts.nrelax_at(l);
    // As XBraid: the weight applies wherever C-relaxation is a smoother, never to the
    // sequential solve of a coarsest level (which has no C-point c > 0 anyway).
    L.cweight = (l < nlevels - 1 || opts.relax_only_cg) ? opts.crelax_weight_at(l) : 1.0;
    L.own = L.ranges[rank];
    set_neighbours(L, rank);
    const std::size_t nslots = L.own.empty() ? 0 : static_cast<std::size_t>(L.own.hi - L.own.lo + 1);
    L.u.assign(nslots, nullptr);
    if (l > 0) {
      L.v.assign(nslots, nullptr);
      L.tau.assign(nslots, nullptr);
    }
  }
  return levels;
}

}  // namespace braid
