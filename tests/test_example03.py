"""Example 3 (parameter estimation): adjoint gradient, fit, and serial/MPI agreement."""

import doctest
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_process import run_mpi
from test_mpi import MPIEXEC

import examples.ex03_parameter_estimation as ex03
from braidpy.adjoint import GradientSolver
from examples.ex03_parameter_estimation import (Fit, HeatParameters, fit, synthetic_data,
                                                true_parameters)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ex03_parameter_estimation.py"
NSPACE, NTIME, BLOCKS = 17, 32, 4
SMALL = ["--nspace", str(NSPACE), "--ntime", str(NTIME), "--blocks", str(BLOCKS)]


def make_app(noise=0.0):
    app = HeatParameters(NSPACE, NTIME, BLOCKS)
    app.set_parameters(*true_parameters(BLOCKS))
    app.data = synthetic_data(app, noise)
    return app


def sequential_objective(app, theta, alpha):
    app.set_parameters(theta[0], theta[1:])
    return app.misfit() + 0.5 * alpha * float(theta[1:] @ theta[1:])


def test_gradient_matches_central_differences():
    app = make_app(noise=0.02)
    alpha = 1e-3
    theta = np.array([0.9, 1.5, 2.5, 0.5, 1.0])
    solver = GradientSolver(app, 0.0, 1.0, NTIME, primal=dict(cfactor=4, abs_tol=1e-13),
                            adjoint=dict(cfactor=4, abs_tol=1e-15))
    J, grad = Fit(app, solver, alpha).objective(theta)
    assert J == pytest.approx(sequential_objective(app, theta, alpha), rel=1e-10)
    eps = 1e-5
    for j in (0, 1, 3):  # kappa and two blocks
        e = np.zeros_like(theta)
        e[j] = eps
        fd = (sequential_objective(app, theta + e, alpha)
              - sequential_objective(app, theta - e, alpha)) / (2 * eps)
        assert grad[j] == pytest.approx(fd, rel=1e-6), (j, grad[j], fd)


def test_fit_recovers_parameters():
    app = make_app()
    kappa_true, c_true = true_parameters(BLOCKS)
    app.set_parameters(1.0, np.zeros(BLOCKS))
    solver = GradientSolver(app, 0.0, 1.0, NTIME, primal=dict(cfactor=4, abs_tol=1e-8),
                            adjoint=dict(cfactor=4, abs_tol=1e-11))
    theta, res, problem = fit(app, solver, np.r_[1.0, np.zeros(BLOCKS)], alpha=1e-8,
                              maxiter=60)
    assert res.success, res.message
    assert abs(theta[0] - kappa_true) / kappa_true < 0.02
    assert np.linalg.norm(theta[1:] - c_true) / np.linalg.norm(c_true) < 0.02
    # Warm starts: late evaluations need fewer MGRIT iterations than the first.
    assert problem.records[-1]["primal"] < problem.records[0]["primal"]


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="blocks"):
        HeatParameters(17, 4, 8)
    app = HeatParameters(17, 32, 4)
    with pytest.raises(ValueError, match="kappa"):
        app.set_parameters(-1.0, np.zeros(4))
    with pytest.raises(ValueError, match="4 entries"):
        app.set_parameters(1.0, np.zeros(3))


def test_docstring_examples():
    result = doctest.testmod(ex03, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def run(nranks, args):
    cmd = [sys.executable, str(SCRIPT), *args]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def numbers(out):
    """Everything printed except the header line with the rank count and the wall time."""
    return [line for line in out.splitlines()
            if "MPI rank" not in line and "wall time" not in line]


def test_script_serial_and_mpi_agree():
    args = SMALL + ["--check-gradient"]
    serial = run(1, args)
    parallel = run(2, args)
    assert "2 MPI rank(s)" in parallel
    assert numbers(serial) == numbers(parallel)
    fitted = re.findall(r"fitted (\S+)", serial)
    assert len(fitted) == 1 + BLOCKS
    kappa_err = float(re.search(r"kappa: .*rel\. error (\S+)", serial).group(1))
    c_err = float(re.search(r"c: relative error .* = (\S+)", serial).group(1))
    assert kappa_err < 0.01 and c_err < 0.01
    checks = [float(x) for x in re.findall(r"finite difference .* rel\. error (\S+)", serial)]
    assert len(checks) == 2 and max(checks) < 1e-6
    assert len(re.findall(r"^\s+\d+\s+\S+e[-+]\d+", serial, flags=re.M)) > 3


def test_each_step_contributes_to_kappa_and_its_own_block():
    app = make_app()
    app.set_parameters(1.0, np.ones(BLOCKS))
    solver = GradientSolver(app, 0.0, 1.0, NTIME, primal=dict(cfactor=4, abs_tol=1e-10))
    g = solver.evaluate()
    assert g.total().shape == (1 + BLOCKS,) and sorted(g.gradients) == list(range(NTIME))
    for n, gn in g.gradients.items():
        assert np.count_nonzero(gn[1:]) == 1 and gn[1 + app.block(n)] != 0
