"""Tests for braidpy.nn.layers: opening layers and the softmax classifier."""

from __future__ import annotations

import numpy as np
import pytest

from braidpy.nn import (
    accuracy,
    classifier_gradient,
    classifier_logits,
    classifier_loss,
    classifier_predict,
    conv2d,
    conv_adjoint,
    conv_forward,
    conv_gradient,
    conv_opening,
    conv_opening_gradient,
    dense_opening,
    dense_opening_gradient,
    get_activation,
    replicate_opening,
    zero_pad_opening,
)

from nn_checks import RTOL
from nn_checks import bias_away_from_kinks as _away_from_kinks
from nn_checks import fd_gradient as _fd_gradient
from nn_checks import rel as _rel

SEED = 20261123
OPENING_ACTS = [None, "tanh", "relu", "smooth_relu"]


def _rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)








def _act(name, z):
    return z if name is None else get_activation(name).value(z)


def _classifier(offset: int = 0, shape=(5, 4), nc: int = 3):
    rng = _rng(offset)
    u = rng.standard_normal(shape)
    q = int(np.prod(shape[1:]))
    W = rng.standard_normal((nc, q)) / np.sqrt(q)
    mu = 0.3 * rng.standard_normal(nc)
    c = np.eye(nc)[rng.integers(0, nc, shape[0])]
    return u, c, W, mu


# ---------------------------------------------------------------- dense opening


@pytest.mark.parametrize("name", OPENING_ACTS)
def test_dense_opening_definition_and_gradient(name):
    rng = _rng(1)
    y, L, b = rng.standard_normal((4, 2)), rng.standard_normal((5, 2)), rng.standard_normal(5)
    w = rng.standard_normal((4, 5))
    b = _away_from_kinks(lambda b_: y @ L.T + b_, b, name)
    want = np.stack([_act(name, L @ y[i] + b) for i in range(4)])
    np.testing.assert_allclose(dense_opening(y, L, b, name), want, rtol=1e-14, atol=1e-14)

    def J(L_=L, b_=b):
        return float(np.sum(w * dense_opening(y, L_, b_, name)))

    dL, db = dense_opening_gradient(w, y, L, b, name)
    assert dL.shape == L.shape and db.shape == b.shape
    assert _rel(dL, _fd_gradient(lambda L_: J(L_=L_), L)) <= RTOL
    assert _rel(db, _fd_gradient(lambda b_: J(b_=b_), b)) <= RTOL


def test_dense_opening_default_is_affine():
    rng = _rng(2)
    y, L, b = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal(4)
    np.testing.assert_allclose(dense_opening(y, L, b), y @ L.T + b, rtol=1e-14)
    w = rng.standard_normal((3, 4))
    dL, db = dense_opening_gradient(w, y, L, b)
    np.testing.assert_allclose(dL, w.T @ y, rtol=1e-14)
    np.testing.assert_allclose(db, w.sum(axis=0), rtol=1e-14)


# ---------------------------------------------------------------- conv opening


@pytest.mark.parametrize("name", OPENING_ACTS)
@pytest.mark.parametrize("k", [1, 3])
def test_conv_opening_definition_and_gradient(name, k):
    rng = _rng(3 + k)
    y = rng.standard_normal((2, 1, 4, 3))  # Cin = 1 (MNIST-like), C = 3
    K, b = rng.standard_normal((3, 1, k, k)) / k, 0.3 * rng.standard_normal(3)
    w = rng.standard_normal((2, 3, 4, 3))
    b = _away_from_kinks(lambda b_: conv2d(y, K) + b_[None, :, None, None], b, name)
    want = _act(name, conv2d(y, K) + b[None, :, None, None])
    np.testing.assert_allclose(conv_opening(y, K, b, name), want, rtol=1e-14, atol=1e-14)

    def J(K_=K, b_=b):
        return float(np.sum(w * conv_opening(y, K_, b_, name)))

    dK, db = conv_opening_gradient(w, y, K, b, name)
    assert dK.shape == K.shape and db.shape == b.shape
    assert _rel(dK, _fd_gradient(lambda K_: J(K_=K_), K)) <= RTOL
    assert _rel(db, _fd_gradient(lambda b_: J(b_=b_), b)) <= RTOL


