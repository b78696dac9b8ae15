"""Tests for braidpy.nn.conv: conv2d and its VJPs, the convolutional ResNet step."""

from __future__ import annotations

import numpy as np
import pytest

from braidpy.nn import (
    conv2d,
    conv2d_input_vjp,
    conv2d_weight_vjp,
    conv_adjoint,
    conv_adjoint_batched,
    conv_forward,
    conv_forward_batched,
    conv_gradient,
    conv_gradient_batched,
    get_activation,
)

from nn_checks import RTOL
from nn_checks import bias_away_from_kinks as _away_from_kinks
from nn_checks import fd_gradient as _fd_gradient
from nn_checks import rel as _rel

SEED = 20261122
ACTIVATIONS = ["tanh", "relu", "smooth_relu"]
BATCH, C, H, W, M = 2, 3, 4, 5, 3


def _rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


def _naive_conv2d(x: np.ndarray, K: np.ndarray) -> np.ndarray:
    """out[n, o, i, j] = sum_{c, p, q} K[o, c, p, q] xpad[n, c, i + p, j + q], loop by loop."""
    nb, cin, h, w = x.shape
    cout, _, k, _ = K.shape
    r = (k - 1) // 2
    xpad = np.zeros((nb, cin, h + 2 * r, w + 2 * r))
    xpad[:, :, r:r + h, r:r + w] = x
    out = np.zeros((nb, cout, h, w))
    for n in range(nb):
        for o in range(cout):
            for i in range(h):
                for j in range(w):
                    out[n, o, i, j] = np.sum(K[o] * xpad[n, :, i:i + k, j:j + k])
    return out










def _layer(offset: int = 0, k: int = 3):
    rng = _rng(offset)
    u = rng.standard_normal((BATCH, C, H, W))
    K = rng.standard_normal((C, C, k, k)) / (k * np.sqrt(C))
    b = 0.3 * rng.standard_normal(C)
    w = rng.standard_normal((BATCH, C, H, W))
    return u, K, b, 0.37, w


def _layers(offset: int = 0, k: int = 3):
    rng = _rng(offset)
    U = rng.standard_normal((M, BATCH, C, H, W))
    Ks = rng.standard_normal((M, C, C, k, k)) / (k * np.sqrt(C))
    bs = 0.3 * rng.standard_normal((M, C))
    hs = rng.uniform(0.05, 0.5, M)
    Wt = rng.standard_normal((M, BATCH, C, H, W))
    return U, Ks, bs, hs, Wt


# ---------------------------------------------------------------- conv2d and its VJPs


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("hw", [(5, 7), (6, 3), (2, 1)])
def test_conv2d_matches_naive_loops(k, hw):
    rng = _rng(k)
    x = rng.standard_normal((3, 2) + hw)
    K = rng.standard_normal((4, 2, k, k))  # Cin = 2 != Cout = 4
    got = conv2d(x, K)
    assert got.shape == (3, 4) + hw
    np.testing.assert_allclose(got, _naive_conv2d(x, K), rtol=1e-13, atol=1e-13)


def test_conv2d_identity_and_shift_kernels():
    x = _rng(1).standard_normal((2, 1, 4, 5))
    K = np.zeros((1, 1, 3, 3))
    K[0, 0, 1, 1] = 1.0
    np.testing.assert_array_equal(conv2d(x, K), x)
    K = np.zeros((1, 1, 3, 3))
    K[0, 0, 1, 2] = 1.0  # out[i, j] = x[i, j + 1], zero at the right edge
    want = np.zeros_like(x)
    want[..., :-1] = x[..., 1:]
    np.testing.assert_array_equal(conv2d(x, K), want)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("hw", [(5, 7), (3, 2)])
def test_conv2d_adjoint_identities(k, hw):
    rng = _rng(10 + k)
    x = rng.standard_normal((3, 2) + hw)
    K = rng.standard_normal((4, 2, k, k))
    g = rng.standard_normal((3, 4) + hw)
    dx, dK = conv2d_input_vjp(g, K), conv2d_weight_vjp(g, x, k)
    assert dx.shape == x.shape and dK.shape == K.shape
    lhs = float(np.sum(conv2d(x, K) * g))
    for rhs in (float(np.sum(x * dx)), float(np.sum(K * dK))):
        assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))


