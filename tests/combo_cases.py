"""XBraid runs with two (or three) features at once, tests/data/xbraid_combos.json (made
by tests/data/make_xbraid_combos.py), as braidpy runs of the same problems:

* ex-02 (1D heat, backward Euler) with -res (App.residual, the step's fstop), -sc
  (App.coarsen/refine, ex-02's bilinear coarsening) and -CWt (crelax_weight) in pairs and
  all three;
* drive-burgers-1D's linear advection with -sc 1 and -CWt;
* ex-01-expanded with -res -periodic (and -sync, -fmg);
* tests/data/xbraid_drivers/parity_driver.c with -res and -periodic, -CWt, -sync, -fmg.

Periodic with a residual: XBraid calls the residual of the step that wraps from the last
point to point 0 with the status times (t_{n-1}, t_0) (hierarchy.c sets the time left of
point 0 from the last point; only its step, base.c, moves the end to tstop), braidpy with
(t_{n-1}, tstop), the interval its step integrates. The periodic residual apps here read
the wrap's end as XBraid gives it (``XBraidWrap``), so that every other operation is
compared; test_feature_combinations.py also checks braidpy's own times.

Run serially by test_feature_combinations.py and at XBraid's rank count by mpi_driver.py
(suite "combos"). Apps with a residual run unbatched here (test_residual.py runs them
batched); the others run chain by chain and batched (step_stacked).
"""

import json
import math
from pathlib import Path

import residual_cases
import spatial_cases
from mpi_world import assert_split
from xbraid_parity_cases import Ex01Res, run_driver_case

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_combos.json").read_text())


class _EndsAt:
    """A step status whose t1 reads ``t1``; everything else is the status's own."""

    def __init__(self, status, t1):
        self._status, self.t1 = status, t1

    def __getattr__(self, name):
        return getattr(self._status, name)


class XBraidWrap:
    """Mixin for a periodic app with a residual: the residual of the wrap step (the only
    step that ends at tstop) sees t1 = tstart, as XBraid's does."""

    def residual(self, ustop, r, status):
        if status.t1 == self.tstop:
            status = _EndsAt(status, self.tstart)
        super().residual(ustop, r, status)


class WrapEx01Res(XBraidWrap, Ex01Res):
    pass


class WrapEx01Expanded(XBraidWrap, residual_cases.Ex01Res):
    pass


def cases(kind=None, nranks=None):
    return [c for c in DATA["cases"] if (kind is None or c["kind"] == kind)
            and (nranks is None or c["nranks"] == nranks)]


class Heat(residual_cases.Ex02Res):
    """ex-02 with any of -res, -sc: Ex02Res's step (fstop added first) and residual, and
    ex-02's spatial coarsening (spatial_cases.Heat's) when sc."""

    def __init__(self, nspace=33, res=True, sc=True, batched=False):
        super().__init__(nspace)
        self.limit = math.floor(math.log2(nspace)) - 1
        if sc:
            self.coarsen = lambda f, s: spatial_cases.Heat._coarsen(self, f, s)
            self.refine = lambda c, s: spatial_cases.Heat._refine(self, c, s)
        if batched:
            self.step_stacked = self._step_stacked

    def _step_stacked(self, U, t0s, t1s, status):
        for k in range(U.shape[0]):
            self.step(U[k], float(t0s[k]), float(t1s[k]), status)


class HeatNoResidual(Heat):
    """Heat without a residual (ex-02 without -res)."""

    residual = None


def _arg(args, name, default, kind=int):
    return kind(args[args.index(name) + 1]) if name in args else default


def run_ex02(case, comm=None, batched=False):
    """Levels, iterations, residuals (%1.6e by iteration) and the discretization error
    at the final time (%1.4e), as ex-02 prints them."""
    a = case["args"]
    res, sc = "-res" in a, "-sc" in a
    ntime, nspace = 64, 33
    tstop = 2 * math.pi
    tol = 1e-7 / (math.sqrt(tstop / (ntime - 1)) * math.sqrt(math.pi / (nspace - 1)))
    kind = Heat if res else HeatNoResidual
    app = kind(nspace, res=res, sc=sc, batched=batched)
    options = dict(max_levels=_arg(a, "-ml", 2), nrelax=_arg(a, "-nu", 1), cfactor=2,
                   abs_tol=tol, max_iter=30, skip=bool(_arg(a, "-skip", 0)), min_coarse=3,
                   crelax_weight=_arg(a, "-CWt", 1.0, float))
    if res:
        options["batch"] = False
    r = braidpy.solve(app, 0.0, tstop, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    error = None if r.final is None else f"{app.error(r.final, tstop):1.4e}"
    if comm is not None:
        error = [e for e in comm.allgather(error) if e is not None][0]
    return dict(levels=r.levels, iterations=r.iterations, error=error,
                residuals={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                               r.residuals)},
                batched=r.counts.get("step_batch", 0) > 0)


def run_burgers(case, comm=None, batched=False):
    sc = int(case["args"][case["args"].index("-sc") + 1])
    got = spatial_cases.run_case(dict(example="drive-burgers-1D", sc=sc), comm=comm,
                                 batched=batched,
                                 crelax_weight=_arg(case["args"], "-CWt", 1.0, float))
    return dict(levels=got["levels"], iterations=got["iterations"], final=got["final"],
                residuals={str(k): v for k, v in enumerate(got["residuals"])},
                batched=got["batched"])


def run_ex01x(case, comm=None, batched=False, xbraid_wrap=True):
    a = case["args"]
    app, tstart, tstop, ntime, opts = residual_cases.problem(
        dict(example="ex-01-expanded", args=" ".join(a)))
    if "-periodic" in a and xbraid_wrap:
        app.__class__ = WrapEx01Expanded
    calls = []
    if "-sync" in a:
        app.sync = lambda status: calls.append(status.iteration)
    r = braidpy.solve(app, tstart, tstop, ntime, comm=comm, batch=False,
                      periodic="-periodic" in a, **opts)
    assert_split(comm, r.owned, len(r.times))
    return dict(levels=r.levels, iterations=r.iterations, syncs=len(calls),
                residuals={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                               r.residuals)})


def expected(case):
    """XBraid's numbers in the form the run_* functions return."""
    out = dict(iterations=case["iterations"], residuals=case["residuals"])
    if case["kind"] == "driver":
        out["final"] = case["final"]
        if "full" in case:
            out["full"] = case["full"]
    if case["kind"] != "driver":
        out["levels"] = case["nlevels"]
    if case["kind"] == "ex02":
        out["error"] = case["error"]
    if case["kind"] == "burgers":
        out["final"] = case["final"]
    return out


def batchable(case):
    return "-res" not in case["args"]


def run(case, comm=None, batched=False):
    """braidpy's numbers for ``case`` (a dict with the keys of expected(case) and a few
    more), on ``comm`` if given."""
    if case["kind"] == "driver":
        return run_driver_case(case, comm, batched=batched,
                               res_class=WrapEx01Res if "-periodic" in case["args"] else Ex01Res)
    return dict(ex02=run_ex02, burgers=run_burgers, ex01x=run_ex01x)[case["kind"]](
        case, comm, batched)


def run_at(nranks, comm):
    """Every case XBraid ran with ``nranks`` processes; the batchable ones batched too."""
    out = {}
    for case in cases(nranks=nranks):
        out[case["id"]] = run(case, comm)
        if batchable(case):
            out[case["id"] + "/batched"] = run(case, comm, batched=True)
    return out
