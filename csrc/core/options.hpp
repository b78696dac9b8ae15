// Solver options as the core sees them: already validated by the Python layer.
#pragma once

#include <map>
#include <utility>
#include <vector>

namespace braid {

struct Options {
  int max_levels = 30;
  int min_coarse = 2;
  int cfactor = 2;                    // default coarsening factor
  std::map<int, int> cfactor_level;   // per-level overrides
  int nrelax = 1;                     // FC sweeps before restriction (1 = FCF)
  std::map<int, int> nrelax_level;    // per-level overrides
  // C-relaxation weight w: u_c <- (1-w) u_c + w Phi(u_{c-1}); 1 = plain C-relaxation.
  // Never applied on a solved coarsest level (XBraid's braid_SetCRelaxWt).
  double crelax_weight = 1.0;
  std::map<int, double> crelax_weight_level;  // per-level overrides
  int max_iter = 100;
  double abs_tol = 1e-9;
  double rel_tol = 0.0;               // 0 disables the relative test
  int tnorm = 2;                      // 1, 2, or 0 for the infinity norm
  bool skip = true;                   // no down-sweep in a cold first iteration
  bool fmg = false;                   // F-cycles
  int nfmg = -1;                      // iteration k is an F-cycle iff nfmg != k
  int fmg_vcycles = 1;                // V-cycles per level inside an F-cycle
  bool store_all = false;             // keep fine F-points too
  bool store_final = false;           // keep the final sweep's F-points (internal)
  // XBraid's braid_SetStorage number for the coarse levels: levels l >= storage (all
  // levels if 0) keep their F-points too; -1 none. Level 0 follows store_all. Stored
  // coarse F-points change only the ustop a user residual's step gets (XBraid's
  // GetUInit), never another value.
  int storage = -1;
  bool seq_soln = false;              // initial guess = sequential solution
  bool final_fc_relax = false;        // one more FC sweep before the final F
  bool relax_only_cg = false;         // coarsest level relaxed, not solved
  // Time-periodic (XBraid's braid_SetPeriodic): u(tstop) = u(tstart). Every level's
  // last point n is point 0 again (the same value), so that point 0 is relaxed like
  // any C-point and the coarsest level is relaxed, not solved.
  bool periodic = false;
  // 0 none, 1 at the end, 2 also the fine C-points after every iteration, 3 (XBraid's
  // debugging level) every point of every relaxation, restriction and interpolation
  // sweep on every level, and an access sweep over all fine points after every iteration.
  int access_level = 1;
  bool print_norms = false;           // print level 3: Ops::progress_norms each iteration
  bool residual_computation = true;   // false: run max_iter iterations, no norm
  bool timings = false;               // callback timers (bindings)
  bool full_rnorm = false;            // also measure the full fine residual norm
  // Temporal refinement (XBraid's braid_SetRefine): the fine level's steps may ask for
  // their interval to be split (RefineRequests); at the top of an iteration the fine grid
  // is rebuilt and the iteration is run again on it. Limits: max_refinements rebuilds,
  // none once the fine grid has tpoints_cutoff intervals or more (XBraid's gupper);
  // incr_max_levels: max_levels grows by one with each rebuild.
  bool refine = false;
  int max_refinements = 200;
  long long tpoints_cutoff = 0x7fffffffLL;
  bool incr_max_levels = false;
  // Delta correction (XBraid's SetDeltaCorrection / SetDeferDelta /
  // SetLyapunovEstimation): rank 0 = off; Delta is computed on levels >= defer_level
  // from iteration defer_iter on; the basis is propagated in the coarsest solve and
  // the interpolation (lyapunov_estimate), in FC-relaxation (lyapunov_relax), and the
  // final FC-relaxation yields Lyapunov exponents (lyapunov_exponents).
  int delta_rank = 0;
  int delta_defer_level = 0;
  int delta_defer_iter = 0;
  bool lyapunov_estimate = false;
  bool lyapunov_relax = false;
  bool lyapunov_exponents = false;
  // XBraid's braid_SetRichardsonEstimation (richardson.cpp): on the fine level, combine
  // each relaxed C-point with one coarse step (Richardson extrapolation), and/or keep an
  // error estimate per fine point; local_order: the stepper's local order (>= 2).
  bool richardson = false;
  bool est_error = false;
  int local_order = 0;
  // Fine-level ownership: (lo, hi) per rank, contiguous and ordered by rank;
  // empty = XBraid's block distribution.
  std::vector<std::pair<long long, long long>> fine_ranges;

  // Whether level l keeps its F-points (XBraid's storage rule, level 0: store_all).
  bool stores_f_at(int level) const {
    if (level == 0) return store_all;
    return storage == 0 || (storage > 0 && level >= storage);
  }
  int cfactor_at(int level) const {
    auto it = cfactor_level.find(level);
    return it == cfactor_level.end() ? cfactor : it->second;
  }
  int nrelax_at(int level) const {
    auto it = nrelax_level.find(level);
    return it == nrelax_level.end() ? nrelax : it->second;
  }
  double crelax_weight_at(int level) const {
    auto it = crelax_weight_level.find(level);
    return it == crelax_weight_level.end() ? crelax_weight : it->second;
  }
};

// Throws std::invalid_argument naming the first impossible value: an option
// out of range, fewer than two or non-increasing fine times, or fine_ranges
// that do not tile 0..npoints-1 over nranks ranks in rank order. Python has
// validated already; this keeps a bad value from crashing or looping the core.
void check_options(const Options& opts, const std::vector<double>& fine_times, int nranks,
                   int rank);


}  // namespace braid
