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
  if (!C.own.empty())
    for (Index j = C.c_at_or_after(std::max<Index>(C.own.lo, 1)); j <= C.own.hi; j += C.cf)
      correct(j, C.u[C.slot(j)]);
  clean(l);
}

void Solver::clean(int l) {
  free_level(l);
  levels_[l].has_tau = false;
}

}  // namespace braid
