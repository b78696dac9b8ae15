"""braidpy.nn layer objects (DenseLayer, ConvLayer) and their kernel backends
(braidpy.nn.kernels): batched rows equal single calls bit for bit on every backend, the
backend choice (default, forced, by namespace) is honoured and reported, bad names are
named, and the network and the MGRIT app compute through the layer object."""

from __future__ import annotations

import numpy as np
import pytest

from braidpy.nn import (ConvLayer, DenseLayer, LayerKernels, ResNet, backend_names,
                        conv_adjoint, conv_forward, conv_gradient, dense_adjoint, dense_forward,
                        dense_gradient, select_kernels)
from braidpy.nn import conv as conv_module
from braidpy.nn.kernels import KINDS
from braidpy.train import LayerParallelEvaluator

SEED = 20261207
ACTIVATIONS = ["tanh", "relu", "smooth_relu"]
# every registered (kind, backend): a backend added later is checked too
BACKENDS = [(kind, name) for kind in KINDS for name in backend_names(kind)]


def _layer(kind: str, name: str, act: str = "tanh") -> DenseLayer | ConvLayer:
    if kind == "dense":
        return DenseLayer(5, act, backend=name)
    return ConvLayer(3, 3, act, backend=name)


def _data(layer, m: int, seed: int, dtype=np.float64):
    """States, strided weight views K[1:m+1] of a stacked array (as ResNetApp passes them),
    biases, step sizes and adjoints for m intervals."""
    rng = np.random.default_rng(SEED + seed)
    state = (4, layer.width) if layer.kind == "dense" else (4, layer.width, 5, 4)
    Kall = rng.standard_normal((m + 2,) + layer.weight_shape) / np.sqrt(layer.fan_in)
    ball = 0.3 * rng.standard_normal((m + 2,) + layer.bias_shape)
    U = rng.standard_normal((m,) + state)
    W = rng.standard_normal((m,) + state)
    hs = rng.uniform(0.05, 0.5, m)
    return tuple(x.astype(dtype) for x in (U, Kall[1:m + 1], ball[1:m + 1], hs, W))


# ---------------------------------------------------------------- bitwise batching


@pytest.mark.parametrize("kind,name", BACKENDS)
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("m", [1, 4])
def test_layer_batched_rows_bitwise_equal_single_calls(kind, name, act, m):
    layer = _layer(kind, name, act)
    U, Ks, bs, hs, W = _data(layer, m, m)
    F = layer.forward_batched(U, Ks, bs, hs)
    A = layer.adjoint_batched(W, U, Ks, bs, hs)
    dKs, dbs = layer.gradient_batched(W, U, Ks, bs, hs)
    assert F.shape == A.shape == U.shape and dKs.shape == Ks.shape and dbs.shape == bs.shape
    for i in range(m):
        h = float(hs[i])
        assert np.array_equal(F[i], layer.forward(U[i], Ks[i], bs[i], h)), i
        assert np.array_equal(A[i], layer.adjoint(W[i], U[i], Ks[i], bs[i], h)), i
        dK, db = layer.gradient(W[i], U[i], Ks[i], bs[i], h)
        assert np.array_equal(dKs[i], dK) and np.array_equal(dbs[i], db), i


@pytest.mark.parametrize("kind,name", BACKENDS)
def test_layer_batched_rows_bitwise_float32(kind, name):
    layer = _layer(kind, name)
    U, Ks, bs, hs, W = _data(layer, 3, 7, np.float32)
    F = layer.forward_batched(U, Ks, bs, hs)
    A = layer.adjoint_batched(W, U, Ks, bs, hs)
    dKs, dbs = layer.gradient_batched(W, U, Ks, bs, hs)
    assert F.dtype == A.dtype == dKs.dtype == np.float32
    for i in range(3):
        assert np.array_equal(F[i], layer.forward(U[i], Ks[i], bs[i], hs[i]))
        assert np.array_equal(A[i], layer.adjoint(W[i], U[i], Ks[i], bs[i], hs[i]))
        dK, db = layer.gradient(W[i], U[i], Ks[i], bs[i], hs[i])
        assert np.array_equal(dKs[i], dK) and np.array_equal(dbs[i], db)


