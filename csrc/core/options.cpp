// The core's preconditions on its options and time grid (see options.hpp).
#include "options.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace braid {

namespace {

template <class T>
[[noreturn]] void fail(const std::string& name, const T& value, const std::string& rule) {
  std::ostringstream msg;
  msg << "invalid core option " << name << " = " << value << ": " << rule;
  throw std::invalid_argument(msg.str());
}

template <class T>
void require(bool ok, const char* name, const T& value, const char* rule) {
  if (!ok) fail(name, value, rule);
}

// Names are built only on failure: these loops run over every time point.
std::string item(const char* name, long long k) {
  return std::string(name) + "[" + std::to_string(k) + "]";
}

void check_per_level(const std::map<int, int>& overrides, const char* name, int minimum,
                     const char* rule) {
  for (const auto& [level, value] : overrides) {
    if (level < 0) fail(std::string(name) + " key", level, "levels are >= 0");
    if (value < minimum) fail(item(name, level), value, rule);
  }
}

bool positive_weight(double w) { return std::isfinite(w) && w > 0.0; }

void check_times(const std::vector<double>& t) {
  require(t.size() >= 2, "times (count)", t.size(), "needs at least 2 times");
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t[i])) fail(item("times", i), t[i], "must be finite");
    if (i > 0 && !(t[i] > t[i - 1]))
      fail(item("times", i), t[i], "times must be strictly increasing");
  }
}

void check_ranges(const Options& o, long long npoints, int nranks) {
  if (o.fine_ranges.empty()) return;
  require(o.fine_ranges.size() == static_cast<std::size_t>(nranks), "fine_ranges (count)",
          o.fine_ranges.size(), "needs one (lo, hi) per rank");
  long long next = 0;  // each range starts where the previous one ended
  for (std::size_t p = 0; p < o.fine_ranges.size(); ++p) {
    const auto [lo, hi] = o.fine_ranges[p];
    if (lo != next)
      fail(item("fine_ranges", p) + ".lo", lo, "ranges must be contiguous from 0, in rank order");
    if (hi < lo - 1)
      fail(item("fine_ranges", p) + ".hi", hi, "must be >= lo - 1 (lo - 1: owns nothing)");
    next = hi + 1;
  }
  if (next != npoints)
    fail(item("fine_ranges", nranks - 1) + ".hi", next - 1,
         "the last range must end at ntime = " + std::to_string(npoints - 1));
}

}  // namespace

void check_options(const Options& o, const std::vector<double>& fine_times, int nranks,
                   int rank) {
  require(nranks >= 1, "communicator size", nranks, "must be >= 1");
  require(rank >= 0 && rank < nranks, "rank", rank, "must be in 0..size-1");
  require(o.max_levels >= 1, "max_levels", o.max_levels, "must be >= 1");
  require(o.min_coarse >= 1, "min_coarse", o.min_coarse, "must be >= 1");
  require(o.cfactor >= 2, "cfactor", o.cfactor, "must be >= 2");
  check_per_level(o.cfactor_level, "cfactor_level", 2, "must be >= 2");
  require(o.nrelax >= 0, "nrelax", o.nrelax, "must be >= 0");
  check_per_level(o.nrelax_level, "nrelax_level", 0, "must be >= 0");
  require(positive_weight(o.crelax_weight), "crelax_weight", o.crelax_weight,
          "must be finite and > 0");
  for (const auto& [level, w] : o.crelax_weight_level) {
    if (level < 0) fail("crelax_weight_level key", level, "levels are >= 0");
    if (!positive_weight(w)) fail(item("crelax_weight_level", level), w, "must be finite and > 0");
  }
  require(o.max_iter >= 1, "max_iter", o.max_iter, "must be >= 1");
  require(std::isfinite(o.abs_tol) && o.abs_tol >= 0, "abs_tol", o.abs_tol,
          "must be finite and >= 0");
  require(std::isfinite(o.rel_tol) && o.rel_tol >= 0, "rel_tol", o.rel_tol,
          "must be finite and >= 0");
  require(o.tnorm >= 0 && o.tnorm <= 2, "tnorm", o.tnorm, "must be 0 (infinity), 1 or 2");
  require(!(o.periodic && o.seq_soln), "periodic", o.periodic,
          "a periodic problem has no sequential solution (seq_soln)");
  if (o.richardson || o.est_error) {
    require(o.local_order >= 2, "local_order", o.local_order,
            "must be >= 2 with richardson or est_error");
    require(!o.periodic, "periodic", o.periodic, "excludes richardson and est_error");
    require(o.delta_rank == 0, "delta_rank", o.delta_rank, "excludes richardson and est_error");
    require(o.crelax_weight == 1.0, "crelax_weight", o.crelax_weight,
            "must be 1 with richardson or est_error");
    for (const auto& [level, w] : o.crelax_weight_level)
      if (w != 1.0) fail(item("crelax_weight_level", level), w,
                         "must be 1 with richardson or est_error");
  }
  require(o.fmg_vcycles >= 1, "fmg_vcycles", o.fmg_vcycles, "must be >= 1");
  require(o.access_level >= 0 && o.access_level <= 3, "access_level", o.access_level,
          "must be 0, 1, 2 or 3");
  require(!(o.periodic && o.access_level >= 3), "access_level", o.access_level,
          "3 is not available with periodic");
  require(!(o.refine && o.access_level >= 3), "access_level", o.access_level,
          "3 is not available with temporal refinement");
  require(!(o.periodic && o.print_norms), "print_norms", o.print_norms,
          "not available with periodic");
  require(o.max_refinements >= 0, "max_refinements", o.max_refinements, "must be >= 0");
  require(o.tpoints_cutoff >= 0, "tpoints_cutoff", o.tpoints_cutoff, "must be >= 0");
  require(!(o.refine && o.periodic), "refine", o.refine,
          "temporal refinement of a periodic problem is not supported");
  require(o.delta_rank >= 0, "delta_rank", o.delta_rank, "must be >= 0");
  require(o.delta_defer_level >= 0, "delta_defer_level", o.delta_defer_level, "must be >= 0");
  require(o.delta_defer_iter >= 0, "delta_defer_iter", o.delta_defer_iter, "must be >= 0");
  require(o.delta_rank > 0 || !(o.lyapunov_estimate || o.lyapunov_relax ||
                                o.lyapunov_exponents),
          "delta_rank", o.delta_rank, "must be > 0 for Lyapunov estimation");
  check_times(fine_times);
  check_ranges(o, static_cast<long long>(fine_times.size()), nranks);
}

}  // namespace braid
