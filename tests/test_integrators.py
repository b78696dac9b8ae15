"""braidpy.integrators: measured orders of accuracy (Newton methods also against Radau on a
stiff problem), batched = unbatched bitwise, MGRIT =
sequential stepping (serial and at 2 and 4 ranks), an independent reference, bad input.

Under pytest this file holds the tests. Run as a script it is their MPI driver
(mpi_launch.launch starts it)::

    mpiexec -n P python tests/test_integrators.py P OUT.json

It solves every case of MPI_CASES on P ranks, batched and unbatched, and rank 0 writes
the summaries (iterations, residuals, every state) as JSON.
"""

import json
import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import braidpy  # noqa: E402
from braidpy import integrators as ig  # noqa: E402

SEED = 20261207

# --- test problems --------------------------------------------------------------------------

LAMBDA = -1.0
# u' = A u + g(t) in two dimensions with the exact solution U_EXACT, g chosen to fit it.
A2 = np.array([[-1.0, 2.0], [-2.0, -1.0]])
M2 = np.array([[2.0, 0.5], [0.5, 3.0]])


def u_exact(t):
    return np.array([math.sin(t) + 1.0, math.cos(2.0 * t)])


def du_exact(t):
    return np.array([math.cos(t), -2.0 * math.sin(2.0 * t)])


def g2(t):
    """The forcing that makes u_exact solve u' = A2 u + g."""
    return du_exact(t) - A2 @ u_exact(t)


def gm2(t):
    """The forcing that makes u_exact solve M2 u' = A2 u + g."""
    return M2 @ du_exact(t) - A2 @ u_exact(t)


def brusselator(t, u):
    """Brusselator (a = 1, b = 3): elementwise polynomial, so rows of a stack come out
    as single states do, bit for bit. Takes (2,) or (m, 2)."""
    x, y = u[..., 0], u[..., 1]
    xxy = x * x * y
    return np.stack([1.0 + xxy - 4.0 * x, 3.0 * x - xxy], axis=-1)


def lorenz(t, u):
    """Lorenz (10, 28, 8/3) with a time-dependent nudge, for states of any leading shape."""
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    tt = np.asarray(t)[..., 0] if np.ndim(t) else t
    return np.stack([10.0 * (y - x) + 0.5 * tt, x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z],
                    axis=-1)


def sequential(app, T, N):
    """Step app through the uniform grid on [0, T] one step after another: the states."""
    app.tstart, app.tstop, app.ntime = 0.0, T, N
    u = app.init(0.0)
    out = [u.copy()]
    for i in range(N):
        app.step(u, i * T / N, (i + 1) * T / N, None)
        out.append(u.copy())
    return np.array(out)


def fitted_order(make, exact, T, Ns):
    """Slope of log(error at T) against log(dt) for the apps make() over the grids Ns."""
    errors = [np.max(np.abs(sequential(make(), T, N)[-1] - exact)) for N in Ns]
    slope = np.polyfit(np.log([T / N for N in Ns]), np.log(errors), 1)[0]
    return float(slope), errors


# --- orders of accuracy ---------------------------------------------------------------------

EXPLICIT = {"forward_euler": 1, "heun": 2, "ssprk3": 3, "rk4": 4, "heun_euler": 2,
            "bogacki_shampine": 3}


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_order_scalar(name):
    slope, errors = fitted_order(
        lambda: ig.ExplicitRK(lambda t, u: LAMBDA * u, np.ones(1), name),
        math.exp(LAMBDA), 1.0, [16, 32, 64, 128])
    assert abs(slope - EXPLICIT[name]) < 0.1, (slope, errors)


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_order_forced_system(name):
    """Stage times matter here: g depends on t."""
    slope, errors = fitted_order(
        lambda: ig.ExplicitRK(lambda t, u: A2 @ u + g2(t), u_exact(0.0), name),
        u_exact(1.0), 1.0, [16, 32, 64, 128])
    assert abs(slope - EXPLICIT[name]) < 0.1, (slope, errors)


IMPLICIT = {"backward_euler": 1, "crank_nicolson": 2, "sdirk2": 2, "sdirk3": 3}


def implicit(name, A, u0, **options):
    if name == "backward_euler":
        return ig.BackwardEuler(A, u0, **options)
    if name == "crank_nicolson":
        return ig.CrankNicolson(A, u0, **options)
    return ig.SDIRK(A, u0, name, **options)


@pytest.mark.parametrize("name", sorted(IMPLICIT))
def test_implicit_order_scalar(name):
    slope, errors = fitted_order(lambda: implicit(name, np.array([[LAMBDA]]), np.ones(1)),
                                 math.exp(LAMBDA), 1.0, [16, 32, 64, 128])
    assert abs(slope - IMPLICIT[name]) < 0.1, (slope, errors)


