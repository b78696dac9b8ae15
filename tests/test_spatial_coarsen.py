"""Spatial coarsening (App.coarsen / App.refine, XBraid's braid_SetSpatialCoarsen and
braid_SetSpatialRefine) against XBraid's printed output at 1, 2 and 4 ranks, and the
contract around it."""

import math

import numpy as np
import pytest
import spatial_cases as s
from mpi_launch import launch

import braidpy


def _ids(cases):
    return [c["command"].split(" ", 3)[3] for c in cases]


SERIAL = [c for c in s.CASES if c["nranks"] == 1]


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", SERIAL, ids=_ids(SERIAL))
def test_serial_run_prints_what_xbraid_printed(case, batched):
    got = s.run_case(case, batched=batched)
    assert {k: got[k] for k in ("residuals", "iterations", "levels", "final")} == \
        s.expected(case)
    assert got["batched"] == batched
    assert (got["coarsen"] > 0) == (case["sc"] > 0) and (got["refine"] > 0) == (case["sc"] > 0)


def test_spatial_coarsening_keeps_the_coarse_cfl():
    """The driver's point: without -sc the coarse levels' CFL doubles per level (the
    residual jumps to 3e10 on the way); with it every level keeps a*dt/dx = 0.5."""
    for sc, cfl in ((0, [0.5, 1.0, 2.0, 4.0]), (1, [0.5] * 4)):
        app = s.Advection(64, sc)
        braidpy.solve(app, 0.0, 5.0, 128, **{**s.burgers_options(), "max_iter": 2})
        assert [app.seen[level][1] / app.seen[level][0] for level in range(4)] == cfl
    by_sc = {c["sc"]: [float(r) for r in c["residuals"]] for c in SERIAL
             if c["example"] == "drive-burgers-1D"}
    assert max(by_sc[0]) > 1e10 and max(by_sc[1]) == by_sc[1][0]


@pytest.fixture(scope="module", params=[1, 2, 4])
def mpi_run(request, tmp_path_factory):
    n = request.param
    return n, launch("mpi_spatial_coarsen_driver.py", n, tmp_path_factory.mktemp("sc"))


def test_mpi_runs_print_what_xbraid_printed(mpi_run):
    n, out = mpi_run
    cases = [c for c in s.CASES if c["nranks"] == n]
    assert len(cases) == 4
    for c in cases:
        for key in (c["command"], c["command"] + " batched"):
            got = out[key]
            assert {k: got[k] for k in ("residuals", "iterations", "levels", "final")} == \
                s.expected(c), key
            assert got["batched"] == key.endswith("batched")
