"""A postprocessed objective J = F(S), S the sum of the objective's terms (XBraid's
braid_SetPostprocessObjective / _diff), against XBraid's ex-01-optimization.

tests/data/xbraid_ex01_optimization.json (tests/data/make_xbraid_optimization.py) holds
what ex-01-optimization printed at 1, 2 and 4 processes (objective and gradient norm per
steepest-descent iteration, 9 digits) and what tests/data/xbraid_drivers/adjoint_driver.c
(the same problem, tolerances on its command line) printed in full precision: with
ex-01-optimization's tolerances (its first two lines, reproduced to the digit) and with
both solves run to 1e-14.

XBraid's adjoint iterates the state and the adjoint together and stops both at 1e-6, so
its printed gradients carry that iteration's error (2.7e-6 relative at iteration 0);
braidpy solves the state, then the adjoint, to their tolerances. The comparison is
therefore made at convergence, where both are the exact discrete objective and
gradient: J agrees to all 17 printed digits at lambda = -1, and to 13 digits (dJ/dlambda
to 11) along three steepest-descent steps, at 1, 2 and 4 ranks; with ex-01-optimization's own settings the first printed objective
agrees to all 9 digits and the gradient norms to 1e-5.
"""

import numpy as np
import pytest
from optimization_cases import (CONVERGED, GAMMA, NTIME, TARGET, Ex01Optimization,
                                converged_path, optimize, xbraid)
from test_mpi import run_driver

from braidpy.adjoint import GradientSolver


def assert_converged_as_xbraid(path, nranks):
    want = xbraid("adjoint_driver", nranks, CONVERGED)["iterations"]
    assert len(path) == len(want) == 3
    for got, ref in zip(path, want):
        assert got["objective"] == f"{float(ref['objective']):.12e}"
        assert got["gradient"] == f"{float(ref['gradient']):.10e}"
    # Iteration 0 (lambda = -1 on both sides): J to the last of XBraid's 17 digits.
    assert path[0]["objective17"] == want[0]["objective"]


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_converged_objective_and_gradient_are_xbraids(nranks):
    assert_converged_as_xbraid(converged_path(), nranks)


def test_at_2_and_4_ranks(tmp_path):
    serial = converged_path()
    printed = optimize(maxiter=3)[0]
    for nranks in (2, 4):
        got = run_driver(nranks, "optimization", tmp_path)
        assert got["converged"] == serial  # bitwise: S, F'(S), J and the gradient
        assert_converged_as_xbraid(got["converged"], nranks)
        assert [tuple(x) for x in got["printed"]] == printed


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_ex01_optimization_as_printed(nranks):
    lines = optimize(maxiter=6)[0]
    want = xbraid("ex-01-optimization", nranks)["iterations"]
    assert lines[0][1] == want[0]["objective"]  # 3.38879028e-03, all 9 digits
    for (k, objective, gnorm), ref in zip(lines, want):
        assert k == ref["k"]
        assert abs(float(objective) / float(ref["objective"]) - 1) < 1e-7
        assert abs(float(gnorm) / float(ref["gnorm"]) - 1) < 1e-5


def test_gradient_against_finite_differences():
    def evaluate(design):
        app = Ex01Optimization(design)
        g = GradientSolver(app, 0.0, NTIME / 2.0, NTIME,
                           primal=dict(max_levels=2, cfactor=2, abs_tol=1e-14,
                                       max_iter=100)).evaluate()
        return g, float(g.total()[0]) + GAMMA * design

    g, gradient = evaluate(-1.0)
    h = 1e-6
    fd = (evaluate(-1.0 + h)[0].objective - evaluate(-1.0 - h)[0].objective) / (2 * h)
    assert abs(fd / gradient - 1) < 1e-8
    # J = F(S): S is the plain objective's value, F'(S) = S - target.
    assert g.objective == 0.5 * (g.objective_sum - TARGET) ** 2 + GAMMA / 2 * 1.0
    assert g.objective_diff == g.objective_sum - TARGET


def test_without_postprocessing_the_objective_is_the_sum():
    class Plain(Ex01Optimization):
        postprocess_objective = None
        postprocess_objective_diff = None

    opts = dict(max_levels=2, cfactor=2, abs_tol=1e-14, max_iter=100)
    plain = GradientSolver(Plain(), 0.0, 25.0, NTIME, primal=opts).evaluate()
    post = GradientSolver(Ex01Optimization(), 0.0, 25.0, NTIME, primal=opts).evaluate()
    assert plain.objective_sum is None and plain.objective_diff is None
    assert plain.objective == post.objective_sum
    # The adjoint is linear in its sources: the gradient scales by F'(S).
    assert np.isclose(post.total()[0], post.objective_diff * plain.total()[0], rtol=1e-12,
                      atol=0)


@pytest.mark.parametrize("missing", ["postprocess_objective", "postprocess_objective_diff"])
def test_one_without_the_other_is_refused(missing):
    class Half(Ex01Optimization):
        pass

    setattr(Half, missing, None)
    with pytest.raises(TypeError, match="postprocess_objective and postprocess_objective_diff"):
        GradientSolver(Half(), 0.0, 25.0, NTIME)


def test_a_failing_postprocess_surfaces_as_its_exception():
    class Failing(Ex01Optimization):
        def postprocess_objective(self, total):
            raise ArithmeticError("F failed")

    with pytest.raises(ArithmeticError, match="F failed"):
        GradientSolver(Failing(), 0.0, 25.0, NTIME).evaluate()


def test_objective_only_is_postprocessed():
    solver = GradientSolver(Ex01Optimization(), 0.0, 25.0, NTIME,
                            primal=dict(abs_tol=1e-14, max_iter=100))
    full = solver.evaluate().objective
    solver.reset()
    assert solver.objective() == full


def test_terminal_term_is_postprocessed_too():
    """F'(S) scales the terminal adjoint as well as the running sources."""
    class Terminal(Ex01Optimization):
        def terminal_objective(self, u):
            return 0.5 * float(u[0] ** 2)

        def terminal_gradient(self, u):
            return u.copy()

    def evaluate(design):
        g = GradientSolver(Terminal(design), 0.0, 2.0, 16,
                           primal=dict(abs_tol=1e-14, max_iter=100)).evaluate()
        return g.objective, float(g.total()[0]) + GAMMA * design

    h = 1e-6
    fd = (evaluate(-0.5 + h)[0] - evaluate(-0.5 - h)[0]) / (2 * h)
    assert abs(fd / evaluate(-0.5)[1] - 1) < 1e-7
