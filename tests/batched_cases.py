"""Batched vs unbatched case table, run in-process and under mpiexec (mpi_driver.py)."""

import math

import numpy as np
from apps import (BatchedDecay, BatchedDecayInto, BatchedHeat, BatchedLogistic,
                  BatchedOpaqueDecay, DenseResNet, DenseResNetInto, RunningResNet,
                  RunningResNetInto)
from mpi_cases import _summary

import braidpy


def _batches(result, comm):
    """step_batch calls of one solve, over all ranks."""
    calls = result.counts["step_batch"]
    return calls if comm is None else comm.allreduce(calls)


def _into_calls(app, comm):
    """Calls of the app's out-of-place hooks (step_stacked_into...), over all ranks."""
    calls = getattr(app, "into_calls", 0)
    return calls if comm is None else comm.allreduce(calls)


def _solve(make, t0, t1, n, comm, **opts):
    """{batch: summary} with and without batching on the same app type."""
    out = {}
    for batch in (True, False):
        app = make()
        result = braidpy.solve(app, t0, t1, n, comm=comm, batch=batch, **opts)
        out[str(batch)] = dict(_summary(result, comm), batched_calls=_batches(result, comm),
                               into_calls=_into_calls(app, comm))
    return out


def _warm(comm):
    out = {}
    for batch in (True, False):
        core = braidpy.Core(BatchedHeat(17), 0.0, 1.0, 61, comm=comm, cfactor=3, abs_tol=1e-10,
                            batch=batch)
        runs, calls = [], []
        for k in range(3):
            if k == 2:
                core.set_initial_condition(np.cos(np.linspace(0.0, math.pi, 17)))
            result = core.solve()
            runs.append(_summary(result, comm))
            calls.append(_batches(result, comm))
        # Every one of the three solves must take the batched path (or none of them).
        out[str(batch)] = dict(runs=runs, batched_calls=min(calls) if batch else max(calls),
                               into_calls=0)
    return out


def _gradient(make, n, comm, oneshot=None, evaluations=1, **opts):
    from braidpy.adjoint import GradientSolver

    out = {}
    for batch in (True, False):
        app = make()
        solver = GradientSolver(app, 0.0, 1.0, n, comm=comm, primal=dict(opts, batch=batch),
                                oneshot=oneshot)
        evals = []
        for _ in range(evaluations):
            g = solver.evaluate()
            local = sorted([k, [np.asarray(x).tolist() for x in v]]
                           for k, v in g.gradients.items())
            parts = [local] if comm is None else comm.allgather(local)
            evals.append(dict(objective=g.objective, gradients=sorted(x for p in parts for x in p),
                              primal=_summary(g.primal, comm), adjoint=_summary(g.adjoint, comm)))
        out[str(batch)] = dict(runs=evals, batched_calls=_batches(g.adjoint, comm),
                               into_calls=_into_calls(app, comm))
    return out


