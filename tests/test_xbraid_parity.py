"""Weighted C-relaxation, sync, nfmg and periodic problems against XBraid's own output,
at 1, 2 and 4 ranks.

tests/data/xbraid_parity.json holds what XBraid (commit in the file) printed for its
ex-02 with -CWt (braid_SetCRelaxWt(core, -1, w)) and the baseline without it, run with
mpiexec -n 1, 2, 4 (tests/data/make_xbraid_parity.py made it). ex-02's initial guess is
random per process, so each rank count is its own reference. braidpy runs the same
problem (xbraid_parity_cases.Ex02) at the same rank count, chain by chain and with a
batched step (the lock-step relaxation), and must print the same residuals to all 7
digits, the same iteration and level counts and the same final discretization error.

The "driver" cases come from tests/data/xbraid_drivers/parity_driver.c, a small program
on XBraid's ex-01 problem that sets what no shipped example does (braid_SetSync and
braid_SetNFMG, per-level weights) and writes every sync call on every rank with what the
sync status tells (calling function, iteration, level, levels, done, NTPoints, GetTIUL
of level 0, GetRNorms). braidpy's App.sync must be called at the same points, as often,
with the same facts, and its residual history must be the same to the last bit.

The "ex06" cases are XBraid's ex-06 with -periodic (u' = -4u - t + 1 on [0, 0.5]):
residuals, iterations, levels and u at t_0 (written by ex-06's access, 15 digits).
"""

import numpy as np
import pytest
from test_mpi import run_driver
from xbraid_parity_cases import Ex01, Ex06, cases, run_driver_case, run_ex02, run_ex06

import braidpy


def assert_as_printed(got, case):
    assert got["levels"] == case["nlevels"], case["id"]
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    assert got["error"] == case["error"], case["id"]


def test_reference_covers_the_weights():
    ids = [c["id"] for c in cases("ex02")]
    assert len(ids) == 15
    assert {c["nranks"] for c in cases("ex02")} == {1, 2, 4}
    # The weight changes XBraid's history: the data can tell a dropped weight.
    plain = {c["nranks"]: c["residuals"] for c in cases("ex02") if not c["args"]}
    weighted = {c["nranks"]: c["residuals"] for c in cases("ex02") if c["args"] == ["-CWt", "1.3"]}
    assert all(plain[n] != weighted[n] for n in (1, 2, 4))


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("ex02", 1), ids=lambda c: c["id"])
def test_ex02_serial(case, batched):
    got = run_ex02(case, batched=batched)
    assert_as_printed(got, case)
    assert (got["stacked_calls"] > 0) == batched


def xbraid_syncs(case):
    """The sync calls XBraid made on each rank; GetRNorms' -1 marks an iteration without
    a norm, which braidpy's history leaves out."""
    minus_one = f"{-1.0:.17e}"
    return {rank: [{**s, "rnorms": [r for r in s["rnorms"] if r != minus_one]} for s in calls]
            for rank, calls in case["syncs"].items()}


def assert_driver(got, case):
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["residuals"] == case["residuals"], case["id"]
    assert got["final"] == case["final"], case["id"]
    assert got["syncs"] == xbraid_syncs(case), case["id"]


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("driver", 1), ids=lambda c: c["id"])
def test_driver_serial(case, batched):
    assert_driver(run_driver_case(case, batched=batched), case)


def test_sync_reference_covers_every_kind_of_run():
    ids = {c["id"].rsplit(" @", 1)[0] for c in cases("driver")}
    assert {"parity_driver -sync -ml 1 -nt 8", "parity_driver -sync -ml 3 -nt 2"} <= ids
    for case in cases("driver"):  # one sync after init, then one per iteration, every rank
        for calls in case["syncs"].values():
            assert [s["caller"] for s in calls] == [7] + [5] * case["iterations"]
            assert [s["iteration"] for s in calls] == [0] + list(range(case["iterations"]))


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    expected = cases("ex02", nranks)
    drivers = cases("driver", nranks)
    periodic = cases("ex06", nranks)
    got = run_driver(nranks, "parity", tmp_path)
    assert sorted(got) == sorted([c["id"] + s for c in expected + drivers + periodic
                                  for s in ("", "/batched")])
    for case in periodic:
        assert_ex06(got[case["id"]], case)
        assert_ex06(got[case["id"] + "/batched"], case)
    for case in expected:
        assert_as_printed(got[case["id"]], case)
        assert_as_printed(got[case["id"] + "/batched"], case)
        assert got[case["id"] + "/batched"]["stacked_calls"] > 0
    for case in drivers:
        assert_driver(got[case["id"]], case)
        assert_driver(got[case["id"] + "/batched"], case)


