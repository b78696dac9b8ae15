"""Error contract, serial: original exceptions, divergence, bad input."""

import math
import traceback

import numpy as np
import pytest
from apps import Decay

import braidpy


class Boom(ValueError):
    pass


def failing(callback, when=lambda status: True):
    """A Decay app whose `callback` raises Boom once `when(status)` holds."""

    class Failing(Decay):
        pass

    def wrap(name):
        base = getattr(Decay, name)

        def method(self, *args):
            status = args[-1] if name in ("step", "access") else None
            if name == callback and (status is None or when(status)):
                raise Boom(f"{name} failed on purpose")
            return base(self, *args)

        return method

    for name in ("init", "step", "clone", "sum", "norm", "access"):
        setattr(Failing, name, wrap(name))
    return Failing()


@pytest.mark.parametrize("callback", ["init", "step", "clone", "sum", "norm", "access"])
def test_callback_exception_is_reraised_unchanged(callback):
    app = failing(callback)
    with pytest.raises(Boom, match=f"{callback} failed on purpose") as info:
        braidpy.solve(app, 0.0, 1.0, 64, cfactor=4)
    # The traceback still reaches into the user's method.
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "method" in frames


def test_failure_on_a_coarse_level_mid_solve():
    app = failing("step", lambda s: s.level == 2 and s.iteration == 2)
    with pytest.raises(Boom):
        braidpy.solve(app, 0.0, 1.0, 256, cfactor=2, abs_tol=1e-14)


def test_solver_is_usable_after_a_failure():
    calls = {"n": 0}

    class Flaky(Decay):
        def step(self, u, t0, t1, status):
            calls["n"] += 1
            if calls["n"] == 100:
                raise Boom("once")
            super().step(u, t0, t1, status)

    core = braidpy.Core(Flaky(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    with pytest.raises(Boom):
        core.solve()
    good = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    again = core.solve()
    assert again.residuals == good.residuals


def test_keyboard_interrupt_passes_through():
    class Interrupted(Decay):
        def step(self, u, t0, t1, status):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        braidpy.solve(Interrupted(), 0.0, 1.0, 16)


def test_nonfinite_residual_raises_divergence():
    class Explode(Decay):
        def step(self, u, t0, t1, status):
            if status.iteration >= 2:
                u[:] = np.nan
            else:
                super().step(u, t0, t1, status)

    with pytest.raises(braidpy.DivergenceError, match="iteration 2, level 0") as info:
        braidpy.solve(Explode(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-14)
    assert info.value.iteration == 2 and math.isnan(info.value.value)


def test_init_returning_none_is_a_clear_error():
    class NoInit(Decay):
        def init(self, t):
            return None

    with pytest.raises(TypeError, match="init"):
        braidpy.solve(NoInit(), 0.0, 1.0, 8)


def test_missing_step_is_rejected_before_any_work():
    class NoStep(braidpy.App):
        def init(self, t):
            raise AssertionError("must not be called")

    with pytest.raises(TypeError, match="step"):
        braidpy.solve(NoStep(), 0.0, 1.0, 8)
    with pytest.raises(TypeError, match="init"):
        braidpy.solve(object(), 0.0, 1.0, 8)


def test_non_array_vectors_without_overrides_explain_themselves():
    class Floats(braidpy.App):
        def init(self, t):
            return 1.0

        def step(self, u, t0, t1, status):
            return u / 2

    with pytest.raises(TypeError, match="override clone"):
        braidpy.solve(Floats(), 0.0, 1.0, 8, cfactor=2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_levels=0), "max_levels"),
    (dict(max_levels=2.5), "max_levels"),
    (dict(cfactor=1), "cfactor"),
    (dict(cfactor={1: 1}), r"cfactor\[1\]"),
    (dict(cfactor={-1: 2}), "cfactor keys"),
    (dict(nrelax=-1), "nrelax"),
    (dict(max_iter=0), "max_iter"),
    (dict(abs_tol=-1.0), "abs_tol"),
    (dict(abs_tol=float("nan")), "abs_tol"),
    (dict(tnorm=3), "tnorm"),
    (dict(skip="yes"), "skip"),
    (dict(storage="some"), "storage"),
    (dict(access_level=4), "access_level"),
    (dict(max_level=3), "did you mean 'max_levels'"),
    (dict(tol=1e-6), "unknown option 'tol'"),
])
def test_bad_options_name_the_option(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        braidpy.solve(Decay(), 0.0, 1.0, 16, **kwargs)


@pytest.mark.parametrize("args, match", [
    ((0.0, 1.0, 0), "ntime"),
    ((0.0, 1.0, 2.0), "ntime"),
    ((1.0, 1.0, 8), "tstop"),
    ((0.0, float("inf"), 8), "tstop"),
    (("a", 1.0, 8), "tstart"),
])
def test_bad_grid_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        braidpy.solve(Decay(), *args)


def test_bad_user_grid():
    with pytest.raises(ValueError, match="increasing"):
        braidpy.solve(Decay(), 0.0, 1.0, 2, times=[0.0, 0.7, 0.5])
    with pytest.raises(ValueError, match="ntime"):
        braidpy.solve(Decay(), 0.0, 1.0, 3, times=[0.0, 0.5, 1.0])


def test_bad_comm():
    with pytest.raises(TypeError, match="comm"):
        braidpy.solve(Decay(), 0.0, 1.0, 8, comm="world")


def test_clone_returning_its_argument_is_a_clear_error():
    class SelfClone(Decay):  # the "copy" would alias the state: silently wrong answers
        def clone(self, u):
            return u

    with pytest.raises(TypeError, match=r"clone\(u\) returned u itself"):
        braidpy.solve(SelfClone(), 0.0, 1.0, 16, cfactor=2)


def test_negative_norm_is_a_clear_error():
    class NegativeNorm(Decay):  # the solve used to run to max_iter and return normally
        def norm(self, u):
            return -0.5

    with pytest.raises(ValueError, match=r"norm\(u\) returned -0.5; a norm is >= 0"):
        braidpy.solve(NegativeNorm(), 0.0, 1.0, 16, cfactor=2)


@pytest.mark.parametrize("value, kind", [("0.5", "str"), (None, "NoneType")])
def test_norm_returning_no_number_names_norm(value, kind):
    class WordNorm(Decay):  # float(...) failed inside the core, naming nothing
        def norm(self, u):
            return value

    with pytest.raises(TypeError, match=rf"norm must return a real number, got {kind}"):
        braidpy.solve(WordNorm(), 0.0, 1.0, 16, cfactor=2)
