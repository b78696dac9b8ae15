"""benchmarks/bench_vs_pymgrit.py's braidpy side (benchmarks/_worker.py's CASES) builds the
problems PyMGRIT 1.0.6 solved for tests/data/pymgrit_golden.json: at those sizes and
settings it reaches PyMGRIT's u(tstop) in at most one iteration more."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")
ROOT = Path(__file__).resolve().parents[1]
#: worker problem -> (golden case, time steps, spatial points)
GOLDEN = {"dahlquist": ("dahlquist_be", 256, 1), "brusselator": ("brusselator_rk4", 640, 1),
          "arenstorf": ("arenstorf_rk45", 64, 1),
          "advection1d": ("advection1d_be", 64, 65), "heat1d": ("heat1d_be", 64, 65),
          "heat2d": ("heat2d_cn", 64, 17), "allencahn": ("allen_cahn_impl", 64, 12)}


@pytest.fixture(scope="module")
def worker():
    path = list(sys.path)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _worker

    yield _worker
    sys.path[:] = path
    sys.modules.pop("_worker", None)


def test_every_case_has_pymgrits_output(worker):
    assert set(worker.CASES) == set(GOLDEN)


@pytest.mark.parametrize("problem", sorted(GOLDEN))
def test_the_braidpy_side_reaches_pymgrits_solution(worker, problem):
    name, nsteps, nx = GOLDEN[problem]
    case = json.loads((ROOT / "tests" / "data" / "pymgrit_golden.json").read_text())
    case = case["cases"][name]
    args = worker.parse_args(["--side", "braidpy", "--problem", problem, "--nsteps",
                              str(nsteps), "--nx", str(nx), "--levels", str(case["levels"]),
                              "--cfactor", str(case["cfactor"]), "--tol", repr(case["tol"])])
    out = worker.braidpy_solve(args, None, nsteps, case["levels"], True)
    assert case["times"][-1] == pytest.approx(worker.CASES[problem][2](nx)["t_stop"])
    theirs = np.ravel(case["states"][-1])
    assert np.max(np.abs(np.subtract(out["final"], theirs))) < 1e-9 * max(
        1.0, np.max(np.abs(theirs)))
    assert out["iterations"] - case["iterations"] in (0, 1)
    assert out["steps"] > 0
