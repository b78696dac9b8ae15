"""XBraid's saved outputs (tests/data/xbraid_ex01_golden.json) as runnable cases, serially
(test_xbraid_golden.py) and at the rank count XBraid used (mpi_driver.py xbraid).

The JSON and tests/data/XBRAID_GOLDEN_NOTES.md say where each number comes from; every
number compared here was printed by XBraid.
"""

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from mpi_world import assert_split

import braidpy

CASES = json.loads((Path(__file__).parent / "data" / "xbraid_ex01_golden.json").read_text())
SUPPORTED = {"relax_only_cg"}


def _supported(requirement):
    # braid_SetRefine(1) with -refine 0 refines nothing: plain MGRIT.
    return requirement in SUPPORTED or requirement.startswith("braid_SetRefine(1)")


class Ex01(braidpy.App):
    """XBraid's ex-01: u' = -u, u(0) = 1, guess 0.456, backward Euler, |u| = sqrt(u*u)."""

    def __init__(self, guess):
        self.guess = guess

    def init(self, t):
        return np.array([1.0 if t == self.tstart else self.guess])

    def step(self, u, t0, t1, status):
        # C's `1./(1. + tstop-tstart)*u`, evaluated left to right.
        u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

    def norm(self, u):
        return float(np.sqrt(u[0] * u[0]))


def ex05_laplacian(nx):
    """ex_05.pyx's generate_spatial_disc: [1, -2, 1]/dx^2 from padded difference
    matrices, periodic entries copied from row 2 (XBraid's own construction)."""
    dx = 1.0 / (nx - 1.0)
    o = np.ones((2, nx + 10))
    o[0, :] *= -1.0
    dplus = (1.0 / dx) * sp.spdiags(o, [0, 1], nx + 10, nx + 10, format="csr")
    dminus = (1.0 / dx) * sp.spdiags(o, [-1, 0], nx + 10, nx + 10, format="csr")
    L = (dplus @ dminus)[5:5 + nx, 5:5 + nx].tolil()
    L[0, -1], L[0, -2], L[1, -1] = L[2, 1], L[2, 0], L[2, 0]
    L[-1, 0], L[-1, 1], L[-2, 0] = L[2, 3], L[2, 4], L[2, 4]
    return L.toarray()


class Ex05(braidpy.App):
    """XBraid's ex_05 (Cython, the periodic heat version): u_t = u_xx on [0, 1], backward
    Euler with (I - dt L)^{-1} formed once per level at its first step, sin(pi x) at
    t = 0 and 6.123451 elsewhere, |u| = sqrt(u.u)."""

    def __init__(self, nx):
        self.nx = nx
        self.L = ex05_laplacian(nx)
        self.phi = {}

    def init(self, t):
        if t == 0.0:
            return np.sin(np.pi * np.linspace(0, 1.0, self.nx))
        return np.full(self.nx, 6.123451)

    def step(self, u, t0, t1, status):
        if status.level not in self.phi:
            self.phi[status.level] = np.linalg.inv(np.eye(self.nx) - (t1 - t0) * self.L)
        u[:] = self.phi[status.level] @ u

    def norm(self, u):
        return float(np.sqrt(np.dot(u, u)))


def usable(case):
    if case["example"].startswith("ex_05"):
        return True
    if not case["example"].startswith("ex-01") or "final_residual_norm" not in case:
        return False
    if not all(_supported(r) for r in case.get("requires", [])):
        return False
    return "-refine" not in case["command"] or "-refine 0" in case["command"]


def _options(o):
    nrelax = o["nrelax"]
    if isinstance(nrelax, dict):
        nrelax = {(k if k == "default" else int(k)): v for k, v in nrelax.items()}
    cfactor = o["cfactor"]
    if "cfactor0" in o:
        cfactor = {0: o["cfactor0"], "default": o["cfactor"]}
    tol = o.get("abs_tol", 1e-6)
    if "abs_tol_note" in o:  # Fortran single-precision literal
        tol = 9.999999974752427e-07
    return dict(max_levels=o["max_levels"], min_coarse=o["min_coarse"], cfactor=cfactor,
                nrelax=nrelax, max_iter=o["max_iter"], abs_tol=tol, skip=bool(o["skip"]),
                fmg=bool(o["fmg"]), relax_only_cg=bool(o.get("relax_only_cg", 0)))


def distinct():
    """The usable cases, one per (example, options); options include the rank count."""
    seen, out = set(), []
    for c in CASES:
        if not usable(c):
            continue
        key = (c["example"], json.dumps(c["options"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def run(case, comm=None):
    """What XBraid prints for ``case``: levels, iterations, the final residual norm and
    the per-iteration history, formatted as XBraid formats them."""
    o = case["options"]
    if case["example"].startswith("ex_05"):
        app = Ex05(o["nx"])
    else:
        app = Ex01(0.4560000002384186 if "init_other_note" in o else o.get("init_other", 0.456))
    r = braidpy.solve(app, o["tstart"], o["tstop"], o["ntime"], comm=comm, **_options(o))
    assert_split(comm, r.owned, len(r.times))
    return dict(levels=r.levels, iterations=r.iterations,
                final=f"{r.residuals[-1] if r.residuals else -1.0:e}",
                history={str(k): f"{v:e}" for k, v in zip(r.residual_iterations, r.residuals)})


def at_rank_count(nranks):
    """The cases XBraid ran with ``nranks`` processes (ex_05's saved statistics cover
    1, 2 and 3 processes; its history was printed by a serial run)."""
    out = [c for c in distinct() if c["options"]["nprocs"] == nranks]
    if nranks in (2, 3):
        out += [c for c in distinct() if c["example"].startswith("ex_05")]
    return out


def run_at(nranks, comm):
    return {c["id"]: run(c, comm) for c in at_rank_count(nranks)}
