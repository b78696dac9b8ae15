// Coarse-grid correction (XBraid interp.c): after an F-sweep on level l, every
// point j >= 1 corrects the fine C-point j*cf by (u_j - v_j), refined in space first
// where the app coarsens in space (Ops::spatial).
#include "solver.hpp"

namespace braid {

void Solver::interp_from(int l) {
  Level& C = levels_[l];
  Level& F = levels_[l - 1];
  if (l == nlevels() - 1 && (opts_.relax_only_cg || opts_.periodic)) relax(l);
  info_.caller = kCallerFInterp;
  // e = u - v and u_fine += e as soon as the sweep has u at j, in one pass per pair
  // where the ops can (the fine C-points are not read on this level, and clean() drops
  // v below); else e goes into v at once and u_fine += e for every point at the end,
  // in one call (a device's one kernel). One call per chain step or lock-step batch.
  // Where v is the fine C-points themselves (C.v_shared, Ops::share), e cannot go into v:
  // the fallback computes e = -v + u into copies of u (the same bits) and frees them.
  std::vector<Vec> es, fines, copies;
  auto errors = [&](Vec* us, const Index* js, Index n) {
    if (access_all())  // access level 3: every coarse value the correction reads
      for (Index k = 0; k < n; ++k) access_at(l, js[k], us[k], kCallerFInterp);
    std::vector<Vec> vs(static_cast<std::size_t>(n)), fs(static_cast<std::size_t>(n));
    for (Index k = 0; k < n; ++k) {
      vs[static_cast<std::size_t>(k)] = C.v[C.slot(js[k])];
      fs[static_cast<std::size_t>(k)] = F.u[F.slot(js[k] * F.cf)];
    }
    if (ops_.spatial()) {  // e = u - v in v, then refined: u_fine += refine(e) at the end
      ops_.sums(1.0, us, -1.0, vs.data(), n);
      for (Index k = 0; k < n; ++k) {
        Vec fe = refine_at(l - 1, js[k], vs[static_cast<std::size_t>(k)]);
        es.push_back(fe);
        copies.push_back(fe);
        fines.push_back(fs[static_cast<std::size_t>(k)]);
      }
      return;
    }
    if (ops_.fused_sums(1.0, us, -1.0, vs.data(), 1.0, 1.0, fs.data(), n)) return;
    if (C.v_shared || delta_) {  // Delta: the next step still reads v's basis
      std::vector<Vec> e(static_cast<std::size_t>(n));
      for (Index k = 0; k < n; ++k) e[static_cast<std::size_t>(k)] = ops_.clone(us[k]);
      ops_.sums(-1.0, vs.data(), 1.0, e.data(), n);
      copies.insert(copies.end(), e.begin(), e.end());
      vs = e;
    } else {
      ops_.sums(1.0, us, -1.0, vs.data(), n);
    }
    es.insert(es.end(), vs.begin(), vs.end());
    fines.insert(fines.end(), fs.begin(), fs.end());
  };
  caller_ = kByInterp;
  f_relax(l, kPhaseRelax, errors, nullptr);
  if (!C.own.empty()) {  // the C-points' errors
    std::vector<Vec> us;
    std::vector<Index> js;
    for (Index j = C.c_at_or_after(std::max<Index>(C.own.lo, 1)); j <= C.own.hi; j += C.cf) {
      us.push_back(C.u[C.slot(j)]);
      js.push_back(j);
    }
    if (!js.empty()) errors(us.data(), js.data(), static_cast<Index>(js.size()));
  }
  if (!es.empty()) ops_.sums(1.0, es.data(), 1.0, fines.data(), static_cast<Index>(es.size()));
  for (Vec e : copies) ops_.free(e);
  if (l == 1 && access_all())  // and every corrected fine C-point (XBraid: on level 0 only)
    for (Index j = std::max<Index>(C.own.lo, 1); j <= C.own.hi; ++j)
      access_at(0, j * F.cf, F.u[F.slot(j * F.cf)], kCallerFInterp);
  clean(l);
  wrap(l - 1, true);  // periodic: fine point 0 was corrected as point n
}

void Solver::clean(int l) {
  free_level(l);
  levels_[l].has_tau = false;
}

}  // namespace braid
