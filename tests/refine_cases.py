"""XBraid's examples/ex-01-refinement reimplemented for braidpy, and its saved output
(tests/data/xbraid_refine.json, made by tests/data/make_xbraid_refine.py) as cases."""

import json
import math
from pathlib import Path

import numpy as np

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_refine.json").read_text())
CASES = DATA["cases"]


class Ex01Refinement(braidpy.App):
    """ex-01-refinement: u' = -u on [0, 5], u(0) = 1, guess 0.456, backward Euler; the
    step asks for refinement as the example's -refine 1..4 do (forward Euler's distance
    as the local error estimate for 2), with -max_rfactor's limit."""

    def __init__(self, refine, tol=1e-6, limit_rfactor=-1):
        self.refine = refine
        self.tol = tol
        self.limit_rfactor = limit_rfactor
        self.syncs = 0

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    def norm(self, u):
        return math.sqrt(u[0] * u[0])

    def sync(self, status):
        if status.phase == "refine":
            self.syncs += 1

    def rfactor(self, v, u, t0, t1, status):
        """What the example's step asks for (None: no request)."""
        dt = t1 - t0
        if not (status.level == 0 and status.nrefine < 8):
            return None
        rf = 1
        if self.refine == 1:
            if dt > 0.001 and t0 <= 2.5 + 0.00001 and 2.5 - 0.00001 <= t1:
                rf = 100
        elif self.refine == 2:
            lte = abs(u - (1.0 - dt) * v)
            x = 0.5 * lte / u / self.tol
            # C's (int)ceil(sqrt(x)): NaN (x < 0) and overflow give INT_MIN on x86, so 1.
            rf = int(math.ceil(math.sqrt(x))) if x >= 0 and math.sqrt(x) < 2**31 else 1
        elif self.refine == 3:
            if dt > 0.001 and t0 <= 2.5 + 0.00001 and 2.5 - 0.00001 <= t1:
                rf = 2
                status.set_refinement_dt_values(rf, [dt / float(rf)] * (rf - 1))
        elif self.refine == 4:
            if status.nrefine < 4 and (status.fine_index + 1) % 2 == 0:
                rf = 3
        rf = max(rf, 1)
        if self.limit_rfactor > 0:
            rf = min(rf, self.limit_rfactor)
        return rf

    def step(self, u, t0, t1, status):
        v = u[0]
        u[0] = 1.0 / (1.0 + (t1 - t0)) * v
        rf = self.rfactor(v, u[0], t0, t1, status)
        if rf is not None:
            status.set_rfactor(rf)


def options(args):
    """braidpy's options for the example's command-line arguments."""
    a = list(args)
    opts = dict(max_levels=15, abs_tol=1e-6, cfactor=2, refine=True, storage=-1)
    app = {"refine": 0}
    while a:
        key = a.pop(0)
        if key == "-refine":
            app["refine"] = int(a.pop(0))
        elif key == "-fmg":
            opts["fmg"] = True
        elif key == "-MaxTotalRefine":
            opts["max_refinements"] = int(a.pop(0))
        elif key == "-incMaxLvl":
            opts["incr_max_levels"] = True
        elif key == "-ml":
            opts["max_levels"] = int(a.pop(0))
        elif key == "-max_rfactor":
            app["limit_rfactor"] = int(a.pop(0))
        elif key == "-storage":
            opts["storage"] = int(a.pop(0))
        elif key == "-sync":
            app["sync"] = True
        else:
            raise ValueError(key)
    return opts, app


def make(args):
    opts, kw = options(args)
    sync = kw.pop("sync", False)
    app = Ex01Refinement(**kw)
    if not sync:
        app.sync = None  # no sync callback
    return app, opts


def printed(result):
    """XBraid's lines for a braidpy Result: every (k, ||r_k||) as '%1.6e'."""
    return [[k, f"{r:1.6e}"] for k, r in zip(result.residual_iterations, result.residuals)]


def run_case(case, comm=None, batched=False):
    """What ex-01-refinement prints for ``case``, run on ``comm``, and every rank's share
    of the final fine grid."""
    from mpi_world import assert_split

    app, opts = make(case["args"])
    if batched:
        from test_refine import Stacked

        stacked = Stacked(app.refine, limit_rfactor=app.limit_rfactor)
        stacked.sync = app.sync if app.sync is None else stacked.sync
        app = stacked
    r = braidpy.solve(app, 0.0, 5.0, 100, comm=comm, **opts)
    assert_split(comm, r.owned, len(r.times))
    shares = [len(r.owned)] if comm is None else comm.allgather(len(r.owned))
    return dict(residuals=printed(r), ntime=len(r.times) - 1, iterations=r.iterations,
                levels=r.levels, refinements=r.refinements, final_u=f"{r.final[0]:.14e}",
                final_t=f"{r.times[-1]:.14e}", shares=shares, final_hex=float(r.final[0]).hex(),
                history_hex=[float(v).hex() for v in r.residuals],
                syncs=app.syncs if app.sync is not None else None,
                steps_batched=r.counts.get("step_batch", 0))


class FailsWhileRefining(Ex01Refinement):
    """-refine 1, whose step raises on one rank while the grid is being rebuilt."""

    def __init__(self, rank):
        super().__init__(1)
        self.rank = rank
        self.sync = None

    def step(self, u, t0, t1, status):
        if status.phase == "refine" and self.rank == 1:
            raise ZeroDivisionError("step failed while refining")
        super().step(u, t0, t1, status)


def run_at(nranks, comm):
    """Every case XBraid ran at nranks, chain by chain and batched, and a failing step."""
    out = {"cases": [], "failure": None}
    for case in [c for c in CASES if c["ranks"] == nranks]:
        got = run_case(case, comm)
        batched = run_case(case, comm, batched=True) if case["args"][1] != "2" else None
        out["cases"].append(dict(args=case["args"], got=got, batched=batched))
    try:
        braidpy.solve(FailsWhileRefining(comm.rank), 0.0, 5.0, 100, comm=comm, max_levels=15,
                      abs_tol=1e-6, refine=True)
        outcome = ("ok", "")
    except BaseException as exc:  # noqa: BLE001 - every rank's outcome is reported
        outcome = (type(exc).__name__, str(exc))
    out["failure"] = comm.gather(outcome)
    return out
