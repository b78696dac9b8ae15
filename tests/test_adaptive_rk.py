"""braidpy.integrators.AdaptiveRK: the Dormand-Prince tableau's orders, SciPy's RK45 at the
same tolerances (the same substeps), the Arenstorf orbit closing, the achieved error against
rtol, batched = unbatched bitwise (every row its own controller), MGRIT = sequential stepping
at 1, 2 and 4 ranks, errors that name the step or the bad value.

Under pytest this file holds the tests. Run as a script it is their MPI driver
(mpi_launch.launch starts it)::

    mpiexec -n P python tests/test_adaptive_rk.py P OUT.json

It solves every case of MPI_CASES on P ranks, batched and unbatched, and rank 0 writes
the summaries (iterations, residuals, every state) as JSON.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import braidpy  # noqa: E402
from braidpy import integrators as ig  # noqa: E402
from braidpy import problems as pb  # noqa: E402

SEED = 20261208
PERIOD = pb.ArenstorfOrbit.PERIOD
ARENSTORF = pb.ArenstorfOrbit()  # for its right-hand side and initial value


def brusselator(t, u):
    """Brusselator (a = 1, b = 3) with a time-dependent source: elementwise, any leading
    shape, t a float or a column."""
    x, y = u[..., 0], u[..., 1]
    tt = np.asarray(t)[..., 0] if np.ndim(t) else t
    xxy = x * x * y
    return np.stack([1.0 + xxy - 4.0 * x + 0.1 * np.cos(tt), 3.0 * x - xxy], axis=-1)


def solve_ivp_end(rhs, u0, t0, t1, **options):
    from scipy.integrate import solve_ivp

    sol = solve_ivp(rhs, (t0, t1), u0, **options)
    assert sol.success, sol.message
    return sol.y[:, -1], sol.nfev


def one_step(app, u0, t0, t1):
    u = np.array(u0, dtype=np.float64)
    app.step(u, t0, t1, None)
    return u


# --- the tableaus -----------------------------------------------------------------------------


ROTATION = np.array([[-0.5, 2.0], [-2.0, -0.5]])


def fixed_step_orders(tab, rhs, exact, N=(8, 16, 32, 64)):
    """The measured orders of tab's b and of its b_hat as fixed-step methods (ExplicitRK)
    over [0, 1] from (1, 0.5)."""
    u0 = np.array([1.0, 0.5])
    slopes = []
    for t in (tab, ig.ButcherTableau(tab.A, tab.b_hat, tab.c, name="embedded")):
        errors = []
        for n in N:
            app = ig.ExplicitRK(rhs, u0, t)
            u = u0.copy()
            for i in range(n):
                app.step(u, i / n, (i + 1) / n, None)
            errors.append(float(np.max(np.abs(u - exact))))
        slopes.append(float(np.polyfit(np.log([1.0 / n for n in N]), np.log(errors), 1)[0]))
    return slopes


@pytest.mark.parametrize("name", ["dopri5", "bogacki_shampine", "heun_euler"])
def test_the_pairs_have_their_orders(name):
    """Each pair's method and its embedded method, as fixed-step methods, converge at
    their stated orders: on u' = R u (the stability polynomials) to within 0.3; on the
    forced Brusselator (the nonlinear order conditions) at least that fast (Dormand and
    Prince made the fifth-order error terms small: slope 6 on these grids)."""
    from scipy.linalg import expm

    tab = ig.tableau(name)
    linear = fixed_step_orders(tab, lambda t, u: u @ ROTATION.T,
                               expm(ROTATION) @ np.array([1.0, 0.5]))
    assert abs(linear[0] - tab.order) < 0.3 and abs(linear[1] - tab.embedded_order) < 0.3, \
        (name, linear)
    exact, _ = solve_ivp_end(brusselator, [1.0, 0.5], 0.0, 1.0, method="DOP853", rtol=1e-13,
                             atol=1e-13)
    nonlinear = fixed_step_orders(tab, brusselator, exact)
    assert nonlinear[0] > tab.order - 0.25 and nonlinear[1] > tab.embedded_order - 0.25, \
        (name, nonlinear)


def test_dormand_prince_is_first_same_as_last():
    t = ig.DORMAND_PRINCE
    assert t.stages == 7 and t.order == 5 and t.embedded_order == 4
    assert np.array_equal(t.A[6], t.b) and t.c[6] == 1.0 and t.b[6] == 0.0
    assert ig.tableau("dopri5") is t


# --- against SciPy's RK45 ---------------------------------------------------------------------


@pytest.mark.parametrize("rtol, atol, orbit", [(1e-3, 1e-6, 2.0), (1e-6, 1e-9, PERIOD),
                                               (1e-10, 1e-12, PERIOD)])
def test_the_same_substeps_as_scipy_rk45(rtol, atol, orbit):
    """The same algorithm as solve_ivp(method="RK45") (HNW's norm, controller and first
    step): over one long step the same number of f evaluations and the same end to
    rounding, on a smooth problem and on the Arenstorf orbit's close approaches (over
    [0, 2] only at rtol 1e-3: over a period that solution is so far off the orbit that
    rounding grows to 2e-4)."""
    u0 = np.array([1.5, 3.0])
    for rhs, y0, t1 in ((brusselator, u0, 10.0), (ARENSTORF.rhs, ARENSTORF.u0, orbit)):
        app = ig.AdaptiveRK(rhs, y0, "rk45", rtol=rtol, atol=atol)
        got = one_step(app, y0, 0.0, t1)
        want, nfev = solve_ivp_end(rhs, y0, 0.0, t1, method="RK45", rtol=rtol, atol=atol)
        assert app.counts["rhs"] == nfev, (rtol, app.counts, nfev)
        # the substeps' sums round differently: rounding, amplified along the orbit
        assert np.max(np.abs(got - want)) < 2e-9, (got, want)


def test_bogacki_shampine_matches_scipy_rk23():
    app = ig.AdaptiveRK(brusselator, [1.5, 3.0], "rk23", rtol=1e-6, atol=1e-9)
    got = one_step(app, [1.5, 3.0], 0.0, 10.0)
    want, nfev = solve_ivp_end(brusselator, [1.5, 3.0], 0.0, 10.0, method="RK23", rtol=1e-6,
                               atol=1e-9)
    assert app.counts["rhs"] == nfev and np.max(np.abs(got - want)) < 1e-10


def test_the_arenstorf_orbit_closes_after_its_period():
    """Tight tolerances: the end of one period is the start again, as a DOP853 reference
    at rtol 1e-12 has it; MGRIT over 64 steps reaches the same."""
    ref = ARENSTORF.reference([PERIOD])[0]
    app = ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0, rtol=1e-10, atol=1e-12, vectorized=True)
    end = one_step(app, ARENSTORF.u0, 0.0, PERIOD)
    assert np.max(np.abs(end - ref)) < 2e-6 and np.max(np.abs(end - ARENSTORF.u0)) < 2e-6
    p = pb.ArenstorfOrbit(method="rk45", rtol=1e-10, atol=1e-12, ntime=64)
    r = p.solve(max_levels=3, cfactor=4, abs_tol=1e-10)
    assert r.converged and np.max(np.abs(r.final - ref)) < 2e-6
    # the default tolerances (PyMGRIT's) do not close it: the error is the tolerances'
    loose = one_step(ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0), ARENSTORF.u0, 0.0, PERIOD)
    assert np.max(np.abs(loose - ref)) > 1e-2


def test_the_error_scales_with_rtol():
    """The achieved error at the end against rtol (atol = rtol / 100): proportional, the
    slope of log(error) against log(rtol) about 1 (Dormand-Prince with local
    extrapolation), and always below 1000 rtol."""
    u0 = np.array([1.5, 3.0])
    exact, _ = solve_ivp_end(brusselator, u0, 0.0, 10.0, method="DOP853", rtol=1e-13,
                             atol=1e-13)
    rtols = [1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9]
    errors = []
    for rtol in rtols:
        app = ig.AdaptiveRK(brusselator, u0, rtol=rtol, atol=rtol / 100)
        errors.append(float(np.max(np.abs(one_step(app, u0, 0.0, 10.0) - exact))))
    slope = float(np.polyfit(np.log(rtols), np.log(errors), 1)[0])
    assert 0.8 < slope < 1.2, (slope, errors)
    assert all(e < 1e3 * r for e, r in zip(errors, rtols)), errors


def test_steps_end_exactly_at_t1_and_compose():
    """A step lands on t1 (one step over [0, 2] and two over [0, 1], [1, 2] agree to the
    tolerance, not to the bits: each step restarts its controller), t1 = t0 changes
    nothing, and a backward step returns to the start."""
    app = ig.AdaptiveRK(brusselator, [1.5, 3.0], rtol=1e-10, atol=1e-12)
    whole = one_step(app, [1.5, 3.0], 0.0, 2.0)
    halves = one_step(app, one_step(app, [1.5, 3.0], 0.0, 1.0), 1.0, 2.0)
    assert 0.0 < np.max(np.abs(whole - halves)) < 1e-8
    before = app.counts["rhs"]
    assert np.array_equal(one_step(app, whole, 2.0, 2.0), whole)
    assert app.counts["rhs"] == before
    back = one_step(app, whole, 2.0, 0.0)
    assert np.max(np.abs(back - [1.5, 3.0])) < 1e-8


# --- batched = unbatched ----------------------------------------------------------------------


def stacked_vs_rows(app, U, t0s, t1s):
    A, B = U.copy(), U.copy()
    assert app.step_stacked(A, t0s, t1s, None) is None  # in place
    for k in range(len(U)):
        app.step(B[k], float(t0s[k]), float(t1s[k]), None)
    return A, B


@pytest.mark.parametrize("vectorized", [True, False])
@pytest.mark.parametrize("name", ["dopri5", "bogacki_shampine", "heun_euler"])
def test_step_stacked_is_step_row_by_row_bitwise(name, vectorized):
    """Rows that need from one substep to hundreds (far from the moon and past it), of
    different lengths, one of length 0, one backward: each row exactly as alone, and in
    any order of the rows."""
    rng = np.random.default_rng(SEED)
    m = 12
    U = ARENSTORF.u0 + 1e-3 * rng.standard_normal((m, 4))
    t0s = rng.uniform(0.0, 8.0, m)
    t1s = t0s + rng.choice([1e-3, 0.05, 0.5, 3.0], m)
    t1s[3] = t0s[3]
    t1s[7] = t0s[7] - 0.2
    seen = []

    def rhs(t, u):
        seen.append(np.shape(t))
        return ARENSTORF.rhs(t, u)

    rtol = 1e-3 if name == "heun_euler" else 1e-6  # order 2: 1e-6 takes 10^4 substeps
    app = ig.AdaptiveRK(rhs, ARENSTORF.u0, name, rtol=rtol, atol=rtol * 1e-3,
                        vectorized=vectorized)
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B) and np.array_equal(A[3], U[3])
    assert np.all(np.any(A != U, axis=1)[np.arange(m) != 3])
    perm = rng.permutation(m)
    C = U[perm].copy()
    app.step_stacked(C, t0s[perm], t1s[perm], None)
    assert np.array_equal(C, A[perm])
    if vectorized:  # one call per stage for the rows still stepping, times as a column
        assert seen[0] == (m - 1, 1) and min(s[0] for s in seen) < m - 1


def test_states_of_two_axes_bitwise_and_float32():
    """A state of shape (40, 2) (forty uncoupled Brusselators: a longer norm reduction),
    and float32 states, which step in float32."""
    rng = np.random.default_rng(SEED + 1)
    U = np.array([1.5, 3.0]) + 0.5 * rng.random((5, 40, 2))
    t0s = rng.uniform(0.0, 1.0, 5)
    t1s = t0s + rng.uniform(0.1, 2.0, 5)
    app = ig.AdaptiveRK(brusselator, U[0], rtol=1e-8, atol=1e-10, vectorized=True)
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B)
    app32 = ig.AdaptiveRK(brusselator, U[0].astype(np.float32), rtol=1e-5, atol=1e-7,
                          vectorized=True)
    A32, B32 = stacked_vs_rows(app32, U.astype(np.float32), t0s, t1s)
    assert A32.dtype == np.float32 and np.array_equal(A32, B32)
    assert np.max(np.abs(A32 - A)) < 1e-3


def test_atol_per_component():
    """atol as an array weighs the components: a loose atol on the velocities takes fewer
    substeps than a tight one."""
    loose = ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0, rtol=1e-6, atol=[1e-9, 1e-9, 1.0, 1.0])
    tight = ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0, rtol=1e-6, atol=1e-9)
    one_step(loose, ARENSTORF.u0, 0.0, 1.0)
    one_step(tight, ARENSTORF.u0, 0.0, 1.0)
    assert loose.counts["accepted"] < tight.counts["accepted"]
    with pytest.raises(ValueError, match=r"atol of shape \(3,\) does not broadcast to the "
                                         r"state's shape \(4,\)"):
        ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0, atol=[1e-6] * 3)


# --- MGRIT = sequential stepping --------------------------------------------------------------

#: name: (the app, T, N, the tolerance MGRIT must reach sequential stepping to)
MGRIT_CASES = {
    "arenstorf_rk45": (lambda: pb.ArenstorfOrbit(method="rk45", rtol=1e-8, atol=1e-10,
                                                 tstop=2.0, ntime=64).app(), 2.0, 64),
    "arenstorf_pymgrit_tolerances": (lambda: pb.ArenstorfOrbit(method="rk45", tstop=2.0,
                                                               ntime=128).app(), 2.0, 128),
    "brusselator_rk23": (lambda: ig.AdaptiveRK(brusselator, [1.5, 3.0], "rk23", rtol=1e-7,
                                               atol=1e-9, vectorized=True), 4.0, 64),
}
MPI_CASES = tuple(sorted(MGRIT_CASES))


def sequential(app, T, N):
    app.tstart, app.tstop, app.ntime = 0.0, T, N
    u = app.init(0.0)
    out = [u.copy()]
    for i in range(N):
        app.step(u, i * T / N, (i + 1) * T / N, None)
        out.append(u.copy())
    return np.array(out)


def run_case(name, batch, comm=None):
    """Summary of an MGRIT solve of MGRIT_CASES[name] (the states only on rank 0)."""
    make, T, N = MGRIT_CASES[name]
    r = braidpy.solve(make(), 0.0, T, N, comm=comm, max_levels=3, cfactor=4, abs_tol=1e-10,
                      batch=batch)
    mine = {int(i): r.solution(index=int(i)).tolist() for i in r.owned}
    if comm is not None:
        from mpi_world import assert_split

        assert_split(comm, r.owned, len(r.times))
        parts = comm.gather(mine, root=0)
        mine = None if parts is None else {k: v for p in parts for k, v in p.items()}
    calls = r.counts["step_batch"]
    return dict(iterations=r.iterations, converged=r.converged,
                residuals=[float(x) for x in r.residuals], final=r.final.tolist(),
                states=None if mine is None else [mine[i] for i in range(N + 1)],
                batched_calls=calls if comm is None else comm.allreduce(calls))


@pytest.mark.parametrize("name", MPI_CASES)
def test_mgrit_converges_to_sequential_stepping(name):
    make, T, N = MGRIT_CASES[name]
    seq = sequential(make(), T, N)
    runs = {b: run_case(name, b) for b in (True, False)}
    assert runs[True]["batched_calls"] > 0 and runs[False]["batched_calls"] == 0
    for batch, got in runs.items():
        assert got["converged"] and got["iterations"] <= 8, (name, batch, got["iterations"])
        assert np.max(np.abs(np.array(got["states"]) - seq)) < 1e-8 * max(
            1.0, float(np.max(np.abs(seq)))), (name, batch)
    assert runs[True]["states"] == runs[False]["states"]  # rows are bitwise their steps


def drive(nranks, path):
    """The MPI driver: every case batched and unbatched; rank 0 writes the JSON."""
    from mpi4py import MPI
    from mpi_world import expect_world

    comm = MPI.COMM_WORLD
    expect_world(comm, nranks)
    out = {"size": comm.Get_size(), "ranks": comm.gather(comm.Get_rank())}
    for name in MPI_CASES:
        out[name] = {str(b): run_case(name, b, comm) for b in (True, False)}
    if comm.Get_rank() == 0:
        Path(path).write_text(json.dumps(out))


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_mgrit_under_mpi_matches_serial(nranks, tmp_path):
    """Under mpiexec at 1, 2 and 4 ranks (each holding its part of the grid): the same
    iterations and, bit for bit, the same states as the serial solve, batched or not, and
    those are sequential stepping's to the tolerance."""
    from mpi_launch import launch

    par = launch(Path(__file__).name, nranks, tmp_path)
    assert par["size"] == nranks and par["ranks"] == list(range(nranks))
    for name in MPI_CASES:
        where = f"{name} at {nranks} ranks"
        make, T, N = MGRIT_CASES[name]
        seq = sequential(make(), T, N)
        for batch in ("True", "False"):
            got, ser = par[name][batch], run_case(name, batch == "True")
            assert (got["batched_calls"] > 0) == (batch == "True"), where
            assert got["converged"] and got["iterations"] == ser["iterations"], where
            np.testing.assert_allclose(got["residuals"], ser["residuals"], rtol=1e-12,
                                       err_msg=where)
            assert got["states"] == ser["states"], where
            assert np.max(np.abs(np.array(got["states"]) - seq)) < 1e-8 * max(
                1.0, float(np.max(np.abs(seq)))), where


