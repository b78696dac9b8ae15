// Coarse-grid correction (XBraid interp.c): after an F-sweep on level l, every
// point j >= 1 corrects the fine C-point j*cf by (u_j - v_j).
#include "solver.hpp"

namespace braid {

void Solver::interp_from(int l) {
  Level& C = levels_[l];
  Level& F = levels_[l - 1];
  if (l == nlevels() - 1 && opts_.relax_only_cg) relax(l);
  auto correct = [&](Index j, Vec uj) {
    const Index s = C.slot(j);
    ops_.sum(1.0, uj, -1.0, C.v[s]);                       // e = u - v (in v)
    ops_.sum(1.0, C.v[s], 1.0, F.u[F.slot(j * F.cf)]);     // u_fine = e + u_fine
  };
  f_relax(l, kPhaseRelax, [&](Index j, Vec& w) { correct(j, w); }, nullptr);
  if (!C.own.empty()) {  // the C-points' corrections, each of the two sums in one call
    std::vector<Vec> us, vs, fine;
    for (Index j = C.c_at_or_after(std::max<Index>(C.own.lo, 1)); j <= C.own.hi; j += C.cf) {
      us.push_back(C.u[C.slot(j)]);
      vs.push_back(C.v[C.slot(j)]);
      fine.push_back(F.u[F.slot(j * F.cf)]);
    }
    const auto n = static_cast<Index>(us.size());
    ops_.sums(1.0, us.data(), -1.0, vs.data(), n);     // e = u - v (in v)
    ops_.sums(1.0, vs.data(), 1.0, fine.data(), n);    // u_fine = e + u_fine
  }
  clean(l);
}

void Solver::clean(int l) {
  free_level(l);
  levels_[l].has_tau = false;
}

}  // namespace braid
