"""MGRIT correctness anchors (serial): exactness, convergence, warm restarts."""

import math

import numpy as np
import pytest
from apps import Decay, Heat, Logistic, OpaqueDecay, serial_trajectory

import braidpy

APPS = {
    "decay": (lambda: Decay(), 0.0, 4.0, 97),
    "heat": (lambda: Heat(17), 0.0, 1.0, 64),
    "logistic": (lambda: Logistic(), 0.0, 5.0, 128),
}


def all_values(result):
    return [result.solution(index=i) for i in result.owned]


@pytest.mark.parametrize("name", sorted(APPS))
def test_one_level_is_serial_stepping_bitwise(name):
    make, t0, t1, n = APPS[name]
    r = braidpy.solve(make(), t0, t1, n, max_levels=1)
    assert r.iterations == 0 and r.levels == 1
    ref = serial_trajectory(make(), t0, t1, n)
    for got, want in zip(all_values(r), ref):
        assert np.array_equal(got, want)
    assert np.array_equal(r.final, ref[-1])


@pytest.mark.parametrize("name", sorted(APPS))
@pytest.mark.parametrize("opts", [dict(cfactor=2), dict(cfactor=4, nrelax=0),
                                  dict(cfactor=3, fmg=True),
                                  dict(cfactor=2, max_levels=2, skip=False)])
def test_converges_to_serial_solution(name, opts):
    make, t0, t1, n = APPS[name]
    r = braidpy.solve(make(), t0, t1, n, abs_tol=1e-11, max_iter=60, **opts)
    assert r.residuals[-1] < 1e-11
    ref = serial_trajectory(make(), t0, t1, n)
    scale = max(np.max(np.abs(v)) for v in ref)
    err = max(np.max(np.abs(a - b)) for a, b in zip(all_values(r), ref))
    assert err < 1e-9 * scale


@pytest.mark.parametrize("name", sorted(APPS))
def test_from_sequential_solution_first_residual_is_zero(name):
    make, t0, t1, n = APPS[name]
    r = braidpy.solve(make(), t0, t1, n, cfactor=4, seq_soln=True)
    assert r.residual_iterations[0] == 0 and r.residuals[0] == 0.0
    assert r.iterations == 1


class BadCoarse(Decay):
    """Fine backward Euler, a deliberately wrong coarse propagator: convergence
    can then only come from the exactness property of F-relaxation."""

    def step(self, u, t0, t1, status):
        if status is not None and status.level > 0:
            u *= 0.5
        else:
            super().step(u, t0, t1, status)


@pytest.mark.parametrize("cf", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [32, 37])
def test_two_level_f_relaxation_exact_after_n_over_cf_iterations(cf, n):
    ref = serial_trajectory(BadCoarse(lam=-0.4, guess=5.0), 0.0, 2.0, n)

    def error(iterations):
        r = braidpy.solve(BadCoarse(lam=-0.4, guess=5.0), 0.0, 2.0, n, max_levels=2, cfactor=cf,
                          nrelax=0, skip=False, abs_tol=0.0, max_iter=iterations)
        return max(abs(a[0] - b[0]) for a, b in zip(all_values(r), ref))

    assert error(math.ceil(n / cf)) < 1e-15
    # The bound is sharp up to one iteration: two fewer leave a real error.
    assert error(n // cf - 1) > 1e-6


def test_level_construction_follows_xbraid():
    def nlev(n, **o):
        return braidpy.Core(Decay(), 0.0, 1.0, n, **o).nlevels

    assert nlev(1024, cfactor=4) == 5
    assert nlev(1024, cfactor=2) == 10
    assert nlev(1000, cfactor=3, max_levels=3) == 3
    assert nlev(10, cfactor=2, max_levels=2) == 2
    assert nlev(2, cfactor=2) == 1  # ntime <= min_coarse
    assert nlev(64, cfactor={0: 4, 1: 2}, min_coarse=4) == 4  # 64, 16, 8, 4


def test_iteration_count_with_skip_is_residuals_plus_one():
    r = braidpy.solve(Decay(), 0.0, 5.0, 256, cfactor=4, abs_tol=1e-10)
    assert r.residual_iterations == list(range(1, r.iterations))
    r0 = braidpy.solve(Decay(), 0.0, 5.0, 256, cfactor=4, abs_tol=1e-10, skip=False)
    assert r0.residual_iterations == list(range(r0.iterations))


def test_max_iter_stops_and_relative_tolerance():
    r = braidpy.solve(Decay(), 0.0, 5.0, 256, cfactor=2, max_iter=3, abs_tol=0.0)
    assert r.iterations == 3
    r = braidpy.solve(Decay(), 0.0, 5.0, 256, cfactor=2, abs_tol=0.0, rel_tol=1e-6)
    first = r.residuals[0]
    assert r.residuals[-1] < 1e-6 * first
    assert all(x >= 1e-6 * first for x in r.residuals[:-1])


def test_tnorms_differ_and_inf_norm_is_max():
    base = dict(cfactor=4, max_iter=2, abs_tol=0.0)
    r2 = braidpy.solve(Decay(), 0.0, 5.0, 64, tnorm=2, **base).residuals
    r1 = braidpy.solve(Decay(), 0.0, 5.0, 64, tnorm=1, **base).residuals
    ri = braidpy.solve(Decay(), 0.0, 5.0, 64, tnorm=math.inf, **base).residuals
    assert ri[0] <= r2[0] <= r1[0] and ri[0] < r1[0]


def test_residual_computation_off_runs_max_iter():
    r = braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4, max_iter=4, residual_computation=False)
    assert r.iterations == 4 and r.residuals == []


