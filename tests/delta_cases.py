"""XBraid's ex-07 (the Lorenz system with Delta correction), operation for operation.

Forward Euler ``u <- u + h f(u)`` and its Jacobian ``F = I + h J(u)`` applied to each
basis vector, the inner product and the norm summed in XBraid's order, so that the
iterates are XBraid's bit for bit. ``run(argv)`` maps ex-07's command-line options
(``-rank``, ``-ml``, ``-tstop``, ``-ntime``, ``-noLyap``, ``-fcfLyap``, ``-defer-lvl``,
``-defer-iter``, ``-nu``, ``-cf``) to braidpy's Options, as ex-07's main() sets them.
"""

from __future__ import annotations

import math

import numpy as np

import braidpy

SIGMA, RHO, BETA = 10.0, 28.0, 8.0 / 3.0
U0 = (9.614521163788712, 17.519127090401067, 13.94230712158098)


def lorenz(u):
    return [SIGMA * (u[1] - u[0]), u[0] * (RHO - u[2]) - u[1], u[0] * u[1] - BETA * u[2]]


def euler_matrix(u, h):
    """I + h J(u), entry by entry as ex-07's MatAxpy."""
    J = [[-SIGMA, SIGMA, 0.0], [RHO - u[2], -1.0, -u[0]], [u[1], u[0], -BETA]]
    return [[h * J[i][j] + (1.0 if i == j else 0.0) for j in range(3)] for i in range(3)]


def dot(u, v):
    s = 0.0
    for i in range(3):
        s += float(u[i]) * float(v[i])
    return s


class Ex07(braidpy.App):
    """ex-07's callbacks; ``propagate=False`` plants a bug (the basis is not stepped)."""

    def __init__(self, propagate=True, sign=1.0):
        self.propagate = propagate
        self.sign = sign  # -1: the step propagates -F psi (a planted sign error)
        self.final = None
        self.final_basis = None

    def init(self, t):
        return np.array(U0)

    def init_basis(self, t, index):
        e = np.zeros(3)
        e[index] = 1.0
        return e

    def inner_prod(self, u, v):
        return dot(u, v)

    def norm(self, u):
        return math.sqrt(dot(u, u))

    def step(self, u, t0, t1, status):
        h = t1 - t0
        uu = [float(x) for x in u]
        basis = status.basis
        F = euler_matrix(uu, h) if basis else None
        k1 = lorenz(uu)
        for i in range(3):
            u[i] = h * k1[i] + uu[i]
        if not self.propagate:
            return
        for psi in basis:
            tmp = [float(x) for x in psi]
            for i in range(3):
                s = 0.0
                for j in range(3):
                    s += F[i][j] * tmp[j]
                psi[i] = self.sign * s

    def access(self, u, status):
        if status.t == self.tstop:
            self.final = u.copy()
            self.final_basis = [b.copy() for b in status.basis]


def options(argv):
    """braidpy Options for ex-07's command line ``argv`` (a list of str) and its tstop."""
    o = dict(max_levels=3, nrelax=0, abs_tol=1e-6, cfactor=2, max_iter=100, skip=False)
    rank, lyap, relax_lyap, defer_lvl, defer_iter, tlyap = 3, True, False, 0, 0, 4.0
    ntime = 2048
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "-rank":
            rank = int(args.pop(0))
        elif a == "-ml":
            o["max_levels"] = int(args.pop(0))
        elif a == "-nu":
            o["nrelax"] = int(args.pop(0))
        elif a == "-cf":
            o["cfactor"] = int(args.pop(0))
        elif a == "-tstop":
            tlyap = float(args.pop(0))
        elif a == "-ntime":
            ntime = int(args.pop(0))
        elif a == "-noLyap":
            lyap = False
        elif a == "-fcfLyap":
            relax_lyap = True
        elif a == "-defer-lvl":
            defer_lvl = int(args.pop(0))
        elif a == "-defer-iter":
            defer_iter = int(args.pop(0))
        else:
            raise ValueError(f"ex-07 option {a!r} not mapped")
    if rank > 0:
        o.update(delta_rank=rank, delta_defer_level=defer_lvl, delta_defer_iter=defer_iter,
                 lyapunov_relax=relax_lyap, lyapunov_estimate=lyap,
                 lyapunov_exponents=relax_lyap or lyap)
    return o, ntime, math.log(10.0) / 0.9 * tlyap


def run(argv, comm=None, app=None):
    """Solve ex-07 with ``argv``: (Result, app)."""
    o, ntime, tstop = options(argv)
    app = app or Ex07()
    r = braidpy.solve(app, 0.0, tstop, ntime, comm=comm, **o)
    return r, app