@pytest.mark.parametrize("mass", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", sorted(IMPLICIT))
def test_implicit_order_forced_system(name, sparse, mass):
    import scipy.sparse as sp

    A = sp.csr_matrix(A2) if sparse else A2
    M = (sp.csr_matrix(M2) if sparse else M2) if mass else None
    slope, errors = fitted_order(
        lambda: implicit(name, A, u_exact(0.0), M=M, g=gm2 if mass else g2),
        u_exact(1.0), 1.0, [16, 32, 64, 128])
    assert abs(slope - IMPLICIT[name]) < 0.1, (slope, errors)


def test_embedded_error_estimate_has_the_embedded_order():
    """error_estimate ~ C h^(p_hat + 1): halving h divides it by 2^(p_hat + 1)."""
    for name, p_hat in (("heun_euler", 1), ("bogacki_shampine", 2)):
        app = ig.ExplicitRK(lambda t, u: A2 @ u + g2(t), u_exact(0.0), name)
        u = u_exact(0.3)
        e = [np.max(np.abs(app.error_estimate(u, 0.3, 0.3 + h))) for h in (0.04, 0.02, 0.01)]
        slopes = np.diff(np.log(e)) / np.log(0.5)
        assert np.all(np.abs(slopes - (p_hat + 1)) < 0.15), (name, slopes)
        assert np.array_equal(u, u_exact(0.3))  # u left as it was
        # the estimate is the difference of the two methods' results
        hi = u.copy()
        app.step(hi, 0.3, 0.34, None)
        low = ig.ExplicitRK(app.rhs, u_exact(0.0), ig.ButcherTableau(
            app.tableau.A, app.tableau.b_hat, app.tableau.c))
        lo = u.copy()
        low.step(lo, 0.3, 0.34, None)
        np.testing.assert_allclose(app.error_estimate(u, 0.3, 0.34), hi - lo, rtol=1e-9,
                                   atol=1e-15)
    with pytest.raises(ValueError, match="'rk4' has no embedded"):
        ig.ExplicitRK(brusselator, np.ones(2)).error_estimate(np.ones(2), 0.0, 0.1)


# --- nonlinear implicit methods (Newton) ----------------------------------------------------

NONLINEAR = {"backward_euler": 1, "sdirk2": 2, "sdirk3": 3}


def g3(t):
    """The forcing that makes u_exact solve u' = A2 u - u^3 + g."""
    ue = u_exact(t)
    return du_exact(t) - A2 @ ue + ue ** 3


def cubic(t, u):
    """u' = A2 u - u^3 + g3(t): for a state, or stacked states with a column of times."""
    if np.ndim(t) == 0:
        return A2 @ u - u ** 3 + g3(t)
    return u @ A2.T - u ** 3 + np.array([g3(s) for s in np.ravel(t)])


def cubic_jacobian(t, u):
    return A2 - 3.0 * np.diag(u ** 2)


def cubic_jacobian_sparse(t, u):
    import scipy.sparse as sp

    return sp.csr_matrix(cubic_jacobian(t, u))


VDP_MU = 10.0


def van_der_pol(t, u):
    """Van der Pol, mu = 10 (stiff): elementwise, for (2,) or stacked (m, 2)."""
    x, y = u[..., 0], u[..., 1]
    return np.stack([y, VDP_MU * (1.0 - x * x) * y - x], axis=-1)


def van_der_pol_jacobian(t, u):
    x, y = float(u[0]), float(u[1])
    return np.array([[0.0, 1.0], [-2.0 * VDP_MU * x * y - 1.0, VDP_MU * (1.0 - x * x)]])


@pytest.mark.parametrize("jacobian", ["dense", "sparse", "differences"])
@pytest.mark.parametrize("name", sorted(NONLINEAR))
def test_nonlinear_order_forced_system(name, jacobian):
    """Stage times and the Jacobian both matter: g depends on t, f is cubic in u."""
    jac = {"dense": cubic_jacobian, "sparse": cubic_jacobian_sparse, "differences": None}
    slope, errors = fitted_order(
        lambda: ig.NonlinearSDIRK(cubic, u_exact(0.0), name, jacobian=jac[jacobian]),
        u_exact(1.0), 1.0, [16, 32, 64, 128])
    assert abs(slope - NONLINEAR[name]) < 0.1, (slope, errors)


@pytest.mark.parametrize("name", sorted(NONLINEAR))
def test_nonlinear_van_der_pol_matches_radau(name):
    """Stiff and nonlinear: Van der Pol, mu = 10, on [0, 1] against solve_ivp's Radau
    (rtol = atol = 1e-12); the error falls at the method's order."""
    from scipy.integrate import solve_ivp

    T = 1.0
    ref = solve_ivp(van_der_pol, (0.0, T), [2.0, 0.0], method="Radau", rtol=1e-12,
                    atol=1e-12, jac=van_der_pol_jacobian).y[:, -1]
    Ns = [16, 32, 64, 128]
    errors = [np.max(np.abs(sequential(ig.NonlinearSDIRK(
        van_der_pol, np.array([2.0, 0.0]), name, jacobian=van_der_pol_jacobian,
        vectorized=True, newton_tol=1e-13), T, N)[-1] - ref)) for N in Ns]
    slope = np.polyfit(np.log([T / N for N in Ns]), np.log(errors), 1)[0]
    assert abs(slope - NONLINEAR[name]) < 0.3, (slope, errors)
    assert errors[-1] < {"backward_euler": 2e-5, "sdirk2": 3e-8, "sdirk3": 3e-9}[name], errors


def test_nonlinear_backward_euler_is_the_one_stage_sdirk():
    a = ig.NonlinearBackwardEuler(cubic, u_exact(0.0), jacobian=cubic_jacobian)
    b = ig.NonlinearSDIRK(cubic, u_exact(0.0), ig.BACKWARD_EULER, jacobian=cubic_jacobian)
    assert np.array_equal(sequential(a, 1.0, 16), sequential(b, 1.0, 16))
    # the stage equation is solved: u1 = u0 + h f(t1, u1) to the Newton tolerance
    u = u_exact(0.0)
    a.step(u, 0.0, 0.25, None)
    assert np.max(np.abs(u - u_exact(0.0) - 0.25 * cubic(0.25, u))) < 1e-10


def test_finite_difference_jacobian_matches_the_analytic_one():
    rng = np.random.default_rng(SEED + 4)
    for vectorized in (False, True):
        app = ig.NonlinearSDIRK(cubic, u_exact(0.0), vectorized=vectorized)
        for _ in range(3):
            u = rng.standard_normal(2)
            np.testing.assert_allclose(app._jac(0.3, u), cubic_jacobian(0.3, u), rtol=1e-6,
                                       atol=1e-6)


@pytest.mark.parametrize("jacobian", ["dense", "sparse", "differences"])
@pytest.mark.parametrize("name", sorted(NONLINEAR))
def test_nonlinear_step_stacked_is_step_row_by_row_bitwise(name, jacobian):
    """Every row runs its own Newton iterations (rows converge after different counts) and
    comes out as step computes it, bit for bit: the rhs is elementwise."""
    jac = {"dense": van_der_pol_jacobian, "sparse": lambda t, u: __import__(
        "scipy.sparse").sparse.csr_matrix(van_der_pol_jacobian(t, u)), "differences": None}
    rng = np.random.default_rng(SEED + 5)
    U = rng.uniform(-2.0, 2.0, (9, 2))
    t0s, t1s = mixed_steps(9, rng)
    t1s = t0s + 0.25 * (t1s - t0s)  # steps of 0.0025, 0.005 and 0.04
    for vectorized in (False, True):
        app = ig.NonlinearSDIRK(van_der_pol, np.array([2.0, 0.0]), name,
                                jacobian=jac[jacobian], vectorized=vectorized)
        A, B = stacked_vs_rows(app, U, t0s, t1s)
        assert np.array_equal(A, B) and not np.array_equal(A, U)


def periodic_reaction_diffusion(n):
    """u' = D u + u - u^3, D the periodic 1D second difference (n points, dx = 1/n): its
    rhs for (n,) or stacked (m, n), and its Jacobian three ways: CSC on one kept pattern
    (the same index arrays every call, the diagonal stored), CSR built afresh, dense."""
    import scipy.sparse as sp

    D = sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1],
                 format="lil")
    D[0, n - 1] = D[n - 1, 0] = 1.0
    D = (D.tocsc() * float(n * n)).tocsc()
    D.sort_indices()
    diag = np.flatnonzero(D.indices == np.repeat(np.arange(n), np.diff(D.indptr)))

    def rhs(t, u):
        return np.ascontiguousarray((D @ np.atleast_2d(u).T).T).reshape(u.shape) + u - u ** 3

    def kept(t, u):
        data = D.data.copy()
        data[diag] += 1.0 - 3.0 * u * u
        return sp.csc_matrix((data, D.indices, D.indptr), shape=D.shape)

    def fresh(t, u):
        return (D + sp.diags(1.0 - 3.0 * u * u)).tocsr()

    return rhs, {"kept": kept, "fresh": fresh, "dense": lambda t, u: fresh(t, u).toarray()}


