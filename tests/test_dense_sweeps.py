"""Serial sweeps in one compiled call (braidpy.nn.dense.dense_sweep_forward/_backward,
the layers' sweep_* and ResNet's serial forward and gradient on them): the bits of the
single-step kernels layer by layer, and where they do not apply."""

import re

import numpy as np
import pytest

from braidpy._core import _host_dense
from braidpy.nn import ResNet, dense_adjoint_and_gradient, dense_forward
from braidpy.nn import network as network_module
from braidpy.nn.dense import dense_sweep_backward, dense_sweep_forward, dense_sweeps_take
from braidpy.nn.layers import classifier_gradient


def _weights(n, width, dtype, seed=3):
    rng = np.random.default_rng(seed)
    Ks = (rng.standard_normal((n, width, width)) / np.sqrt(width)).astype(dtype)
    bs = (0.3 * rng.standard_normal((n, width))).astype(dtype)
    hs = rng.uniform(0.05, 0.3, n).tolist()  # Python floats, as ResNet passes them
    return Ks, bs, hs, rng


def _loop_forward(u, Ks, bs, hs, act):
    states = [u]
    for n in range(len(hs)):
        u = dense_forward(u, Ks[n], bs[n], hs[n], act)
        states.append(u)
    return states


@pytest.mark.parametrize("act", ["relu", "smooth_relu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("width", [2, 5, 8, 32])
def test_sweeps_give_the_single_calls_bits(act, dtype, width):
    n, rows = 9, 37
    Ks, bs, hs, rng = _weights(n, width, dtype)
    u0 = rng.standard_normal((rows, width)).astype(dtype)
    want = _loop_forward(u0, Ks, bs, hs, act)
    S = np.empty((n + 1, rows, width), dtype)
    S[0] = u0
    assert dense_sweep_forward(S, Ks, bs, hs, act)
    for k in range(n + 1):
        np.testing.assert_array_equal(S[k], want[k], err_msg=f"state {k}")
    last = u0.copy()  # in place: the last state only
    assert dense_sweep_forward(last, Ks, bs, hs, act)
    np.testing.assert_array_equal(last, want[-1])

    wN = rng.standard_normal((rows, width)).astype(dtype)
    w, dKs, dbs = wN, [None] * n, [None] * n
    for k in range(n - 1, -1, -1):
        w, dKs[k], dbs[k] = dense_adjoint_and_gradient(w, want[k], Ks[k], bs[k], hs[k], act)
    got = wN.copy()
    dK, db = np.empty_like(Ks), np.empty_like(bs)
    assert dense_sweep_backward(got, S, Ks, bs, hs, act, dK, db)
    np.testing.assert_array_equal(got, w)
    np.testing.assert_array_equal(dK, np.stack(dKs))
    np.testing.assert_array_equal(db, np.stack(dbs))
    # The forward's first N states suffice.
    again = wN.copy()
    assert dense_sweep_backward(again, S[:n], Ks, bs, hs, act, dK, db)
    np.testing.assert_array_equal(again, w)


def test_where_the_sweeps_do_not_apply_they_do_nothing():
    Ks, bs, hs, rng = _weights(4, 8, np.float64)
    S = np.zeros((5, 6, 8))
    S[0] = rng.standard_normal((6, 8))
    before = S.copy()
    assert not dense_sweep_forward(S, Ks, bs, hs, "tanh")  # no one-pass kernel
    assert not dense_sweep_forward(S, Ks.astype(np.float32), bs, hs, "relu")  # mixed
    assert not dense_sweep_forward(S[:, :, ::2], Ks[:, :4, :4], bs[:, :4], hs, "relu")
    ro = S.copy()
    ro.flags.writeable = False
    assert not dense_sweep_forward(ro, Ks, bs, hs, "relu")
    wide = _weights(2, 33, np.float64)
    assert not dense_sweep_forward(np.zeros((3, 2, 33)), wide[0], wide[1], wide[2], "relu")
    assert not dense_sweeps_take(np.zeros((6, 33)), wide[0], wide[1], "relu")
    assert not dense_sweeps_take(np.zeros((6, 8), np.float32), Ks, bs, "relu")
    assert dense_sweeps_take(np.zeros((6, 8)), Ks, bs, "smooth_relu")
    np.testing.assert_array_equal(S, before)
    dK, db = np.empty_like(Ks), np.empty_like(bs)
    w = np.ones((6, 8))
    assert not dense_sweep_backward(w, S, Ks, bs, hs, "relu", dK[:, :, ::-1], db)
    np.testing.assert_array_equal(w, 1.0)


def test_array_api_states_do_not_take_the_sweeps():
    xp = pytest.importorskip("array_api_strict")
    Ks, bs, hs, _ = _weights(3, 4, np.float64)
    S = xp.zeros((4, 2, 4), dtype=xp.float64)
    assert not dense_sweep_forward(S, xp.asarray(Ks), xp.asarray(bs), hs, "relu")
    assert not dense_sweeps_take(xp.zeros((2, 4), dtype=xp.float64), xp.asarray(Ks),
                                 xp.asarray(bs), "relu")


@pytest.mark.parametrize("call, message", [
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_forward(S[:3], K, b, h, 3),
     "S must hold N + 1 = 5 states, got 3"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_forward(np.zeros((6, 3, 8)), K, b, h,
                                                            3),
     "S must hold N + 1 = 5 states, got 6"),  # more than N + 1 too
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_forward(S, K[:2], b, h, 3),
     "expected K (N, width, width), b (N, width) and h (N,)"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_forward(S, K, b, h, 7),
     "act must be 2 (relu) or 3 (smooth_relu), got 7"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_forward(S, K, b, h.astype(np.float32),
                                                            3),
     "K, b and h must have the states' dtype"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_backward(S[0], S, K, b, h, 3,
                                                             np.empty_like(K),
                                                             np.empty_like(b)),
     "W shares memory with an input"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_backward(S[0].copy(), S[:2], K, b, h, 3,
                                                             np.empty_like(K),
                                                             np.empty_like(b)),
     "S must be W's dtype, shaped (at least N, rows, width)"),
    (lambda S, K, b, h: _host_dense.dense_rows_sweep_backward(S[0].copy(), S, K, b, h, 3,
                                                             K, np.empty_like(b)),
     "dK shares memory with an input"),
])
def test_the_compiled_sweeps_name_bad_arguments(call, message):
    Ks, bs, hs, _ = _weights(4, 8, np.float64)
    S = np.zeros((5, 3, 8))
    with pytest.raises(ValueError, match=re.escape(message)):
        call(S, Ks, bs, np.asarray(hs))


