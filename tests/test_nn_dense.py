"""Tests for braidpy.nn: activations and the dense ResNet layer (forward, adjoint, gradient)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from braidpy.nn import (
    SMOOTH_RELU_EPS,
    Activation,
    activation_names,
    dense_adjoint,
    dense_adjoint_and_gradient,
    dense_adjoint_batched,
    dense_forward,
    dense_forward_batched,
    dense_gradient,
    dense_gradient_batched,
    get_activation,
    smooth_relu,
    smooth_relu_derivative,
)

from nn_checks import FD_STEP, KINKS, RTOL
from nn_checks import fd_gradient as _fd_gradient
from nn_checks import min_kink_distance as _min_kink_distance
from nn_checks import rel as _rel

SEED = 20261121
RTOL_DTYPE = {np.float64: 1e-13, np.float32: 2e-6}  # sums in another order
ACTIVATIONS = ["tanh", "relu", "smooth_relu"]
# Points of non-smoothness (where the second derivative jumps) for each activation.
BATCH, WIDTH, M = 5, 4, 3


def _rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


def _away_from_kinks(x: np.ndarray, name: str, margin: float = 1e-3) -> np.ndarray:
    """Move entries of x that lie within margin of a kink by 2*margin (for FD checks)."""
    x = x.copy()
    for k in KINKS[name]:
        near = np.abs(x - k) < margin
        x[near] += 2 * margin
    return x


def _layer(offset: int = 0):
    rng = _rng(offset)
    u = rng.standard_normal((BATCH, WIDTH))
    K = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)
    b = 0.3 * rng.standard_normal(WIDTH)
    c = rng.standard_normal((BATCH, WIDTH))
    return u, K, b, 0.37, c


def _layers(offset: int = 0):
    rng = _rng(offset)
    U = rng.standard_normal((M, BATCH, WIDTH))
    Ks = rng.standard_normal((M, WIDTH, WIDTH)) / np.sqrt(WIDTH)
    bs = 0.3 * rng.standard_normal((M, WIDTH))
    hs = rng.uniform(0.05, 0.5, M)
    C = rng.standard_normal((M, BATCH, WIDTH))
    return U, Ks, bs, hs, C








# ---------------------------------------------------------------- activations


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_derivative_matches_finite_differences(name):
    act = get_activation(name)
    x = _away_from_kinks(np.linspace(-2.0, 2.0, 401), name)
    x = np.concatenate([x, _away_from_kinks(_rng(1).standard_normal(200), name),
                        np.array([-0.09, -0.05, 0.03, 0.07])])  # inside the smooth blend
    fd = (act.value(x + FD_STEP) - act.value(x - FD_STEP)) / (2 * FD_STEP)
    np.testing.assert_allclose(act.derivative(x), fd, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_keeps_shape_and_dtype(name, dtype):
    act = get_activation(name)
    x = _rng(2).standard_normal((3, 4)).astype(dtype)
    for y in (act.value(x), act.derivative(x), act(x)):
        assert y.shape == x.shape and y.dtype == dtype


def test_relu_values():
    act = get_activation("relu")
    x = np.array([-2.0, -0.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(act.value(x), [0.0, 0.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(act.derivative(x), [0.0, 0.0, 0.0, 1.0, 1.0])


def test_smooth_relu_formula_of_the_paper():
    # Günther et al. (2020), eq. (5.34): 2.5 x^2 + 0.5 x + 0.025 on |x| <= 0.1, else max(x, 0).
    assert SMOOTH_RELU_EPS == 0.1
    x = np.linspace(-0.1, 0.1, 41)
    np.testing.assert_allclose(smooth_relu(x), 2.5 * x**2 + 0.5 * x + 0.025, rtol=0, atol=1e-15)
    np.testing.assert_allclose(smooth_relu_derivative(x), 5.0 * x + 0.5, rtol=0, atol=1e-15)
    x = np.array([-3.0, -0.2, -0.1000001, 0.1000001, 0.2, 3.0])
    np.testing.assert_array_equal(smooth_relu(x), np.maximum(x, 0.0))
    np.testing.assert_array_equal(smooth_relu_derivative(x), (x > 0).astype(float))


@pytest.mark.parametrize("eps", [SMOOTH_RELU_EPS, 0.5])
def test_smooth_relu_is_c1_at_its_breakpoints(eps):
    for x0, value, slope in [(-eps, 0.0, 0.0), (eps, eps, 1.0)]:
        for delta in (1e-4, 1e-6, 1e-8):
            x = np.array([x0 - delta, x0, x0 + delta])
            v = smooth_relu(x, eps)
            d = smooth_relu_derivative(x, eps)
            # value continuous: both sides within slope*delta + O(delta^2) of the limit
            np.testing.assert_allclose(v, value + slope * (x - x0), rtol=0,
                                       atol=delta**2 / eps + 1e-15)
            # derivative continuous: jump across the breakpoint vanishes like delta / eps
            assert abs(d[2] - d[0]) <= delta / eps + 1e-15
            assert abs(d[1] - slope) <= 1e-15


def test_get_activation_registry_and_errors():
    assert activation_names() == ("relu", "smooth_relu", "tanh")
    for name in ACTIVATIONS:
        act = get_activation(name)
        assert isinstance(act, Activation) and act.name == name
        assert get_activation(act) is act
    with pytest.raises(ValueError, match=r"'sigmoid'.*'relu', 'smooth_relu', 'tanh'"):
        get_activation("sigmoid")
    with pytest.raises(ValueError, match="unknown activation"):
        dense_forward(*_layer()[:4], "ReLU")


# ---------------------------------------------------------------- single layer


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_dense_forward_definition(name):
    u, K, b, h, _ = _layer()
    act = get_activation(name)
    expected = np.empty_like(u)
    for i in range(BATCH):  # K acts on each row vector
        expected[i] = u[i] + h * act.value(K @ u[i] + b)
    np.testing.assert_allclose(dense_forward(u, K, b, h, name), expected, rtol=1e-14)
    assert dense_forward(u, K, b, h, act) is not u


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_dense_adjoint_and_gradient_match_finite_differences(name):
    u, K, b, h, c = _layer(3)
    u = _away_from_kinks_layer(u, K, b, name)
    assert _min_kink_distance(u @ K.T + b, name) > 1e-4  # FD steps never cross a kink

    def J(u_, K_=K, b_=b):
        return float(np.sum(c * dense_forward(u_, K_, b_, h, name)))

    w = dense_adjoint(c, u, K, b, h, name)
    dK, db = dense_gradient(c, u, K, b, h, name)
    assert w.shape == u.shape and dK.shape == K.shape and db.shape == b.shape
    assert _rel(w, _fd_gradient(J, u)) <= RTOL
    assert _rel(dK, _fd_gradient(lambda K_: J(u, K_=K_), K)) <= RTOL
    assert _rel(db, _fd_gradient(lambda b_: J(u, b_=b_), b)) <= RTOL


def _away_from_kinks_layer(u, K, b, name, margin=1e-3):
    """Shift b so that no pre-activation z = u K^T + b lies within margin of a kink."""
    b = b.copy()
    for _ in range(20):
        z = u @ K.T + b
        if _min_kink_distance(z, name) > margin:
            return u
        u = u + 0.0137  # deterministic nudge; the seed is fixed, this rarely loops
    raise AssertionError("could not keep the test data away from the kinks")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_adjoint_and_gradient_together_equal_the_two_calls(name):
    u, K, b, h, c = _layer(8)
    w, dK, db = dense_adjoint_and_gradient(c, u, K, b, h, name)
    want_dK, want_db = dense_gradient(c, u, K, b, h, name)
    np.testing.assert_array_equal(w, dense_adjoint(c, u, K, b, h, name))
    np.testing.assert_array_equal(dK, want_dK)
    np.testing.assert_array_equal(db, want_db)
    f32 = [x.astype(np.float32) for x in (c, u, K, b)]  # the general path
    w32, dK32, db32 = dense_adjoint_and_gradient(*f32, h, name)
    assert w32.dtype == dK32.dtype == db32.dtype == np.float32
    np.testing.assert_array_equal(w32, dense_adjoint(*f32, h, name))


def test_dense_inputs_are_not_modified():
    u, K, b, h, c = _layer()
    copies = [x.copy() for x in (u, K, b, c)]
    dense_forward(u, K, b, h, "tanh")
    dense_adjoint(c, u, K, b, h, "tanh")
    dense_gradient(c, u, K, b, h, "tanh")
    for x, y in zip((u, K, b, c), copies):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_dense_float32_stays_float32(name):
    u, K, b, h, c = (x.astype(np.float32) if isinstance(x, np.ndarray) else x
                     for x in _layer())
    assert dense_forward(u, K, b, h, name).dtype == np.float32
    assert dense_adjoint(c, u, K, b, h, name).dtype == np.float32
    assert all(g.dtype == np.float32 for g in dense_gradient(c, u, K, b, h, name))
    U, Ks, bs, hs, C = (x.astype(np.float32) for x in _layers())
    assert dense_forward_batched(U, Ks, bs, hs, name).dtype == np.float32
    assert dense_adjoint_batched(C, U, Ks, bs, hs, name).dtype == np.float32
    assert all(g.dtype == np.float32 for g in dense_gradient_batched(C, U, Ks, bs, hs, name))
    # float64 step sizes do not promote float32 states
    assert dense_forward_batched(U, Ks, bs, hs.astype(np.float64), name).dtype == np.float32


# ---------------------------------------------------------------- the compiled kernels
# relu and smooth_relu layers of width up to ROWS_MAX_WIDTH take the one-pass kernels
# (braidpy._core._host_dense.dense_rows_*): the product in a fixed order, k ascending,
# one rounding per operation; the gradient's sums rows ascending. Their bits must be
# those of NumPy operations written out in that order (the activation from
# braidpy.nn.activations, then *h, +u; act', *w, *h), for both dtypes, one interval or
# stacked ones, and arrays in any memory layout. Wider layers keep NumPy's (BLAS's)
# product and the compiled elementwise pass after it (dense_step_finish, dense_slope).


def _ordered_product(x, M):
    """x @ M (also stacked) summed k ascending, one rounding per operation: the order of
    the one-pass kernels (NumPy's matmul sums in BLAS's order)."""
    z = x[..., 0:1] * M[..., 0:1, :]
    for k in range(1, x.shape[-1]):
        z = z + x[..., k:k + 1] * M[..., k:k + 1, :]
    return z


def _ordered_gradient(g, x):
    """(g^T @ x, g summed over the rows) accumulated from zero, rows ascending."""
    dK = np.zeros(g.shape[:-2] + (g.shape[-1], x.shape[-1]), g.dtype)
    db = np.zeros(g.shape[:-2] + g.shape[-1:], g.dtype)
    for r in range(g.shape[-2]):
        dK = dK + g[..., r, :, None] * x[..., r, None, :]
        db = db + g[..., r, :]
    return dK, db


def _unfused(name, u, K, b, h, w, product=_ordered_product):
    """Forward and scaled slope by NumPy operations written out here, in u's dtype
    (product: how u @ K^T is summed)."""
    act = get_activation(name)
    z = product(u, np.swapaxes(K, -1, -2))
    z = z + (b[:, None, :] if u.ndim == 3 else b)
    hh = h[:, None, None] if u.ndim == 3 else u.dtype.type(h)
    return u + hh * act.value(z), (act.derivative(z) * w) * hh


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["relu", "smooth_relu"])
def test_compiled_kernels_have_the_bits_of_the_ordered_numpy_operations(name, dtype):
    u, K, b, h, c = (x.astype(dtype) if isinstance(x, np.ndarray) else x for x in _layer(5))
    # pre-activations on both sides of smooth_relu's blend and at its ends
    u[0, :3] = np.array([SMOOTH_RELU_EPS, -SMOOTH_RELU_EPS, 0.0], dtype) - b[:3]
    K[:3, :] = 0
    U, Ks, bs, hs, C = (x.astype(dtype) for x in _layers(6))
    for x, kk, bb, hh, w in ((u, K, b, h, c), (U, Ks, bs, hs, C)):
        want_f, want_g = _unfused(name, x, kk, bb, hh, w)
        if x.ndim == 3:
            got_f = dense_forward_batched(x, kk, bb, hh, name)
            got_a = dense_adjoint_batched(w, x, kk, bb, hh, name)
            got_dK, got_db = dense_gradient_batched(w, x, kk, bb, hh, name)
        else:
            got_f = dense_forward(x, kk, bb, hh, name)
            got_a = dense_adjoint(w, x, kk, bb, hh, name)
            got_dK, got_db = dense_gradient(w, x, kk, bb, hh, name)
        assert got_f.dtype == dtype and got_a.dtype == dtype
        np.testing.assert_array_equal(got_f, want_f)
        np.testing.assert_array_equal(got_a, w + _ordered_product(want_g, kk))
        want_dK, want_db = _ordered_gradient(want_g, x)
        np.testing.assert_array_equal(got_dK, want_dK)
        np.testing.assert_array_equal(got_db, want_db)
        # and NumPy's own (BLAS's) sums, to rounding
        tol = dict(rtol=RTOL_DTYPE[dtype], atol=RTOL_DTYPE[dtype])
        np.testing.assert_allclose(got_f, _unfused(name, x, kk, bb, hh, w, np.matmul)[0], **tol)
        np.testing.assert_allclose(got_a, w + np.matmul(want_g, kk), **tol)
        np.testing.assert_allclose(got_dK, np.matmul(np.swapaxes(want_g, -1, -2), x), **tol)
        np.testing.assert_allclose(got_db, np.sum(want_g, axis=-2), **tol)


# The compiled pass's loops exist twice, for baseline x86-64 and for AVX2, picked at run
# time (_host_dense.simd()); both must give the bits above, for every width (vector
# remainders), both dtypes and every activation.


def _cpu_has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


@pytest.fixture(params=["baseline", "avx2"])
def simd(request):
    from braidpy._core import _host_dense
    if request.param == "avx2" and not _cpu_has_avx2():
        pytest.skip("this processor has no AVX2")
    before = _host_dense._use_simd(request.param)
    yield request.param
    _host_dense._use_simd(before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["relu", "smooth_relu"])
def test_compiled_kernels_have_the_reference_bits_in_either_instruction_set(name, dtype, simd):
    from braidpy._core import _host_dense
    assert _host_dense.simd() == simd
    test_compiled_kernels_have_the_bits_of_the_ordered_numpy_operations(name, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", [1, 2, 3])  # tanh, relu, smooth_relu
def test_instruction_sets_agree_bit_for_bit(act, dtype):
    from braidpy._core import _host_dense
    if not _cpu_has_avx2():
        pytest.skip("this processor has no AVX2")
    rng = _rng(41)
    for width in (1, 3, 4, 5, 8, 13, 17):
        for shape in ((37, width), (3, 29, width)):
            stacked = len(shape) == 3
            # pre-activations spread over smooth_relu's pieces: below, inside, above the blend
            Z = (0.2 * rng.standard_normal(shape)).astype(dtype)
            X = rng.standard_normal(shape).astype(dtype)
            b = (0.05 * rng.standard_normal((3, width) if stacked else width)).astype(dtype)
            h = rng.uniform(0.05, 0.5, 3).astype(dtype) if stacked else 0.37
            results = []
            for isa in ("baseline", "avx2"):
                before = _host_dense._use_simd(isa)
                try:
                    fin, slope, upd = Z.copy(), Z.copy(), X.copy()
                    _host_dense.dense_step_finish(fin, X, b, h, act)
                    _host_dense.dense_slope(slope, X, b, h, act)
                    _host_dense.dense_step_update(Z, upd, b, h, act)
                finally:
                    _host_dense._use_simd(before)
                results.append((fin, slope, upd))
            for base, wide in zip(*results):
                np.testing.assert_array_equal(base, wide, err_msg=f"{shape} act {act}")


# Every width up to 32 takes the one-pass kernels: unrolled for 2, 4, 8, 16 and 32, a loop
# for the others (both pairs of rows and a last odd row; rows beyond one tile).
ROWS_WIDTHS = (1, 2, 3, 4, 5, 8, 13, 16, 17, 31, 32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["relu", "smooth_relu"])
def test_one_pass_kernels_have_the_reference_bits_at_every_width(name, dtype, simd):
    from braidpy._core import _host_dense
    code = {"relu": 2, "smooth_relu": 3}[name]
    rng = _rng(43)
    for width in ROWS_WIDTHS:
        for lead in ((), (3,)):
            rows = 2 * (256 // width) + 3  # two whole tiles and three rows more, odd
            U, W = (rng.standard_normal(lead + (rows, width)).astype(dtype) for _ in "UW")
            K = (rng.standard_normal(lead + (width, width)) / np.sqrt(width)).astype(dtype)
            b = (0.1 * rng.standard_normal(lead + (width,))).astype(dtype)
            h = rng.uniform(0.1, 0.5, 3).astype(dtype) if lead else 0.37
            want_f, g = _unfused(name, U, K, b, h, W)
            want_a = W + _ordered_product(g, K)
            want_dK, want_db = _ordered_gradient(g, U)
            where = f"width {width}, shape {U.shape}"
            out = np.empty_like(U)
            _host_dense.dense_rows_step(U, K, b, h, code, out)
            np.testing.assert_array_equal(out, want_f, err_msg=where)
            _host_dense.dense_rows_adjoint(W, U, K, b, h, code, out)
            np.testing.assert_array_equal(out, want_a, err_msg=where)
            dK, db = _host_dense.dense_rows_gradient(W, U, K, b, h, code)
            np.testing.assert_array_equal(dK, want_dK, err_msg=where)
            np.testing.assert_array_equal(db, want_db, err_msg=where)
            # in place: each row read whole before it is written
            Wc = W.copy()
            dK, db = _host_dense.dense_rows_adjoint_gradient(Wc, U, K, b, h, code, Wc)
            np.testing.assert_array_equal(Wc, want_a, err_msg=where)
            np.testing.assert_array_equal(dK, want_dK, err_msg=where)
            np.testing.assert_array_equal(db, want_db, err_msg=where)
            _host_dense.dense_rows_step(U, K, b, h, code, U)
            np.testing.assert_array_equal(U, want_f, err_msg=where)


@pytest.mark.parametrize("name", ["relu", "smooth_relu"])
def test_single_and_stacked_calls_give_the_same_bits(name):
    """Serial backprop steps one interval at a time, MGRIT's relaxation m at once: the
    same kernels, so the same bits (at widths up to 32 and beyond)."""
    for width in (8, 13, 40):
        rng = _rng(width)
        U, C = rng.standard_normal((2, 4, 600, width))
        Ks = rng.standard_normal((4, width, width)) / np.sqrt(width)
        bs, hs = 0.1 * rng.standard_normal((4, width)), rng.uniform(0.1, 0.5, 4)
        F = dense_forward_batched(U, Ks, bs, hs, name)
        A = dense_adjoint_batched(C, U, Ks, bs, hs, name)
        dKs, dbs = dense_gradient_batched(C, U, Ks, bs, hs, name)
        for i in range(4):
            args = (U[i], Ks[i], bs[i], float(hs[i]), name)
            np.testing.assert_array_equal(F[i], dense_forward(*args))
            w, dK, db = dense_adjoint_and_gradient(C[i], *args)
            for got, want in ((A[i], w), (A[i], dense_adjoint(C[i], *args)),
                              (dKs[i], dK), (dbs[i], db)):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [slice(1, 20, 4), slice(17, 0, -4), slice(19, None, -3)])
def test_one_pass_kernels_read_strided_stacks_in_place(rows):
    """A stack whose states lie apart (every cf-th state of a trajectory, either
    direction: what the adjoint's batched steps get) is read and written in place, with
    the bits of its contiguous copy; the states in between are left alone."""
    from braidpy._core import _host_dense

    rng = _rng(7)
    T = rng.standard_normal((20, 50, 8))
    U = T[rows]
    m = len(U)
    W = rng.standard_normal(U.shape)
    K = rng.standard_normal((m, 8, 8)) / np.sqrt(8)
    b, h = 0.1 * rng.standard_normal((m, 8)), rng.uniform(0.1, 0.5, m)
    Uc = np.ascontiguousarray(U)
    assert not U.flags.c_contiguous
    for call in ("dense_rows_step", "dense_rows_adjoint", "dense_rows_adjoint_gradient"):
        fn = getattr(_host_dense, call)
        args = (K, b, h, 3)
        got, want = np.empty(U.shape), np.empty(U.shape)
        if call == "dense_rows_step":
            fn(U, *args, got), fn(Uc, *args, want)
        else:
            g1, g2 = fn(W, U, *args, got), fn(W, Uc, *args, want)
            assert all(np.array_equal(x, y) for x, y in zip(g1 or (), g2 or ())), call
        np.testing.assert_array_equal(got, want, err_msg=call)
    dK, db = _host_dense.dense_rows_gradient(W, U, K, b, h, 3)
    dKc, dbc = _host_dense.dense_rows_gradient(W, Uc, K, b, h, 3)
    assert np.array_equal(dK, dKc) and np.array_equal(db, dbc)
    # In place over the strided states themselves.
    T2 = T.copy()
    V = T2[rows]
    want = np.empty(V.shape)
    _host_dense.dense_rows_step(np.ascontiguousarray(V), K, b, h, 2, want)
    _host_dense.dense_rows_step(V, K, b, h, 2, V)
    np.testing.assert_array_equal(V, want)
    others = np.setdiff1d(np.arange(20), np.arange(20)[rows])
    np.testing.assert_array_equal(T2[others], T[others])


def test_one_pass_kernels_refuse_overlapping_strided_stacks():
    """Interleaved stacks overlap although no two states share an element: out must
    be U itself or lie apart from it, also for strided and reversed stacks."""
    from braidpy._core import _host_dense

    T = np.ones((20, 5, 4))
    K, b, h = np.ones((5, 4, 4)), np.zeros((5, 4)), np.ones(5)
    with pytest.raises(ValueError, match="out must be U itself or share no memory"):
        _host_dense.dense_rows_step(T[1:20:4], K, b, h, 2, T[2:20:4])
    with pytest.raises(ValueError, match="out must be U itself or share no memory"):
        _host_dense.dense_rows_step(T[17::-4], K, b, h, 2, T[18::-4][:5])
    with pytest.raises(ValueError, match="out must be U itself or share no memory"):
        _host_dense.dense_rows_step(T[1:20:4], K, b, h, 2, T[17::-4])  # U, reversed
    with pytest.raises(ValueError, match="C-contiguous, or a 3-D stack"):
        _host_dense.dense_rows_step(T[1:20:4, ::2], K[:, :4], b, h, 2, np.empty((5, 3, 4)))


def test_wider_layers_keep_numpys_product():
    """Above ROWS_MAX_WIDTH the product is NumPy's matmul (BLAS's order)."""
    from braidpy.nn import dense

    width = dense.ROWS_MAX_WIDTH + 1
    rng = _rng(44)
    u, c = rng.standard_normal((2, 9, width))
    K, b = rng.standard_normal((width, width)) / np.sqrt(width), rng.standard_normal(width)
    blas = lambda x, M: np.matmul(x, np.ascontiguousarray(M))  # noqa: E731  (K^T copied)
    want_f, want_g = _unfused("relu", u, K, b, 0.3, c, blas)
    np.testing.assert_array_equal(dense_forward(u, K, b, 0.3, "relu"), want_f)
    np.testing.assert_array_equal(dense_adjoint(c, u, K, b, 0.3, "relu"), c + want_g @ K)


def test_one_pass_kernels_refuse_what_they_cannot_take():
    from braidpy._core import _host_dense

    U, K, b, out = np.ones((3, 4)), np.eye(4), np.zeros(4), np.empty((3, 4))
    with pytest.raises(ValueError, match=r"act must be 2 \(relu\) or 3 \(smooth_relu\), got 1"):
        _host_dense.dense_rows_step(U, K, b, 0.5, 1, out)
    with pytest.raises(ValueError, match="width 33 exceeds 32"):
        _host_dense.dense_rows_step(np.ones((3, 33)), np.eye(33), np.zeros(33), 0.5, 2,
                                    np.empty((3, 33)))
    with pytest.raises(ValueError, match=r"K must be U's dtype, shaped \(width, width\)"):
        _host_dense.dense_rows_step(U, np.eye(3), b, 0.5, 2, out)
    with pytest.raises(ValueError, match=r"K must be U's dtype, shaped \(m, width, width\)"):
        _host_dense.dense_rows_gradient(np.ones((2, 3, 4)), np.ones((2, 3, 4)),
                                        np.ones((3, 4, 4)), np.zeros((2, 4)), np.ones(2), 3)
    with pytest.raises(ValueError, match="b does not match U"):
        _host_dense.dense_rows_adjoint(U, U, K, np.zeros(3), 0.5, 2, out)
    with pytest.raises(ValueError, match="out must have U's shape and dtype"):
        _host_dense.dense_rows_step(U, K, b, 0.5, 2, np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="out must be W itself or share no memory"):
        _host_dense.dense_rows_adjoint(np.ones((3, 4)), U, K, b, 0.5, 2, U)
    with pytest.raises(ValueError, match="out must be U itself or share no memory"):
        big = np.ones((4, 4))
        _host_dense.dense_rows_step(big[:3], K, b, 0.5, 2, big[1:])
    with pytest.raises(ValueError, match="out must be writable"):
        ro = np.empty((3, 4))
        ro.flags.writeable = False
        _host_dense.dense_rows_step(U, K, b, 0.5, 2, ro)
    with pytest.raises(ValueError, match="C-contiguous"):
        _host_dense.dense_rows_step(np.ones((4, 3)).T, K, b, 0.5, 2, np.empty((3, 4)))


def test_instruction_set_is_reported_and_chosen():
    from braidpy._core import _host_dense
    assert _host_dense.simd() == ("avx2" if _cpu_has_avx2() else "baseline")
    with pytest.raises(ValueError, match="'avx2' or 'baseline' expected, got 'sse9'"):
        _host_dense._use_simd("sse9")
    code = "from braidpy._core import _host_dense; print(_host_dense.simd())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "BRAIDPY_HOST_SIMD": "baseline"}, check=True)
    assert out.stdout.strip() == "baseline"


@pytest.mark.parametrize("name", ["relu", "smooth_relu"])
def test_compiled_pass_takes_strided_arrays_as_the_numpy_path_does(name):
    U, Ks, bs, hs, C = _layers(7)
    wide_U = np.repeat(U, 2, axis=2)[:, :, ::2]  # the same values, not contiguous
    wide_C = np.repeat(C, 2, axis=2)[:, :, ::2]
    wide_hs = np.repeat(hs, 2)[::2]
    every_other_bs = np.repeat(bs, 2, axis=0)[::2]  # as a coarse level sees the biases
    assert not wide_U.flags.c_contiguous and not wide_hs.flags.c_contiguous
    assert not every_other_bs.flags.c_contiguous
    np.testing.assert_array_equal(dense_forward_batched(wide_U, Ks, bs, wide_hs, name),
                                  dense_forward_batched(U, Ks, bs, hs, name))
    np.testing.assert_array_equal(dense_adjoint_batched(wide_C, wide_U, Ks, bs, wide_hs, name),
                                  dense_adjoint_batched(C, U, Ks, bs, hs, name))
    np.testing.assert_array_equal(dense_forward_batched(U, Ks, every_other_bs, wide_hs, name),
                                  dense_forward_batched(U, Ks, bs, hs, name))
    np.testing.assert_array_equal(dense_adjoint_batched(C, U, Ks, every_other_bs, hs, name),
                                  dense_adjoint_batched(C, U, Ks, bs, hs, name))
    np.testing.assert_array_equal(dense_forward(wide_U[1], Ks[1], bs[1], 0.3, name),
                                  dense_forward(U[1], Ks[1], bs[1], 0.3, name))


def test_compiled_pass_refuses_what_it_cannot_take():
    from braidpy._core import _host_dense

    Z, U, b = np.zeros((3, 4)), np.ones((3, 4)), np.zeros(4)
    with pytest.raises(ValueError, match="act must be 1 .* got 7"):
        _host_dense.dense_step_finish(Z, U, b, 0.5, 7)
    with pytest.raises(ValueError, match="b does not match Z"):
        _host_dense.dense_step_finish(Z, U, np.zeros(3), 0.5, 2)
    with pytest.raises(ValueError, match="dtypes differ"):
        _host_dense.dense_slope(Z, U.astype(np.float32), b, 0.5, 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        _host_dense.dense_slope(Z, np.ones((4, 3)).T, b, 0.5, 2)
    with pytest.raises(ValueError, match=r"h must be Z's dtype, shaped \(m,\)"):
        _host_dense.dense_slope(np.zeros((2, 3, 4)), np.ones((2, 3, 4)), np.zeros((2, 4)),
                                np.ones(3), 2)
    with pytest.raises(TypeError, match="float64 or float32"):
        _host_dense.dense_slope(Z.astype(int), U.astype(int), b.astype(int), 0.5, 2)


# ---------------------------------------------------------------- batched over intervals


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_batched_equals_per_interval(name):
    U, Ks, bs, hs, C = _layers(4)
    F = dense_forward_batched(U, Ks, bs, hs, name)
    A = dense_adjoint_batched(C, U, Ks, bs, hs, name)
    dKs, dbs = dense_gradient_batched(C, U, Ks, bs, hs, name)
    assert F.shape == A.shape == U.shape and dKs.shape == Ks.shape and dbs.shape == bs.shape
    for i in range(M):
        h = float(hs[i])
        f = dense_forward(U[i], Ks[i], bs[i], h, name)
        a = dense_adjoint(C[i], U[i], Ks[i], bs[i], h, name)
        dK, db = dense_gradient(C[i], U[i], Ks[i], bs[i], h, name)
        for got, want in ((F[i], f), (A[i], a), (dKs[i], dK), (dbs[i], db)):
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


def test_batched_accepts_list_step_sizes():
    U, Ks, bs, hs, _ = _layers()
    np.testing.assert_array_equal(dense_forward_batched(U, Ks, bs, list(hs), "tanh"),
                                  dense_forward_batched(U, Ks, bs, hs, "tanh"))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_batched_adjoint_and_gradient_match_finite_differences(name):
    U, Ks, bs, hs, C = _layers(5)
    for _ in range(20):  # keep pre-activations away from the kinks
        if _min_kink_distance(np.matmul(U, Ks.transpose(0, 2, 1)) + bs[:, None, :],
                              name) > 1e-3:
            break
        U = U + 0.0137
    else:
        raise AssertionError("could not keep the test data away from the kinks")

    def J(U_=U, Ks_=Ks, bs_=bs):
        return float(np.sum(C * dense_forward_batched(U_, Ks_, bs_, hs, name)))

    W = dense_adjoint_batched(C, U, Ks, bs, hs, name)
    dKs, dbs = dense_gradient_batched(C, U, Ks, bs, hs, name)
    assert _rel(W, _fd_gradient(lambda U_: J(U_=U_), U)) <= RTOL
    assert _rel(dKs, _fd_gradient(lambda K_: J(Ks_=K_), Ks)) <= RTOL
    assert _rel(dbs, _fd_gradient(lambda b_: J(bs_=b_), bs)) <= RTOL


# ---------------------------------------------------------------- shape errors


def test_single_shape_errors_name_argument_and_shapes():
    u, K, b, h, c = _layer()
    cases = [
        (lambda: dense_forward(u[0], K, b, h, "tanh"), r"dense_forward: u must be 2-D.*\(4,\)"),
        (lambda: dense_forward(u, K[:3], b, h, "tanh"),
         r"dense_forward: K has shape \(3, 4\) but u has shape \(5, 4\)"),
        (lambda: dense_adjoint(c, u, K, b[:3], h, "tanh"),
         r"dense_adjoint: b has shape \(3,\) but u has shape \(5, 4\)"),
        (lambda: dense_adjoint(c[:2], u, K, b, h, "tanh"),
         r"dense_adjoint: w has shape \(2, 4\) but u has shape \(5, 4\)"),
        (lambda: dense_gradient(c, u, K.T[:, :2], b, h, "tanh"),
         r"dense_gradient: K has shape \(4, 2\) but u has shape \(5, 4\)"),
        (lambda: dense_gradient(c.T, u, K, b, h, "tanh"),
         r"dense_gradient: w has shape \(4, 5\) but u has shape \(5, 4\)"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


def test_batched_shape_errors_name_argument_and_shapes():
    U, Ks, bs, hs, C = _layers()
    cases = [
        (lambda: dense_forward_batched(U[0], Ks, bs, hs, "tanh"),
         r"dense_forward_batched: U must be 3-D.*\(5, 4\)"),
        (lambda: dense_forward_batched(U, Ks[:2], bs, hs, "tanh"),
         r"dense_forward_batched: Ks has shape \(2, 4, 4\) but U has shape \(3, 5, 4\)"),
        (lambda: dense_adjoint_batched(C, U, Ks, bs[:, :3], hs, "tanh"),
         r"dense_adjoint_batched: bs has shape \(3, 3\) but U has shape \(3, 5, 4\)"),
        (lambda: dense_adjoint_batched(C, U, Ks, bs, hs[:2], "tanh"),
         r"dense_adjoint_batched: hs has shape \(2,\) but U has shape \(3, 5, 4\)"),
        (lambda: dense_gradient_batched(C[:, :2], U, Ks, bs, hs, "tanh"),
         r"dense_gradient_batched: W has shape \(3, 2, 4\) but U has shape \(3, 5, 4\)"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


# ---------------------------------------------------------------- other array namespaces


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_array_api_strict_namespace_gives_numpy_results(name):
    xp = pytest.importorskip("array_api_strict")
    u, K, b, h, c = _layer(6)
    U, Ks, bs, hs, C = _layers(6)
    want = [dense_forward(u, K, b, h, name), dense_adjoint(c, u, K, b, h, name),
            *dense_gradient(c, u, K, b, h, name),
            dense_forward_batched(U, Ks, bs, hs, name),
            dense_adjoint_batched(C, U, Ks, bs, hs, name),
            *dense_gradient_batched(C, U, Ks, bs, hs, name)]
    a = xp.asarray
    got = [dense_forward(a(u), a(K), a(b), h, name), dense_adjoint(a(c), a(u), a(K), a(b), h, name),
           *dense_gradient(a(c), a(u), a(K), a(b), h, name),
           dense_forward_batched(a(U), a(Ks), a(bs), a(hs), name),
           dense_adjoint_batched(a(C), a(U), a(Ks), a(bs), a(hs), name),
           *dense_gradient_batched(a(C), a(U), a(Ks), a(bs), a(hs), name)]
    for g, w in zip(got, want):
        assert type(g) is type(a(u))
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-14, atol=1e-14)


def test_unpickled_arrays_take_the_same_kernels_and_bits():
    """A state received from another rank is unpickled, with its own float64 descriptor
    object: it must take the kernels a local array takes (else the bits of a training
    run would depend on its rank count; tests/test_cli.py's two-rank resume found it)."""
    import pickle

    from braidpy.nn import dense

    rng = np.random.default_rng(7)
    for dt in (np.float64, np.float32):
        u, w = (rng.standard_normal((30, 8)).astype(dt) for _ in range(2))
        K, b = rng.standard_normal((8, 8)).astype(dt), rng.standard_normal(8).astype(dt)
        U, W = (pickle.loads(pickle.dumps(x)) for x in (u, w))
        assert U.dtype == u.dtype and U.dtype is not u.dtype  # the case in question
        for act in ("smooth_relu", "relu", "tanh"):
            assert np.array_equal(dense.dense_forward(U, K, b, 0.25, act),
                                  dense.dense_forward(u, K, b, 0.25, act))
            assert np.array_equal(dense.dense_adjoint(W, U, K, b, 0.25, act),
                                  dense.dense_adjoint(w, u, K, b, 0.25, act))
            for got, want in zip(dense.dense_gradient(W, U, K, b, 0.25, act),
                                 dense.dense_gradient(w, u, K, b, 0.25, act)):
                assert np.array_equal(got, want)
            Us = pickle.loads(pickle.dumps(u[None]))
            assert np.array_equal(
                dense.dense_forward_batched(Us, K[None], b[None], np.array([0.25], dt), act),
                dense.dense_forward_batched(u[None], K[None], b[None], np.array([0.25], dt),
                                            act))
