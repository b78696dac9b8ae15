// Temporal norm of the fine residual (XBraid norm.c): this rank's part,
// accumulated from the right-most C-point to the left; ranks are combined in
// top() by one reduction together with the failure flag.
#include <algorithm>
#include <cmath>

#include "solver.hpp"

namespace braid {

double Solver::combine_norms(const std::vector<double>& norms) {
  double acc = 0.0;
  for (auto it = norms.rbegin(); it != norms.rend(); ++it) {
    const double r = *it;
    if (opts_.tnorm == 2) acc += r * r;
    else if (opts_.tnorm == 1) acc += r;
    else acc = (std::isnan(r) || std::isnan(acc)) ? NAN : std::max(acc, r);
  }
  return acc;
}

}  // namespace braid
