"""braidpy.problems.KuramotoSivashinsky: the discretisation, the time integrator's order,
batched = unbatched, MGRIT = sequential stepping, and XBraid's KS driver reproduced
(tests/data/xbraid_ks.json: every printed residual, iteration and level counts, u(tstop))
at 1, 2 and 4 ranks."""

import math

import numpy as np
import pytest
from ks_cases import DATA, cases, run_case
from mpi_launch import launch

import braidpy
from braidpy.problems import KuramotoSivashinsky, KuramotoSivashinskySpectral

pytest.importorskip("scipy")
threadpoolctl = pytest.importorskip("threadpoolctl")


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The LU solves' rounding depends on BLAS' thread count: one, as XBraid's UMFPACK."""
    with threadpoolctl.threadpool_limits(1):
        yield


def assert_as_printed(got, case):
    assert got["levels"] == case["nlevels"], case["id"]
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["history"] == case["residuals"], case["id"]
    # u(tstop): XBraid's 17 digits; the solves' rounding differs (UMFPACK vs LAPACK)
    np.testing.assert_allclose(got["final"], case["final"], rtol=0, atol=1e-10,
                               err_msg=case["id"])


def test_reference_data_covers_ranks_and_options():
    assert {c["nranks"] for c in cases()} == {1, 2, 4}
    assert len({tuple(c["args"]) for c in cases()}) == 4
    assert any("-theta" in c["args"] for c in cases())
    assert "52178c8" in DATA["xbraid"]
    for c in cases():  # XBraid's answer does not depend on its rank count
        same = [d for d in cases() if d["args"] == c["args"]]
        assert all(d["residuals"] == c["residuals"] for d in same)


@pytest.mark.parametrize("case", cases(1), ids=lambda c: c["id"])
def test_xbraid_driver_serial(case):
    assert_as_printed(run_case(case), case)


@pytest.mark.parametrize("nranks", [2, 4])
def test_xbraid_driver_at_its_rank_count(nranks, tmp_path):
    got = launch("mpi_ks_driver.py", nranks, tmp_path, timeout=900)
    expected = cases(nranks)
    assert sorted(got) == sorted(c["id"] for c in expected)
    for case in expected:
        assert_as_printed(got[case["id"]], case)


def test_xbraid_options_are_the_drivers():
    p = KuramotoSivashinsky()  # -nt 2048 -tf 4: tstop 92.1, coarsest dt at most 1.5
    o = p.xbraid_options()
    assert p.tstop == pytest.approx(4 * math.log(10) / 0.1)
    assert o["max_levels"] == 3 and o["min_coarse"] == 62 and o["storage"] == 0
    assert o["cfactor"] == {"default": 4, 0: 4} and not o["batch"]
    assert p.xbraid_options(theta=True)["max_levels"] == 4


def test_discretisation_is_fourth_order_and_its_jacobian_exact():
    errs = []
    for nx in (32, 64):
        p = KuramotoSivashinsky(nx=nx, length=2 * math.pi * 4)
        x, k = p.x, 2 * math.pi / p.length * 3
        u = 0.5 * np.sin(k * x)
        exact = -(-k * k * u + k ** 4 * u) - u * 0.5 * k * np.cos(k * x)
        errs.append(abs(p.rhs(0.0, u) - exact).max())
    assert math.log2(errs[0] / errs[1]) == pytest.approx(4.0, abs=0.1)
    p = KuramotoSivashinsky(nx=16, length=16.0)
    u, v = np.cos(p.x / 3) + 0.3, np.sin(p.x)
    eps = 1e-6
    fd = (p.rhs(0.0, u + eps * v) - p.rhs(0.0, u - eps * v)) / (2 * eps)
    np.testing.assert_allclose(p.jacobian(0.0, u) @ v, fd, atol=1e-7)
    U = np.stack([u, v])
    np.testing.assert_array_equal(p.rhs(0.0, U)[1], p.rhs(0.0, v))


def test_lobatto_iiic_is_second_order():
    p = KuramotoSivashinsky(nx=32, length=32.0, lyapunov_times=0.05, ntime=8)
    ref = p.reference([p.tstop])[0]
    errs = [abs(p.sequential(n)[-1] - ref).max() for n in (8, 16, 32, 64)]
    slopes = np.diff(np.log2(errs)) * -1
    assert slopes == pytest.approx([2.0] * 3, abs=0.1), (errs, slopes)


def test_batched_equals_unbatched_bitwise():
    p = KuramotoSivashinsky(nx=32, length=32.0, lyapunov_times=0.2, ntime=32)
    app = p.app()
    rng = np.random.default_rng(20231)
    U = p.u0 + 0.1 * rng.standard_normal((5, p.nx))
    dts = np.array([0.1, 0.4, 0.05, 1.2, 0.4])
    one = np.stack([p._lobatto(U[k][None].copy(), dts[k:k + 1])[0] for k in range(5)])
    got = app.step_stacked(U.copy(), np.zeros(5), dts, None)
    np.testing.assert_array_equal(got, one)
    kw = dict(max_levels=3, cfactor=4, abs_tol=1e-11, max_iter=30)
    a = p.solve(**kw)
    b = p.solve(batch=False, **kw)
    assert a.residuals == b.residuals
    np.testing.assert_array_equal(a.final, b.final)
    np.testing.assert_allclose(a.final, p.sequential()[-1], rtol=0, atol=1e-9)


