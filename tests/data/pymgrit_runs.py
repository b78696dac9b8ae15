"""Runs PyMGRIT on the problems that braidpy.problems discretises as PyMGRIT does and writes
tests/data/pymgrit_golden.json (iterations, residual history, the states at every fourth
time point).

Run in a virtual environment that has PyMGRIT (never braidpy's own environment)::

    python -m venv /tmp/pymgrit-venv && /tmp/pymgrit-venv/bin/pip install pymgrit==1.0.6
    /tmp/pymgrit-venv/bin/python tests/data/pymgrit_runs.py tests/data/pymgrit_golden.json

Serial runs; every case uses V-cycles with FCF relaxation (cf_iter=1), no nested
iteration, zero initial guess away from t = 0, and the 2-norm over C-points of the
residual (PyMGRIT's only criterion).
"""

import json
import logging
import platform
import sys
from importlib.metadata import version

import numpy as np
from pymgrit.advection.advection_1d import Advection1D
from pymgrit.allen_cahn.allen_cahn import AllenCahn
from pymgrit.arenstorf_orbit.arenstorf_orbit import ArenstorfOrbit
from pymgrit.brusselator.brusselator import Brusselator
from pymgrit.core.mgrit import Mgrit
from pymgrit.core.simple_setup_problem import simple_setup_problem
from pymgrit.dahlquist.dahlquist import Dahlquist
from pymgrit.heat.heat_1d import Heat1D
from pymgrit.heat.heat_2d import Heat2D


def heat1d_rhs(x, t):
    return -np.sin(np.pi * x) * (np.sin(t) - np.pi ** 2 * np.cos(t))


def heat2d_rhs(x, y, t):
    return -np.sin(np.pi * x) * np.sin(np.pi * y) * (np.sin(t) - 2 * np.pi ** 2 * np.cos(t))


STRIDE = 4

CASES = {
    "dahlquist_be": dict(
        make=lambda: Dahlquist(method="BE", t_start=0, t_stop=5, nt=257),
        levels=3, cfactor=4, tol=1e-10,
        braidpy="Dahlquist(method='BE', ntime=256)"),
    "heat1d_be": dict(
        make=lambda: Heat1D(x_start=0, x_end=2, nx=65, a=1,
                            init_cond=lambda x: np.sin(np.pi * x), rhs=heat1d_rhs,
                            t_start=0, t_stop=2, nt=65),
        levels=3, cfactor=4, tol=1e-10, braidpy="Heat1D(nx=65, ntime=64)"),
    "advection1d_be": dict(
        make=lambda: Advection1D(c=1, x_start=-1, x_end=1, nx=65, t_start=0, t_stop=2,
                                 nt=65),
        levels=3, cfactor=4, tol=1e-10, braidpy="Advection1D(nx=65, ntime=64)"),
    "brusselator_rk4": dict(
        make=lambda: Brusselator(t_start=0, t_stop=12, nt=641),
        levels=3, cfactor=4, tol=1e-10, braidpy="Brusselator() (12, 640 steps)"),
    # solve_ivp's RK45 (rtol 1e-3, atol 1e-6) inside every step
    "arenstorf_rk45": dict(
        make=lambda: ArenstorfOrbit(t_start=0, t_stop=2.0, nt=65),
        levels=3, cfactor=4, tol=1e-10,
        braidpy="ArenstorfOrbit(method='rk45', tstop=2.0, ntime=64)"),
    "heat2d_cn": dict(
        make=lambda: Heat2D(x_start=0, x_end=1, y_start=0, y_end=1, nx=17, ny=17, a=1,
                            rhs=heat2d_rhs,
                            init_cond=lambda x, y: np.sin(np.pi * x) * np.sin(np.pi * y),
                            method="CN", t_start=0, t_stop=1, nt=65),
        levels=3, cfactor=4, tol=1e-10, braidpy="Heat2D(nx=17, ny=17, method='CN')"),
    "allen_cahn_impl": dict(
        make=lambda: AllenCahn(nx=12, method="IMPL", t_start=0, t_stop=0.02, nt=65),
        levels=3, cfactor=4, tol=1e-9, braidpy="AllenCahn(nx=12)"),
}


def run(case):
    problem = simple_setup_problem(problem=case["make"](), level=case["levels"],
                                   coarsening=case["cfactor"])
    mgrit = Mgrit(problem=problem, tol=case["tol"], cf_iter=1, cycle_type="V",
                  nested_iteration=False, max_iter=100, logging_lvl=logging.ERROR)
    mgrit.solve()
    # every iteration's residual (the dictionary solve returns drops exact zeros)
    conv = [float(c) for c in mgrit.conv[1:mgrit.solve_iter + 1]]
    # the states at every STRIDE-th time point (the C-points of level 1), to keep the file small
    states = [np.asarray(u.get_values(), dtype=float).ravel().tolist()
              for u in mgrit.u[0][::STRIDE]]
    return dict(levels=case["levels"], cfactor=case["cfactor"], tol=case["tol"],
                cf_iter=1, cycle="V", nested_iteration=False, braidpy=case["braidpy"],
                iterations=len(conv), residuals=conv, stride=STRIDE,
                times=list(map(float, mgrit.t[0][::STRIDE])), states=states)


if __name__ == "__main__":
    out = {"command": "python tests/data/pymgrit_runs.py tests/data/pymgrit_golden.json "
                      "(in a venv with pymgrit==1.0.6)",
           "pymgrit": version("pymgrit"), "numpy": np.__version__,
           "scipy": version("scipy"), "python": platform.python_version(),
           "cases": {name: run(case) for name, case in CASES.items()}}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    for name, case in out["cases"].items():
        print(name, case["iterations"], case["residuals"][-1])