def test_opening_errors_name_argument_and_shapes():
    y, L, b = np.zeros((4, 2)), np.zeros((5, 2)), np.zeros(5)
    yi, K, bk = np.zeros((2, 1, 4, 3)), np.zeros((3, 1, 3, 3)), np.zeros(3)
    cases = [
        (lambda: dense_opening(y[0], L, b), r"dense_opening: y must be 2-D"),
        (lambda: dense_opening(y, L.T, b),
         r"dense_opening: L has shape \(2, 5\) but y has shape \(4, 2\); L must be "
         r"\(width, nf\) = \(width, 2\)"),
        (lambda: dense_opening(y, L, b[:3]), r"dense_opening: b has shape \(3,\) but L has"),
        (lambda: dense_opening_gradient(np.zeros((4, 4)), y, L, b),
         r"dense_opening_gradient: w has shape \(4, 4\) but the opening's output has shape "
         r"\(4, 5\)"),
        (lambda: dense_opening(y, L, b, "sigmoid"), r"unknown activation 'sigmoid'"),
        (lambda: conv_opening(yi[0], K, bk), r"conv_opening: y must be 4-D"),
        (lambda: conv_opening(yi, np.zeros((3, 2, 3, 3)), bk),
         r"conv_opening: K has shape \(3, 2, 3, 3\) but y has shape \(2, 1, 4, 3\)"),
        (lambda: conv_opening(yi, np.zeros((3, 1, 2, 2)), bk),
         r"conv_opening: kernel size k = 2 of K .* must be odd"),
        (lambda: conv_opening(yi, K, bk[:2]), r"conv_opening: b has shape \(2,\) but K has"),
        (lambda: conv_opening_gradient(np.zeros((2, 1, 4, 3)), yi, K, bk),
         r"conv_opening_gradient: w has shape \(2, 1, 4, 3\) but the opening's output has "
         r"shape \(2, 3, 4, 3\)"),
        (lambda: conv_opening_gradient(np.zeros((2, 3, 4, 3)), yi, K, bk, "ReLU"),
         r"unknown activation 'ReLU'"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


# ---------------------------------------------------------------- parameter-free openings


def test_replicate_opening_dense_and_image():
    y = _rng(5).standard_normal((3, 2))
    u = replicate_opening(y, 5)
    assert u.shape == (3, 5)
    for j in range(5):
        np.testing.assert_array_equal(u[:, j], y[:, j % 2])
    yi = _rng(6).standard_normal((2, 3, 4, 5))
    ui = replicate_opening(yi, 8)
    assert ui.shape == (2, 8, 4, 5)
    for j in range(8):
        np.testing.assert_array_equal(ui[:, j], yi[:, j % 3])
    one = _rng(7).standard_normal((2, 1, 3, 3))  # MNIST: one channel copied to all
    np.testing.assert_array_equal(replicate_opening(one, 4), np.repeat(one, 4, axis=1))
    same = replicate_opening(y, 2)
    np.testing.assert_array_equal(same, y)
    assert not np.shares_memory(same, y)


def test_zero_pad_opening_dense_and_image():
    y = _rng(8).standard_normal((3, 2))
    u = zero_pad_opening(y, 5)
    np.testing.assert_array_equal(u[:, :2], y)
    np.testing.assert_array_equal(u[:, 2:], 0.0)
    yi = _rng(9).standard_normal((2, 3, 4, 5))
    ui = zero_pad_opening(yi, 7)
    assert ui.shape == (2, 7, 4, 5)
    np.testing.assert_array_equal(ui[:, :3], yi)
    np.testing.assert_array_equal(ui[:, 3:], 0.0)
    same = zero_pad_opening(yi, 3)
    np.testing.assert_array_equal(same, yi)
    assert not np.shares_memory(same, yi)
    assert zero_pad_opening(y.astype(np.float32), 4).dtype == np.float32


@pytest.mark.parametrize("opening", [replicate_opening, zero_pad_opening])
def test_parameter_free_opening_errors(opening):
    fn = opening.__name__
    with pytest.raises(ValueError, match=rf"{fn}: y has nf = 6 .*more than width = 4"):
        opening(np.zeros((2, 6)), 4)
    with pytest.raises(ValueError, match=rf"{fn}: y has Cin = 3 .*more than width = 2"):
        opening(np.zeros((2, 3, 4, 4)), 2)
    with pytest.raises(ValueError, match=rf"{fn}: y must be 2-D .* or 4-D"):
        opening(np.zeros((2, 3, 4)), 8)


# ---------------------------------------------------------------- classifier


def _softmax_loss_reference(u, c, W, mu):
    z = u.reshape(u.shape[0], -1) @ W.T + mu
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return float(np.mean(-np.sum(c * np.log(p), axis=1)))


@pytest.mark.parametrize("shape", [(5, 4), (3, 2, 3, 2)])
def test_classifier_logits_and_loss_definition(shape):
    u, c, W, mu = _classifier(10, shape)
    z = classifier_logits(u, W, mu)
    np.testing.assert_allclose(z, u.reshape(shape[0], -1) @ W.T + mu, rtol=1e-14)
    loss = classifier_loss(u, c, W, mu)
    assert np.ndim(loss) == 0
    assert abs(float(loss) - _softmax_loss_reference(u, c, W, mu)) <= 1e-14


@pytest.mark.parametrize("shape", [(5, 4), (3, 2, 3, 2)])
@pytest.mark.parametrize("soft", [False, True])
def test_classifier_gradient_matches_finite_differences(shape, soft):
    u, c, W, mu = _classifier(11, shape)
    if soft:  # probability rows instead of one-hot ones
        c = _rng(12).uniform(0.1, 1.0, c.shape)
        c /= c.sum(axis=1, keepdims=True)
    loss, du, dW, dmu = classifier_gradient(u, c, W, mu)
    assert float(loss) == pytest.approx(float(classifier_loss(u, c, W, mu)), rel=1e-15)
    assert du.shape == u.shape and dW.shape == W.shape and dmu.shape == mu.shape
    assert _rel(du, _fd_gradient(lambda u_: float(classifier_loss(u_, c, W, mu)), u)) <= RTOL
    assert _rel(dW, _fd_gradient(lambda W_: float(classifier_loss(u, c, W_, mu)), W)) <= RTOL
    assert _rel(dmu, _fd_gradient(lambda m_: float(classifier_loss(u, c, W, m_)), mu)) <= RTOL


def test_classifier_is_stable_for_large_logits():
    u, c, W, mu = _classifier(13)
    base = float(classifier_loss(u, c, W, mu))
    _, du0, dW0, dmu0 = classifier_gradient(u, c, W, mu)
    # Shifting every logit by the same constant changes neither loss nor gradient; the
    # naive exp(z) would overflow at z ~ 1e3 (and filterwarnings=error would catch it).
    for shift in (1e3, -1e3):
        assert float(classifier_loss(u, c, W, mu + shift)) == pytest.approx(base, abs=1e-12)
        _, du, dW, dmu = classifier_gradient(u, c, W, mu + shift)
        for got, want in ((du, du0), (dW, dW0), (dmu, dmu0)):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # Logits ~1e3 apart: the loss is the gap when the right class is behind, ~0 otherwise.
    u = np.array([[1.0, 0.0], [0.0, 1.0]])
    W, mu = 1e3 * np.eye(2), np.zeros(2)
    c = np.array([[0.0, 1.0], [0.0, 1.0]])
    loss, du, dW, dmu = classifier_gradient(u, c, W, mu)
    assert float(loss) == pytest.approx(1e3 / 2, rel=1e-15)
    assert np.all(np.isfinite(du)) and np.all(np.isfinite(dW)) and np.all(np.isfinite(dmu))
    np.testing.assert_allclose(dmu, [0.5, -0.5], rtol=1e-15)


def test_classifier_predict_and_accuracy_hand_made():
    u = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    W, mu = np.eye(3), np.zeros(3)
    np.testing.assert_array_equal(classifier_predict(u, W, mu), [0, 2, 1, 0])
    c = np.eye(3)[[0, 2, 0, 1]]
    assert accuracy(u, c, W, mu) == 0.5
    assert isinstance(accuracy(u, c, W, mu), float)
    soft = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1], [0.9, 0.05, 0.05]])
    assert accuracy(u, soft, W, mu) == 1.0
    # a bias can overrule the state: everything is class 1
    assert accuracy(u, c, W, np.array([0.0, 10.0, 0.0])) == 0.25
    ui = u.reshape(4, 3, 1, 1)  # image states are flattened
    np.testing.assert_array_equal(classifier_predict(ui, W, mu), [0, 2, 1, 0])


