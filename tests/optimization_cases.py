"""XBraid's ex-01-optimization as a braidpy app, and what XBraid printed for it
(tests/data/xbraid_ex01_optimization.json).

ex-01-optimization: u' = lambda u on [0, 25], 50 backward Euler steps u <- u / (1 - lambda
dt), u(0) = 1, guess 0.456; objective J = F(S) with S = sum_{i=0..50} u_i^2 / 50 (every
time point, its ObjectiveT) and F(S) = (S - target)^2 / 2 + gamma/2 lambda^2 (its
PostprocessObjective), F'(S) = S - target (PostprocessObjective_diff, which also writes
gamma lambda, the regularization's derivative, into the gradient); steepest descent
lambda <- lambda - 6 dJ/dlambda until |dJ/dlambda| < 1e-6, at most 100 iterations.
"""

import json
from pathlib import Path

import numpy as np

import braidpy
import braidpy.adjoint

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_ex01_optimization.json").read_text())
TARGET, GAMMA, STEPSIZE, GTOL, MAXITER, NTIME = 1.15231184218078e-01, 0.0005, 6.0, 1e-6, 100, 50


class Ex01Optimization(braidpy.App):
    """The ODE and objective of ex-01-optimization; ``design`` is lambda."""

    def __init__(self, design=-1.0):
        self.design = design

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    def step(self, u, t0, t1, status):
        u[0] = 1.0 / (1.0 - self.design * (t1 - t0)) * u[0]

    def step_adjoint(self, w, u, t0, t1, status):
        w[0] = 1.0 / (1.0 - self.design * (t1 - t0)) * w[0]

    def step_gradient(self, w, u, t0, t1, status):
        dt = t1 - t0
        return np.array([(dt * u[0]) / (1.0 - dt * self.design) ** 2 * w[0]])

    def running_objective(self, u, t, status):
        return 1.0 / NTIME * u[0] * u[0]

    def running_gradient(self, u, t, status):
        return np.array([2.0 / NTIME * u[0]])

    def terminal_objective(self, u):
        return 0.0

    def terminal_gradient(self, u):
        return np.zeros(1)

    def postprocess_objective(self, total):
        return 1.0 / 2.0 * (total - TARGET) ** 2 + GAMMA / 2.0 * self.design ** 2

    def postprocess_objective_diff(self, total):
        return total - TARGET

    def norm(self, u):
        return float(np.sqrt(u[0] * u[0]))


def optimize(comm=None, maxiter=MAXITER, **primal):
    """ex-01-optimization's loop through braidpy: the lines it prints, as
    (iteration, objective %1.8e, gradient norm %1.8e), and the last Gradient."""
    app = Ex01Optimization()
    options = {**dict(max_levels=2, cfactor=2, abs_tol=1e-6, max_iter=10), **primal}
    solver = braidpy.adjoint.GradientSolver(app, 0.0, NTIME / 2.0, NTIME, comm=comm,
                                            primal=options)
    lines, g = [], None
    for it in range(maxiter):
        g = solver.evaluate()
        gradient = float(g.total()[0]) + GAMMA * app.design
        gnorm = float(np.sqrt(gradient * gradient))
        lines.append((it, f"{g.objective:1.8e}", f"{gnorm:1.8e}"))
        if gnorm < GTOL:
            break
        app.design -= STEPSIZE * gradient
    solver.close()
    return lines, g, app.design


def xbraid(kind, nranks, args=None):
    [case] = [c for c in DATA["cases"] if c["kind"] == kind and c["nranks"] == nranks
              and (args is None or c["args"] == args)]
    return case


CONVERGED = ["-tol", "1e-14", "-tola", "1e-14", "-mi", "100", "-oi", "3"]


def converged_path(comm=None, iterations=3):
    """adjoint_driver's converged run through braidpy: per optimization iteration, J
    (%.12e, and %.17e) and dJ/dlambda (%.10e), both solves to 1e-14 (from a cold start each time,
    as tight solves make the warm start irrelevant)."""
    app = Ex01Optimization()
    solver = braidpy.adjoint.GradientSolver(
        app, 0.0, NTIME / 2.0, NTIME, comm=comm,
        primal=dict(max_levels=2, cfactor=2, abs_tol=1e-14, max_iter=100))
    out = []
    for _ in range(iterations):
        g = solver.evaluate()
        gradient = float(g.total()[0]) + GAMMA * app.design
        out.append(dict(objective=f"{g.objective:.12e}", gradient=f"{gradient:.10e}",
                        objective17=f"{g.objective:.17e}",
                        sum=g.objective_sum, diff=g.objective_diff))
        app.design -= STEPSIZE * gradient
    solver.close()
    return out


def run_at(nranks, comm):
    return {"converged": converged_path(comm), "printed": optimize(comm, maxiter=3)[0]}
