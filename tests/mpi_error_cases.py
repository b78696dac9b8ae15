"""Failures injected on one rank of a parallel solve (see test_mpi.py)."""

import math

import numpy as np
from apps import Decay, DecayRate

import braidpy

FAIL_RANK = 2  # a middle rank of 4 (rank 1 when only 2 ranks run)


class Boom(ValueError):
    pass


def _fail_rank(comm):
    return min(FAIL_RANK, comm.size - 1) if comm.size > 2 else comm.size - 1


class Failing(Decay):
    """Raises Boom in `where` on the failing rank once `cond(status)` holds."""

    def __init__(self, comm, where, cond=lambda s: True):
        super().__init__()
        self.mine = comm.rank == _fail_rank(comm)
        self.where, self.cond = where, cond

    def _maybe(self, name, status=None):
        if self.mine and name == self.where and (status is None or self.cond(status)):
            raise Boom(f"{name} failed on purpose on rank {self.rank_name}")

    @property
    def rank_name(self):
        return "the failing rank"

    def init(self, t):
        self._maybe("init")
        return super().init(t)

    def step(self, u, t0, t1, status):
        self._maybe("step", status)
        if self.mine and self.where == "nan" and self.cond(status):
            u[:] = np.nan
            return
        super().step(u, t0, t1, status)

    def clone(self, u):
        self._maybe("clone")
        return super().clone(u)

    def access(self, u, status):
        self._maybe("access", status)

    def bufpack(self, u):
        self._maybe("bufpack")
        if self.mine and self.where in BAD_BUFFERS:  # returns what MPI cannot send
            return BAD_BUFFERS[self.where]
        return super().bufpack(u)

    def bufunpack(self, buf):
        self._maybe("bufunpack")
        return super().bufunpack(buf)


class FailingSync(Failing):
    """Failing with a sync, which raises Boom on the failing rank once cond holds."""

    def sync(self, status):
        self._maybe("sync", status)


def _run_sync(comm, cond):
    braidpy.solve(FailingSync(comm, "sync", cond), 0.0, 4.0, 128, comm=comm, cfactor=2,
                  abs_tol=1e-13, max_iter=30)


# bufpack returning something that is not bytes-like, on the failing rank.
BAD_BUFFERS = {"bufpack_returns_str": "not bytes", "bufpack_returns_none": None}


class FailingBatched(Failing):
    """Failing with a stacked kernel; raises Boom in it on the failing rank."""

    def step_stacked(self, U, t0s, t1s, status):
        if self.mine and self.where == "step_stacked" and self.cond(status):
            raise Boom(f"step_stacked failed on purpose on rank {self.rank_name}")
        U /= (1.0 - self.lam * (t1s - t0s))[:, None]


class FailingBatchedInto(FailingBatched):
    """FailingBatched with the out-of-place hook, which raises on the failing rank (App's
    own clone: braidpy steps out of place only where the new states are its blocks)."""

    clone = braidpy.App.clone

    def step_stacked_into(self, U, out, t0s, t1s, status):
        if self.mine and self.where == "step_stacked_into" and self.cond(status):
            raise Boom(f"step_stacked_into failed on purpose on rank {self.rank_name}")
        np.divide(U, (1.0 - self.lam * (t1s - t0s))[:, None], out=out)


def _run_batched(comm, cond, where="step_stacked"):
    app = (FailingBatchedInto if where == "step_stacked_into" else FailingBatched)(
        comm, where, cond)
    braidpy.solve(app, 0.0, 4.0, 128, comm=comm, cfactor=4, abs_tol=1e-13, max_iter=30,
                  storage="all")


def _run_adjoint_batched(comm, where):
    from apps import DenseResNet
    from braidpy.adjoint import gradient
    from braidpy.nn import dense_adjoint_batched

    class App(DenseResNet):
        mine = comm.rank == _fail_rank(comm)

        def step_adjoint_batch(self, W, U, t0s, t1s, status):
            if self.mine and where == "step_adjoint_batch" and status.level == 1:
                raise Boom("step_adjoint_batch failed on purpose")
            return super().step_adjoint_batch(W, U, t0s, t1s, status)

        def step_gradient_batch(self, W, U, t0s, t1s, status):
            if self.mine and where == "step_gradient_batch":
                raise Boom("step_gradient_batch failed on purpose")
            return super().step_gradient_batch(W, U, t0s, t1s, status)

        def step_adjoint_batch_into(self, W, U, out, t0s, t1s, status):
            if self.mine and where == "step_adjoint_batch_into" and status.done:
                raise Boom("step_adjoint_batch_into failed on purpose")
            n = status.fine_indices
            dense_adjoint_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh", out=out)

    gradient(App(64), 0.0, 1.0, 64, comm=comm, primal=dict(cfactor=4, abs_tol=1e-12))


def _run(comm, where, cond=lambda s: True, **opts):
    options = dict(cfactor=2, abs_tol=1e-13, max_iter=30)
    options.update(opts)
    braidpy.solve(Failing(comm, where, cond), 0.0, 4.0, 128, comm=comm, **options)


class FailingResidual(Failing):
    """Failing with a user residual: step takes fstop, residual may raise Boom."""

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        self._maybe("step", status)
        if fstop is not None:
            u += fstop
        u /= 1.0 - self.lam * (t1 - t0)

    def residual(self, ustop, r, status):
        self._maybe("residual", status)
        r[:] = (1.0 - self.lam * (status.t1 - status.t0)) * ustop - r

    def full_residual(self, ustop, r, status):
        self._maybe("full_residual", status)
        self.residual(ustop, r, status)


def _run_residual(comm, where, cond=lambda s: True, **opts):
    braidpy.solve(FailingResidual(comm, where, cond), 0.0, 4.0, 128, comm=comm, cfactor=2,
                  abs_tol=1e-13, max_iter=30, batch=False, **opts)