def test_classifier_errors_name_argument_and_shapes():
    u, c, W, mu = _classifier(14)  # batch 5, q 4, nc 3
    ui = np.zeros((5, 2, 2, 2))
    cases = [
        (lambda: classifier_logits(u, W[:, :3], mu),
         r"classifier_logits: W has shape \(3, 3\) but the state has q = 4 features"),
        (lambda: classifier_loss(ui, c, W, mu),
         r"classifier_loss: W has shape \(3, 4\) but the state has q = 8 features "
         r"\(u has shape \(5, 2, 2, 2\)\)"),
        (lambda: classifier_gradient(u, c, W, mu[:2]),
         r"classifier_gradient: mu has shape \(2,\) but W has shape \(3, 4\) with nc = 3"),
        (lambda: classifier_gradient(u, c[:, :2], W, mu),
         r"classifier_gradient: c has shape \(5, 2\) but W has nc = 3 classes"),
        (lambda: accuracy(u, c[:4], W, mu), r"accuracy: c has shape \(4, 3\) .* batch = 5"),
        (lambda: classifier_predict(u[0], W, mu), r"classifier_predict: u must be 2-D"),
        (lambda: classifier_predict(np.zeros((5, 2, 2)), W, mu), r"or 4-D"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


# ---------------------------------------------------------------- the pieces together


def test_opening_steps_classifier_chain_rule_matches_finite_differences():
    """Loss of opening -> two conv steps -> classifier; adjoints chained back to the opening."""
    rng = _rng(20)
    y = rng.standard_normal((2, 1, 3, 4))
    K0, b0 = rng.standard_normal((2, 1, 3, 3)) / 3, 0.1 * rng.standard_normal(2)
    Ks = [rng.standard_normal((2, 2, 3, 3)) / 6 for _ in range(2)]
    bs = [0.1 * rng.standard_normal(2) for _ in range(2)]
    W, mu = rng.standard_normal((3, 24)) / 5, np.zeros(3)
    c = np.eye(3)[[0, 2]]
    h = 0.5

    def loss(K0_=K0, K1_=Ks[1]):
        u = conv_opening(y, K0_, b0, "tanh")
        u = conv_forward(u, Ks[0], bs[0], h, "tanh")
        u = conv_forward(u, K1_, bs[1], h, "tanh")
        return float(classifier_loss(u, c, W, mu))

    states = [conv_opening(y, K0, b0, "tanh")]
    for i in range(2):
        states.append(conv_forward(states[-1], Ks[i], bs[i], h, "tanh"))
    _, lam, _, _ = classifier_gradient(states[-1], c, W, mu)
    dK1, _ = conv_gradient(lam, states[1], Ks[1], bs[1], h, "tanh")
    for i in (1, 0):
        lam = conv_adjoint(lam, states[i], Ks[i], bs[i], h, "tanh")
    dK0, _ = conv_opening_gradient(lam, y, K0, b0, "tanh")
    assert _rel(dK1, _fd_gradient(lambda K_: loss(K1_=K_), Ks[1])) <= RTOL
    assert _rel(dK0, _fd_gradient(lambda K_: loss(K0_=K_), K0)) <= RTOL


# ---------------------------------------------------------------- other array namespaces


def test_array_api_strict_namespace_gives_numpy_results():
    xp = pytest.importorskip("array_api_strict")
    rng = _rng(30)
    y, L, b = rng.standard_normal((4, 2)), rng.standard_normal((5, 2)), rng.standard_normal(5)
    w = rng.standard_normal((4, 5))
    yi, K, bk = rng.standard_normal((2, 1, 4, 3)), rng.standard_normal((3, 1, 3, 3)), np.ones(3)
    wi = rng.standard_normal((2, 3, 4, 3))
    u, c, W, mu = _classifier(31, (2, 3, 2, 2))

    def run(a):
        return [dense_opening(a(y), a(L), a(b), "tanh"),
                *dense_opening_gradient(a(w), a(y), a(L), a(b), "smooth_relu"),
                *dense_opening_gradient(a(w), a(y), a(L), a(b)),
                conv_opening(a(yi), a(K), a(bk), "relu"),
                *conv_opening_gradient(a(wi), a(yi), a(K), a(bk), "tanh"),
                replicate_opening(a(y), 5), replicate_opening(a(yi), 4),
                zero_pad_opening(a(y), 5), zero_pad_opening(a(yi), 4),
                classifier_logits(a(u), a(W), a(mu)), classifier_loss(a(u), a(c), a(W), a(mu)),
                *classifier_gradient(a(u), a(c), a(W), a(mu)),
                classifier_predict(a(u), a(W), a(mu))]

    for got, want in zip(run(xp.asarray), run(np.asarray)):
        assert type(got) is type(xp.asarray(y))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14, atol=1e-14)
    assert accuracy(xp.asarray(u), xp.asarray(c), xp.asarray(W), xp.asarray(mu)) == \
        accuracy(u, c, W, mu)
