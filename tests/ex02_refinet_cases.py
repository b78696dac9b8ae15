"""XBraid's ex-02 with -refinet (temporal refinement driven by Richardson error estimates)
run through braidpy, and its saved output (tests/data/xbraid_ex02_refinet.json, made by
tests/data/make_xbraid_ex02_refinet.py) as cases: serially (test_ex02_refinet.py) and at
XBraid's rank count (mpi_driver.py ex02_refinet).

ex-02.c with -refinet TOL: braid_SetRichardsonEstimation(core, est_error=1, richardson,
local_order=2), braid_SetRefine(core, 1), braid_SetTPointsCutoff(core, 10000); its step
takes the backward Euler step and then, on level 0, reads the estimate at the step's end
(braid_StepStatusGetSingleErrorEstStep: -1 until the first restriction from the fine
level has made one) and asks for rfactor = (int) ceil(sqrt(estimate / TOL)), or 1 without
an estimate. In braidpy: refine=True, est_error=True, local_order=2, tpoints_cutoff=10000
and the same request through status.set_rfactor. The heat equation, its random initial
guess and XBraid's other options are xbraid_parity_cases.Ex02 and ex02_options; with -res
(ex-02's residual, braid_SetResidual) the app is residual_cases.Ex02Res, which has no
batched step. (XBraid's ex-02 stops with a segmentation fault under -refinet -sc, so
refinement with spatial coarsening, which braidpy refuses, has no reference here.)
"""

import json
import math
from pathlib import Path

from mpi_world import assert_split
from residual_cases import Ex02Res
from xbraid_parity_cases import Ex02, discretization_error, ex02_options

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_ex02_refinet.json").read_text())


def cases(nranks=None):
    return [c for c in DATA["cases"] if nranks is None or c["nranks"] == nranks]


def refinet_options(args):
    """ex-02's arguments with -refinet TOL (and -richardson, -res): the grid size,
    braidpy's options and TOL."""
    args = list(args)
    k = args.index("-refinet")
    error_tol = float(args[k + 1])
    del args[k:k + 2]
    extra = dict(refine=True, est_error=True, local_order=2, tpoints_cutoff=10000)
    if "-richardson" in args:
        args.remove("-richardson")
        extra["richardson"] = True
    if "-res" in args:
        args.remove("-res")
        extra["batch"] = False  # Ex02Res steps one state at a time
    ntime, options = ex02_options(args)
    return ntime, dict(options, **extra), error_tol


def rfactor(estimate, error_tol):
    """ex-02's request: ceil(sqrt(estimate / TOL)) with an estimate, else 1. A factor
    below 1 (an estimate of 0) is one XBraid's refinement reports and replaces by 1."""
    if estimate is None:
        return 1
    return max(1, int(math.ceil(math.sqrt(estimate / error_tol))))


class Ex02Refinet(Ex02):
    """ex-02 with -refinet: each fine step asks for the refinement its estimate calls for;
    the sync (phase "refine", after each rebuild) records the new grid's size."""

    def __init__(self, error_tol, batched=False):
        super().__init__(batched=batched)
        self.error_tol = error_tol
        self.grids = []

    def step(self, u, t0, t1, status):
        super().step(u, t0, t1, status)
        if status.level == 0:
            status.set_rfactor(rfactor(status.error_estimate(), self.error_tol))

    def _step_stacked(self, U, t0s, t1s, status):
        super()._step_stacked(U, t0s, t1s, status)
        if status.level > 0:
            return
        est, start = status.error_estimates(), status.owned(0).start
        for k in range(len(U)):  # each state's estimate at its end, as step reads it
            end = int(status.fine_indices[k]) + 1
            status.set_rfactor(rfactor(None if est is None else float(est[end - start]),
                                       self.error_tol), row=k)

    def sync(self, status):
        if status.phase == "refine":
            self.grids.append(status.ntime)


class Ex02ResRefinet(Ex02Res):
    """ex-02 -res with -refinet: Ex02Res's step (fstop added first) and residual, the
    request and the grid record of Ex02Refinet."""

    def __init__(self, error_tol):
        super().__init__(33)
        self.error_tol = error_tol
        self.grids = []
        self.stacked_calls = 0

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        super().step(u, t0, t1, status, fstop=fstop, ustop=ustop)
        if status.level == 0:
            status.set_rfactor(rfactor(status.error_estimate(), self.error_tol))

    sync = Ex02Refinet.sync


def run_case(case, comm=None, batched=False):
    """What ex-02 -refinet prints and writes for ``case``: residuals (%1.6e, in printed
    order), the refined grid sizes, iteration, level and refinement counts, the final
    grid's size and times (%.14e), the solution at the final time (%.14e) and its
    discretization error (%1.4e)."""
    ntime, options, error_tol = refinet_options(case["args"])
    app = Ex02ResRefinet(error_tol) if "-res" in case["args"] else \
        Ex02Refinet(error_tol, batched=batched)
    r = braidpy.solve(app, 0.0, 2 * math.pi, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    final = None
    if r.final is not None:  # on the rank that owns the last point
        final = ([f"{v:.14e}" for v in r.final.tolist()],
                 f"{discretization_error(r.final, r.times[-1]):1.4e}")
    if comm is not None:
        final = [f for f in comm.allgather(final) if f is not None][0]
    return dict(printed=[[str(k), f"{v:1.6e}"] for k, v in zip(r.residual_iterations,
                                                               r.residuals)],
                grids=app.grids, iterations=r.iterations, nlevels=r.levels,
                refinements=r.refinements, ntime=len(r.times) - 1,
                times=[f"{float(t):.14e}" for t in r.times], final=final[0], error=final[1],
                stacked_calls=app.stacked_calls)


KEYS = ("printed", "grids", "iterations", "nlevels", "refinements", "ntime", "times",
        "final", "error")


def batched_too(case):
    """Whether braidpy also runs ``case`` with a batched step (not with -res)."""
    return "-res" not in case["args"]


def run_at(nranks, comm):
    """Every case XBraid ran with ``nranks`` processes, chain by chain and batched."""
    out = {}
    for case in cases(nranks):
        out[case["id"]] = run_case(case, comm)
        if batched_too(case):
            out[case["id"] + "/batched"] = run_case(case, comm, batched=True)
    return out
