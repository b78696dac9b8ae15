"""Adjoint MGRIT: gradients vs serial backprop and finite differences; one-shot."""

import numpy as np
import pytest
from apps import DecayRate, HeatControl, LogisticParam, serial_gradient

import braidpy
from braidpy.adjoint import GradientSolver, gradient

N_HEAT = 48
CONTROLS = np.sin(np.linspace(0.0, 3.0, N_HEAT))

PROBLEMS = {
    "decay": (lambda: DecayRate(running=True), 0.0, 2.0, 64),
    "heat": (lambda: HeatControl(17, CONTROLS), 0.0, 0.5, N_HEAT),
    "logistic": (lambda: LogisticParam(), 0.0, 4.0, 96),
}
TIGHT = dict(cfactor=2, abs_tol=1e-13, max_iter=60)


def as_vector(grads, n):
    return np.array([float(np.asarray(grads[i]).ravel()[0]) for i in range(n)])


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_one_level_equals_serial_backward_sweep_bitwise(name):
    make, t0, t1, n = PROBLEMS[name]
    g = gradient(make(), t0, t1, n, primal=dict(max_levels=1))
    J, grads, w0 = serial_gradient(make(), t0, t1, n)
    assert g.objective == J
    assert np.array_equal(as_vector(g.gradients, n), as_vector(grads, n))
    assert np.array_equal(g.initial_adjoint, w0)
    assert g.adjoint.iterations == 0


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_mgrit_gradient_matches_serial_backprop(name):
    make, t0, t1, n = PROBLEMS[name]
    g = gradient(make(), t0, t1, n, primal=TIGHT)
    J, grads, w0 = serial_gradient(make(), t0, t1, n)
    ref = as_vector(grads, n)
    assert g.objective == pytest.approx(J, rel=1e-11)
    assert np.max(np.abs(as_vector(g.gradients, n) - ref)) <= 1e-10 * np.max(np.abs(ref))
    assert np.max(np.abs(g.initial_adjoint - w0)) <= 1e-10 * np.max(np.abs(w0))
    assert g.adjoint.residuals[-1] < 1e-13 and g.adjoint.iterations > 1


def objective(app, t0, t1, n):
    return braidpy.adjoint.gradient(app, t0, t1, n, primal=TIGHT).objective


def test_decay_rate_gradient_vs_finite_differences():
    make, t0, t1, n = PROBLEMS["decay"]
    dJ = gradient(make(), t0, t1, n, primal=TIGHT).total()[0]
    h = 1e-6
    fd = (objective(DecayRate(1.3 + h, running=True), t0, t1, n)
          - objective(DecayRate(1.3 - h, running=True), t0, t1, n)) / (2 * h)
    # Central differences: O(h^2) truncation plus solver tolerance / h.
    assert dJ == pytest.approx(fd, rel=1e-7)


def test_heat_control_gradient_vs_finite_differences():
    make, t0, t1, n = PROBLEMS["heat"]
    grads = as_vector(gradient(make(), t0, t1, n, primal=TIGHT).gradients, n)
    h = 1e-5
    for k in (0, n // 3, n - 1):
        up, down = CONTROLS.copy(), CONTROLS.copy()
        up[k] += h
        down[k] -= h
        fd = (objective(HeatControl(17, up), t0, t1, n)
              - objective(HeatControl(17, down), t0, t1, n)) / (2 * h)
        assert grads[k] == pytest.approx(fd, rel=1e-6, abs=1e-11)


def test_nonlinear_system_gradient_vs_finite_differences():
    make, t0, t1, n = PROBLEMS["logistic"]
    dJ = gradient(make(), t0, t1, n, primal=TIGHT).total()
    h = 1e-6
    fd = (objective(LogisticParam(0.1 + h), t0, t1, n)
          - objective(LogisticParam(0.1 - h), t0, t1, n)) / (2 * h)
    assert float(dJ) == pytest.approx(fd, rel=1e-7)


def test_oneshot_gradient_error_decreases_with_iterations():
    make, t0, t1, n = PROBLEMS["logistic"]
    exact = gradient(make(), t0, t1, n, primal=TIGHT).total()
    errors = []
    for m in (1, 2, 4, 8):
        g = GradientSolver(make(), t0, t1, n, primal=dict(cfactor=2), oneshot=(m, m)).evaluate()
        assert g.primal.iterations == m and g.adjoint.iterations == m
        errors.append(abs(float(g.total()) - float(exact)))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-6 * abs(float(exact))


def test_oneshot_warm_start_converges_over_calls():
    make, t0, t1, n = PROBLEMS["heat"]
    exact = as_vector(gradient(make(), t0, t1, n, primal=TIGHT).gradients, n)
    solver = GradientSolver(make(), t0, t1, n, primal=dict(cfactor=2), oneshot=(1, 1))
    errors = [np.max(np.abs(as_vector(solver.evaluate().gradients, n) - exact)) for _ in range(6)]
    assert errors[-1] < 1e-3 * errors[0]


def test_adjoint_options_are_separate():
    make, t0, t1, n = PROBLEMS["decay"]
    g = gradient(make(), t0, t1, n, primal=dict(cfactor=2, abs_tol=1e-12),
                 adjoint=dict(cfactor=4, abs_tol=1e-6))
    assert g.primal.residuals[-1] < 1e-12
    assert 1e-12 < g.adjoint.residuals[-1] < 1e-6
    assert g.adjoint.level_info[0]["cfactor"] == 4


def test_missing_adjoint_callbacks_fail_before_any_work():
    class NoAdjoint(braidpy.App):
        def init(self, t):
            raise AssertionError("no work may happen")

        def step(self, u, t0, t1, status):
            raise AssertionError("no work may happen")

    with pytest.raises(TypeError, match="step_adjoint, step_gradient, terminal_objective"):
        gradient(NoAdjoint(), 0.0, 1.0, 8)

    class HalfRunning(DecayRate):
        def running_objective(self, u, t, status):
            return 0.0

    with pytest.raises(TypeError, match="running_gradient"):
        gradient(HalfRunning(), 0.0, 1.0, 8)


@pytest.mark.parametrize("kwargs, match", [
    (dict(primal=dict(storage="C")), "storage"),
    (dict(adjoint=dict(access_level=2)), "access_level"),
    (dict(adjoint=dict(cfactor=1)), "cfactor"),
    (dict(oneshot=(0, 2)), "m1"),
])
def test_bad_adjoint_options(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GradientSolver(DecayRate(), 0.0, 1.0, 8, **kwargs)


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("callback", ["step_adjoint", "step_gradient", "terminal_gradient",
                                      "terminal_objective"])
def test_adjoint_callback_exception_is_reraised(callback):
    class Failing(DecayRate):
        pass

    def fail(*args):
        raise Boom(callback)

    setattr(Failing, callback, fail)
    with pytest.raises(Boom, match=callback):
        gradient(Failing(), 0.0, 1.0, 32, primal=dict(cfactor=2))