@pytest.mark.parametrize("name", sorted(NONLINEAR))
def test_nonlinear_sparse_jacobian_on_a_kept_pattern(name):
    """I - gamma h J written in place on the Jacobian's kept pattern: each Newton iteration
    with the Jacobian at its own iterate (the iteration counts of a fresh sparse or a dense
    Jacobian, the same states to rounding), step_stacked = step row by row bitwise, and a
    Jacobian whose pattern changes (a diagonal entry not stored) between calls."""
    n = 24
    rhs, jacs = periodic_reaction_diffusion(n)
    rng = np.random.default_rng(SEED + 11)
    x = np.arange(n) / n
    U = np.array([np.sin(2.0 * math.pi * x + p) * a
                  for p, a in zip(rng.uniform(0.0, 6.0, 7), (0.2, 0.5, 0.9, 1.3, 0.7, 1.1, 0.3))])
    t0s, t1s = mixed_steps(len(U), rng)
    out, counts = {}, {}
    for kind, jac in jacs.items():
        app = ig.NonlinearSDIRK(rhs, U[0], name, jacobian=jac, vectorized=True,
                                newton_tol=1e-12)
        A, B = stacked_vs_rows(app, U, t0s, t1s)
        assert np.array_equal(A, B) and not np.array_equal(A, U), kind
        out[kind], counts[kind] = A, app.newton_iterations
    assert counts["kept"] == counts["fresh"] == counts["dense"], counts
    np.testing.assert_allclose(out["kept"], out["dense"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["fresh"], out["dense"], rtol=0, atol=1e-12)
    # patterns alternating between calls: an explicit zero at (0, n / 2) stored (a pattern
    # not symmetric) where u[0] < 0; a Jacobian with a diagonal entry not stored is the
    # Van der Pol case of test_nonlinear_step_stacked_is_step_row_by_row_bitwise
    import scipy.sparse as sp

    def alternating(t, u):
        J = jacs["kept"](t, u)
        if u[0] >= 0.0:
            return J
        coo = J.tocoo()
        return sp.csc_matrix((np.append(coo.data, 0.0), (np.append(coo.row, 0),
                                                         np.append(coo.col, n // 2))),
                             shape=J.shape)
    app = ig.NonlinearSDIRK(rhs, U[0], name, jacobian=alternating, vectorized=True,
                            newton_tol=1e-12)
    ref = ig.NonlinearSDIRK(rhs, U[0], name, jacobian=jacs["dense"], vectorized=True,
                            newton_tol=1e-12)
    V = U * np.where(np.arange(len(U)) % 2 == 0, 1.0, -1.0)[:, None]  # u[0] of both signs
    A, B = stacked_vs_rows(app, V, t0s, t1s)
    C, _ = stacked_vs_rows(ref, V, t0s, t1s)
    assert np.array_equal(A, B)
    np.testing.assert_allclose(A, C, rtol=0, atol=1e-12)
    assert app.newton_iterations == ref.newton_iterations


@pytest.mark.parametrize("name", sorted(NONLINEAR))
def test_constant_plus_diagonal_is_its_callable_bitwise(name):
    """A ConstantPlusDiagonal Jacobian (d of all rows from one call, written into A's
    pattern) steps as the same Jacobian given as a callable does, bit for bit, with the
    same Newton iteration counts; batched = row by row bitwise; and its value at a state
    is A + diag(d)."""
    n = 24
    rhs, jacs = periodic_reaction_diffusion(n)
    D = jacs["fresh"](0.0, np.zeros(n)) - __import__("scipy.sparse").sparse.identity(n)
    split = ig.ConstantPlusDiagonal(D, lambda t, U: 1.0 - 3.0 * U * U)
    rng = np.random.default_rng(SEED + 12)
    U = np.sin(2.0 * math.pi * np.arange(n) / n + rng.uniform(0.0, 6.0, (7, 1))) * \
        rng.uniform(0.1, 1.3, (7, 1))
    t0s, t1s = mixed_steps(len(U), rng)
    a = ig.NonlinearSDIRK(rhs, U[0], name, jacobian=split, vectorized=True)
    b = ig.NonlinearSDIRK(rhs, U[0], name, jacobian=jacs["kept"], vectorized=True)
    A, B = stacked_vs_rows(a, U, t0s, t1s)
    C, _ = stacked_vs_rows(b, U, t0s, t1s)
    assert np.array_equal(A, B) and np.array_equal(A, C) and not np.array_equal(A, U)
    assert a.newton_iterations == b.newton_iterations > 0
    u = U[3]
    np.testing.assert_array_equal(split(0.5, u).toarray(), jacs["dense"](0.5, u))
    # an A without a stored diagonal: it is stored, as zeros
    import scipy.sparse as sp

    off = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1], format="csr")
    J = ig.ConstantPlusDiagonal(off, lambda t, U: -U)(0.0, u)
    np.testing.assert_array_equal(J.toarray(), off.toarray() - np.diag(u))


def test_constant_plus_diagonal_bad_input_names_the_bad_value():
    import scipy.sparse as sp

    with pytest.raises(TypeError, match="diagonal must be a callable diagonal\\(t, U\\), got 3"):
        ig.ConstantPlusDiagonal(sp.identity(3), 3)
    with pytest.raises(ValueError, match=r"A must be square, got shape \(2, 3\)"):
        ig.ConstantPlusDiagonal(np.ones((2, 3)), lambda t, U: U)
    with pytest.raises(TypeError, match="A must be a matrix"):
        ig.ConstantPlusDiagonal("A", lambda t, U: U)
    bad = ig.ConstantPlusDiagonal(sp.identity(3), lambda t, U: U[:, :2])
    with pytest.raises(ValueError, match=r"returned ndarray of shape \(1, 2\) for states of "
                                         r"shape \(1, 3\)"):
        bad(0.0, np.ones(3))
    with pytest.raises(ValueError, match="the jacobian's A is 3 x 3; the state has 2 values"):
        ig.NonlinearSDIRK(cubic, np.ones(2),
                          jacobian=ig.ConstantPlusDiagonal(sp.identity(3), lambda t, U: U))
    # through Newton: the bad shape is named from the step
    app = ig.NonlinearBackwardEuler(lambda t, U: -U, np.ones(3), vectorized=True, jacobian=bad)
    with pytest.raises(ValueError, match=r"of shape \(1, 2\) for states of shape \(1, 3\)"):
        app.step(np.ones(3), 0.0, 0.1, None)


def test_newton_failure_names_the_step_and_the_residual():
    """u' = u^2 from u = 1: backward Euler's Y - h Y^2 = 1 has no real root once h > 1/4."""
    app = ig.NonlinearBackwardEuler(lambda t, u: u * u, np.ones(1),
                                    jacobian=lambda t, u: np.diag(2.0 * u), newton_max_iter=8)
    u = np.ones(1)
    app.step(u, 0.0, 0.2, None)  # a root exists: converges
    with pytest.raises(ig.NewtonError, match=r"from t0 = 0.5 to t1 = 0.9 \(stage 0\): "
                                             r"residual max\|G\| = .* after 8 iterations") as e:
        app.step(np.ones(1), 0.5, 0.9, None)
    assert e.value.t0 == 0.5 and e.value.t1 == 0.9 and e.value.residual > 1e-3
    # h = 1/2: 1 - 2 h u = 0 at the first iterate, a singular Newton matrix
    with pytest.raises(ig.NewtonError, match=r"from t0 = 0.5 to t1 = 1.0 \(stage 0\): the "
                                             r"matrix I - gamma h J is singular"):
        app.step(np.ones(1), 0.5, 1.0, None)
    # and through MGRIT: the failing step's error surfaces from solve, batched or not
    for batch in (True, False):
        with pytest.raises(ig.NewtonError, match="did not converge in the step from t0 ="):
            braidpy.solve(app, 0.0, 4.0, 8, max_levels=2, cfactor=2, batch=batch)


def test_newton_singular_sparse_matrix_names_the_step():
    """A singular I - gamma h J from a sparse Jacobian (a banded LU's zero pivot, or
    SuperLU's on a wide pattern) raises NewtonError naming the step, as the dense one."""
    import scipy.sparse as sp

    n = 120  # a full first row and column: wider than any band, so SuperLU
    wide = sp.lil_matrix((n, n))
    wide[0, :] = wide[:, 0] = 1e-3
    wide = wide.tocsr()
    for extra in (sp.csr_matrix((n, n)), wide):
        app = ig.NonlinearBackwardEuler(
            lambda t, u, extra=extra: u * u + extra @ u, np.ones(n),
            jacobian=lambda t, u, extra=extra: (sp.diags(2.0 * u) + extra).tocsr())
        with pytest.raises(ig.NewtonError, match=r"from t0 = 0.5 to t1 = 1.0 \(stage 0\): "
                                                 r"the matrix I - gamma h J is singular"):
            app.step(np.ones(n), 0.5, 1.0, None)
        assert (app._pattern.band is None) == (extra.nnz > 0)


def test_newton_bad_input_names_the_bad_value():
    with pytest.raises(ValueError, match=r"newton_tol must be a number in \(0, 1\), got 0"):
        ig.NonlinearSDIRK(cubic, np.ones(2), newton_tol=0)
    with pytest.raises(ValueError, match="newton_max_iter must be an int >= 1, got 0"):
        ig.NonlinearSDIRK(cubic, np.ones(2), newton_max_iter=0)
    with pytest.raises(TypeError, match="jacobian must be a callable"):
        ig.NonlinearSDIRK(cubic, np.ones(2), jacobian=np.eye(2))
    with pytest.raises(ValueError, match="'rk4' is not singly diagonally implicit"):
        ig.NonlinearSDIRK(cubic, np.ones(2), "rk4")
    with pytest.raises(ValueError, match=r"u0 must be a real vector of shape \(n,\)"):
        ig.NonlinearSDIRK(cubic, np.ones((2, 2)))
    app = ig.NonlinearSDIRK(cubic, np.ones(2), jacobian=lambda t, u: np.eye(3))
    with pytest.raises(ValueError, match=r"jacobian\(t, u\) returned ndarray of shape "
                                         r"\(3, 3\); it must be 2 x 2"):
        app.step(np.ones(2), 0.0, 0.1, None)


# --- batched = unbatched --------------------------------------------------------------------


def stacked_vs_rows(app, U, t0s, t1s):
    """(step_stacked on a copy of U, step row by row on another copy)."""
    A, B = U.copy(), U.copy()
    r = app.step_stacked(A, t0s, t1s, None)
    assert r is None  # in place
    for k in range(len(U)):
        app.step(B[k], float(t0s[k]), float(t1s[k]), None)
    return A, B


def mixed_steps(m, rng):
    """Per-row start times and three step sizes, interleaved."""
    t0s = np.sort(rng.uniform(0.0, 1.0, m))
    sizes = np.resize([0.01, 0.02, 0.16], m)
    rng.shuffle(sizes)
    return t0s, t0s + sizes


@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_step_stacked_is_step_row_by_row_bitwise(name, vectorized):
    rng = np.random.default_rng(SEED)
    seen = []

    def rhs(t, u):
        seen.append(np.shape(t))
        return lorenz(t, u)

    app = ig.ExplicitRK(rhs, np.ones(3), name, vectorized=vectorized)
    U = rng.standard_normal((9, 3))
    t0s, t1s = mixed_steps(9, rng)
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B) and not np.array_equal(A, U)
    if vectorized:  # one call per stage for the stack, times as a column
        assert seen[0] == (9, 1)


def test_explicit_vectorized_states_of_two_axes_and_float32():
    rng = np.random.default_rng(SEED + 1)
    # times come as float64 (a column for stacked states): the rhs casts them to the
    # states' dtype, so that a stack and a row compute in the same precision
    app = ig.ExplicitRK(lambda t, u: -u * u + np.asarray(t, dtype=u.dtype), np.ones((2, 3)),
                        "ssprk3", vectorized=True)
    U = rng.standard_normal((5, 2, 3))
    t0s, t1s = mixed_steps(5, rng)
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B)
    A, B = stacked_vs_rows(app, U.astype(np.float32), t0s, t1s)
    assert A.dtype == np.float32 and np.array_equal(A, B)