def test_passes_check_app():
    from braidpy.testing import check_app

    check_app(pb.ArenstorfOrbit(method="rk45", tstop=1.0, ntime=16).app(), 0.0, 1.0, 8)


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("options, error, message", [
    (dict(rtol=0.0), ValueError, r"rtol must be a finite number >= 2.22e-14 .*got 0.0"),
    (dict(rtol=-1e-3), ValueError, r"rtol must be .*got -0.001"),
    (dict(rtol=float("nan")), ValueError, r"rtol must be .*got nan"),
    (dict(rtol=1e-16), ValueError, r"rtol must be .*got 1e-16"),
    (dict(rtol="1e-3"), TypeError, r"rtol must be a real number, got '1e-3'"),
    (dict(atol=0.0), ValueError, r"atol must be positive and finite \(each entry\), got 0.0"),
    (dict(atol=float("inf")), ValueError, r"atol must be positive .*got inf"),
    (dict(atol=[1e-6, -1.0, 1e-6, 1e-6]), ValueError,
     r"atol must be positive .*got \[1e-06, -1.0, 1e-06, 1e-06\]"),
    (dict(first_step=0.0), ValueError, r"first_step must be positive and finite, got 0.0"),
    (dict(first_step=float("nan")), ValueError, r"first_step must be .*got nan"),
    (dict(max_steps=0), ValueError, r"max_steps must be an int >= 1, got 0"),
    (dict(max_steps=2.5), ValueError, r"max_steps must be an int >= 1, got 2.5"),
    (dict(tableau="dopri8"), ValueError, r"unknown tableau 'dopri8'; the built-in ones are"),
    (dict(tableau="rk4"), ValueError, r"the tableau 'rk4' needs embedded weights b_hat"),
    (dict(tableau="sdirk2"), ValueError, r"the tableau 'sdirk2' is not explicit"),
    (dict(vectorized=1), TypeError, r"vectorized must be True or False, got 1"),
    (dict(on_failure="warn"), ValueError, r"on_failure must be 'raise' or 'stop', got 'warn'"),
])
def test_bad_options_name_the_bad_value(options, error, message):
    with pytest.raises(error, match=message):
        ig.AdaptiveRK(ARENSTORF.rhs, ARENSTORF.u0, **options)