def test_storage_all_gives_same_values():
    a = braidpy.solve(Heat(17), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-10)
    b = braidpy.solve(Heat(17), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-10, storage="all")
    for x, y in zip(all_values(a), all_values(b)):
        assert np.array_equal(x, y)
    assert a.residuals == b.residuals


def test_final_fc_relax_changes_only_the_returned_solution():
    a = braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4, max_iter=2, abs_tol=0.0)
    b = braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4, max_iter=2, abs_tol=0.0,
                      final_fc_relax=True)
    assert a.residuals == b.residuals and a.iterations == b.iterations
    ref = serial_trajectory(Decay(), 0.0, 5.0, 64)[-1][0]
    # Strictly closer: the option must do something after two iterations.
    assert abs(b.final[0] - ref) < abs(a.final[0] - ref)


def test_final_fc_relax_is_one_fc_sweep_before_the_final_f_sweep():
    """XBraid's FinalFCRelax: one more F-relaxation then C-relaxation on level 0 after the
    last iteration, then the final F-sweep. Without it the returned F-points are Phi
    applied to the C-points; with it each C-point c > 0 becomes Phi of the F-point just
    before it in the run without the option (bitwise), and only C-point 0 keeps its value."""
    cf, n = 4, 64
    opts = dict(cfactor=cf, max_iter=2, abs_tol=0.0)
    a = braidpy.solve(Decay(), 0.0, 5.0, n, **opts)
    b = braidpy.solve(Decay(), 0.0, 5.0, n, final_fc_relax=True, **opts)
    app = Decay()
    ua, ub = all_values(a), all_values(b)

    def step(u, i):
        v = u.copy()
        app.step(v, a.times[i - 1], a.times[i], None)
        return v

    changed = 0
    for i in range(1, n + 1):
        if i % cf == 0:  # C-point: one C-relaxation from a's F-point i-1
            want = step(ua[i - 1], i)
            changed += not np.array_equal(ub[i], ua[i])
        else:  # F-point: the final F-sweep from b's own values
            want = step(ub[i - 1], i)
        assert np.array_equal(ub[i], want), i
    assert np.array_equal(ub[0], ua[0])
    assert changed > n // cf // 2  # two iterations leave most C-points inexact
    assert np.array_equal(b.final, ub[n])


def test_access_sees_every_point_in_time_order_at_the_end():
    seen = []

    class Watch(Decay):
        def access(self, u, status):
            seen.append((status.index, status.t, status.done, float(u[0])))

    r = braidpy.solve(Watch(), 0.0, 2.0, 50, cfactor=4, abs_tol=1e-12)
    assert [s[0] for s in seen] == list(range(51))
    assert all(s[2] for s in seen)
    assert np.allclose([s[1] for s in seen], r.times, rtol=0, atol=0)
    assert seen[-1][3] == r.final[0]


def test_access_level_2_each_iteration_and_0_never():
    calls = []

    class Watch(Decay):
        def access(self, u, status):
            calls.append((status.iteration, status.done))

    r = braidpy.solve(Watch(), 0.0, 2.0, 64, cfactor=4, abs_tol=1e-12, access_level=2)
    iters = {k for k, done in calls if not done}
    assert iters == set(range(r.iterations))
    calls.clear()
    braidpy.solve(Watch(), 0.0, 2.0, 64, cfactor=4, access_level=0)
    assert calls == []


def test_status_fields_during_step():
    records = []

    class Watch(Decay):
        def step(self, u, t0, t1, status):
            records.append((status.level, status.index, status.fine_index, t0, t1,
                            status.iteration, status.phase))
            super().step(u, t0, t1, status)

    core = braidpy.Core(Watch(), 0.0, 1.0, 16, cfactor=2, max_iter=2, abs_tol=0.0)
    r = core.solve()
    times = r.times
    for level, index, fine, t0, t1, it, phase in records:
        stride = 2**level
        assert fine == index * stride
        assert t0 == times[index * stride] and t1 == times[(index + 1) * stride]
        assert 0 <= it <= r.iterations and phase in ("relax", "residual", "final")
    assert {rec[0] for rec in records} == set(range(r.levels))