def test_xbraid_app_state_carries_the_stage_values():
    p = KuramotoSivashinsky(nx=16, length=16.0, lyapunov_times=0.1, ntime=8)
    app = p.xbraid_app()
    u = app.init(0.0)
    assert u.shape == (48,) and not u[16:].any()
    assert app.norm(u) == pytest.approx(np.linalg.norm(p.u0) / 4)
    r = braidpy.solve(app, p.tstart, p.tstop, p.ntime, **p.xbraid_options(max_levels=2))
    # converged: the state is Lobatto IIIC's, Newton's inexactness below the tolerance
    np.testing.assert_allclose(r.final[:16], p.sequential()[-1], rtol=0, atol=1e-8)


@pytest.mark.parametrize("kwargs, message", [
    (dict(nx=4), "nx must be an int >= 7"), (dict(length=-1.0), "length must be > 0"),
    (dict(newton_iters=0), "newton_iters must be an int >= 1"),
    (dict(newton_tol=0.0), "newton_tol must be > 0"), (dict(ntime=0), "ntime must be")])
def test_bad_parameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KuramotoSivashinsky(**kwargs)


def test_newton_failure_is_an_error_not_a_wrong_answer():
    p = KuramotoSivashinsky(nx=32, length=32.0, newton_max_iter=1)
    with pytest.raises(RuntimeError, match="Newton did not reach"):
        p.sequential(4)


def test_spectral_etdrk4_is_fourth_order():
    p = KuramotoSivashinskySpectral(lyapunov_times=0.1, ntime=16)
    ref = p.reference([p.tstop])[0]
    errs = [abs(p.sequential(n)[-1] - ref).max() for n in (16, 32, 64)]
    slopes = np.diff(np.log2(errs)) * -1
    assert slopes == pytest.approx([4.0] * 2, abs=0.1), (errs, slopes)


def test_spectral_batched_equals_unbatched_and_mgrit_equals_sequential():
    p = KuramotoSivashinskySpectral(nx=32, length=32.0, lyapunov_times=0.2, ntime=32)
    rng = np.random.default_rng(7919)
    U = p.u0 + 0.1 * rng.standard_normal((4, p.nx))
    dts = np.array([0.1, 0.4, 0.1, 1.2])
    one = np.stack([p.app().step_stacked(U[k][None].copy(), np.zeros(1), dts[k:k + 1], None)[0]
                    for k in range(4)])
    np.testing.assert_array_equal(p.app().step_stacked(U.copy(), np.zeros(4), dts, None), one)
    kw = dict(max_levels=3, cfactor=4, abs_tol=1e-11, max_iter=30)
    a, b = p.solve(**kw), p.solve(batch=False, **kw)
    assert a.residuals == b.residuals
    np.testing.assert_array_equal(a.final, b.final)
    np.testing.assert_allclose(a.final, p.sequential()[-1], rtol=0, atol=1e-9)


def test_finite_differences_and_spectral_agree_to_the_spatial_error():
    fd = KuramotoSivashinsky(lyapunov_times=0.1, ntime=64)
    spectral = KuramotoSivashinskySpectral(lyapunov_times=0.1, ntime=64)
    np.testing.assert_array_equal(fd.u0, spectral.u0)
    diff = abs(fd.reference([fd.tstop])[0] - spectral.reference([fd.tstop])[0]).max()
    assert 5e-7 < diff < 2.5e-6, diff  # the 4th-order stencils' error (1.5e-6 measured)


def test_step_propagates_the_basis_by_its_derivative():
    p = KuramotoSivashinsky(nx=32, length=32.0)
    app = p.app()
    u = p.u0 + 0.2 * np.cos(p.x / 2)
    basis = [app.init_basis(0.0, k) for k in range(3)]
    assert app.inner_prod(basis[1], basis[2]) == pytest.approx(0.0, abs=1e-12)

    class Status:
        pass

    status = Status()
    status.basis = [b.copy() for b in basis]
    stepped = u.copy()
    app.step(stepped, 0.0, 0.5, status)
    np.testing.assert_array_equal(stepped, p._lobatto(u[None], np.array([0.5]))[0])
    h = 1e-6
    for b, got in zip(basis, status.basis):
        fd = (p._lobatto((u + h * b)[None], np.array([0.5]))[0]
              - p._lobatto((u - h * b)[None], np.array([0.5]))[0]) / (2 * h)
        np.testing.assert_allclose(got, fd, rtol=0, atol=1e-7 * max(1.0, abs(fd).max()))
        assert abs(got - b).max() > 1e-3  # it moved