BATCHED_CASES = {
    "decay_cf2": lambda c: _solve(BatchedDecay, 0.0, 5.0, 128, c, cfactor=2, abs_tol=1e-12),
    "decay_cf4_uneven": lambda c: _solve(BatchedDecay, 0.0, 5.0, 97, c, cfactor=4,
                                         abs_tol=1e-12),
    "decay_cf3_fmg": lambda c: _solve(BatchedDecay, 0.0, 5.0, 250, c, cfactor=3, fmg=True,
                                      fmg_vcycles=2, abs_tol=1e-12),
    "decay_nrelax0": lambda c: _solve(BatchedDecay, 0.0, 5.0, 99, c, cfactor=2, nrelax=0,
                                      abs_tol=1e-12),
    "decay_nrelax2": lambda c: _solve(BatchedDecay, 0.0, 5.0, 99, c, cfactor=4, nrelax=2,
                                      abs_tol=1e-12),
    "decay_levels2_cf16": lambda c: _solve(BatchedDecay, 0.0, 5.0, 203, c, cfactor=16,
                                           max_levels=2, abs_tol=1e-12),
    "decay_cf16_short_ranks": lambda c: _solve(BatchedDecay, 0.0, 5.0, 40, c, cfactor=16,
                                               max_levels=2, nrelax=2, storage="all",
                                               abs_tol=1e-12),
    "decay_levels3_mixed": lambda c: _solve(BatchedDecay, 0.0, 5.0, 200, c,
                                            cfactor={0: 8, 1: 2}, max_levels=3,
                                            nrelax={0: 0, 1: 2}, abs_tol=1e-12),
    "decay_levels4": lambda c: _solve(BatchedDecay, 0.0, 5.0, 131, c, cfactor=3, max_levels=4,
                                      abs_tol=1e-12),
    "decay_one_level": lambda c: _solve(BatchedDecay, 0.0, 5.0, 33, c, max_levels=1),
    "decay_noskip_storage_all": lambda c: _solve(BatchedDecay, 0.0, 5.0, 70, c, cfactor=4,
                                                 skip=False, storage="all", abs_tol=1e-12),
    "decay_seq_soln": lambda c: _solve(BatchedDecay, 0.0, 5.0, 77, c, cfactor=2,
                                       seq_soln=True),
    "decay_relax_only_cg": lambda c: _solve(BatchedDecay, 0.0, 5.0, 48, c, cfactor=2,
                                            max_levels=3, relax_only_cg=True, max_iter=6,
                                            abs_tol=0.0),
    "decay_access2": lambda c: _solve(BatchedDecay, 0.0, 5.0, 50, c, cfactor=5,
                                      access_level=2, abs_tol=1e-12),
    "decay_access0": lambda c: _solve(BatchedDecay, 0.0, 5.0, 50, c, cfactor=5,
                                      access_level=0, abs_tol=1e-12),
    "decay_tiny": lambda c: _solve(BatchedDecay, 0.0, 1.0, 5, c, cfactor=2, abs_tol=1e-12),
    "heat_final_fc": lambda c: _solve(lambda: BatchedHeat(17), 0.0, 1.0, 64, c, cfactor=4,
                                      final_fc_relax=True, max_iter=3, abs_tol=0.0),
    "logistic_fmg": lambda c: _solve(BatchedLogistic, 0.0, 6.0, 300, c, cfactor=4, fmg=True,
                                     abs_tol=1e-12),
    "opaque_list": lambda c: _solve(BatchedOpaqueDecay, 0.0, 2.0, 64, c, cfactor=4,
                                    abs_tol=1e-12),
    "resnet_cf8": lambda c: _solve(lambda: DenseResNet(96), 0.0, 2.0, 96, c, cfactor=8,
                                   max_levels=2, abs_tol=1e-12),
    # Out-of-place steps (step_stacked_into): chains start from their C-points where they
    # lie; a storing final sweep writes every position where it is kept.
    "decay_into_cf4": lambda c: _solve(BatchedDecayInto, 0.0, 5.0, 97, c, cfactor=4,
                                       abs_tol=1e-12),
    "decay_into_storage_all": lambda c: _solve(BatchedDecayInto, 0.0, 5.0, 70, c, cfactor=4,
                                               skip=False, storage="all", abs_tol=1e-12),
    "decay_into_levels3_fmg": lambda c: _solve(BatchedDecayInto, 0.0, 5.0, 250, c,
                                               cfactor=3, max_levels=3, fmg=True,
                                               storage="all", abs_tol=1e-12),
    "warm_restart": _warm,
    "gradient_resnet": lambda c: _gradient(lambda: DenseResNet(64), 64, c, cfactor=4,
                                           abs_tol=1e-12),
    "gradient_resnet_running": lambda c: _gradient(lambda: RunningResNet(50), 50, c, cfactor=5,
                                                   nrelax=0, abs_tol=1e-12),
    "gradient_resnet_oneshot": lambda c: _gradient(lambda: DenseResNet(45), 45, c,
                                                   oneshot=(2, 2), evaluations=2, cfactor=3),
    "gradient_resnet_into": lambda c: _gradient(lambda: DenseResNetInto(64), 64, c, cfactor=4,
                                                abs_tol=1e-12),
    "gradient_resnet_into_running": lambda c: _gradient(lambda: RunningResNetInto(50), 50, c,
                                                        cfactor=5, nrelax=0, abs_tol=1e-12),
    "gradient_resnet_into_oneshot": lambda c: _gradient(lambda: DenseResNetInto(45), 45, c,
                                                        oneshot=(1, 2), evaluations=2,
                                                        cfactor=3, nrelax=0),
}