def test_warm_restart_starts_from_previous_solution():
    core = braidpy.Core(Heat(17), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-10)
    first = core.solve()
    second = core.solve()
    assert second.residuals[0] < 1e-9
    assert second.iterations < first.iterations
    core.reset_guess()
    third = core.solve()
    assert third.residuals == first.residuals


def test_set_initial_condition():
    core = braidpy.Core(Decay(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    core.solve()
    core.set_initial_condition(np.array([3.0]))
    r = core.solve()
    ref = serial_trajectory(Decay(u0=3.0), 0.0, 1.0, 64)[-1]
    assert abs(r.final[0] - ref[0]) < 1e-11


def test_step_may_return_a_new_object():
    class Functional(Decay):
        def step(self, u, t0, t1, status):
            return u / (1.0 - self.lam * (t1 - t0))  # new array, u untouched

    a = braidpy.solve(Functional(), 0.0, 3.0, 81, cfactor=3, abs_tol=1e-12)
    b = braidpy.solve(Decay(), 0.0, 3.0, 81, cfactor=3, abs_tol=1e-12)
    assert a.residuals == b.residuals and np.array_equal(a.final, b.final)


def test_opaque_vectors():
    r = braidpy.solve(OpaqueDecay(), 0.0, 2.0, 64, cfactor=4, abs_tol=1e-12)
    want = (1 + 2.0 / 64) ** -64
    assert abs(r.final.values[0] - want) < 1e-11
    assert abs(r.final.values[1] - 2 * want) < 1e-11


def test_user_time_grid():
    n = 40
    times = np.concatenate([np.linspace(0.0, 1.0, 21), np.linspace(1.0, 3.0, 21)[1:]])
    r = braidpy.solve(Decay(), 0.0, 3.0, n, times=times, cfactor=2, abs_tol=1e-12)
    u = 1.0
    for a, b in zip(times[:-1], times[1:]):
        u /= 1.0 + (b - a)
    assert np.array_equal(r.times, times)
    assert abs(r.final[0] - u) < 1e-12


def test_solution_lookup_by_time_and_errors():
    r = braidpy.solve(Decay(), 0.0, 1.0, 10, cfactor=2)
    assert np.array_equal(r.solution(0.5), r.solution(index=5))
    with pytest.raises(ValueError, match="not a point"):
        r.solution(0.55)
    with pytest.raises(IndexError):
        r.solution(index=11)
    with pytest.raises(TypeError):
        r.solution()


def test_clone_count_is_what_the_algorithm_needs():
    r = braidpy.solve(Decay(), 0.0, 5.0, 4096, cfactor=4, max_levels=30, abs_tol=1e-9)
    per_step = r.counts["clone"] / r.counts["step"]
    assert per_step < 0.5  # one clone per interval sweep and per injected point


def test_print_level_reports_each_iteration(capsys):
    r = braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4, abs_tol=1e-10, print_level=2)
    out = capsys.readouterr().out
    assert "|| r_0 || not available" in out
    assert out.count("|| r_") == r.iterations
    assert f"|| r_{r.iterations - 1} || = {r.residuals[-1]:.6e}" in out
    assert "level 0: 64 intervals, cfactor 4" in out
    braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4)
    assert capsys.readouterr().out == ""


def test_core_getters():
    core = braidpy.Core(Decay(), 0.0, 1.0, 16, cfactor=2)
    assert core.nlevels == len(core.level_info) == 4
    assert core.owned == range(0, 17)
    assert core.times[0] == 0.0 and len(core.times) == 17
    assert [lv["n"] for lv in core.level_info] == [16, 8, 4, 2]


@pytest.mark.parametrize("name", sorted(APPS))
def test_fast_array_paths_match_python_defaults_bitwise(name):
    """The C++ fast clone/sum/norm (used when the app keeps App's defaults) round
    exactly like braidpy.backends.numpy; an override forces the Python path."""
    from braidpy.backends import numpy as np_backend

    make, t0, t1, n = APPS[name]

    def python_path():
        app = make()
        app.sum = lambda a, x, b, y: np_backend.sum(a, x, b, y)
        app.clone = lambda u: np_backend.clone(u)
        app.norm = lambda u: np_backend.norm(u)
        return app

    opts = dict(cfactor=2, abs_tol=1e-12, max_iter=12)
    fast = braidpy.solve(make(), t0, t1, n, **opts)
    slow = braidpy.solve(python_path(), t0, t1, n, **opts)
    assert fast.residuals == slow.residuals
    assert all(np.array_equal(a, b) for a, b in zip(all_values(fast), all_values(slow)))