class FailingAdjoint(DecayRate):
    """Raises Boom in adjoint callback `where` on the failing rank."""

    def __init__(self, comm, where):
        super().__init__(running=True)
        self.mine = comm.rank == _fail_rank(comm)
        self.where = where

    def _maybe(self, name):
        if self.mine and name == self.where:
            raise Boom(f"{name} failed on purpose")

    def step_adjoint(self, w, u, t0, t1, status):
        self._maybe("step_adjoint")
        return super().step_adjoint(w, u, t0, t1, status)

    def step_gradient(self, w, u, t0, t1, status):
        self._maybe("step_gradient")
        return super().step_gradient(w, u, t0, t1, status)

    def _running_objective(self, u, t, status):
        self._maybe("running_objective")
        return super()._running_objective(u, t, status)

    def primal_solved(self):
        self._maybe("primal_solved")


def _run_adjoint(comm, where):
    from braidpy.adjoint import gradient

    gradient(FailingAdjoint(comm, where), 0.0, 2.0, 64, comm=comm,
             primal=dict(cfactor=2, abs_tol=1e-12))


ERROR_CASES = {
    "step_adjoint": lambda c: _run_adjoint(c, "step_adjoint"),
    "step_gradient": lambda c: _run_adjoint(c, "step_gradient"),
    "running_objective": lambda c: _run_adjoint(c, "running_objective"),
    "primal_solved": lambda c: _run_adjoint(c, "primal_solved"),
    "step_fine_iteration1": lambda c: _run(c, "step", lambda s: s.level == 0 and s.iteration == 1),
    "step_coarse_level": lambda c: _run(c, "step", lambda s: s.level == 2 and s.iteration == 2),
    "step_final_sweep": lambda c: _run(c, "step", lambda s: s.done),
    "step_stacked_fine": lambda c: _run_batched(c, lambda s: s.level == 0 and s.iteration == 1),
    "step_stacked_coarse_tau": lambda c: _run_batched(c, lambda s: s.level == 1 and
                                                      s.phase == "residual"),
    "step_stacked_final": lambda c: _run_batched(c, lambda s: s.done),
    "step_stacked_into_first": lambda c: _run_batched(c, lambda s: s.iteration == 1,
                                                      "step_stacked_into"),
    "step_stacked_into_final": lambda c: _run_batched(c, lambda s: s.done,
                                                      "step_stacked_into"),
    "step_adjoint_batch": lambda c: _run_adjoint_batched(c, "step_adjoint_batch"),
    "step_adjoint_batch_into": lambda c: _run_adjoint_batched(c, "step_adjoint_batch_into"),
    "step_gradient_batch": lambda c: _run_adjoint_batched(c, "step_gradient_batch"),
    "residual_fine": lambda c: _run_residual(c, "residual", lambda s: s.level == 0 and
                                             s.iteration == 2),
    "residual_coarse": lambda c: _run_residual(c, "residual", lambda s: s.level == 1 and
                                               s.iteration == 1),
    "residual_step_fstop": lambda c: _run_residual(c, "step", lambda s: s.level == 2 and
                                                   s.iteration == 1),
    "full_residual": lambda c: _run_residual(c, "full_residual", lambda s: s.iteration == 2,
                                             full_rnorm=True),
    "full_residual_final": lambda c: _run_residual(c, "full_residual", lambda s: s.done,
                                                   full_rnorm=True),
    "init": lambda c: _run(c, "init"),
    "step_periodic": lambda c: _run(c, "step", lambda s: s.level == 1 and s.iteration == 1,
                                    periodic=True),
    "sync_after_init": lambda c: _run_sync(c, lambda s: s.phase == "init"),
    "sync_cycle": lambda c: _run_sync(c, lambda s: s.phase == "cycle" and s.iteration == 2),
    "clone": lambda c: _run(c, "clone"),
    "access": lambda c: _run(c, "access", lambda s: s.index % 2 == 1),
    "bufpack": lambda c: _run(c, "bufpack"),
    "bufunpack": lambda c: _run(c, "bufunpack"),
    "bufpack_returns_str": lambda c: _run(c, "bufpack_returns_str"),
    "bufpack_returns_none": lambda c: _run(c, "bufpack_returns_none"),
    "nan_residual": lambda c: _run(c, "nan", lambda s: s.level == 0 and s.iteration == 2),
    # MPI's MAX reduction may drop a NaN: the infinity norm must still see it.
    "nan_residual_tnorm_inf": lambda c: _run(c, "nan", lambda s: s.level == 0 and
                                             s.iteration == 2, tnorm=math.inf),
    "nan_residual_tnorm_1": lambda c: _run(c, "nan", lambda s: s.level == 0 and
                                           s.iteration == 2, tnorm=1),
    # Every rank sees the same residuals, so every rank raises (no rank returns).
    "not_converged": lambda c: braidpy.solve(Decay(), 0.0, 4.0, 128, comm=c, cfactor=2,
                                             abs_tol=1e-15, max_iter=2,
                                             require_convergence=True),
    "healthy_after_failures": lambda c: braidpy.solve(Decay(), 0.0, 4.0, 128, comm=c,
                                                      cfactor=2, abs_tol=1e-13),
}


def outcomes(comm):
    """Every case of ERROR_CASES run on ``comm``: case -> every rank's (exception type
    name, text), ("ok", "") where the case raised nothing (gathered on rank 0)."""
    out = {}
    for name, case in ERROR_CASES.items():
        try:
            case(comm)
            outcome = ("ok", "")
        except BaseException as exc:  # noqa: BLE001 - we report every outcome
            outcome = (type(exc).__name__, str(exc))
        out[name] = comm.gather(outcome)
    return out
