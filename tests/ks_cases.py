"""XBraid's Kuramoto-Sivashinsky driver (drivers/drive-KS-Delta/drive-ks.cpp) run through
braidpy: the cases of tests/data/xbraid_ks.json (tests/data/make_xbraid_ks.py made it),
serially (test_ks.py) and at XBraid's rank count (mpi_ks_driver.py)."""

import json
from pathlib import Path

from mpi_world import assert_split

import braidpy
from braidpy.problems import KuramotoSivashinsky

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_ks.json").read_text())

#: The driver's flags: (problem keyword, solver keyword, type) and its defaults.
FLAGS = {"-nt": ("ntime", None, int), "-tf": ("lyapunov_times", None, float),
         "-nx": ("nx", None, int), "-len": ("length", None, float),
         "-niters": ("newton_iters", None, int), "-ml": (None, "max_levels", int),
         "-cf": (None, "cfactor", int), "-cf0": (None, "cfactor0", int),
         "-nu": (None, "nrelax", int), "-nu0": (None, "nrelax0", int),
         "-tol": (None, "tol", float), "-mi": (None, "max_iter", int)}


def cases(nranks=None):
    return [c for c in DATA["cases"] if nranks is None or c["nranks"] == nranks]


def setup(args):
    """(problem, app, options) of the driver's command-line arguments."""
    problem_kw, solver_kw, theta, k = {}, {}, False, 0
    while k < len(args):
        if args[k] == "-theta":
            theta, k = True, k + 1
            continue
        pk, sk, kind = FLAGS[args[k]]
        (problem_kw if pk else solver_kw)[pk or sk] = kind(args[k + 1])
        k += 2
    p = KuramotoSivashinsky(**problem_kw)
    return p, p.xbraid_app(theta=theta), p.xbraid_options(theta=theta, **solver_kw)


def run_case(case, comm=None, **extra):
    """What the driver prints for ``case`` (levels, iterations, %1.6e residuals) and
    u(tstop), gathered from the rank that holds it."""
    p, app, options = setup(case["args"])
    options.update(extra)
    r = braidpy.solve(app, p.tstart, p.tstop, p.ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    final = None if r.final is None else r.final[:p.nx].tolist()
    if comm is not None:
        final = [f for f in comm.allgather(final) if f is not None][0]
    return dict(levels=r.levels, iterations=r.iterations, final=final,
                history={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                             r.residuals)})


def run_at(nranks, comm):
    return {c["id"]: run_case(c, comm) for c in cases(nranks)}
