"""Options: every value checked by name before it reaches the compiled core:
huge integers, booleans where numbers are meant, NumPy scalars."""

import math

import numpy as np
import pytest
from apps import Decay

import braidpy
from braidpy import Options


@pytest.mark.parametrize("name, value", [("max_iter", 2**31), ("cfactor", 2**40),
                                         ("max_levels", 2**70), ("nrelax", {1: 2**33}),
                                         ("print_level", 2**64)])
def test_huge_integers_are_refused_by_name(name, value):
    with pytest.raises(ValueError, match=f"{name}.* must be <= 2147483647"):
        Options(**{name: value})


@pytest.mark.parametrize("name, value", [("tnorm", True), ("tnorm", False), ("tnorm", 2.0),
                                         ("abs_tol", True), ("max_iter", True),
                                         ("cfactor", np.True_)])
def test_booleans_are_not_numbers(name, value):
    with pytest.raises((ValueError, TypeError), match=name):
        Options(**{name: value})


def test_numpy_scalars_are_accepted_and_normalised():
    o = Options(abs_tol=np.float32(1e-6), max_iter=np.int64(7), cfactor={np.int32(0): np.int8(4)},
                tnorm=np.float64(np.inf), rel_tol=np.float16(0.5))
    assert o.abs_tol == float(np.float32(1e-6)) and type(o.abs_tol) is float
    assert o.max_iter == 7 and type(o.max_iter) is int
    assert o.cfactor == {0: 4} and all(type(k) is int for k in o.cfactor)
    assert o.tnorm == math.inf and type(o.tnorm) is float
    r = braidpy.solve(Decay(), 0.0, 1.0, 32, options=o)
    assert r.level_info[0]["cfactor"] == 4 and r.iterations <= 7
    assert Options(tnorm=np.int64(1)).tnorm == 1


def test_an_overflowing_interval_is_refused_before_any_work():
    with pytest.raises(ValueError, match="tstop - tstart must be a finite number"):
        braidpy.solve(Decay(), -1e308, 1e308, 16)


@pytest.mark.parametrize("value", [0, 0.0, -1.3, math.nan, math.inf, True, "1.3", None,
                                   {0: 0.0}, {"default": -1.0}, {-1: 1.3}, {"x": 1.3}])
def test_crelax_weight_is_refused_by_name(value):
    with pytest.raises(ValueError, match="crelax_weight"):
        Options(crelax_weight=value)


def test_crelax_weight_per_level_reaches_the_core():
    o = Options(crelax_weight={np.int32(1): np.float32(0.5), "default": 2})
    assert o.crelax_weight == {1: 0.5, "default": 2.0}
    core = o.to_core()
    assert core.crelax_weight == 2.0 and core.crelax_weight_level == {1: 0.5}
    r = braidpy.solve(Decay(), 0.0, 1.0, 32, cfactor=2, max_levels=3, options=o)
    # The solved coarsest level is never weighted.
    assert [lv["crelax_weight"] for lv in r.level_info] == [2.0, 0.5, 1.0]
    assert Options(crelax_weight=1).crelax_weight == 1.0


def test_nfmg_needs_fmg_and_an_int():
    assert Options(fmg=True, nfmg=2).to_core().nfmg == 2
    assert Options().to_core().nfmg == -1
    with pytest.raises(ValueError, match="nfmg=2 needs fmg=True"):
        Options(nfmg=2)
    with pytest.raises(ValueError, match="nfmg must be >= -1"):
        Options(fmg=True, nfmg=-2)
    with pytest.raises(TypeError, match="nfmg must be an int"):
        Options(fmg=True, nfmg=1.0)


def test_nfmg_makes_that_iteration_a_v_cycle():
    # With 2 levels an F-cycle is a V-cycle: use 4, where they differ.
    def run(**kw):
        return braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, max_levels=4, skip=False,
                             abs_tol=1e-14, max_iter=6, **kw).residuals

    f, v = run(fmg=True), run()
    mixed = run(fmg=True, nfmg=1)
    assert mixed[:2] == f[:2] and mixed[2] != f[2]  # r_2 measures iteration 1's cycle
    assert run(fmg=True, nfmg=0)[1] == v[1]
