"""XBraid's ex-02 (1D heat equation) with -refinet: temporal refinement driven by the
Richardson error estimates (Options refine, est_error, local_order, tpoints_cutoff and
status.set_rfactor), against XBraid's own output at 1, 2 and 4 ranks.

tests/data/xbraid_ex02_refinet.json holds what XBraid (commit in the file) printed and
wrote for ex-02 -refinet TOL, alone and with -richardson, -ml 3 -fmg, -ml 4 -cf 4 -mc 2,
-nu 2 -skip 1, -res (its user residual) and its default 64 steps, run with mpiexec -n 1, 2, 4
(tests/data/make_xbraid_ex02_refinet.py made it). braidpy runs the same problem
(ex02_refinet_cases) chain by chain and (except -res) with a batched step and must print the same
residuals to all 7 digits in the same order, refine to the same grid sizes in the same
number of rebuilds, take the same iterations and levels, put every point of the final
grid at the same time and end with the same solution (%.14e) and error (%1.4e).

ex-02's initial guess is random per process (XBraid's braid_Rand, seeded alike in each
process), so the runs at 4 ranks refine to other grids than at 1 and 2: each rank count
is compared with XBraid at that rank count.
"""

import pytest
from ex02_refinet_cases import KEYS, batched_too, cases, run_case
from test_mpi import run_driver


def assert_case(got, case, where):
    for key in KEYS:
        assert got[key] == case[key], (where, key)


def test_the_reference_refines():
    # Every case rebuilds its grid at least twice, by factors above 2 (8 steps -> 64), and
    # the random guess makes 4 ranks refine differently from 1 rank in some of them.
    for case in cases():
        assert case["refinements"] == len(case["grids"]) >= 2, case["id"]
        assert case["ntime"] == case["grids"][-1] == len(case["times"]) - 1, case["id"]
    first = {c["id"]: c for c in cases(1)}["ex-02 -ntime 8 -refinet 1e-2 @1"]
    assert first["grids"][0] == 64
    assert any(a["grids"] != b["grids"] for a, b in zip(cases(1), cases(4)))
    assert {c["nranks"] for c in cases()} == {1, 2, 4}


SERIAL = [pytest.param(case, batched, id=f"{case['id']}-{'batched' if batched else 'chains'}")
          for case in cases(1) for batched in (False, True)
          if batched_too(case) or not batched]  # -res's app (Ex02Res) steps one by one


@pytest.mark.parametrize("case, batched", SERIAL)
def test_serial(case, batched):
    got = run_case(case, batched=batched)
    assert_case(got, case, case["id"])
    assert (got["stacked_calls"] > 0) == batched


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    got = run_driver(nranks, "ex02_refinet", tmp_path)
    expected = [c["id"] + s for c in cases(nranks)
                for s in (("", "/batched") if batched_too(c) else ("",))]
    assert sorted(got) == sorted(expected)
    for case in cases(nranks):
        assert_case(got[case["id"]], case, case["id"])
        if batched_too(case):
            assert_case(got[case["id"] + "/batched"], case, case["id"] + "/batched")
            assert got[case["id"] + "/batched"]["stacked_calls"] > 0