def _history(case, **extra):
    return run_ex02(case, **extra)["history"]


def test_per_level_weights_name_levels():
    # ml 4: levels 0..2 relax (weighted), level 3 is solved (never weighted).
    [case] = [c for c in cases("ex02", 1) if c["args"][:5] == ["-CWt", "1.3", "-ml", "4", "-nu"]]
    assert _history(case, crelax_weight={0: 1.3, 1: 1.3, 2: 1.3, "default": 1.0}) == \
        case["residuals"]
    assert _history(case, crelax_weight={"default": 1.3, 3: 0.5}) == case["residuals"]
    assert _history(case, crelax_weight={0: 1.3, 1: 1.3}) != case["residuals"]


def _decay(xp=None):
    import numpy as np

    import braidpy

    if xp is None:
        class Decay(braidpy.App):
            rates = np.array([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]])

            def init(self, t):
                return np.ones((2, 3))

            def step(self, u, t0, t1, status):
                u /= 1.0 + (t1 - t0) * self.rates

        return Decay()
    from backend_cases import strict_decay_app

    return strict_decay_app()


@pytest.mark.parametrize("w", [0.6, 1.4])
def test_weight_on_array_api_states(w):
    pytest.importorskip("array_api_strict")
    import numpy as np

    import braidpy

    opts = dict(cfactor=2, abs_tol=1e-12, max_iter=20, crelax_weight=w, skip=False)
    strict = braidpy.solve(_decay("strict"), 0.0, 2.0, 32, **opts)
    host = braidpy.solve(_decay(), 0.0, 2.0, 32, **opts)
    plain = braidpy.solve(_decay(), 0.0, 2.0, 32, **{**opts, "crelax_weight": 1.0})
    # The states agree bitwise; the norms' summation order differs between backends.
    assert np.array_equal(np.from_dlpack(strict.final), host.final)
    assert np.allclose(strict.residuals, host.residuals, rtol=1e-13, atol=0)
    assert len(strict.residuals) != len(plain.residuals) or \
        not np.allclose(strict.residuals, plain.residuals, rtol=1e-6, atol=0)


def test_weight_with_a_warm_restart():
    import numpy as np

    import braidpy

    core = braidpy.Core(_decay(), 0.0, 2.0, 64, cfactor=4, abs_tol=1e-10, crelax_weight=1.3,
                        nrelax=2)
    first = core.solve()
    second = core.solve()
    assert first.converged and second.converged
    assert second.iterations < first.iterations
    assert np.allclose(second.final, first.final, rtol=0, atol=1e-9)


def test_sync_is_optional_and_counted():
    plain = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3)
    synced_app = Ex01()
    synced = braidpy.solve(synced_app, 0.0, 5.0, 16, max_levels=3)
    assert plain.counts["sync"] == 0 and not hasattr(Ex01(record_syncs=False), "sync")
    assert synced.counts["sync"] == len(synced_app.syncs) == synced.iterations + 1
    assert plain.residuals == synced.residuals


def test_sync_after_a_warm_restart_skips_the_init_call():
    app = Ex01()
    core = braidpy.Core(app, 0.0, 5.0, 16, max_levels=3, abs_tol=1e-10)
    first = core.solve()
    n = len(app.syncs)
    second = core.solve()
    assert n == first.iterations + 1
    assert [s["caller"] for s in app.syncs[n:]] == [5] * second.iterations


def test_sync_status_answers_the_grid():
    seen = {}

    class App(Ex01):
        def _sync(self, status):
            seen.update(cf=[status.cfactor(level) for level in range(status.nlevels)],
                        times=status.times(1).tolist(), owned=status.owned(2))
            with pytest.raises(ValueError, match="level must be in 0..2"):
                status.cfactor(3)

    braidpy.solve(App(), 0.0, 4.0, 8, max_levels=3, max_iter=2)
    assert seen == dict(cf=[2, 2, 3], times=[0.0, 1.0, 2.0, 3.0, 4.0], owned=range(0, 3))


