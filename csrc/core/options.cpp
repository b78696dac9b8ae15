// The core's preconditions on its options and time grid (see options.hpp).
#include "options.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace braid {

namespace {

template <class T>
void require(bool ok, const std::string& name, const T& value, const std::string& rule) {
  if (ok) return;
  std::ostringstream msg;
  msg << "invalid core option " << name << " = " << value << ": " << rule;
  throw std::invalid_argument(msg.str());
}

void check_per_level(const std::map<int, int>& overrides, const char* name, int minimum,
                     const char* rule) {
  for (const auto& [level, value] : overrides) {
    const std::string where = std::string(name) + "[" + std::to_string(level) + "]";
    require(level >= 0, std::string(name) + " key", level, "levels are >= 0");
    require(value >= minimum, where, value, rule);
  }
}

void check_times(const std::vector<double>& t) {
  require(t.size() >= 2, "times (count)", t.size(), "needs at least 2 times");
  for (std::size_t i = 0; i < t.size(); ++i) {
    require(std::isfinite(t[i]), "times[" + std::to_string(i) + "]", t[i], "must be finite");
    if (i > 0)
      require(t[i] > t[i - 1], "times[" + std::to_string(i) + "]", t[i],
              "times must be strictly increasing");
  }
}

void check_ranges(const Options& o, long long npoints, int nranks) {
  if (o.fine_ranges.empty()) return;
  require(o.fine_ranges.size() == static_cast<std::size_t>(nranks), "fine_ranges (count)",
          o.fine_ranges.size(), "needs one (lo, hi) per rank");
  long long next = 0;  // each range starts where the previous one ended
  for (std::size_t p = 0; p < o.fine_ranges.size(); ++p) {
    const auto [lo, hi] = o.fine_ranges[p];
    const std::string where = "fine_ranges[" + std::to_string(p) + "]";
    require(lo == next, where + ".lo", lo, "ranges must be contiguous from 0, in rank order");
    require(hi >= lo - 1, where + ".hi", hi, "must be >= lo - 1 (lo - 1: owns nothing)");
    next = hi + 1;
  }
  require(next == npoints, "fine_ranges[" + std::to_string(nranks - 1) + "].hi", next - 1,
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
  require(o.max_iter >= 1, "max_iter", o.max_iter, "must be >= 1");
  require(std::isfinite(o.abs_tol) && o.abs_tol >= 0, "abs_tol", o.abs_tol,
          "must be finite and >= 0");
  require(std::isfinite(o.rel_tol) && o.rel_tol >= 0, "rel_tol", o.rel_tol,
          "must be finite and >= 0");
  require(o.tnorm >= 0 && o.tnorm <= 2, "tnorm", o.tnorm, "must be 0 (infinity), 1 or 2");
  require(o.fmg_vcycles >= 1, "fmg_vcycles", o.fmg_vcycles, "must be >= 1");
  require(o.access_level >= 0 && o.access_level <= 2, "access_level", o.access_level,
          "must be 0, 1 or 2");
  check_times(fine_times);
  check_ranges(o, static_cast<long long>(fine_times.size()), nranks);
}

}  // namespace braid