def _reference_gradient(net, p, X, C):
    """Serial backpropagation written out layer by layer with the single-step kernels."""
    v = net.views(p)
    hs = net.steps.tolist()
    states = _loop_forward(net.open(p, X), v["K"], v["b"], hs, net.activation)
    loss, w, dW, dmu = classifier_gradient(states[-1], C, v["W"], v["mu"])
    g = np.zeros(net.nparams)
    gv = net.views(g)
    gv["W"][...], gv["mu"][...] = dW, dmu
    for n in range(net.nlayers - 1, -1, -1):
        w, gv["K"][n], gv["b"][n] = dense_adjoint_and_gradient(w, states[n], v["K"][n],
                                                               v["b"][n], hs[n],
                                                               net.activation)
    for name, value in net.opening_gradient(p, X, w).items():
        gv[name][...] = value
    return float(loss), g, states[-1]


@pytest.mark.parametrize("opening", [None, "dense"])
def test_resnet_serial_gradient_is_the_layer_by_layer_one(opening):
    net = ResNet((3,), 4, width=6, nlayers=40, opening=opening)
    p = net.init_params(2, scale=0.5)
    rng = np.random.default_rng(7)
    for rows in (50, 50, 31, 64):  # the kept buffer, a smaller block in it, a larger one
        X = rng.standard_normal((rows, 3))
        C = np.eye(4)[rng.integers(0, 4, rows)]
        X_before = X.copy()
        loss, grad = net.loss_and_gradient(p, X, C)
        want_loss, want_grad, want_last = _reference_gradient(net, p, X, C)
        assert loss == want_loss
        np.testing.assert_array_equal(grad, want_grad)
        np.testing.assert_array_equal(net.forward(p, X), want_last)
        np.testing.assert_array_equal(X, X_before)  # the in-place sweep leaves X alone
        assert net.loss(p, X, C) == pytest.approx(want_loss, rel=0, abs=0)
    kept = net._sweep_workspace
    assert kept is not None and kept.shape == (41 * 64 * 6,)