@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_numpy_layer_is_the_free_functions_bitwise(kind):
    # The "numpy" backend is the public functions themselves: one implementation.
    layer = _layer(kind, "numpy")
    U, Ks, bs, hs, W = _data(layer, 1, 11)
    u, K, b, h, w = U[0], Ks[0], bs[0], float(hs[0]), W[0]
    fwd, adj, grad = ((dense_forward, dense_adjoint, dense_gradient) if kind == "dense"
                      else (conv_forward, conv_adjoint, conv_gradient))
    assert layer.kernels.forward is fwd and layer.kernels.gradient is grad
    assert np.array_equal(layer.forward(u, K, b, h), fwd(u, K, b, h, "tanh"))
    assert np.array_equal(layer.adjoint(w, u, K, b, h), adj(w, u, K, b, h, "tanh"))
    for got, want in zip(layer.gradient(w, u, K, b, h), grad(w, u, K, b, h, "tanh")):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_backends_agree(kind, act):
    ref, other = _layer(kind, "numpy", act), _layer(kind, "array-api", act)
    U, Ks, bs, hs, W = _data(ref, 3, 13)
    for call in ("forward_batched", "adjoint_batched", "gradient_batched"):
        args = (U, Ks, bs, hs) if call == "forward_batched" else (W, U, Ks, bs, hs)
        got, want = getattr(other, call)(*args), getattr(ref, call)(*args)
        for g, r in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------- choosing a backend


def test_default_backend_and_report():
    assert DenseLayer(4).backend == "numpy" and ConvLayer(2).backend == "numpy"
    assert DenseLayer(4, xp=np).kernels is select_kernels("dense", "numpy")
    assert backend_names("dense") == backend_names("conv") == ("array-api", "numpy")
    net = ResNet((1, 4, 4), 2, width=2, nlayers=3)
    assert net.backend == "numpy" and isinstance(net.layer, ConvLayer)
    assert "numpy" in repr(net.layer) and net.layer.kernels.summary