def laplacian(n):
    import scipy.sparse as sp

    h = 1.0 / (n + 1)
    return sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]) / h**2


def dyadic_steps(m, rng):
    """Per-row start times and three step sizes, interleaved, all binary fractions: each
    t1 - t0 is exactly one of the three sizes (one factorization each)."""
    t0s = rng.integers(0, 64, m) / 64.0
    sizes = np.resize([1 / 128, 1 / 64, 1 / 8], m)
    rng.shuffle(sizes)
    return t0s, t0s + sizes


@pytest.mark.parametrize("name", sorted(IMPLICIT))
@pytest.mark.parametrize("kind", ["tridiagonal", "sparse", "dense"])
def test_implicit_step_stacked_is_step_row_by_row(name, kind):
    """Tridiagonal (SuperLU's factors without dense blocks): bitwise. With fill-in, and
    dense (LAPACK, BLAS): the multi-column kernels differ from the one-column ones by a
    few ulps. One right-hand side per call: bitwise always."""
    import scipy.sparse as sp

    rng = np.random.default_rng(SEED + 2)
    n = 40
    A = laplacian(n)
    M = sp.identity(n) + 0.1 * sp.diags(rng.uniform(size=n))
    if kind != "tridiagonal":
        A = A + 1000.0 * sp.random(n, n, density=0.2, random_state=rng)
        M = M + 0.01 * sp.random(n, n, density=0.2, random_state=rng)
    if kind == "dense":
        A, M = A.toarray(), M.toarray()
    x = np.linspace(0.0, 1.0, n)
    m = 2 * 8 + 5  # more than one block per step size
    U = rng.standard_normal((m, n))
    t0s, t1s = dyadic_steps(m, rng)
    for per_solve in (8, 1):
        app = implicit(name, A, np.sin(math.pi * x), M=M, g=lambda t: np.cos(t) * x,
                       rhs_per_solve=per_solve)
        A_, B_ = stacked_vs_rows(app, U, t0s, t1s)
        assert not np.array_equal(A_[0], A_[1])
        if kind == "tridiagonal" or per_solve == 1:
            assert np.array_equal(A_, B_), per_solve
        else:
            np.testing.assert_allclose(A_, B_, rtol=0, atol=1e-14 * np.max(np.abs(B_)))
        # three step sizes: one factorization each (SDIRK's stages share theirs)
        assert len(app.system.factors) == 3 and app.system.factors.made == 3


