// Temporal refinement requests (XBraid's StepStatusSetRFactor and
// StatusSetRefinementDtValues): what the fine level's steps ask of the next rebuild
// of the fine grid (refine.cpp).
#pragma once

#include <map>
#include <vector>

#include "interfaces.hpp"

namespace braid {

struct RefineRequests {
  Index lo = 0, hi = -1;  // this rank's fine points
  // factor[i - lo]: the number of intervals that replace (t_{i-1}, t_i]; 1 = kept.
  std::vector<Index> factor;
  // Point i's interval split at the given step sizes (the first factor - 1 of them,
  // from t_{i-1}); absent: split evenly.
  std::map<Index, std::vector<double>> dts;

  // Every owned point back to 1 (a new fine grid).
  void reset(Index first, Index last) {
    lo = first;
    hi = last;
    factor.assign(last >= first ? static_cast<std::size_t>(last - first + 1) : 0, 1);
    dts.clear();
  }
  // The step into point i asks for r intervals (r >= 1; sizes: the first r - 1 step
  // sizes, or empty for an even split). A point this rank does not own is ignored.
  // The latest request of a point wins, until the grid is rebuilt.
  void set(Index i, Index r, std::vector<double> sizes) {
    if (i < lo || i > hi) return;
    factor[static_cast<std::size_t>(i - lo)] = r;
    if (sizes.empty()) dts.erase(i);
    else dts[i] = std::move(sizes);
  }
};

}  // namespace braid
