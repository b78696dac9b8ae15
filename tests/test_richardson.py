"""Richardson extrapolation and error estimates (Options richardson, est_error,
local_order) against XBraid's own output, at 1, 2 and 4 ranks.

tests/data/xbraid_richardson.json holds what XBraid (commit in the file) printed for its
ex-06 and ex-02 with -richardson (braid_SetRichardsonEstimation), ex-06 without it and
with -refinet (temporal refinement driven by the error estimates, with and without
-richardson), and
for tests/data/xbraid_drivers/richardson_driver.c (ex-01's problem with extrapolation and
estimates switched on, writing every estimate XBraid's step, sync and access statuses
give), run with mpiexec -n 1, 2, 4 (tests/data/make_xbraid_richardson.py made it).
braidpy runs the same problems (richardson_cases) chain by chain and with a batched step
and must print the same residuals to all 7 digits, the same iteration and level counts,
the same final values, and the same estimates to the last bit.
"""

import numpy as np
import pytest
from richardson_cases import cases, run_driver_case, run_ex02, run_ex06
from test_mpi import run_driver
from xbraid_parity_cases import Ex06

import braidpy


def assert_ex06(got, case):
    assert (got["ntime"], got["printed"]) == (case["ntime"], case["printed"]), case["id"]
    assert got["levels"] == case["nlevels"], case["id"]
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    assert (got["sol"], got["err"]) == (case["sol"], case["err"]), case["id"]


def assert_ex02(got, case):
    assert got["levels"] == case["nlevels"], case["id"]
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    assert got["error"] == case["error"], case["id"]


def assert_driver(got, case):
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    assert got["final"] == case["final"], case["id"]
    assert sorted(got["estimates"]) == sorted(case["estimates"]), case["id"]
    for rank, lines in case["estimates"].items():
        mine = got["estimates"][rank]
        kinds = ("step", "sync")
        for kind in kinds:  # in order
            assert [w for w in mine if w.startswith(kind)] == \
                [w for w in lines if w.startswith(kind)], (case["id"], rank, kind)
        # XBraid's final access walks the intervals from the right; braidpy in time order.
        assert sorted(w for w in mine if w.startswith("final")) == \
            sorted(w for w in lines if w.startswith("final")), (case["id"], rank)


def test_the_reference_shows_the_gain():
    # ex-06, 256 steps: the same 7 iterations, the final error 7.26e-04 -> 7.40e-06.
    plain = [c for c in cases("ex06", 1) if c["args"] == []][0]
    rich = [c for c in cases("ex06", 1) if c["args"] == ["-richardson"]][0]
    assert plain["iterations"] == rich["iterations"] == 7
    assert plain["err"].startswith("0.000725952") and rich["err"].startswith("0.0000073979")
    assert {c["nranks"] for c in cases("driver")} == {1, 2, 4}


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("ex06", 1), ids=lambda c: c["id"])
def test_ex06_serial(case, batched):
    assert_ex06(run_ex06(case, batched=batched), case)


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("ex02", 1), ids=lambda c: c["id"])
def test_ex02_serial(case, batched):
    got = run_ex02(case, batched=batched)
    assert_ex02(got, case)
    assert (got["stacked_calls"] > 0) == batched


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("driver", 1), ids=lambda c: c["id"])
def test_driver_serial(case, batched):
    assert_driver(run_driver_case(case, batched=batched), case)


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    got = run_driver(nranks, "richardson", tmp_path)
    checks = (("ex06", assert_ex06), ("ex02", assert_ex02), ("driver", assert_driver))
    expected = [c["id"] + s for kind, _ in checks for c in cases(kind, nranks)
                for s in ("", "/batched")]
    assert sorted(got) == sorted(expected)
    for kind, check in checks:
        for case in cases(kind, nranks):
            check(got[case["id"]], case)
            check(got[case["id"] + "/batched"], case)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(richardson=True), ValueError, "richardson=True needs local_order"),
    (dict(est_error=True, richardson=True), ValueError,
     "richardson=True and est_error=True needs local_order"),
    (dict(richardson=True, local_order=1), ValueError, "local_order must be >= 2, got 1"),
    (dict(est_error=True, local_order=2.0), TypeError, "local_order must be an int, got 2.0"),
    (dict(richardson=1, local_order=2), TypeError, "richardson must be True or False, got 1"),
    (dict(richardson=True, local_order=2, crelax_weight=1.3), ValueError,
     r"excludes a C-relaxation weight other than 1 \(as in XBraid\), got crelax_weight=1.3"),
    (dict(est_error=True, local_order=2, crelax_weight={1: 0.7}), ValueError,
     "est_error=True excludes a C-relaxation weight"),
    (dict(richardson=True, local_order=2, periodic=True), ValueError,
     "richardson=True excludes periodic=True"),
    (dict(est_error=True, local_order=2, full_rnorm=True), ValueError,
     "est_error=True excludes full_rnorm=True"),
    (dict(richardson=True, local_order=2, delta_rank=2), ValueError,
     r"richardson=True excludes Delta correction \(delta_rank=2"),
])
def test_options_refuse_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        braidpy.Options(**kwargs)
    with pytest.raises(error, match=message):
        braidpy.Core(Ex06(), 0.0, 0.5, 16, **kwargs)


