"""Case tables run both in-process (serial) and under mpiexec by mpi_driver.py."""

import math

import numpy as np
from apps import Box, Decay, DecayRate, Heat, HeatControl, Logistic, LogisticParam, OpaqueDecay
from mpi_world import assert_split

import braidpy


def _values(result, comm):
    """All fine values, gathered in time order (on every rank)."""
    assert_split(comm, result.owned, len(result.times))
    local = []
    for i in result.owned:
        u = result.solution(index=i)
        local.append((i, u.values if isinstance(u, Box) else np.asarray(u).tolist()))
    parts = [local] if comm is None else comm.allgather(local)
    return [v for _, v in sorted(x for p in parts for x in p)]


def _summary(result, comm):
    final = result.final
    return dict(iterations=result.iterations, residuals=result.residuals,
                residual_iterations=result.residual_iterations, levels=result.levels,
                values=_values(result, comm),
                final=final.values if isinstance(final, Box) else np.asarray(final).tolist())


def _solve(make, t0, t1, n, comm, **opts):
    return _summary(braidpy.solve(make(), t0, t1, n, comm=comm, **opts), comm)


def _warm(comm):
    core = braidpy.Core(Heat(17), 0.0, 1.0, 61, comm=comm, cfactor=3, abs_tol=1e-10)
    first = _summary(core.solve(), comm)
    second = _summary(core.solve(), comm)
    core.set_initial_condition(np.cos(np.linspace(0.0, math.pi, 17)))
    third = _summary(core.solve(), comm)
    return dict(first=first, second=second, third=third)


def _grid(comm):
    times = np.concatenate([np.linspace(0.0, 1.0, 31), np.linspace(1.0, 2.0, 20)[1:]])
    return _solve(lambda: Decay(), 0.0, 2.0, 49, comm, times=times, cfactor=2, abs_tol=1e-12)


def _gradient(make, t0, t1, n, comm, oneshot=None, evaluations=1, **opts):
    from braidpy.adjoint import GradientSolver

    solver = GradientSolver(make(), t0, t1, n, comm=comm, primal=opts, oneshot=oneshot)
    out = []
    for _ in range(evaluations):
        g = solver.evaluate()
        local = sorted([k, np.asarray(v, dtype=float).tolist()]
                       for k, v in g.gradients.items())
        parts = [local] if comm is None else comm.allgather(local)
        w0 = None if g.initial_adjoint is None else np.asarray(g.initial_adjoint).tolist()
        w0s = [w0] if comm is None else comm.allgather(w0)
        total = g.total()
        out.append(dict(objective=g.objective, total=np.asarray(total).tolist(),
                        gradients=sorted(x for p in parts for x in p),
                        initial_adjoint=[w for w in w0s if w is not None],
                        primal=_summary(g.primal, comm), adjoint=_summary(g.adjoint, comm)))
    return out


HISTORY_CASES = {
    "decay_cf2": lambda c: _solve(Decay, 0.0, 5.0, 128, c, cfactor=2, abs_tol=1e-12),
    "decay_cf3_uneven": lambda c: _solve(Decay, 0.0, 5.0, 101, c, cfactor=3, abs_tol=1e-12),
    "decay_cf4_uneven": lambda c: _solve(Decay, 0.0, 5.0, 97, c, cfactor=4, abs_tol=1e-12),
    "decay_cf8": lambda c: _solve(Decay, 0.0, 5.0, 515, c, cfactor=8, abs_tol=1e-12),
    "decay_fmg": lambda c: _solve(Decay, 0.0, 5.0, 130, c, cfactor=2, fmg=True, abs_tol=1e-12),
    "decay_fmg_cf3": lambda c: _solve(Decay, 0.0, 5.0, 250, c, cfactor=3, fmg=True,
                                      fmg_vcycles=2, abs_tol=1e-12),
    "decay_nrelax0": lambda c: _solve(Decay, 0.0, 5.0, 99, c, cfactor=2, nrelax=0, abs_tol=1e-12),
    "decay_nrelax2": lambda c: _solve(Decay, 0.0, 5.0, 99, c, cfactor=4, nrelax=2, abs_tol=1e-12),
    "decay_nrelax_levels": lambda c: _solve(Decay, 0.0, 5.0, 200, c, cfactor={0: 4, 1: 2},
                                            nrelax={0: 0, 2: 2}, abs_tol=1e-12),
    "decay_noskip_tnorm1": lambda c: _solve(Decay, 0.0, 5.0, 64, c, cfactor=2, skip=False,
                                            tnorm=1, abs_tol=1e-12),
    "decay_tnorm_inf": lambda c: _solve(Decay, 0.0, 5.0, 64, c, cfactor=2, tnorm=math.inf,
                                        abs_tol=1e-12),
    "decay_one_level": lambda c: _solve(Decay, 0.0, 5.0, 33, c, max_levels=1),
    "decay_seq_soln": lambda c: _solve(Decay, 0.0, 5.0, 77, c, cfactor=2, seq_soln=True),
    "decay_relax_only_cg": lambda c: _solve(Decay, 0.0, 5.0, 48, c, cfactor=2, max_levels=3,
                                            relax_only_cg=True, max_iter=6, abs_tol=0.0),
    "decay_tiny": lambda c: _solve(Decay, 0.0, 1.0, 5, c, cfactor=2, abs_tol=1e-12),
    "heat_storage_all": lambda c: _solve(lambda: Heat(33), 0.0, 1.0, 129, c, cfactor=4,
                                         storage="all", abs_tol=1e-10),
    "heat_final_fc": lambda c: _solve(lambda: Heat(17), 0.0, 1.0, 64, c, cfactor=2,
                                      final_fc_relax=True, max_iter=3, abs_tol=0.0),
    "logistic_fmg": lambda c: _solve(Logistic, 0.0, 6.0, 300, c, cfactor=4, fmg=True,
                                     abs_tol=1e-12),
    "opaque": lambda c: _solve(OpaqueDecay, 0.0, 2.0, 64, c, cfactor=4, abs_tol=1e-12),
    "warm_restart": _warm,
    "gradient_decay": lambda c: _gradient(lambda: DecayRate(running=True), 0.0, 2.0, 64, c,
                                          cfactor=2, abs_tol=1e-12),
    "gradient_heat": lambda c: _gradient(lambda: HeatControl(17, np.sin(np.arange(50.0))), 0.0,
                                         0.5, 50, c, cfactor=4, abs_tol=1e-11),
    "gradient_logistic_oneshot": lambda c: _gradient(LogisticParam, 0.0, 4.0, 97, c,
                                                     oneshot=(2, 2), evaluations=3, cfactor=2),
    "user_grid": _grid,
}