def test_superlu_multi_column_solve_and_products_against_one_column():
    """What the sparse integrators' bitwise equality rests on: CSR products and SuperLU
    solves of tridiagonal matrices treat the columns independently; with fill-in, SuperLU's
    dense supernodes make multi-column solves differ by a few ulps."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    rng = np.random.default_rng(SEED + 3)
    for n in (7, 64, 255, 1023):
        for fill in (False, True):
            A = sp.identity(n) - 0.3 * laplacian(n) / (n + 1) ** 2
            if fill:
                A = A + 0.05 * sp.random(n, n, density=0.2, random_state=rng)
            lu = splu(A.tocsc())
            R = rng.standard_normal((33, n))
            X = lu.solve(R.T).T
            Y = np.array([lu.solve(r) for r in R])
            if fill:
                np.testing.assert_allclose(X, Y, rtol=0, atol=1e-14 * np.max(np.abs(Y)))
            else:
                assert np.array_equal(X, Y), n
            P = (A.tocsr() @ R.T).T
            Q = np.array([A.tocsr() @ r for r in R])
            assert np.array_equal(P, Q), n


# --- the factorization cache ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(IMPLICIT))
def test_separable_forcing_is_its_callable_bitwise_batched_or_not(name):
    """A SeparableForcing steps exactly as the plain callable amplitude(t) * profile does,
    one row or a stack (tridiagonal: bitwise), each row with its own time and step."""
    rng = np.random.default_rng(SEED + 7)
    n, m = 40, 2 * 8 + 5
    x = np.linspace(0.0, 1.0, n)
    profile = np.sin(math.pi * x) + 0.1 * rng.standard_normal(n)

    def amplitude(t):
        return math.cos(3.0 * t) - 2.0 * math.sin(t)

    separable = implicit(name, laplacian(n), profile, g=ig.SeparableForcing(profile, amplitude),
                         rhs_per_solve=8)
    plain = implicit(name, laplacian(n), profile, g=lambda t: amplitude(t) * profile,
                     rhs_per_solve=8)
    assert np.array_equal(separable.system.g(0.3), plain.system.g(0.3))
    U = rng.standard_normal((m, n))
    t0s, t1s = dyadic_steps(m, rng)
    A_, B_ = stacked_vs_rows(separable, U, t0s, t1s)
    C_, D_ = stacked_vs_rows(plain, U, t0s, t1s)
    assert not np.array_equal(A_[0], A_[1])
    assert np.array_equal(A_, B_) and np.array_equal(A_, C_) and np.array_equal(C_, D_)


def test_separable_forcing_bad_input_names_the_bad_value():
    with pytest.raises(ValueError, match=r"profile must be one-dimensional, got shape \(2, 2\)"):
        ig.SeparableForcing(np.ones((2, 2)), math.cos)
    with pytest.raises(TypeError, match="amplitude must be a callable amplitude.*got 2.0"):
        ig.SeparableForcing(np.ones(2), 2.0)
    with pytest.raises(ValueError, match=r"g's profile must have shape \(2,\) .* got shape "
                                         r"\(3,\)"):
        ig.BackwardEuler(A2, np.ones(2), g=ig.SeparableForcing(np.ones(3), math.cos))
    app = ig.BackwardEuler(A2, np.ones(2), g=ig.SeparableForcing(np.ones(2), lambda t: "x"))
    with pytest.raises(ValueError, match=r"amplitude\(0.1\) returned 'x'"):
        app.step(np.ones(2), 0.0, 0.1, None)
    app = ig.BackwardEuler(A2, np.ones(2), g=ig.SeparableForcing(np.ones(2),
                                                                 lambda t: np.ones(1)))
    with pytest.raises(ValueError, match=r"amplitude\(0.1\) returned array\(\[1.\]\)"):
        app.step_stacked(np.ones((2, 2)), np.zeros(2), np.full(2, 0.1), None)


def test_default_block_size_and_nearly_equal_blocks():
    """The default rhs_per_solve: 32 where the block stays in cache, 8 where the columns
    are 4096 bytes apart (n = 512 float64: one L1 set for all), fewer past 256 KB but 4
    at least; a group is cut into blocks of nearly equal sizes, none above the limit."""
    import scipy.sparse as sp

    assert [ig.default_rhs_per_solve(n) for n in (1, 40, 999, 512, 1024, 3969, 10 ** 5)] \
        == [32, 32, 32, 8, 8, 8, 4]
    assert ig.default_rhs_per_solve(512, itemsize=4) == 16  # 2048 bytes apart: 2 sets x 8
    assert ig.BackwardEuler(laplacian(512), np.ones(512)).rhs_per_solve == 8
    assert ig.BackwardEuler(laplacian(40), np.ones(40), rhs_per_solve=3).rhs_per_solve == 3
    calls = []
    app = ig.BackwardEuler(sp.identity(4) * -1.0, np.ones(4), rhs_per_solve=12)
    solve = app.system.solve

    def counted(dt, coef, R):
        calls.append(len(R))
        return solve(dt, coef, R)

    app.system.solve = counted
    for m, sizes in ((16, [8, 8]), (12, [12]), (25, [8, 8, 9]), (1, [1])):
        calls.clear()
        U = np.ones((m, 4))
        app.step_stacked(U, np.zeros(m), np.full(m, 0.5), None)
        assert calls == sizes, m
        assert np.array_equal(U, np.full((m, 4), 1.0 / 1.5))
    calls.clear()  # two step sizes interleaved: a group each, as index arrays
    U = np.ones((26, 4))
    app.step_stacked(U, np.zeros(26), np.resize([0.5, 0.25], 26), None)
    assert calls == [6, 7, 6, 7]
    np.testing.assert_array_equal(U[::2], 1.0 / 1.5)
    np.testing.assert_array_equal(U[1::2], 1.0 / 1.25)


def test_superlu_ordering_follows_the_sparsity_pattern():
    """Minimum degree on B + B^T for symmetric patterns (on the 2D Laplacian it keeps
    about half COLAMD's fill-in), COLAMD otherwise (a one-sided periodic corner, an
    unsymmetric mass matrix); the integrator's factors are the ordering's."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    n = 24
    L2 = sp.kron(laplacian(n), sp.identity(n)) + sp.kron(sp.identity(n), laplacian(n))
    app = ig.BackwardEuler(L2, np.ones(n * n))
    assert app.system.ordering == "MMD_AT_PLUS_A"
    B = (sp.identity(n * n) - 1e-3 * L2).tocsc()
    fill = {spec: splu(B, permc_spec=spec).L.nnz for spec in ("MMD_AT_PLUS_A", "COLAMD")}
    assert fill["MMD_AT_PLUS_A"] < 0.75 * fill["COLAMD"], fill
    assert app.system.factors.get(1e-3, 1.0).L.nnz == fill["MMD_AT_PLUS_A"]
    upwind = sp.diags([-np.ones(n), np.ones(n - 1)], [0, -1], format="lil")
    upwind[0, n - 1] = 1.0
    assert ig.BackwardEuler(upwind.tocsr(), np.ones(n)).system.ordering == "COLAMD"
    unsymmetric_mass = sp.identity(n) + sp.diags([0.1 * np.ones(n - 2)], [2])  # not in A's
    assert ig.BackwardEuler(laplacian(n), np.ones(n), M=unsymmetric_mass).system.ordering \
        == "COLAMD"
    assert ig.BackwardEuler(laplacian(n), np.ones(n), M=sp.identity(n)).system.ordering \
        == "MMD_AT_PLUS_A"