def test_bad_problem_options_name_the_bad_value():
    with pytest.raises(ValueError, match=r"rtol must be .*got nan"):
        pb.ArenstorfOrbit(method="rk45", rtol=float("nan"))
    with pytest.raises(ValueError, match=r"atol must be positive .*got -1.0"):
        pb.ArenstorfOrbit(atol=-1.0)
    with pytest.raises(ValueError, match=r"unknown method 'rk46'"):
        pb.ArenstorfOrbit().app("rk46")
    with pytest.raises(TypeError, match=r"rhs must be a callable"):
        ig.AdaptiveRK(None, [1.0])


def blows_up(t, u):
    """u' = u^2, u(0.5) = 2: u = 1 / (1 - t), infinite at t = 1."""
    return u * u


def test_a_blow_up_names_the_step():
    app = ig.AdaptiveRK(blows_up, [1.0], rtol=1e-6, atol=1e-9)
    with pytest.raises(ig.StepSizeError, match=r"the step size fell to .* in the step over "
                                               r"\[0.5, 1.5\]") as info:
        app.step(np.array([2.0]), 0.5, 1.5, None)
    assert info.value.t0 == 0.5 and info.value.t1 == 1.5 and 0.99 < info.value.t < 1.01


def test_max_steps_names_the_step():
    app = ig.AdaptiveRK(brusselator, [1.5, 3.0], rtol=1e-10, atol=1e-12, max_steps=20)
    with pytest.raises(ig.StepSizeError, match=r"max_steps = 20 substeps did not reach the "
                                               r"end of the step over \[0.25, 8.0\]; t = "):
        app.step(np.array([1.5, 3.0]), 0.25, 8.0, None)
    # exactly enough substeps is no failure
    app = ig.AdaptiveRK(brusselator, [1.5, 3.0], rtol=1e-10, atol=1e-12)
    one_step(app, [1.5, 3.0], 0.25, 0.5)
    n = app.counts["accepted"] + app.counts["rejected"]
    ig.AdaptiveRK(brusselator, [1.5, 3.0], rtol=1e-10, atol=1e-12,
                  max_steps=n).step(np.array([1.5, 3.0]), 0.25, 0.5, None)
    with pytest.raises(ig.StepSizeError, match=f"max_steps = {n - 1} substeps"):
        ig.AdaptiveRK(brusselator, [1.5, 3.0], rtol=1e-10, atol=1e-12,
                      max_steps=n - 1).step(np.array([1.5, 3.0]), 0.25, 0.5, None)


