// Time-grid hierarchy: level sizes, C/F structure, block distribution over
// ranks, and the vector slots each rank stores per level.
#pragma once

#include <vector>

#include "interfaces.hpp"
#include "options.hpp"

namespace braid {

struct Range {
  Index lo = 0;
  Index hi = -1;  // lo > hi: the rank owns no point on this level
  bool empty() const { return lo > hi; }
};

struct Level {
  Index n = 0;               // intervals; points 0..n
  Index cf = 2;              // coarsening factor (n+1 on a solved coarsest level)
  Index fine_stride = 1;     // fine index of point i is i * fine_stride
  int nrelax = 1;
  double cweight = 1.0;      // C-relaxation weight (1 on a solved coarsest level)
  std::vector<double> t;     // all n+1 times (every rank keeps them)
  std::vector<Range> ranges; // owned range of every rank
  Range own;                 // this rank's range
  int left = -1, right = -1; // nearest ranks with points on this level

  // Local slots (index i - own.lo). u holds C-points (all points if stored);
  // v (injected values) and tau (FAS right-hand side) exist on coarse levels.
  std::vector<Vec> u, v, tau;
  bool has_tau = false;
  // v's handles are the finer level's C-point vectors themselves (Ops::share), not copies.
  bool v_shared = false;

  bool is_c(Index i) const { return i % cf == 0; }
  Index slot(Index i) const { return i - own.lo; }
  bool owns(Index i) const { return i >= own.lo && i <= own.hi; }
  // First C-point at or after i.
  Index c_at_or_after(Index i) const { return ((i + cf - 1) / cf) * cf; }
  // The step that ends at point i (i >= 1).
  BatchItem step_to(Index i) const { return {t[i - 1], t[i], i - 1, (i - 1) * fine_stride}; }
};

// Contiguous block distribution of npoints over nranks, as XBraid's
// _braid_GetBlockDistInterval.
Range block_range(Index npoints, int nranks, int rank);

// Number of levels and their sizes/cfactors following XBraid's
// _braid_InitHierarchy rule (see docs/conventions.md).
std::vector<Level> build_hierarchy(const std::vector<double>& fine_times,
                                   const Options& opts, int nranks, int rank);

}  // namespace braid