def test_factorizations_are_keyed_by_the_exact_step_size():
    """Steps that differ in the last bit get factorizations of their own, and a step is the
    same function of (t0, t1) whatever was stepped before it."""
    A = laplacian(20)
    u0 = np.linspace(1.0, 2.0, 20)
    dt = 0.1
    dt2 = np.nextafter(dt, 1.0)
    app = ig.SDIRK(A, u0, "sdirk3")
    first = u0.copy()
    app.step(first, 0.0, dt, None)
    other = u0.copy()
    app.step(other, 0.0, dt2, None)
    again = u0.copy()
    app.step(again, 0.0, dt, None)
    assert np.array_equal(first, again)
    assert app.system.factors.keys() == [(dt2, app._gamma), (dt, app._gamma)]
    fresh = u0.copy()
    ig.SDIRK(A, u0, "sdirk3").step(fresh, 0.0, dt2, None)
    assert np.array_equal(other, fresh)
    # a step of another size never reuses a factorization made for a different one
    for h in (0.05, 0.2, 0.1, 0.05):
        u, v = u0.copy(), u0.copy()
        app.step(u, 0.0, h, None)
        ig.SDIRK(A, u0, "sdirk3").step(v, 0.0, h, None)
        assert np.array_equal(u, v), h


def test_the_cache_is_bounded():
    app = ig.BackwardEuler(laplacian(10), np.ones(10), max_factorizations=2)
    for h in (0.1, 0.2, 0.3, 0.1):
        app.step(np.ones(10), 0.0, h, None)
    assert len(app.system.factors) == 2 and app.system.factors.made == 4
    assert [k[0] for k in app.system.factors.keys()] == [0.3, 0.1]


# --- MGRIT converges to sequential stepping ------------------------------------------------


def solve_states(app, T, N, **options):
    r = braidpy.solve(app, 0.0, T, N, **options)
    return r, np.array([r.solution(index=i) for i in range(N + 1)])