def assert_ex06(got, case):
    assert got["levels"] == case["nlevels"], case["id"]
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    assert got["u0"] == case["u0"] == got["final"], case["id"]  # u(tstop) = u(tstart)


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", cases("ex06", 1), ids=lambda c: c["id"])
def test_periodic_ex06_serial(case, batched):
    assert_ex06(run_ex06(case, batched=batched), case)


def test_periodic_final_is_the_value_at_tstart_and_warm_restarts_keep_it():
    core = braidpy.Core(Ex06(), 0.0, 0.5, 64, periodic=True, cfactor=4, min_coarse=2,
                        abs_tol=1e-12, access_level=0)
    first = core.solve()
    assert first.final[0] == first.solution(index=0)[0]
    second = core.solve()
    assert first.converged and second.converged and second.iterations <= 2
    assert second.final[0] == second.solution(index=0)[0]
    assert len(first.times) == 65 and first.times[-1] == 0.5
    with pytest.raises(ValueError, match="periodic problem"):
        core.set_initial_condition(np.array([1.0]))


@pytest.mark.parametrize("kwargs, message", [
    # XBraid's ex-06 -nt 37 -periodic hangs: 37 is odd, so level 0 cannot coarsen by 2.
    (dict(ntime=37), "level 0 has 37 intervals, not a multiple of its cfactor 2"),
    (dict(ntime=40, min_coarse=1), "level 3 has 5 intervals"),
    (dict(ntime=40, cfactor=4, min_coarse=2, relax_only_cg=True, max_levels=2),
     "coarsest level's 10 intervals are not a multiple of its cfactor 4"),
    (dict(ntime=8, min_coarse=8), "the hierarchy has one level"),
    (dict(ntime=64, max_levels=1), "the hierarchy has one level"),
    (dict(ntime=64, seq_soln=True), "seq_soln"),
    (dict(ntime=64, cfactor={0: 4, "default": 2}), "one cfactor for all levels"),
])
def test_periodic_refuses_what_xbraid_cannot_do(kwargs, message):
    kwargs = {"cfactor": 2, "min_coarse": 8, **kwargs}
    ntime = kwargs.pop("ntime")
    with pytest.raises(ValueError, match=message):
        braidpy.solve(Ex06(), 0.0, 0.5, ntime, periodic=True, **kwargs)


def test_periodic_is_refused_by_the_adjoint():
    from apps import DecayRate
    from braidpy.adjoint import GradientSolver

    with pytest.raises(ValueError, match="periodic"):
        GradientSolver(DecayRate(), 0.0, 1.0, 16, primal=dict(periodic=True))


def test_periodic_wrap_step_ends_at_tstop_exactly():
    steps = []

    class App(Ex06):
        def step(self, u, t0, t1, status):
            steps.append((status.level, t0, t1))
            super().step(u, t0, t1, status)

    tstart, tstop = 0.2, 0.9  # tstart + (n/n)*(tstop - tstart) is not tstop here
    assert tstart + (48 / 48) * (tstop - tstart) != tstop
    r = braidpy.solve(App(), tstart, tstop, 48, periodic=True, cfactor=4, min_coarse=2,
                      max_iter=3, batch=False)
    assert r.times[-1] == tstop and r.levels == 3
    ends = {level: max(t1 for lv, _, t1 in steps if lv == level) for level in range(3)}
    assert ends == {0: tstop, 1: tstop, 2: tstop}
    starts = {(level, t0) for level, t0, t1 in steps if t1 == tstop}
    assert starts == {(0, r.times[47]), (1, r.times[44]), (2, r.times[32])}


def test_periodic_on_array_api_states():
    pytest.importorskip("array_api_strict")
    opts = dict(cfactor=2, min_coarse=2, abs_tol=1e-12, max_iter=20, periodic=True,
                crelax_weight=1.2)
    strict = braidpy.solve(_decay("strict"), 0.0, 2.0, 32, **opts)
    host = braidpy.solve(_decay(), 0.0, 2.0, 32, **opts)
    assert strict.iterations == host.iterations and strict.converged
    assert np.array_equal(np.from_dlpack(strict.final), host.final)
    assert np.array_equal(np.from_dlpack(strict.solution(index=0)), host.final)