def test_conv2d_vjps_match_naive_transposes():
    # The VJPs as explicit sums over the naive correlation's Jacobian.
    rng = _rng(20)
    x, K = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((3, 2, 3, 3))
    g = rng.standard_normal((2, 3, 3, 4))
    dx = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1.0
        dx[i] = np.sum(_naive_conv2d(e, K) * g)
    np.testing.assert_allclose(conv2d_input_vjp(g, K), dx, rtol=1e-13, atol=1e-13)
    dK = np.zeros_like(K)
    for i in np.ndindex(K.shape):
        e = np.zeros_like(K)
        e[i] = 1.0
        dK[i] = np.sum(_naive_conv2d(x, e) * g)
    np.testing.assert_allclose(conv2d_weight_vjp(g, x, 3), dK, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------- one step


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("k", [1, 3])
def test_conv_forward_definition(name, k):
    u, K, b, h, _ = _layer(k=k)
    act = get_activation(name)
    want = u + h * act.value(_naive_conv2d(u, K) + b[None, :, None, None])
    got = conv_forward(u, K, b, h, name)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    assert got is not u


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("k", [3, 5])
def test_conv_adjoint_and_gradient_match_finite_differences(name, k):
    u, K, b, h, w = _layer(3, k)
    b = _away_from_kinks(lambda b_: conv2d(u, K) + b_[None, :, None, None], b, name)

    def J(u_=u, K_=K, b_=b):
        return float(np.sum(w * conv_forward(u_, K_, b_, h, name)))

    lam = conv_adjoint(w, u, K, b, h, name)
    dK, db = conv_gradient(w, u, K, b, h, name)
    assert lam.shape == u.shape and dK.shape == K.shape and db.shape == b.shape
    assert _rel(lam, _fd_gradient(J, u)) <= RTOL
    assert _rel(dK, _fd_gradient(lambda K_: J(K_=K_), K)) <= RTOL
    assert _rel(db, _fd_gradient(lambda b_: J(b_=b_), b)) <= RTOL


def test_conv_inputs_are_not_modified():
    u, K, b, h, w = _layer()
    copies = [x.copy() for x in (u, K, b, w)]
    conv_forward(u, K, b, h, "tanh")
    conv_adjoint(w, u, K, b, h, "tanh")
    conv_gradient(w, u, K, b, h, "tanh")
    for x, y in zip((u, K, b, w), copies):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_conv_float32_stays_float32(name):
    u, K, b, h, w = (x.astype(np.float32) if isinstance(x, np.ndarray) else x
                     for x in _layer())
    assert conv2d(u, K).dtype == np.float32
    assert conv_forward(u, K, b, h, name).dtype == np.float32
    assert conv_adjoint(w, u, K, b, h, name).dtype == np.float32
    assert all(g.dtype == np.float32 for g in conv_gradient(w, u, K, b, h, name))
    U, Ks, bs, hs, Wt = (x.astype(np.float32) for x in _layers())
    assert conv_forward_batched(U, Ks, bs, hs.astype(np.float64), name).dtype == np.float32
    assert conv_adjoint_batched(Wt, U, Ks, bs, hs, name).dtype == np.float32
    assert all(g.dtype == np.float32 for g in conv_gradient_batched(Wt, U, Ks, bs, hs, name))


# ---------------------------------------------------------------- batched over intervals


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_conv_batched_equals_per_interval(name, k):
    U, Ks, bs, hs, Wt = _layers(4, k)
    F = conv_forward_batched(U, Ks, bs, hs, name)
    A = conv_adjoint_batched(Wt, U, Ks, bs, hs, name)
    dKs, dbs = conv_gradient_batched(Wt, U, Ks, bs, hs, name)
    assert F.shape == A.shape == U.shape and dKs.shape == Ks.shape and dbs.shape == bs.shape
    for i in range(M):
        h = float(hs[i])
        f = conv_forward(U[i], Ks[i], bs[i], h, name)
        a = conv_adjoint(Wt[i], U[i], Ks[i], bs[i], h, name)
        dK, db = conv_gradient(Wt[i], U[i], Ks[i], bs[i], h, name)
        for got, want in ((F[i], f), (A[i], a), (dKs[i], dK), (dbs[i], db)):
            assert _rel(got, want) <= 1e-13


def test_conv_batched_accepts_list_step_sizes():
    U, Ks, bs, hs, Wt = _layers()
    np.testing.assert_array_equal(conv_forward_batched(U, Ks, bs, list(hs), "tanh"),
                                  conv_forward_batched(U, Ks, bs, hs, "tanh"))
    np.testing.assert_array_equal(conv_adjoint_batched(Wt, U, Ks, bs, list(hs), "tanh"),
                                  conv_adjoint_batched(Wt, U, Ks, bs, hs, "tanh"))


@pytest.mark.parametrize("name", ["smooth_relu"])
def test_conv_batched_adjoint_and_gradient_match_finite_differences(name):
    U, Ks, bs, hs, Wt = _layers(5)
    U, Ks, bs, Wt = U[:2, :1], Ks[:2], bs[:2], Wt[:2, :1]  # keep the FD loops short
    hs = hs[:2]
    bs = _away_from_kinks(
        lambda b_: np.stack([conv2d(U[i], Ks[i]) for i in range(2)]) + b_[:, None, :, None, None],
        bs, name)

    def J(U_=U, Ks_=Ks, bs_=bs):
        return float(np.sum(Wt * conv_forward_batched(U_, Ks_, bs_, hs, name)))

    A = conv_adjoint_batched(Wt, U, Ks, bs, hs, name)
    dKs, dbs = conv_gradient_batched(Wt, U, Ks, bs, hs, name)
    assert _rel(A, _fd_gradient(lambda U_: J(U_=U_), U)) <= RTOL
    assert _rel(dKs, _fd_gradient(lambda K_: J(Ks_=K_), Ks)) <= RTOL
    assert _rel(dbs, _fd_gradient(lambda b_: J(bs_=b_), bs)) <= RTOL


# ---------------------------------------------------------------- errors


def test_conv2d_errors_name_argument_and_shapes():
    x = np.zeros((2, 3, 4, 5))
    cases = [
        (lambda: conv2d(x[0], np.zeros((1, 3, 3, 3))), r"conv2d: x must be 4-D.*\(3, 4, 5\)"),
        (lambda: conv2d(x, np.zeros((1, 2, 3, 3))),
         r"conv2d: K has shape \(1, 2, 3, 3\) but x has shape \(2, 3, 4, 5\).*Cin"),
        (lambda: conv2d(x, np.zeros((1, 3, 3, 5))), r"conv2d: K has shape \(1, 3, 3, 5\)"),
        (lambda: conv2d(x, np.zeros((1, 3, 2, 2))),
         r"conv2d: kernel size k = 2 of K \(shape \(1, 3, 2, 2\)\) must be odd"),
        (lambda: conv2d_input_vjp(np.zeros((2, 4, 4, 5)), np.zeros((1, 3, 3, 3))),
         r"conv2d_input_vjp: K has shape \(1, 3, 3, 3\) but g has shape \(2, 4, 4, 5\)"),
        (lambda: conv2d_input_vjp(np.zeros((2, 1, 4, 5)), np.zeros((1, 3, 4, 4))),
         r"conv2d_input_vjp: kernel size k = 4 of K"),
        (lambda: conv2d_weight_vjp(np.zeros((2, 1, 4, 4)), x, 3),
         r"conv2d_weight_vjp: g has shape \(2, 1, 4, 4\) but x has shape \(2, 3, 4, 5\)"),
        (lambda: conv2d_weight_vjp(np.zeros((2, 1, 4, 5)), x, 4),
         r"conv2d_weight_vjp: kernel size k = 4 .* must be odd"),
        (lambda: conv2d_weight_vjp(np.zeros((2, 1, 4, 5)), x, 0),
         r"conv2d_weight_vjp: kernel size k must be a positive odd integer, got 0"),
        (lambda: conv2d_weight_vjp(np.zeros((2, 1, 4, 5)), x, 3.0),
         r"positive odd integer, got 3.0"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()
    assert conv2d_weight_vjp(np.zeros((2, 1, 4, 5)), x, np.int64(3)).shape == (1, 3, 3, 3)


def test_conv_step_errors_name_argument_and_shapes():
    u, K, b, h, w = _layer()
    U, Ks, bs, hs, Wt = _layers()
    cases = [
        (lambda: conv_forward(u[0], K, b, h, "tanh"), r"conv_forward: u must be 4-D"),
        (lambda: conv_forward(u, K[:2], b, h, "tanh"),
         r"conv_forward: K has shape \(2, 3, 3, 3\) but u has shape \(2, 3, 4, 5\)"),
        (lambda: conv_forward(u, np.zeros((C, C, 2, 2)), b, h, "tanh"),
         r"conv_forward: kernel size k = 2 of K"),
        (lambda: conv_adjoint(w, u, K, b[:2], h, "tanh"),
         r"conv_adjoint: b has shape \(2,\) but u has shape \(2, 3, 4, 5\)"),
        (lambda: conv_gradient(w[:1], u, K, b, h, "tanh"),
         r"conv_gradient: w has shape \(1, 3, 4, 5\) but u has shape \(2, 3, 4, 5\)"),
        (lambda: conv_forward_batched(U[0], Ks, bs, hs, "tanh"),
         r"conv_forward_batched: U must be 5-D"),
        (lambda: conv_forward_batched(U, Ks[:2], bs, hs, "tanh"),
         r"conv_forward_batched: Ks has shape \(2, 3, 3, 3, 3\) but U has shape "
         r"\(3, 2, 3, 4, 5\)"),
        (lambda: conv_forward_batched(U, np.zeros((M, C, C, 4, 4)), bs, hs, "tanh"),
         r"conv_forward_batched: kernel size k = 4 of Ks"),
        (lambda: conv_adjoint_batched(Wt, U, Ks, bs[:, :2], hs, "tanh"),
         r"conv_adjoint_batched: bs has shape \(3, 2\)"),
        (lambda: conv_adjoint_batched(Wt, U, Ks, bs, hs[:2], "tanh"),
         r"conv_adjoint_batched: hs has shape \(2,\)"),
        (lambda: conv_gradient_batched(Wt[:2], U, Ks, bs, hs, "tanh"),
         r"conv_gradient_batched: W has shape \(2, 2, 3, 4, 5\) but U has shape"),
        (lambda: conv_forward(u, K, b, h, "sigmoid"), r"unknown activation 'sigmoid'"),
        (lambda: conv_gradient_batched(Wt, U, Ks, bs, hs, "ReLU"), r"unknown activation"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


# ---------------------------------------------------------------- other array namespaces


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_array_api_strict_namespace_gives_numpy_results(name):
    xp = pytest.importorskip("array_api_strict")
    u, K, b, h, w = _layer(6)
    U, Ks, bs, hs, Wt = _layers(6)
    g = _rng(7).standard_normal((BATCH, C, H, W))

    def run(a):
        return [conv2d(a(u), a(K)), conv2d_input_vjp(a(g), a(K)),
                conv2d_weight_vjp(a(g), a(u), 3), conv_forward(a(u), a(K), a(b), h, name),
                conv_adjoint(a(w), a(u), a(K), a(b), h, name),
                *conv_gradient(a(w), a(u), a(K), a(b), h, name),
                conv_forward_batched(a(U), a(Ks), a(bs), a(hs), name),
                conv_adjoint_batched(a(Wt), a(U), a(Ks), a(bs), a(hs), name),
                *conv_gradient_batched(a(Wt), a(U), a(Ks), a(bs), a(hs), name)]

    for got, want in zip(run(xp.asarray), run(np.asarray)):
        assert type(got) is type(xp.asarray(u))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------- fast path and bitwise batching

PATHS = ["numpy", "generic", "numpy-small-chunks"]


@pytest.fixture(params=PATHS)
def conv_path(request, monkeypatch):
    """Run the kernels on the chunked NumPy path, the generic path, or with tiny chunks and
    column blocks (many chunks and blocks per call, a remainder chunk, blocks across images)."""
    from braidpy.nn import conv as conv_module

    if request.param == "generic":
        monkeypatch.setattr(conv_module, "_NUMPY_FAST_PATH", False)
    elif request.param == "numpy-small-chunks":
        monkeypatch.setattr(conv_module, "_CHUNK_BYTES", 3000)
        monkeypatch.setattr(conv_module, "_BLOCK_MNK", 700)
    return request.param


def _random_layers(m: int, k: int, seed: int, shape=(7, 3, 5, 4)):
    rng = _rng(100 + seed)
    U = rng.standard_normal((m,) + shape)
    c = shape[1]
    Kall = rng.standard_normal((m + 2, c, c, k, k)) / (k * np.sqrt(c))
    bs = 0.3 * rng.standard_normal((m + 2, c))[1:m + 1]
    hs = rng.uniform(0.05, 0.5, m)
    Wt = rng.standard_normal((m,) + shape)
    return U, Kall[1:m + 1], bs, hs, Wt  # Ks a slice of a stacked array, like ResNetApp's


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("m", [1, 3, 5])
def test_conv_batched_rows_bitwise_equal_single(conv_path, name, k, m):
    # braidpy's results must not depend on how the steps are batched (or on the number of
    # ranks): row i of a batched call is bit for bit the single-interval call on row i.
    U, Ks, bs, hs, Wt = _random_layers(m, k, 10 * m + k)
    F = conv_forward_batched(U, Ks, bs, hs, name)
    A = conv_adjoint_batched(Wt, U, Ks, bs, hs, name)
    dKs, dbs = conv_gradient_batched(Wt, U, Ks, bs, hs, name)
    for i in range(m):
        h = float(hs[i])
        assert np.array_equal(F[i], conv_forward(U[i], Ks[i], bs[i], h, name))
        assert np.array_equal(A[i], conv_adjoint(Wt[i], U[i], Ks[i], bs[i], h, name))
        dK, db = conv_gradient(Wt[i], U[i], Ks[i], bs[i], h, name)
        assert np.array_equal(dKs[i], dK) and np.array_equal(dbs[i], db)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_batched_bitwise_larger_batch(conv_path, dtype):
    # A batch that spans several chunks on the NumPy path (and a remainder chunk).
    U, Ks, bs, hs, Wt = (x.astype(dtype) for x in _random_layers(3, 3, 7, (45, 4, 6, 6)))
    F = conv_forward_batched(U, Ks, bs, hs, "tanh")
    A = conv_adjoint_batched(Wt, U, Ks, bs, hs, "tanh")
    dKs, dbs = conv_gradient_batched(Wt, U, Ks, bs, hs, "tanh")
    for i in range(3):
        h = hs[i]
        assert np.array_equal(F[i], conv_forward(U[i], Ks[i], bs[i], h, "tanh"))
        assert np.array_equal(A[i], conv_adjoint(Wt[i], U[i], Ks[i], bs[i], h, "tanh"))
        dK, db = conv_gradient(Wt[i], U[i], Ks[i], bs[i], h, "tanh")
        assert np.array_equal(dKs[i], dK) and np.array_equal(dbs[i], db)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_conv_paths_match_naive(conv_path, k):
    # Every path (generic, chunked, tiny chunks) against the loop definitions.
    rng = _rng(200 + k)
    x = rng.standard_normal((9, 2, 5, 7))
    K = rng.standard_normal((3, 2, k, k))
    g = rng.standard_normal((9, 3, 5, 7))
    np.testing.assert_allclose(conv2d(x, K), _naive_conv2d(x, K), rtol=1e-13, atol=1e-13)
    lhs = float(np.sum(conv2d(x, K) * g))
    for rhs in (float(np.sum(x * conv2d_input_vjp(g, K))),
                float(np.sum(K * conv2d_weight_vjp(g, x, k)))):
        assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))
    u, Kc, b, h, w = _layer(8, k)
    act = get_activation("tanh")
    z = _naive_conv2d(u, Kc) + b[None, :, None, None]
    np.testing.assert_allclose(conv_forward(u, Kc, b, h, "tanh"), u + h * act.value(z),
                               rtol=1e-13, atol=1e-13)
    gz = h * w * act.derivative(z)
    np.testing.assert_allclose(conv_adjoint(w, u, Kc, b, h, "tanh"),
                               w + conv2d_input_vjp(gz, Kc), rtol=1e-13, atol=1e-13)
    dK, db = conv_gradient(w, u, Kc, b, h, "tanh")
    np.testing.assert_allclose(dK, conv2d_weight_vjp(gz, u, k), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db, gz.sum(axis=(0, 2, 3)), rtol=1e-12, atol=1e-13)