def mgrit_apps():
    """name: a factory of the App (fresh each call)."""
    import scipy.sparse as sp

    n = 31
    x = np.linspace(0.0, 1.0, n + 2)[1:-1]
    heat = laplacian(n) * 0.05
    return {
        "rk4_brusselator": lambda: ig.ExplicitRK(brusselator, np.array([1.5, 3.0]), "rk4",
                                                 vectorized=True),
        "ssprk3_lorenz_rows": lambda: ig.ExplicitRK(lorenz, np.array([1.0, 1.0, 1.0]),
                                                    "ssprk3"),
        "backward_euler_heat": lambda: ig.BackwardEuler(heat, np.sin(math.pi * x),
                                                        g=lambda t: math.cos(t) * x),
        "crank_nicolson_dense": lambda: ig.CrankNicolson(A2, u_exact(0.0), M=None, g=g2),
        "sdirk2_mass": lambda: ig.SDIRK(sp.csr_matrix(A2), u_exact(0.0), "sdirk2",
                                        M=sp.csr_matrix(M2), g=gm2),
        "sdirk3_heat": lambda: ig.SDIRK(heat, np.sin(math.pi * x), "sdirk3"),
        "newton_sdirk2_vdp": lambda: ig.NonlinearSDIRK(
            van_der_pol, np.array([2.0, 0.0]), "sdirk2", jacobian=van_der_pol_jacobian,
            vectorized=True),
        "newton_be_cubic_differences": lambda: ig.NonlinearBackwardEuler(
            cubic, u_exact(0.0)),
        "per_level_rk4_be": lambda: ig.PerLevel([
            ig.ExplicitRK(lambda t, u: A2 @ u + g2(t), u_exact(0.0), "rk4"),
            ig.BackwardEuler(A2, u_exact(0.0), g=g2)]),
    }


#: T, N for each app (explicit ones stable on the coarsest level's steps).
GRIDS = {"rk4_brusselator": (2.0, 128), "ssprk3_lorenz_rows": (0.25, 128)}


@pytest.mark.parametrize("name", sorted(mgrit_apps()))
def test_mgrit_converges_to_sequential_stepping(name):
    make = mgrit_apps()[name]
    T, N = GRIDS.get(name, (1.0, 64))
    _, seq = solve_states(make(), T, N, max_levels=1)
    assert np.array_equal(seq, sequential(make(), T, N))  # max_levels=1 is sequential
    for batch in (True, False):
        r, got = solve_states(make(), T, N, max_levels=3, cfactor=4, abs_tol=1e-10,
                              batch=batch)
        assert r.levels == 3 and r.iterations > 1 and r.converged
        assert (r.counts["step_batch"] > 0) == batch
        scale = max(1.0, float(np.max(np.abs(seq))))
        assert np.max(np.abs(got - seq)) < 1e-8 * scale, (name, batch)


def test_per_level_uses_each_levels_integrator():
    calls = {}

    class Counting(ig.ExplicitRK):
        def step(self, u, t0, t1, status):
            calls[(self.tableau.name, getattr(status, "level", None))] = True
            return super().step(u, t0, t1, status)

    fine = Counting(lambda t, u: LAMBDA * u, np.ones(1), "rk4")
    coarse = Counting(lambda t, u: LAMBDA * u, np.ones(1), "heun")
    app = ig.PerLevel([fine, coarse])
    r = braidpy.solve(app, 0.0, 1.0, 64, max_levels=3, cfactor=4, abs_tol=1e-12, batch=False)
    assert set(calls) == {("rk4", 0), ("heun", 1), ("heun", 2)}
    assert abs(r.final[0] - sequential(fine, 1.0, 64)[-1][0]) < 1e-11  # the fine solution
    assert app.app_for(7) is coarse and app.app_for(0) is fine


@pytest.mark.parametrize("name", sorted(mgrit_apps()))
def test_every_integrator_passes_check_app(name):
    from braidpy.testing import check_app

    check_app(mgrit_apps()[name]())  # raises, naming the rule, if a callback breaks one


# --- an independent reference ---------------------------------------------------------------


def test_rk4_brusselator_matches_solve_ivp():
    from scipy.integrate import solve_ivp

    T, N = 2.0, 512
    ref = solve_ivp(lambda t, u: brusselator(t, u), (0.0, T), [1.5, 3.0], method="DOP853",
                    rtol=1e-12, atol=1e-12, t_eval=np.linspace(0.0, T, 9))
    app = ig.ExplicitRK(brusselator, np.array([1.5, 3.0]), "rk4", vectorized=True)
    r, got = solve_states(app, T, N, max_levels=4, cfactor=4, abs_tol=1e-12)
    err = np.max(np.abs(got[::N // 8] - ref.y.T))
    assert err < 1e-8, err  # RK4 at h = 1/256: about 1e-9 here


def test_ssprk3_lorenz_matches_solve_ivp():
    from scipy.integrate import solve_ivp

    T, N = 0.5, 4096
    ref = solve_ivp(lambda t, u: lorenz(t, u), (0.0, T), [1.0, 1.0, 1.0], method="DOP853",
                    rtol=1e-12, atol=1e-12)
    got = sequential(ig.ExplicitRK(lorenz, np.ones(3), "ssprk3"), T, N)[-1]
    assert np.max(np.abs(got - ref.y[:, -1])) < 1e-6


# --- bad input ------------------------------------------------------------------------------


def test_bad_tableaus_name_the_bad_value():
    with pytest.raises(ValueError, match=r"sum\(b\) = 1.1"):
        ig.ButcherTableau([[0, 0], [1, 0]], [0.5, 0.6], [0, 1])
    with pytest.raises(ValueError, match=r"c\[1\] = 0.5 must equal the sum of row 1"):
        ig.ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5], [0, 0.5])
    with pytest.raises(ValueError, match=r"A must be a non-empty square matrix, got shape "
                                         r"\(2, 3\)"):
        ig.ButcherTableau(np.zeros((2, 3)), [0.5, 0.5], [0, 0])
    with pytest.raises(ValueError, match=r"b must have shape \(2,\), got \(3,\)"):
        ig.ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5, 0.0], [0, 1])
    with pytest.raises(ValueError, match="b_hat must sum to 1"):
        ig.ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5], [0, 1], [1.0, 1.0])
    with pytest.raises(ValueError, match="non-finite"):
        ig.ButcherTableau([[0, 0], [np.nan, 0]], [0.5, 0.5], [0, 1])
    with pytest.raises(ValueError, match="'sdirk2' is not explicit"):
        ig.ExplicitRK(brusselator, np.ones(2), "sdirk2")
    with pytest.raises(ValueError, match="'rk4' is not singly diagonally implicit"):
        ig.SDIRK(A2, np.ones(2), "rk4")
    with pytest.raises(ValueError, match="unknown tableau 'rk5'"):
        ig.ExplicitRK(brusselator, np.ones(2), "rk5")


