"""XBraid's Richardson cases (tests/data/xbraid_richardson.json) run through braidpy:
serially (test_richardson.py) and at XBraid's rank count (mpi_driver.py richardson).

ex-06 (u' = -4u - t + 1 on [0, 0.5], backward Euler or SDIRK-23) and ex-02 (the heat
equation of xbraid_parity_cases.Ex02) with -richardson, and richardson_driver.c: XBraid's
ex-01 problem (xbraid_parity_cases.Ex01, Ex01Res for -res) with Richardson extrapolation
(-rich) and error estimates (-est) of local order -order (2 unless given), whose step,
sync and final access write the estimates XBraid's statuses give.
"""

import json
import math
from pathlib import Path

import numpy as np
from mpi_world import assert_split
from xbraid_parity_cases import Ex01, Ex01Res, Ex02, Ex06, discretization_error, ex02_options

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_richardson.json").read_text())


def cases(kind, nranks=None):
    return [c for c in DATA["cases"]
            if c["kind"] == kind and (nranks is None or c["nranks"] == nranks)]


def history(r):
    return {str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations, r.residuals)}


class Ex06Sdirk(Ex06):
    """ex-06 with -time_discr 2: SDIRK-23 (ex-06.c's mysdirk23, its operation order)."""

    @staticmethod
    def _be(x, t0, t1):
        dt = t1 - t0
        gamma = (2.0 - math.sqrt(2.0)) / 2.0

        def implicit_solve(x, tstop, dt):
            return (-4.0 * x + 1 - tstop) / (1.0 + 4.0 * dt)

        k = implicit_solve(x, t0 + gamma * dt, gamma * dt)
        y = x + (1.0 - 2.0 * gamma) * dt * k
        x = x + k * dt / 2.0
        k = implicit_solve(y, t0 + (1.0 - gamma) * dt, gamma * dt)
        return x + k * (dt / 2.0)


def ex06_options(args):
    """braidpy options for ex-06's arguments (its defaults; storage 0 and access level 2
    change no value) and whether they choose SDIRK-23."""
    o = dict(max_levels=100, nrelax=1, cfactor=2, max_iter=100, min_coarse=8, skip=False)
    ntime, sdirk, k = 256, False, 0
    while k < len(args):
        if args[k] in ("-richardson", "-refinet"):
            # -refinet: braid_SetRefine(1), estimates on, the sync (ex-06.c's main)
            o.update(richardson=True) if args[k] == "-richardson" else \
                o.update(refine=True, est_error=True, tpoints_cutoff=o.get("tpoints_cutoff", 100))
            k += 1
            continue
        a, v = args[k], args[k + 1]
        if a == "-nt":
            ntime = int(v)
        elif a == "-time_discr":
            sdirk = v == "2"
        elif a == "-max_tpts":
            o["tpoints_cutoff"] = int(v)
        else:
            o[{"-ml": "max_levels", "-nu": "nrelax", "-cf": "cfactor"}[a]] = int(v)
        k += 2
    o["local_order"] = 3 if sdirk else 2
    # ex-06 scales tol by sqrt(dt) with dt from its default ntime 256, before parsing -nt.
    o["abs_tol"] = 1.0e-12 / math.sqrt((0.5 - 0.0) / (256 - 1))
    return ntime, sdirk, o


