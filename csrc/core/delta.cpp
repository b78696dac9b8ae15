// Delta correction and Lyapunov estimates (XBraid delta.c, and the Delta branches of
// step.c, residual.c and restrict.c): the coarse propagator Phi_c is corrected by a
// low-rank Delta = (J_f - J_c) Psi Psi^T, where J_f is the fine propagator's Jacobian
// over a coarse interval, J_c the coarse one's, and Psi the basis carried by the
// solution at the interval's start. The operation order follows XBraid's (user sum
// calls y <- a x + b y with the same a, b, x, y), so that the iterates agree bit for
// bit with the same user callbacks.
#include <cmath>

#include "solver.hpp"

namespace braid {

// ---------------------------------------------------------------- DeltaOps

Vec DeltaOps::wrap(Vec u, const CallInfo& info) {
  if (u == nullptr) return nullptr;
  auto* v = new DeltaVec;
  v->u = u;
  v->basis.assign(static_cast<std::size_t>(rank_), nullptr);
  for (int k = 0; k < rank_; ++k) v->basis[static_cast<std::size_t>(k)] = in_.init_basis(info, k);
  gram_schmidt(v, nullptr);
  return v;
}

Vec DeltaOps::release(Vec v) {
  if (v == nullptr) return nullptr;
  DeltaVec* d = of(v);
  Vec u = d->u;
  for (Vec b : d->basis) in_.free(b);
  delete d;
  return u;
}

void DeltaOps::gram_schmidt(Vec v, double* exps) {
  if (v == nullptr || in_.failed()) return;
  std::vector<Vec>& b = of(v)->basis;
  for (std::size_t i = 0; i < b.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {  // subtract the projections on the earlier ones
      const double p = in_.inner_prod(b[i], b[j]);
      in_.sum(-p, b[j], 1.0, b[i]);
    }
    const double p = in_.inner_prod(b[i], b[i]);
    if (in_.failed()) return;
    if (p == 0.0 || !std::isfinite(p)) {
      in_.raise_error(
          "Delta correction: a basis vector has zero or non-finite norm in the Gram-Schmidt "
          "orthonormalization (the basis vectors from init_basis, or as propagated by "
          "step, are linearly dependent)");
      return;
    }
    in_.sum(0.0, b[i], 1.0 / std::sqrt(p), b[i]);
    if (exps != nullptr) exps[i] = std::log(std::fabs(p)) / 2.0;
  }
}

void DeltaOps::low_rank_dot(Vec x, Vec d, Vec psi) {
  if (rank_ == 0 || x == nullptr || d == nullptr || psi == nullptr) return;
  std::vector<double> coords(static_cast<std::size_t>(rank_));
  for (int k = 0; k < rank_; ++k)
    coords[static_cast<std::size_t>(k)] = in_.inner_prod(of(psi)->basis[static_cast<std::size_t>(k)], x);
  in_.sum(coords[0], of(d)->basis[0], 0.0, x);
  for (int k = 1; k < rank_; ++k)
    in_.sum(coords[static_cast<std::size_t>(k)], of(d)->basis[static_cast<std::size_t>(k)], 1.0, x);
}

void DeltaOps::step_with_basis(Vec& v, CallInfo& info, bool prop) {
  if (v == nullptr) return;
  if (prop) {
    info.basis = of(v)->basis.data();
    info.basis_rank = rank_;
  }
  in_.step(of(v)->u, info);
  info.basis = nullptr;
  info.basis_rank = 0;
}

Vec DeltaOps::init(const CallInfo& info) { return wrap(in_.init(info), info); }

void DeltaOps::step(Vec& u, const CallInfo& info) {
  if (u != nullptr) in_.step(of(u)->u, info);
}

Vec DeltaOps::clone(Vec u) {
  if (u == nullptr) return nullptr;
  auto* v = new DeltaVec;
  v->u = in_.clone(of(u)->u);
  for (Vec b : of(u)->basis) v->basis.push_back(in_.clone(b));
  return v;
}

void DeltaOps::sum(double a, Vec x, double b, Vec y) {
  if (x == nullptr || y == nullptr) return;
  in_.sum(a, of(x)->u, b, of(y)->u);
  for (std::size_t k = 0; k < of(y)->basis.size(); ++k)
    in_.sum(a, of(x)->basis[k], b, of(y)->basis[k]);
}

double DeltaOps::norm(Vec u) { return u == nullptr ? 0.0 : in_.norm(of(u)->u); }

void DeltaOps::access(Vec u, const CallInfo& info) {
  if (u != nullptr) in_.access(of(u)->u, info);  // the Solver has set info.basis
}

void DeltaOps::free(Vec u) {
  if (u == nullptr) return;
  in_.free(release(u));
}

// ---------------------------------------------------------------- DeltaComm

void DeltaComm::send(int dest, int tag, Vec u) {
  in_.send(dest, tag, DeltaOps::user(u));
  for (int k = 0; k < ops_.rank(); ++k)
    in_.send(dest, tag, u == nullptr ? nullptr : DeltaOps::of(u)->basis[static_cast<std::size_t>(k)]);
}

Vec DeltaComm::recv(int src, int tag) {
  auto* v = new DeltaVec;
  v->u = in_.recv(src, tag);
  for (int k = 0; k < ops_.rank(); ++k) v->basis.push_back(in_.recv(src, tag));
  if (v->u == nullptr) {
    ops_.free(v);
    return nullptr;
  }
  return v;
}

// ---------------------------------------------------------------- Solver

bool Solver::do_delta(int l) const {
  return info_.iteration >= opts_.delta_defer_iter && l >= opts_.delta_defer_level;
}

bool Solver::use_delta(int l) const {
  return info_.iteration >= opts_.delta_defer_iter && l > opts_.delta_defer_level;
}

Vec Solver::delta_v_prev(int l, Index i) {
  const Level& L = levels_[l];
  if (i - 1 >= L.own.lo) return L.v[L.slot(i - 1)];
  return delta_left_[static_cast<std::size_t>(l)];
}

void Solver::delta_step(Level& L, int l, Vec& u, Index i, bool with_tau) {
  info_.level = l;
  info_.set_step(L.step_to(i));
  comm_.advance_sends();
  Ops& in = delta_->inner();
  if (!do_delta(l)) {  // the plain step; tau is added to the state and the basis
    ops_.step(u, info_);
    if (with_tau) add_tau(L, &i, &u, 1);
    return;
  }
  const int last = nlevels() - 1;
  const bool estimate = opts_.lyapunov_estimate && (l == last || caller_ == kByInterp);
  const bool relax = lyap_relax_ && l < last && (caller_ == kByRelax || caller_ == kByInterp);
  const bool prop = (caller_ == kByRestrict || estimate || relax) && l >= opts_.delta_defer_level;
  if (!prop && u != nullptr) {  // the basis at i stays: the one the point holds
    Vec keep = caller_ == kByInterp ? L.v[L.slot(i)] : guess_at(L, l, i, u);
    if (keep != u && keep != nullptr)
      for (int k = 0; k < delta_->rank(); ++k)
        in.sum(1.0, DeltaOps::of(keep)->basis[k], 0.0, DeltaOps::of(u)->basis[k]);
  }
  const Vec tau = with_tau && l > 0 && L.has_tau ? L.tau[L.slot(i)] : nullptr;
  const bool correct = tau != nullptr && use_delta(l);
  Vec d = nullptr;
  if (correct) {  // Delta applied to the state (and the basis) at i-1
    d = ops_.clone(u);
    const Vec psi = delta_v_prev(l, i);
    if (d != nullptr) {
      delta_->low_rank_dot(DeltaOps::of(d)->u, tau, psi);
      if (prop)
        for (Vec b : DeltaOps::of(d)->basis) delta_->low_rank_dot(b, tau, psi);
    }
  }
  delta_->step_with_basis(u, info_, prop);
  if (tau != nullptr && u != nullptr) {
    in.sum(1.0, DeltaOps::of(tau)->u, 1.0, DeltaOps::of(u)->u);
    if (correct && d != nullptr) {
      in.sum(1.0, DeltaOps::of(d)->u, 1.0, DeltaOps::of(u)->u);
      if (prop)
        for (int k = 0; k < delta_->rank(); ++k)
          in.sum(1.0, DeltaOps::of(d)->basis[k], 1.0, DeltaOps::of(u)->basis[k]);
    }
  }
  ops_.free(d);
  // Orthonormal again at C-points, on the coarsest level and in the interpolation; the
  // final FC-relaxation's C-points keep the local Lyapunov exponents.
  if (prop && (L.is_c(i) || caller_ == kByInterp || l == last)) {
    double* exps = nullptr;
    if (info_.done && l == 0 && caller_ == kByRelax && !local_lyap_.empty())
      exps = &local_lyap_[static_cast<std::size_t>(L.slot(i) * delta_->rank())];
    delta_->gram_schmidt(u, exps);
  }
}

void Solver::delta_residual(Level& L, int l, Index i, int caller, Vec ustop, Vec r) {
  info_.level = l;
  info_.set_step(L.step_to(i));
  comm_.advance_sends();
  if (r == nullptr || ustop == nullptr) return;
  const bool on = do_delta(l) && !(caller == kByResidual && l == opts_.delta_defer_level);
  if (on) {  // the basis is propagated and negated (the state's residual's sign)
    Ops& in = delta_->inner();
    delta_->step_with_basis(r, info_, true);
    in.sum(1.0, DeltaOps::of(ustop)->u, -1.0, DeltaOps::of(r)->u);
    for (Vec b : DeltaOps::of(r)->basis) in.sum(0.0, b, -1.0, b);
  } else {
    ops_.step(r, info_);
    ops_.sum(1.0, ustop, -1.0, r);
  }
}

void Solver::delta_fas_residual(Level& L, int l, Index c, Vec w) {
  const Vec tau = l > 0 && L.has_tau ? L.tau[L.slot(c)] : nullptr;
  const bool correct = tau != nullptr && use_delta(l);
  Ops& in = delta_->inner();
  Vec d = nullptr;
  if (correct && w != nullptr) {
    d = ops_.clone(w);
    const Vec psi = delta_v_prev(l, c);
    delta_->low_rank_dot(DeltaOps::of(d)->u, tau, psi);
    for (Vec b : DeltaOps::of(d)->basis) delta_->low_rank_dot(b, tau, psi);
  }
  info_.phase = kPhaseResidual;
  delta_residual(L, l, c, kByFAS, L.u[L.slot(c)], w);
  if (w == nullptr) return;
  if (tau == nullptr) {
    ops_.sum(0.0, w, -1.0, w);
  } else if (d != nullptr) {  // r = (tau + Delta u_{c-1}) - A(u)
    in.sum(1.0, DeltaOps::of(tau)->u, 1.0, DeltaOps::of(d)->u);
    in.sum(1.0, DeltaOps::of(d)->u, -1.0, DeltaOps::of(w)->u);
    for (int k = 0; k < delta_->rank(); ++k)
      in.sum(1.0, DeltaOps::of(d)->basis[k], -1.0, DeltaOps::of(w)->basis[k]);
  } else {
    ops_.sum(1.0, tau, -1.0, w);
  }
  ops_.free(d);
}

// tau_j = r_{j*cf} + (v_j - Phi_c(v_{j-1})) - Delta_j v_{j-1}; the basis part of tau_j
// becomes the low-rank Delta_j's columns, (J_f - J_c) psi_k at j-1.
void Solver::delta_coarse_rhs(int l, int tag) {
  Level& C = levels_[l + 1];
  Ops& in = delta_->inner();
  const bool correct = do_delta(l);
  auto part = [&](Index j, Vec prev) {
    const Index s = C.slot(j);
    Vec action = correct && prev != nullptr ? in.clone(DeltaOps::user(prev)) : nullptr;
    Vec g = ops_.clone(prev);
    delta_residual(C, l + 1, j, kByResidual, C.v[s], g);
    Vec tau = C.tau[s];
    if (correct && g != nullptr && tau != nullptr) {
      in.sum(1.0, DeltaOps::of(g)->u, 1.0, DeltaOps::of(tau)->u);
      for (int k = 0; k < delta_->rank(); ++k)
        in.sum(1.0, DeltaOps::of(g)->basis[k], 1.0, DeltaOps::of(tau)->basis[k]);
      delta_->low_rank_dot(action, tau, prev);
      in.sum(-1.0, action, 1.0, DeltaOps::of(tau)->u);
    } else {
      ops_.sum(1.0, g, 1.0, tau);
    }
    in.free(action);
    ops_.free(g);
  };
  for (Index j = C.own.hi; j > C.own.lo; --j) part(j, C.v[C.slot(j - 1)]);
  Vec& left = delta_left_[static_cast<std::size_t>(l + 1)];
  ops_.free(left);
  left = nullptr;
  if (C.left >= 0) {  // kept: the steps of this level's sweeps read its basis
    left = comm_.recv(C.left, tag);
    part(C.own.lo, left);
  }
}

void Solver::delta_final_relax() {
  const Level& L = levels_[0];
  const auto r = static_cast<std::size_t>(delta_->rank());
  local_lyap_.assign(L.u.size() * r, 0.0);
  const bool saved = lyap_relax_;
  if (opts_.delta_defer_level == 0) lyap_relax_ = true;
  fc_relax(0);
  lyap_relax_ = saved;
  // The average exponents: the local ones summed over every fine C-point, / time span.
  lyapunov_.assign(r, 0.0);
  for (Index c = L.c_at_or_after(L.own.lo); c <= L.own.hi; c += L.cf)
    for (std::size_t k = 0; k < r; ++k)
      lyapunov_[k] += local_lyap_[static_cast<std::size_t>(L.slot(c)) * r + k];
  comm_.allreduce(lyapunov_.data(), static_cast<int>(r), ReduceOp::kSum);
  for (double& e : lyapunov_) e /= L.t[static_cast<std::size_t>(L.n)] - L.t[0];
}

}  // namespace braid