def test_bad_problems_name_the_bad_value():
    with pytest.raises(TypeError, match="rhs must be a callable rhs"):
        ig.ExplicitRK(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match=r"u0 must have at least one axis .* shape \(\)"):
        ig.ExplicitRK(brusselator, 1.0)
    with pytest.raises(TypeError, match="vectorized must be True or False"):
        ig.ExplicitRK(brusselator, np.ones(2), vectorized="yes")
    with pytest.raises(ValueError, match=r"A must be a non-empty square matrix, got shape "
                                         r"\(2, 3\)"):
        ig.BackwardEuler(np.ones((2, 3)), np.ones(2))
    import scipy.sparse as sp

    with pytest.raises(ValueError, match=r"got shape \(3, 2\)"):
        ig.SDIRK(sp.csr_matrix(np.ones((3, 2))), np.ones(3))
    with pytest.raises(ValueError, match=r"u0 must have shape \(2,\) \(A is 2 x 2\), got "
                                         r"shape \(3,\)"):
        ig.CrankNicolson(A2, np.ones(3))
    with pytest.raises(ValueError, match=r"M must have A's shape \(2, 2\), got shape \(3, 3\)"):
        ig.BackwardEuler(A2, np.ones(2), M=np.eye(3))
    with pytest.raises(TypeError, match="g must be a callable"):
        ig.BackwardEuler(A2, np.ones(2), g=np.ones(2))
    with pytest.raises(ValueError, match=r"theta must be a number in \[0, 1\], got 1.5"):
        ig.ThetaMethod(A2, np.ones(2), theta=1.5)
    with pytest.raises(ValueError, match="guess must be"):
        ig.ExplicitRK(brusselator, np.ones(2), guess="ones")
    with pytest.raises(ValueError, match="PerLevel needs at least one app"):
        ig.PerLevel([])
    # a right-hand side or forcing of the wrong shape, found at the first step
    app = ig.ExplicitRK(lambda t, u: np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match=r"returned ndarray of shape \(3,\) for a state of "
                                         r"shape \(2,\)"):
        app.step(np.ones(2), 0.0, 0.1, None)
    app = ig.BackwardEuler(A2, np.ones(2), g=lambda t: 1.0)
    with pytest.raises(ValueError, match=r"g\(0.1\) returned float .* shape \(2,\)"):
        app.step(np.ones(2), 0.0, 0.1, None)


class RhsFailed(Exception):
    pass


def test_a_failing_rhs_surfaces_from_solve():
    def rhs(t, u):
        if t > 0.5:
            raise RhsFailed(f"no value at t = {t}")
        return -u

    for vectorized, batch in ((False, False), (True, True)):
        app = ig.ExplicitRK(rhs, np.ones(1), "heun", vectorized=vectorized)
        with pytest.raises(RhsFailed, match="no value at t"):
            braidpy.solve(app, 0.0, 1.0, 64, max_levels=3, cfactor=4, batch=batch)


def test_without_scipy_the_implicit_methods_name_the_extra():
    from test_extras import run_hidden

    rc, out = run_hidden("""
        import numpy as np
        import pytest
        from braidpy import integrators as ig

        app = ig.ExplicitRK(lambda t, u: -u, np.ones(1))   # explicit: NumPy only
        app.step(np.ones(1), 0.0, 0.1, None)
        with pytest.raises(ImportError, match=r"implicit methods needs scipy.*"
                                              r"\\[integrators\\]"):
            ig.BackwardEuler(np.eye(2), np.ones(2))
        print("scipy message ok")
    """, {"scipy"})
    assert rc == 0, out
    assert "scipy message ok" in out


# --- under MPI ------------------------------------------------------------------------------

MPI_CASES = ("rk4_brusselator", "sdirk3_heat", "crank_nicolson_dense", "per_level_rk4_be",
             "newton_sdirk2_vdp")
#: Cases whose batched rows are bitwise their unbatched steps (elementwise rhs; tridiagonal
#: SuperLU solves), so their results are bitwise the same on any number of ranks. The dense
#: ones' multi-column solves round differently from one column's, and the rows a batch
#: holds depend on the rank count: they agree to rounding.
BITWISE = ("rk4_brusselator", "sdirk3_heat", "newton_sdirk2_vdp")


def run_case(name, batch, comm=None):
    """Summary of an MGRIT solve of mgrit_apps()[name] (the states only on rank 0)."""
    T, N = GRIDS.get(name, (1.0, 64))
    r = braidpy.solve(mgrit_apps()[name](), 0.0, T, N, comm=comm, max_levels=3, cfactor=4,
                      abs_tol=1e-10, batch=batch)
    mine = {int(i): r.solution(index=int(i)).tolist() for i in r.owned}
    if comm is not None:
        from mpi_world import assert_split

        assert_split(comm, r.owned, len(r.times))
        parts = comm.gather(mine, root=0)
        mine = None if parts is None else {k: v for p in parts for k, v in p.items()}
    calls = r.counts["step_batch"]
    return dict(iterations=r.iterations, residuals=[float(x) for x in r.residuals],
                final=r.final.tolist(),
                states=None if mine is None else [mine[i] for i in range(N + 1)],
                batched_calls=calls if comm is None else comm.allreduce(calls))


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


@pytest.mark.parametrize("nranks", [2, 4])
def test_mgrit_under_mpi_matches_serial(nranks, tmp_path):
    from mpi_launch import launch

    par = launch(Path(__file__).name, nranks, tmp_path)
    # one world of nranks, each holding its own part of the time grid (assert_split ran)
    assert par["size"] == nranks and par["ranks"] == list(range(nranks))
    for name in MPI_CASES:
        where = f"{name} at {nranks} ranks"
        T, N = GRIDS.get(name, (1.0, 64))
        seq = sequential(mgrit_apps()[name](), T, N)
        for batch in ("True", "False"):
            got, ser = par[name][batch], run_case(name, batch == "True")
            assert (got["batched_calls"] > 0) == (batch == "True"), where
            assert got["iterations"] == ser["iterations"], where
            exact = batch == "False" or name in BITWISE
            # residual norms are summed per rank first: they agree to rounding, relative to
            # the first residual where the states themselves do
            np.testing.assert_allclose(got["residuals"], ser["residuals"], rtol=1e-12,
                                       atol=0 if exact else 1e-12 * ser["residuals"][0],
                                       err_msg=where)
            if exact:
                assert got["states"] == ser["states"], where  # bitwise, any rank count
            else:
                np.testing.assert_allclose(got["states"], ser["states"], rtol=1e-13,
                                           atol=1e-14, err_msg=where)
            assert np.max(np.abs(np.array(got["states"]) - seq)) < 1e-8 * max(
                1.0, float(np.max(np.abs(seq)))), where


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2])