def refining(base, comm):
    """ex-06 -refinet's app: its sync keeps the largest estimate of all ranks (at the top
    of each cycle and after a refinement), and from iteration 2 on a fine step whose
    estimate exceeds 0.02 times it asks for its interval to be halved."""

    class Refining(base):
        max_estimate = -1.0

        def step(self, u, t0, t1, status):
            super().step(u, t0, t1, status)
            est = status.error_estimate()
            if status.level == 0 and status.iteration > 1 and est is not None and \
                    est > 0.02 * self.max_estimate:
                status.set_rfactor(2)

        def _step_stacked(self, U, t0s, t1s, status):
            super()._step_stacked(U, t0s, t1s, status)
            est, times = status.error_estimates(), status.times(0)
            if status.level > 0 or status.iteration <= 1 or est is None:
                return
            for k in range(len(U)):  # each state's estimate at its end, as step's
                e = float(est[int(np.searchsorted(times, float(t1s[k])))])
                if e > 0.02 * self.max_estimate:
                    status.set_rfactor(2, row=k)

        def sync(self, status):
            if status.phase in ("cycle", "refine"):
                est = status.error_estimates()
                mine = max([-1.0] + ([] if est is None else est.tolist()))
                self.max_estimate = mine if comm is None else comm.allreduce(mine, op=_max())

    return Refining


def _max():
    from mpi4py import MPI

    return MPI.MAX


