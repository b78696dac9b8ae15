"""Features together against XBraid with the same features together, at 1, 2 and 4 ranks.

tests/data/xbraid_combos.json (tests/data/make_xbraid_combos.py) holds what XBraid
printed for ex-02 with -res -sc, -CWt -sc, -res -CWt and all three, drive-burgers-1D with
-CWt -sc 1, ex-01-expanded with -res -periodic (-sync, -fmg) and parity_driver.c with -res
and -periodic, -CWt, -sync, -fmg. braidpy runs the same problems (combo_cases.py) and
must print the same residuals to all 7 digits, the same iteration and level counts and
the same final values; the apps without a residual also with a batched step, and the
driver's sync calls must be XBraid's, rank by rank.
"""

import numpy as np
import pytest
from combo_cases import (Heat, HeatNoResidual, batchable, cases, expected, run, run_ex01x,
                         run_ex02)
from test_mpi import run_driver
from test_xbraid_parity import xbraid_syncs

import braidpy


def assert_matches(got, case):
    for key, value in expected(case).items():
        assert got[key] == value, (case["id"], key)
    if case["kind"] == "driver":
        want = xbraid_syncs(case)
        if "-periodic" in case["args"] or "-fullres" in case["args"]:
            # The periodic norm adds point 0's term in another place than XBraid does, and
            # the full norm sums the ranks' parts in another order: the full-precision
            # norms may differ in their last bit (docs/conventions.md).
            got, want = _rounded(got["syncs"]), _rounded(want)
        else:
            got = got["syncs"]
        assert got == want, case["id"]


def _rounded(syncs):
    return {rank: [{**s, "rnorms": [f"{float(r):.14e}" for r in s["rnorms"]]} for s in calls]
            for rank, calls in syncs.items()}


def test_reference_covers_the_pairs():
    ids = {c["id"].rsplit(" @", 1)[0] for c in cases()}
    assert {"ex-02 -res -sc -ml 4", "ex-02 -CWt 1.3 -sc -ml 4", "ex-02 -res -CWt 1.3",
            "ex-02 -res -CWt 1.3 -sc -ml 4"} <= ids
    assert {c["nranks"] for c in cases()} == {1, 2, 4}
    assert len(cases()) == 3 * len(cases(nranks=1))


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases(nranks=1), ids=lambda c: c["id"])
def test_serial(case, batched):
    if batched and not batchable(case):
        with pytest.raises(ValueError, match="batch=False"):
            braidpy.solve(Heat(batched=True), 0.0, 1.0, 8, max_iter=1)
        return
    got = run(case, batched=batched)
    assert_matches(got, case)
    if case["kind"] in ("ex02", "burgers"):
        assert got["batched"] == batched


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    got = run_driver(nranks, "combos", tmp_path)
    expect = cases(nranks=nranks)
    assert sorted(got) == sorted([c["id"] for c in expect] +
                                 [c["id"] + "/batched" for c in expect if batchable(c)])
    for case in expect:
        assert_matches(got[case["id"]], case)
        if batchable(case):
            assert_matches(got[case["id"] + "/batched"], case)


def test_the_features_change_each_others_history():
    """Each pair's history differs from either feature alone: a dropped feature shows."""
    one = {c["id"].rsplit(" @", 1)[0]: c["residuals"] for c in cases(nranks=1)}
    res_sc, cwt_sc = one["ex-02 -res -sc -ml 4"], one["ex-02 -CWt 1.3 -sc -ml 4"]
    both = one["ex-02 -res -CWt 1.3 -sc -ml 4"]
    assert len({str(res_sc), str(cwt_sc), str(both), str(one["ex-02 -res -CWt 1.3"])}) == 4
    plain = run_ex02(dict(args=["-res", "-ml", "4"]))["residuals"]
    assert plain != res_sc
    # The driver's scalar coarsening changes the periodic history (XBraid's own numbers).
    from xbraid_parity_cases import cases as parity_cases
    [periodic] = [c for c in parity_cases("driver", 1)
                  if c["args"] == ["-periodic", "-nt", "64", "-ml", "3"]]
    [coarsened] = [c for c in cases("driver", 1)
                   if c["args"] == ["-sc", "-periodic", "-nt", "64", "-ml", "3"]]
    assert periodic["residuals"]["1"] != coarsened["residuals"]["1"]


def test_periodic_residual_sees_the_wrap_step_as_braidpy_steps_it():
    """braidpy's wrap residual gets (t_{n-1}, tstop), its step's interval; XBraid's gets
    (t_{n-1}, tstart) (see combo_cases)."""
    seen = []

    class App(Heat):
        def residual(self, ustop, r, status):
            seen.append((status.t0, status.t1))
            super().residual(ustop, r, status)

    r = braidpy.solve(App(17, sc=False), 0.0, 1.0, 16, periodic=True, batch=False,
                      max_levels=2, min_coarse=2, max_iter=2, skip=False)
    assert (r.times[15], 1.0) in seen and all(t1 != 0.0 for _, t1 in seen)
    [case] = [c for c in cases("ex01x", 1) if "-sync" not in c["args"]]
    own = run_ex01x(case, xbraid_wrap=False)
    assert own["residuals"] != case["residuals"] and own["iterations"] <= case["iterations"]


def test_full_rnorm_with_spatial_coarsening_measures_the_fine_residual():
    """full_rnorm's norm lives on level 0: with identity coarsen/refine it is bitwise the
    one without spatial coarsening, and with ex-02's coarsening its first value (before
    any coarse correction) is unchanged."""
    def solve(app, **kw):
        return braidpy.solve(app, 0.0, 2 * np.pi, 64, batch=False, full_rnorm=True,
                             max_levels=4, min_coarse=3, max_iter=4, skip=False, **kw)

    class Identity(Heat):
        def __init__(self):
            super().__init__(33, sc=False)
            self.coarsen = lambda f, s: f.copy()
            self.refine = lambda c, s: c.copy()

    plain = solve(Heat(33, sc=False))
    same = solve(Identity())
    coarse = solve(Heat(33, sc=True))
    assert same.full_residuals == plain.full_residuals and same.residuals == plain.residuals
    assert coarse.full_residuals[0] == plain.full_residuals[0]
    assert coarse.full_residuals[1:] != plain.full_residuals[1:]
    assert coarse.counts["coarsen"] > 0


def test_sync_with_spatial_coarsening_and_weights():
    """sync sees every iteration of a spatially coarsened, weighted solve; it changes no
    value."""
    calls = []

    class Synced(HeatNoResidual):
        def sync(self, status):
            calls.append((status.phase, status.iteration, status.nlevels))

    [case] = [c for c in cases("ex02", 1) if c["args"][:4] == ["-CWt", "1.3", "-sc", "-ml"]]
    app = Synced(33, res=False, sc=True)
    got = run_ex02(case)
    r = braidpy.solve(app, 0.0, 2 * np.pi, 64, max_levels=4, min_coarse=3, skip=False,
                      crelax_weight=1.3, max_iter=30,
                      abs_tol=1e-7 / (np.sqrt(2 * np.pi / 63) * np.sqrt(np.pi / 32)))
    assert [f"{v:1.6e}" for v in r.residuals] == list(got["residuals"].values())
    assert calls == [("init", 0, 4)] + [("cycle", k, 4) for k in range(r.iterations)]