@pytest.mark.parametrize("vectorized", [True, False])
def test_on_failure_stop_ends_the_failed_rows_only(vectorized):
    """on_failure="stop": a row whose step fails ends where it stopped (as solve_ivp
    returns it), the others as if alone, bit for bit; the failures are counted."""
    app = ig.AdaptiveRK(blows_up, [1.0], rtol=1e-6, atol=1e-9, on_failure="stop",
                        vectorized=vectorized)
    U = np.array([[2.0], [0.5], [2.0]])
    t0s, t1s = np.array([0.5, 0.0, 0.5]), np.array([1.5, 1.0, 0.9])
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B) and app.counts["failed"] == 2
    assert A[0, 0] > 1e6 and abs(A[1, 0] - 1.0) < 1e-5 and abs(A[2, 0] - 10.0) < 1e-4
    short = ig.AdaptiveRK(brusselator, [1.5, 3.0], max_steps=3, on_failure="stop")
    u = one_step(short, [1.5, 3.0], 0.0, 8.0)
    assert short.counts["failed"] == 1 and short.counts["accepted"] <= 3
    assert np.all(np.isfinite(u)) and not np.array_equal(u, [1.5, 3.0])


def test_non_finite_values_name_the_step():
    def nan_after(t, u):
        f = -u
        return f * np.nan if np.any(np.asarray(t) > 0.3) else f

    app = ig.AdaptiveRK(nan_after, np.ones(2), vectorized=True)
    with pytest.raises(ig.StepSizeError, match=r"its values were not finite.*|"
                                               r"in the step over \[0.25, 0.5\]"):
        app.step(np.ones(2), 0.25, 0.5, None)
    with pytest.raises(ig.StepSizeError, match=r"the state is not finite at t = 0.0 in the "
                                               r"step over \[0.0, 0.5\]"):
        app.step(np.array([1.0, np.inf]), 0.0, 0.5, None)
    with pytest.raises(ig.StepSizeError, match=r"f\(t, u\) is not finite at t = 0.5 in the "
                                               r"step over \[0.5, 1.0\]"):
        app.step(np.ones(2), 0.5, 1.0, None)


class RhsFailed(Exception):
    pass


def test_a_failing_rhs_surfaces_from_solve():
    def rhs(t, u):
        if np.any(np.asarray(t) > 0.5):
            raise RhsFailed("no value past t = 0.5")
        return -u

    for vectorized, batch in ((False, False), (True, True)):
        app = ig.AdaptiveRK(rhs, np.ones(1), vectorized=vectorized)
        with pytest.raises(RhsFailed, match="no value past t = 0.5") as info:
            braidpy.solve(app, 0.0, 1.0, 16, max_levels=2, cfactor=4, batch=batch)
        if sys.version_info >= (3, 11):
            assert any("AdaptiveRK: raised by rhs in the step(s) over" in n
                       for n in info.value.__notes__)
    app = ig.AdaptiveRK(lambda t, u: u[:1], np.ones(2))
    with pytest.raises(ValueError, match=r"rhs\(t, u\) returned ndarray of shape \(1,\) for "
                                         r"a state of shape \(2,\)"):
        app.step(np.ones(2), 0.0, 1.0, None)


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2])