def test_other_namespace_picks_array_api():
    xp = pytest.importorskip("array_api_strict")
    assert select_kernels("conv", xp=xp).name == "array-api"
    layer = DenseLayer(3, "relu", xp=xp)
    assert layer.backend == "array-api"
    rng = np.random.default_rng(SEED)
    u, K, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    got = layer.forward(xp.asarray(u), xp.asarray(K), xp.asarray(b), 0.25)
    assert type(got) is type(xp.asarray(u))
    np.testing.assert_allclose(np.asarray(got), dense_forward(u, K, b, 0.25, "relu"),
                               rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name,chunked", [("numpy", True), ("array-api", False)])
def test_forced_conv_backend_is_honoured(monkeypatch, name, chunked):
    # The forced backend decides how NumPy arrays are convolved: chunked, interval by
    # interval ("numpy") or in one go over all intervals ("array-api").
    seen = []
    real = conv_module._forward

    def spy(u, K, b, h, act, xp, chunk):
        seen.append((len(u.shape), chunk))
        return real(u, K, b, h, act, xp, chunk)

    monkeypatch.setattr(conv_module, "_forward", spy)
    net = ResNet((1, 4, 4), 2, width=2, nlayers=3, backend=name)
    assert net.backend == name and net.layer.kernels is select_kernels("conv", name)
    U, Ks, bs, hs, _ = _data(net.layer, 3, 17)
    net.layer.forward(U[0], Ks[0], bs[0], 0.1)
    net.layer.forward_batched(U, Ks, bs, hs)
    if chunked:
        assert seen == [(4, True)] * 4  # the single call, then 3 intervals one by one
    else:
        assert seen == [(4, False), (5, False)]  # the single call, then all at once


def test_forced_backend_runs_every_network_and_app_kernel():
    # A recording kernel set: ResNet and ResNetApp reach all six kernels through the layer.
    calls = []
    numpy = select_kernels("dense", "numpy")

    def record(name):
        real = getattr(numpy, name)

        def kernel(*args):
            calls.append(name)
            return real(*args)
        return kernel

    names = ("forward", "adjoint", "gradient", "forward_batched", "adjoint_batched",
             "gradient_batched")
    spy = LayerKernels("dense", "spy", "records calls", *(record(n) for n in names))
    net = ResNet((2,), 3, width=4, nlayers=8, backend=spy)
    assert net.backend == "spy" and net.layer.kernels is spy
    rng = np.random.default_rng(SEED)
    X, C = rng.uniform(-1, 1, (5, 2)), np.eye(3)[rng.integers(0, 3, 5)]
    p = net.init_params(seed=SEED)
    net.loss_and_gradient(p, X, C)
    assert set(calls) == {"forward", "adjoint", "gradient"}
    calls.clear()
    ev = LayerParallelEvaluator(net, p.copy(), X, C,
                                mgrit=dict(cfactor=2, max_levels=2, batch=True))
    ev.gradient(p, X, C)
    assert {"forward_batched", "adjoint_batched", "gradient_batched"} <= set(calls)


def test_kernel_sets_of_the_wrong_kind_are_refused():
    with pytest.raises(ValueError, match="computes dense layers, not conv layers"):
        ConvLayer(2, backend=select_kernels("dense", "numpy"))


@pytest.mark.parametrize("make", [
    lambda: DenseLayer(4, backend="cuda"),
    lambda: ConvLayer(2, backend="cuda"),
    lambda: ResNet((2,), 3, width=4, nlayers=2, backend="cuda"),
    lambda: select_kernels("dense", "cuda"),
])
def test_bad_backend_name_is_named(make):
    with pytest.raises(ValueError, match=r"unknown (dense|conv) kernel backend 'cuda'; "
                                         r"choose one of 'array-api', "
                                         r"('cuda-direct', 'cudnn', 'cudnn-streams', |'cuda-fused', )?'numpy'"):
        make()


def test_optional_backend_says_why_it_cannot_run():
    if "cudnn" in backend_names("conv", optional=True):
        pytest.skip("cuDNN and a GPU are usable here")
    with pytest.raises(ValueError, match="conv kernel backend 'cudnn' is not available: "
                                         r"(braidpy\._cuda was not compiled|.*cuDNN is not "
                                         r"available|no usable GPU)"):
        ConvLayer(2, backend="cudnn")
    with pytest.raises(ValueError, match="unknown dense kernel backend 'cudnn'"):
        DenseLayer(2, backend="cudnn")


def test_bad_layer_arguments_are_named():
    with pytest.raises(ValueError, match="width must be a positive integer, got 0"):
        DenseLayer(0)
    with pytest.raises(ValueError, match="channels must be a positive integer"):
        ConvLayer(2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kernel must be odd"):
        ConvLayer(2, kernel=4)
    with pytest.raises(ValueError, match="unknown activation 'sigmoid'"):
        DenseLayer(2, "sigmoid")
    with pytest.raises(ValueError, match="unknown layer kind 'lstm'"):
        select_kernels("lstm")


# ---------------------------------------------------------------- through MGRIT


@pytest.mark.parametrize("kind,name", BACKENDS)
def test_mgrit_gradient_is_batching_independent_on_every_backend(kind, name):
    rng = np.random.default_rng(SEED + 1)
    if kind == "dense":
        X, C = rng.uniform(-3, 3, (12, 2)), np.eye(3)[rng.integers(0, 3, 12)]
        net = ResNet((2,), 3, width=4, nlayers=16, tstop=2.0, backend=name)
    else:
        X, C = rng.standard_normal((3, 1, 5, 4)), np.eye(3)[rng.integers(0, 3, 3)]
        net = ResNet((1, 5, 4), 3, width=2, nlayers=8, activation="smooth_relu", backend=name)
    p = net.init_params(seed=SEED)
    out = []
    for batch in (True, False):
        ev = LayerParallelEvaluator(net, p.copy(), X, C,
                                    mgrit=dict(cfactor=4, max_levels=2, abs_tol=1e-12,
                                               batch=batch))
        out.append(ev.gradient(p, X, C)[:2])
    assert out[0][0] == out[1][0]
    np.testing.assert_array_equal(out[0][1], out[1][1])
    # one level: MGRIT is the serial sweep, step for step
    ref_loss, ref_grad = net.loss_and_gradient(p, X, C)
    ev = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=dict(max_levels=1))
    loss, grad, _ = ev.gradient(p, X, C)
    assert loss == ref_loss
    np.testing.assert_array_equal(grad, ref_grad)