def test_to_core_and_the_core_check():
    from braidpy import _core

    got = braidpy.Options(richardson=True, est_error=True, local_order=3).to_core()
    assert (got.richardson, got.est_error, got.local_order) == (True, True, 3)
    assert braidpy.Options().to_core().local_order == 0
    for fields, message in ((dict(richardson=True, local_order=1), "local_order = 1"),
                            (dict(est_error=True, local_order=2, crelax_weight=0.5),
                             "crelax_weight = 0.5"),
                            (dict(richardson=True, local_order=2, periodic=True), "periodic")):
        with pytest.raises(ValueError, match=message):
            _core.Solver(Ex06(), None, 0, 1, _core.CoreOptions(**fields), [0.0, 0.5, 1.0], None)


def test_off_by_default_and_no_estimates():
    o = braidpy.Options()
    assert (o.richardson, o.est_error, o.local_order) == (False, False, None)
    r = braidpy.solve(Ex06(), 0.0, 0.5, 64, local_order=2)  # the order alone changes nothing
    assert r.error_estimates is None
    assert braidpy.solve(Ex06(), 0.0, 0.5, 64).residuals == r.residuals


def test_estimates_on_statuses_and_result():
    seen = {}

    class App(Ex06):
        def step(self, u, t0, t1, status):
            if status.level > 0:
                assert status.error_estimate() is None
            elif status.iteration == 0:
                assert status.error_estimate() is None and status.error_estimates() is None
            elif status.iteration >= 2:  # skip: iteration 1 restricts for the first time
                seen.setdefault("step", status.error_estimate())
            super().step(u, t0, t1, status)

        def access(self, u, status):
            if status.done:
                seen.setdefault("access", {})[status.index] = status.error_estimate()

    r = braidpy.solve(App(), 0.0, 0.5, 64, cfactor=4, max_levels=2, est_error=True,
                      local_order=2, richardson=True)
    assert seen["step"] > 0
    est = r.error_estimates
    assert est.shape == (65,) and est[0] == 0.0 and np.all(est[1:] > 0)
    assert [seen["access"][i] for i in range(65)] == est.tolist()
    # one value per fine interval (c - 4, c]
    assert np.all(est[1:].reshape(16, 4) == est[4::4][:, None])


def test_warm_restart_starts_without_estimates():
    core = braidpy.Core(Ex06(), 0.0, 0.5, 64, est_error=True, local_order=2, richardson=True,
                        skip=True, abs_tol=1e-12)
    first = core.solve()
    second = core.solve()
    assert first.converged and second.converged
    assert second.error_estimates is not None
    assert np.allclose(second.final, first.final, rtol=0, atol=1e-11)


def test_refused_by_the_adjoint():
    from apps import DecayRate
    from braidpy.adjoint import GradientSolver

    with pytest.raises(ValueError, match="richardson"):
        GradientSolver(DecayRate(), 0.0, 1.0, 16, primal=dict(richardson=True, local_order=2))


@pytest.mark.parametrize("number", [4, 6])
def test_xbraid_saved_outputs(number):
    # XBraid's own test/richardson.saved (xbraid_ex01_golden.json, tests 4 and 6:
    # ex-06 -nt 19 -richardson, with backward Euler and with SDIRK-23).
    from xbraid_cases import CASES

    [case] = [c for c in CASES if c["id"] == f"richardson@19df1476#{number}"]
    got = run_ex06(dict(args=case["command"].split()[4:]))
    assert (got["iterations"], got["levels"]) == (case["iterations"], case["nlevels"])
    assert got["history"][str(got["iterations"] - 1)] == case["final_residual_norm_printed"]
