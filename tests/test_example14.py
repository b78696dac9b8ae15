"""examples/ex14_heat2d_spatial.py: its grid transfers, and the script serially and on
2 MPI ranks (the same iterations and solution, spatial coarsening within one iteration
of time coarsening alone, both converged to sequential backward Euler)."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")

from test_examples import NUM, number, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.ex14_heat2d_spatial import (Heat2DSpatial, bilinear,  # noqa: E402
                                          full_weighting)

SCRIPT = "ex14_heat2d_spatial.py"
ARGS = ["--nx", "32", "--ntime", "32"]


class Level:
    def __init__(self, level):
        self.level = level


def test_transfers_are_full_weighting_and_bilinear_interpolation():
    """On a mesh of m = 8 intervals: coarse point i (fine point 2i) gets
    (u_{2i-1} + 2 u_{2i} + u_{2i+1}) / 4; interpolation copies coarse points, averages
    midpoints (zero boundary) and is 4 times full weighting's transpose in 2D."""
    rng = np.random.default_rng(0)
    u = rng.standard_normal(7)
    assert np.array_equal(full_weighting(u),
                          [0.25 * u[2 * i - 2] + 0.5 * u[2 * i - 1] + 0.25 * u[2 * i]
                           for i in (1, 2, 3)])
    e = rng.standard_normal(3)
    padded = np.concatenate([[0.0], e, [0.0]])
    want = np.empty(7)
    want[1::2] = e
    want[0::2] = 0.5 * (padded[:-1] + padded[1:])
    assert np.array_equal(bilinear(e), want)
    # The app's 2D pair on level 0 of a 16-interval mesh, as matrices: P = 4 R^T.
    app = Heat2DSpatial(16, max_levels=3)
    R = np.array([app.coarsen(col, Level(0)) for col in np.eye(15 * 15)]).T
    P = np.array([app.refine(col, Level(0)) for col in np.eye(7 * 7)]).T
    assert R.shape == (49, 225) and P.shape == (225, 49)
    assert np.allclose(P, 4.0 * R.T, rtol=0, atol=1e-15)
    assert np.allclose(R.sum(axis=1)[24], 1.0)  # an interior row's weights sum to 1
    # A function linear on every coarse cell and zero on the boundary, the product of
    # tents min(x, 1 - x), is interpolated exactly.
    x, xf = np.arange(1, 8) / 8.0, np.arange(1, 16) / 16.0
    tent, tentf = np.minimum(x, 1 - x), np.minimum(xf, 1 - xf)
    assert np.allclose(app.refine(np.outer(tent, tent).ravel(), Level(0)),
                       np.outer(tentf, tentf).ravel(), rtol=0, atol=1e-15)


def test_levels_below_four_intervals_copy():
    app = Heat2DSpatial(8, max_levels=4)
    assert app.meshes == [8, 4, 4, 4]
    u = np.arange(9.0)
    assert np.array_equal(app.coarsen(u, Level(1)), u)
    assert np.array_equal(app.refine(u, Level(2)), u)
    with pytest.raises(ValueError, match="power of two"):
        Heat2DSpatial(24)


def facts(out):
    """Per variant: iterations, last residual, max |MGRIT - sequential|, meshes."""
    found = {}
    for name in ("time only", "space-time"):
        block = re.search(rf"  {name}: meshes per level (.*)\n"
                          rf"    iterations: (\d+), last residual {NUM}\n"
                          rf"    CPU s per iteration: (\S+)\n"
                          rf"    max \|MGRIT - sequential\| at t_N = {NUM}\n", out)
        assert block, f"{name!r} not in:\n{out}"
        found[name] = (block.group(1), int(block.group(2)), float(block.group(3)),
                       float(block.group(5)))
    return found


def test_example_serial_and_two_ranks():
    serial = run(1, SCRIPT, ARGS)
    parallel = run(2, SCRIPT, ARGS)
    assert "1 MPI rank(s)" in serial and "2 MPI rank(s)" in parallel
    one, two = facts(serial), facts(parallel)
    # The same iterations, residuals and solution (to the printed digits) at 1 and 2 ranks.
    assert one == two
    assert one["time only"][0] == "32x32 > 32x32 > 32x32 > 32x32"
    assert one["space-time"][0] == "32x32 > 16x16 > 8x8 > 4x4"
    (_, it0, res0, err0), (_, it1, res1, err1) = one["time only"], one["space-time"]
    assert it0 > 1 and abs(it1 - it0) <= 1
    # Converged (abs_tol 1e-8) to the fine sequential backward Euler solution.
    assert res0 < 1e-8 and res1 < 1e-8
    assert err0 < 1e-9 and err1 < 1e-9
    [ratio] = number(r"space-time / time only: CPU time per iteration (\d+\.\d+)", serial)
    assert ratio > 0
    # --no-spatial runs the time-only variant alone, with the same result.
    alone = run(1, SCRIPT, ARGS + ["--no-spatial"])
    assert "space-time" not in alone
    assert re.search(r"iterations: (\d+)", alone).group(1) == str(it0)