def run_ex06(case, comm=None, batched=False):
    """Levels, iterations, residuals (%1.6e, by iteration and in printed order), the final
    number of time steps, and what ex-06 prints at the end: the final solution and its
    error against the exact solution (%.20f)."""
    ntime, sdirk, options = ex06_options(case["args"])
    base = Ex06Sdirk if sdirk else Ex06
    app = (refining(base, comm) if options.get("refine") else base)(batched=batched)
    r = braidpy.solve(app, 0.0, 0.5, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    exact = (1.0 / 16.0) * (-4.0 * 0.5 + 11.0 * math.exp(-4.0 * 0.5) + 5.0)
    u = float(r.final[0])
    return dict(levels=r.levels, iterations=r.iterations, history=history(r),
                printed=[[str(k), f"{v:1.6e}"] for k, v in zip(r.residual_iterations,
                                                                r.residuals)],
                ntime=len(r.times) - 1, sol=f"{u:.20f}", err=f"{abs(u - exact):.20f}")


def run_ex02(case, comm=None, batched=False):
    """ex-02 -richardson: levels, iterations, residuals and the final error (%1.4e)."""
    args = [a for a in case["args"] if a != "-richardson"]
    ntime, options = ex02_options(args)
    app = Ex02(batched=batched)
    r = braidpy.solve(app, 0.0, 2 * math.pi, ntime, comm=comm, richardson=True, local_order=2,
                      **options)
    assert_split(comm, r.owned, len(r.times))
    error = f"{discretization_error(r.final, r.times[-1]):1.4e}"
    return dict(levels=r.levels, iterations=r.iterations, history=history(r), error=error,
                stacked_calls=app.stacked_calls)


def driver_options(args):
    """braidpy options for richardson_driver.c's arguments (its defaults: ex-01's)."""
    o = dict(max_levels=2, min_coarse=2, cfactor=2, nrelax=1, max_iter=100, abs_tol=1e-6,
             skip=True, local_order=2)
    ntime, k = 10, 0
    flags = {"-rich": dict(richardson=True), "-est": dict(est_error=True),
             "-fmg": dict(fmg=True), "-res": {}, "-sc": {}}
    while k < len(args):
        if args[k] in flags:
            o.update(flags[args[k]])
            k += 1
            continue
        a, v = args[k], args[k + 1]
        if a == "-nt":
            ntime = int(v)
        else:
            name, kind = {"-ml": ("max_levels", int), "-mc": ("min_coarse", int),
                          "-cf": ("cfactor", int), "-nu": ("nrelax", int),
                          "-mi": ("max_iter", int), "-tol": ("abs_tol", float),
                          "-skip": ("skip", lambda s: bool(int(s))),
                          "-order": ("local_order", int)}[a]
            o[name] = kind(v)
        k += 2
    return ntime, o


class Recorder:
    """What richardson_driver.c writes per rank: the estimate at the end of each fine step
    on level 0, per sync the sum and count of the rank's estimates, at the end the
    estimate at every point."""

    def __init__(self, app, ntime, est_error):
        self.ntime = ntime
        self.est_error = est_error
        self.steps = {}
        self.lines = []
        self.app = app

    def step(self, t0, t1, status):
        if status.level == 0 and abs((t1 - t0) - 5.0 / self.ntime) < 1e-12:
            est = status.error_estimate()
            if est is not None:
                self.steps[(status.iteration, status.fine_index + 1)] = est

    def sync(self, status):
        if status.phase != "cycle":
            return
        est = status.error_estimates()
        n = len(status.owned(0)) if self.est_error else 0  # XBraid's GetNumErrorEst
        total = 0.0
        for e in (est if est is not None else [-1.0] * n):
            total += float(e)
        self.lines.append(f"sync {status.iteration} {total:.17e} {n}")

    def access(self, u, status):
        if status.done:
            est = status.error_estimate()
            self.lines.append(f"final {status.index} {-1.0 if est is None else est:.17e}")

    def estimate_lines(self):
        last = max((k for k, _ in self.steps), default=None)
        kept = [f"step {k} {i} {e:.17e}" for (k, i), e in sorted(self.steps.items())
                if k == last]
        return kept + self.lines


def driver_app(args, ntime, batched):
    base = Ex01Res if "-res" in args else Ex01
    recorder = None

    class App(base):
        if base is Ex01Res:
            def step(self, u, t0, t1, status, fstop=None, ustop=None):
                recorder.step(t0, t1, status)
                super().step(u, t0, t1, status, fstop=fstop, ustop=ustop)
        else:
            def step(self, u, t0, t1, status):
                recorder.step(t0, t1, status)
                super().step(u, t0, t1, status)

        def _step_stacked(self, U, t0s, t1s, status):
            for k in range(len(U)):  # each state as the driver's step sees it
                recorder.step(float(t0s[k]), float(t1s[k]), _Item(status, k))
            super()._step_stacked(U, t0s, t1s, status)

        def sync(self, status):
            recorder.sync(status)

        def access(self, u, status):
            recorder.access(u, status)

    app = App(record_syncs=False, batched=batched)
    if "-sc" in args:
        app.coarsen = lambda u, status: 0.75 * u
        app.refine = lambda e, status: e.copy()
    recorder = Recorder(app, ntime, "-est" in args)
    return app, recorder


class _Item:
    """One state of a batched step as a status: its level, iteration, fine index and the
    estimate at its end (status.error_estimates over the rank's points)."""

    def __init__(self, status, k):
        self.level, self.iteration = status.level, status.iteration
        self.fine_index = int(status.fine_indices[k])
        est, owned = status.error_estimates(), status.owned(0)
        end = self.fine_index + 1
        self._est = None if est is None or end not in owned else float(est[end - owned.start])

    def error_estimate(self):
        return self._est


def run_driver_case(case, comm=None, batched=False):
    """richardson_driver's printed residuals, iterations and final value, and every
    rank's estimate lines."""
    ntime, options = driver_options(case["args"])
    if "-res" in case["args"]:
        options["batch"] = False
    app, recorder = driver_app(case["args"], ntime, batched)
    r = braidpy.solve(app, 0.0, 5.0, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    if options.get("est_error"):
        assert np.array_equal(r.error_estimates, np.array(
            [float(line.split()[2]) for line in recorder.lines if line.startswith("final")]))
    final = f"{float(r.final[0]):.17e}"
    lines = recorder.estimate_lines()
    estimates = {"0": lines} if comm is None else \
        {str(k): v for k, v in enumerate(comm.allgather(lines))}
    return dict(iterations=r.iterations, history=history(r), final=final, estimates=estimates)


def run_at(nranks, comm):
    """Every case XBraid ran with ``nranks`` processes, chain by chain and batched."""
    out = {}
    for kind, run in (("ex06", run_ex06), ("ex02", run_ex02), ("driver", run_driver_case)):
        for case in cases(kind, nranks):
            out[case["id"]] = run(case, comm)
            out[case["id"] + "/batched"] = run(case, comm, batched=True)
    return out
