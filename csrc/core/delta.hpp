// Delta correction (XBraid's braid_SetDeltaCorrection; Vargas, Falgout, Guenther,
// Schroder, SISC 2023): every state carries `rank` basis vectors, which the user's step
// propagates with its Jacobian. DeltaOps and DeltaComm wrap the user's Ops and Comm so
// that each core vector is such a pair (XBraid's braid_BaseVector with its basis):
// clone, sum and free act on the state and on every basis vector, the norm and the
// messages on the state first. The MGRIT-specific steps (the low-rank correction, the
// Gram-Schmidt at C-points, the Lyapunov exponents) are the Solver's, in delta.cpp.
#pragma once

#include <vector>

#include "interfaces.hpp"

namespace braid {

// A core vector under Delta correction: the user's state and its basis.
struct DeltaVec {
  Vec u = nullptr;
  std::vector<Vec> basis;
};

class DeltaOps final : public Ops {
 public:
  DeltaOps(Ops& inner, int rank) : in_(inner), rank_(rank) {}

  static DeltaVec* of(Vec v) { return static_cast<DeltaVec*>(v); }
  // The user's state of a core vector (null for null).
  static Vec user(Vec v) { return v == nullptr ? nullptr : of(v)->u; }
  Ops& inner() { return in_; }
  int rank() const { return rank_; }

  // A core vector around the user's state u (taken over), its basis from init_basis
  // at info.t, orthonormalized (XBraid's _braid_BaseInit).
  Vec wrap(Vec u, const CallInfo& info);
  // The user's state of v (which is freed with its basis).
  Vec release(Vec v);
  // basis <- its Gram-Schmidt orthonormalization; exps (if not null) gets the
  // logarithms of the norms the vectors had before normalizing (rank values).
  void gram_schmidt(Vec v, double* exps);
  // x (a user vector) <- Delta (Psi^T x) = sum_k <psi_k, x> delta_k, with delta_k the
  // basis of d and psi_k the basis of psi (XBraid's _braid_LRDeltaDot).
  void low_rank_dot(Vec x, Vec d, Vec psi);
  // The user's step of v; with prop, its basis is handed to the step (CallInfo::basis)
  // for the step to propagate.
  void step_with_basis(Vec& v, CallInfo& info, bool prop);

  Vec init(const CallInfo& info) override;
  void step(Vec& u, const CallInfo& info) override;
  Vec clone(Vec u) override;
  void sum(double a, Vec x, double b, Vec y) override;
  double norm(Vec u) override;
  // The user's access of the state; the Solver sets info.basis (and lyapunov).
  void access(Vec u, const CallInfo& info) override;
  void free(Vec u) override;
  void progress(int iteration, double rnorm, bool has_rnorm) override {
    in_.progress(iteration, rnorm, has_rnorm);
  }
  bool has_sync() const override { return in_.has_sync(); }
  void sync(const CallInfo& info) override { in_.sync(info); }
  void progress_full(int iteration, double rnorm) override {
    in_.progress_full(iteration, rnorm);
  }
  bool failed() const override { return in_.failed(); }
  void raise_error(const char* message) override { in_.raise_error(message); }

 private:
  Ops& in_;
  int rank_;
};

// Messages of DeltaVecs: the state, then each basis vector, in order.
class DeltaComm final : public Comm {
 public:
  DeltaComm(Comm& inner, DeltaOps& ops) : in_(inner), ops_(ops) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  void send(int dest, int tag, Vec u) override;
  Vec recv(int src, int tag) override;
  void finish_sends() override { in_.finish_sends(); }
  void advance_sends() override { in_.advance_sends(); }
  void allreduce(double* values, int n, ReduceOp op) override { in_.allreduce(values, n, op); }

 private:
  Comm& in_;
  DeltaOps& ops_;
};

}  // namespace braid