def test_a_gradient_after_a_loss_at_its_point_reuses_the_forward_states(monkeypatch):
    """loss(keep_states=True) keeps its sweep's states; loss_and_gradient at the same
    parameters and inputs then sweeps backward only, and anything else (parameters
    changed in place, other inputs, a gradient of other data in between) sweeps
    again. Every result is the layer-by-layer gradient's, bit for bit."""
    net = ResNet((3,), 4, width=6, nlayers=30)
    p = net.init_params(2, scale=0.5)
    rng = np.random.default_rng(8)
    X, X2 = rng.standard_normal((40, 3)), rng.standard_normal((40, 3))
    C = np.eye(4)[rng.integers(0, 4, 40)]
    forward = net.layer.sweep_forward
    sweeps = []
    monkeypatch.setattr(net.layer, "sweep_forward",
                        lambda *a: sweeps.append(1) or forward(*a))

    def gradient_sweeps(params, X_):
        before, C_ = len(sweeps), C[:len(X_)]
        loss, grad = net.loss_and_gradient(params, X_, C_)
        want_loss, want_grad, _ = _reference_gradient(net, params, X_, C_)
        assert loss == want_loss and np.array_equal(grad, want_grad)
        return len(sweeps) - before

    assert net.loss(p, X, C, keep_states=True) == net.loss(p, X, C)
    assert gradient_sweeps(p, X) == 0 and net.forward_sweeps_reused == 1
    assert gradient_sweeps(p, X) == 1  # used once: the gradient's own sweep is not kept
    net.loss(p, X, C, keep_states=True)
    p[5] += 1e-3  # the optimizer moves the parameters in place
    assert gradient_sweeps(p, X) == 1
    net.loss(p, X, C, keep_states=True)
    assert gradient_sweeps(p, X2) == 1
    net.loss(p, X, C, keep_states=True)
    gradient_sweeps(p, X2[:25])  # another batch's gradient takes the buffer
    assert gradient_sweeps(p, X) == 1 and net.forward_sweeps_reused == 1


def test_serial_training_counts_the_reused_forward_sweeps():
    from braidpy.train import TrainConfig, Trainer

    net = ResNet((3,), 4, width=6, nlayers=30)
    rng = np.random.default_rng(8)
    X, C = rng.standard_normal((40, 3)), np.eye(4)[rng.integers(0, 4, 40)]
    history = Trainer(net, (X, C), None, TrainConfig(mode="serial", optimizer="lbfgs",
                                                     iterations=4, validate_every=0)).run()
    # the first gradient sweeps both ways; later ones reuse the last trial's states
    assert [r["steps"] - 30 * r["line_search_trials"] for r in history] == \
        [60, 30, 30, 30]
    assert net.forward_sweeps_reused == 3


def test_a_state_that_is_the_input_is_not_stepped_in_place(monkeypatch):
    # braidpy's openings return new arrays; one that passed X through must not see it
    # overwritten by the in-place forward sweep.
    net = ResNet((6,), 3, width=6, nlayers=5, opening="zero-pad")
    p = net.init_params(1)
    X = np.random.default_rng(0).standard_normal((8, 6))
    want = net.forward(p, X)
    monkeypatch.setattr(net, "open", lambda params, X: X)
    X_before = X.copy()
    out = net.forward(p, X)
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(out, X)


def test_kept_states_of_an_input_changed_in_place_are_not_reused(monkeypatch):
    # An opening that passes X through: the kept u_0 must be a copy, or X changed in
    # place would still look like the point of the kept states.
    net = ResNet((6,), 3, width=6, nlayers=5, opening="zero-pad")
    p = net.init_params(1)
    rng = np.random.default_rng(0)
    X, C = rng.standard_normal((8, 6)), np.eye(3)[rng.integers(0, 3, 8)]
    monkeypatch.setattr(net, "open", lambda params, X: X)
    net.loss(p, X, C, keep_states=True)
    X[2, 3] += 0.5
    want_loss, want_grad, _ = _reference_gradient(net, p, X, C)
    loss, grad = net.loss_and_gradient(p, X, C)
    assert net.forward_sweeps_reused == 0
    assert loss == want_loss and np.array_equal(grad, want_grad)


def test_blocks_above_the_limit_are_not_kept(monkeypatch):
    net = ResNet((2,), 3, width=4, nlayers=6)
    p = net.init_params(1)
    X = np.ones((5, 2))
    C = np.eye(3)[[0, 1, 2, 0, 1]]
    monkeypatch.setattr(network_module, "SWEEP_WORKSPACE_MAX_BYTES", 7 * 5 * 4 * 8 - 1)
    net.loss_and_gradient(p, X, C)
    assert net._sweep_workspace is None
    monkeypatch.setattr(network_module, "SWEEP_WORKSPACE_MAX_BYTES", 7 * 5 * 4 * 8)
    net.loss_and_gradient(p, X, C)
    assert net._sweep_workspace is not None


def test_conv_networks_keep_the_layer_by_layer_sweeps():
    net = ResNet((1, 6, 6), 3, width=2, nlayers=3)
    assert not net.layer.sweeps(np.zeros((2, 2, 6, 6)), np.zeros((3, 2, 2, 3, 3)),
                                np.zeros((3, 2)))
    p = net.init_params(1)
    X = np.random.default_rng(0).standard_normal((2, 1, 6, 6))
    C = np.eye(3)[[0, 2]]
    loss, grad = net.loss_and_gradient(p, X, C)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert net._sweep_workspace is None
