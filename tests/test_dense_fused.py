"""The fused dense GPU kernels' wiring (braidpy.nn.dense: the ``_gpu_*`` functions, their
dispatch and the "cuda-fused" kernel set) on the host: braidpy._cuda's ``dense_step`` and
``dense_slope`` are replaced by host twins over the same element functions
(``braidpy._core._host_dense``, csrc/cuda/kernels.hpp), and CuPy by a NumPy-backed stand-in
namespace named "cupy". The kernels themselves run in tests/test_gpu.py (``-m gpu``)."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest

from braidpy import _core
from braidpy.nn import DenseLayer, ResNet, dense
from braidpy.nn.dense import (dense_adjoint, dense_adjoint_and_gradient, dense_adjoint_batched,
                              dense_forward, dense_forward_batched, dense_gradient,
                              dense_gradient_batched)
from braidpy.train.evaluate import LayerParallelEvaluator

SEED = 20261204
ACTIVATIONS = ["tanh", "relu", "smooth_relu"]
# The twins compute what NumPy's code does with the same operations; only the product's
# BLAS call may differ (a transposed view here, a contiguous copy on the fast path).
RTOL = {np.float64: 1e-13, np.float32: 2e-6}


class HostTwin:
    """braidpy._cuda's dense entry points on NumPy arrays by the host pass of the same
    element functions (_core._host_dense); records each call and what it wrote over."""

    def __init__(self, devices=1):
        self.devices, self.calls = devices, []

    def info(self):
        return {"devices": self.devices,
                "error": None if self.devices else "cudaErrorNoDevice (100): no device"}

    def dense_step(self, Z, U, b, h, out, act):
        into_u = np.shares_memory(out, U)
        assert into_u != np.shares_memory(out, Z)  # over Z or over U, nothing else
        self.calls.append(("dense_step", act, "U" if into_u else "Z"))
        (_core._host_dense.dense_step_update if into_u
         else _core._host_dense.dense_step_finish)(Z, U, b, h, act)

    def dense_slope(self, Z, W, b, h, out, act):
        assert np.shares_memory(out, Z) and not np.shares_memory(out, W)
        self.calls.append(("dense_slope", act, "Z"))
        _core._host_dense.dense_slope(Z, W, b, h, act)


@pytest.fixture
def twin(monkeypatch):
    t = HostTwin()
    monkeypatch.setattr(dense, "_cuda", lambda: t)
    monkeypatch.setattr(dense, "_CHOICES", {})
    monkeypatch.delenv(dense.ENV, raising=False)
    return t


def _data(dtype, m=None, batch=6, width=5, offset=0):
    """(w, u, K, b, h) of one step, or (W, U, Ks, bs, hs) of m intervals."""
    rng = np.random.default_rng(SEED + offset)
    lead = () if m is None else (m,)
    W, U = (rng.standard_normal(lead + (batch, width)).astype(dtype) for _ in range(2))
    Ks = (rng.standard_normal(lead + (width, width)) / 2).astype(dtype)
    bs = (rng.standard_normal(lead + (width,)) / 4).astype(dtype)
    hs = 0.3 if m is None else rng.uniform(0.1, 0.5, m).astype(dtype)
    return W, U, Ks, bs, hs


def _close(got, want, dtype):
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=RTOL[dtype])


# ------------------------------------------------------------------ the fused wiring

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_fused_single_steps_equal_numpys(twin, act, dtype):
    w, u, K, b, h = _data(dtype)
    for step in (h, np.float64(h), np.asarray(h, dtype=dtype)):  # a number, an array
        _close(dense._gpu_forward(u, K, b, step, act), dense_forward(u, K, b, h, act), dtype)
    _close(dense._gpu_adjoint(w, u, K, b, h, act), dense_adjoint(w, u, K, b, h, act), dtype)
    for got, want in zip(dense._gpu_gradient(w, u, K, b, h, act),
                         dense_gradient(w, u, K, b, h, act)):
        _close(got, want, dtype)
    for got, want in zip(dense._gpu_adjoint_and_gradient(w, u, K, b, h, act),
                         dense_adjoint_and_gradient(w, u, K, b, h, act)):
        _close(got, want, dtype)
    code = dense._GPU_CODES[id(dense.get_activation(act))]
    # one kernel per call: 3 forwards, then adjoint, gradient, adjoint_and_gradient
    assert twin.calls == [("dense_step", code, "Z")] * 3 + [("dense_slope", code, "Z")] * 3


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_fused_batched_steps_equal_numpys_interval_by_interval(twin, act, dtype):
    W, U, Ks, bs, hs = _data(dtype, m=4)
    want = dense_forward_batched(U, Ks, bs, hs, act)
    _close(dense._gpu_forward_batched(U, Ks, bs, hs, act), want, dtype)
    for i in range(4):  # each interval its own bias and step size
        _close(want[i], dense_forward(U[i], Ks[i], bs[i], float(hs[i]), act), dtype)
    _close(dense._gpu_adjoint_batched(W, U, Ks, bs, hs, act),
           dense_adjoint_batched(W, U, Ks, bs, hs, act), dtype)
    for got, want_g in zip(dense._gpu_gradient_batched(W, U, Ks, bs, hs, act),
                           dense_gradient_batched(W, U, Ks, bs, hs, act)):
        _close(got, want_g, dtype)
    assert [c[0] for c in twin.calls] == ["dense_step", "dense_slope", "dense_slope"]


def test_fused_batched_steps_write_out_in_place(twin):
    W, U, Ks, bs, hs = _data(np.float64, m=3)
    want_u = dense_forward_batched(U, Ks, bs, hs, "smooth_relu")
    want_w = dense_adjoint_batched(W, U, Ks, bs, hs, "smooth_relu")
    Ucopy, Wcopy = U.copy(), W.copy()
    assert dense._gpu_adjoint_batched(Wcopy, U, Ks, bs, hs, "smooth_relu", out=Wcopy) is Wcopy
    assert dense._gpu_forward_batched(Ucopy, Ks, bs, hs, "smooth_relu", out=Ucopy) is Ucopy
    _close(Ucopy, want_u, np.float64)
    _close(Wcopy, want_w, np.float64)
    assert twin.calls[-1] == ("dense_step", 3, "U")  # the step written over U, no copy
    other = np.empty_like(U)
    assert dense._gpu_forward_batched(U, Ks, bs, hs, "relu", out=other) is other
    _close(other, dense_forward_batched(U, Ks, bs, hs, "relu"), np.float64)
    strided = np.empty((3, 6, 10))[:, :, ::2]  # not contiguous: written by a copy
    dense._gpu_forward_batched(U, Ks, bs, hs, "relu", out=strided)
    _close(strided, other, np.float64)
    with pytest.raises(ValueError, match=r"out must have U's shape \(3, 6, 5\)"):
        dense._gpu_forward_batched(U, Ks, bs, hs, "relu", out=np.empty((3, 6, 4)))


def test_what_the_fused_kernels_do_not_cover_takes_the_array_api_code(twin):
    w, u, K, b, h = _data(np.float64)
    mine = dense.Activation("mine", np.sin, np.cos)  # a user's activation
    _close(dense._gpu_forward(u, K, b, h, mine), u + h * np.sin(u @ K.T + b), np.float64)
    _close(dense._gpu_forward(u, K.astype(np.float32), b, h, "tanh"),  # mixed dtypes
           dense_forward(u, K.astype(np.float32), b, h, "tanh"), np.float32)
    assert twin.calls == []
    with pytest.raises(ValueError, match="dense_forward: K has shape"):
        dense._gpu_forward(u, K[:2], b, h, "tanh")


# ------------------------------------------------------------------ dispatch

class CupyArray(np.ndarray):
    """A NumPy array whose namespace is named "cupy" (what dense.py's dispatch asks)."""

    def __array_namespace__(self, api_version=None):
        return FAKE_CUPY


FAKE_CUPY = types.ModuleType("cupy")
FAKE_CUPY.__dict__.update({k: v for k, v in vars(np).items() if not k.startswith("__")})


def _on_fake_gpu(*arrays):
    return [np.array(a, copy=True).view(CupyArray) for a in arrays]


def test_cupy_arrays_take_the_fused_kernels_where_they_can_run(twin):
    w, u, K, b, h = _data(np.float64)
    assert dense.gpu_choice() == ("cuda-fused",
                                  "the default for CuPy: braidpy._cuda and a GPU are usable")
    got = dense_forward(*_on_fake_gpu(u, K, b), h, "smooth_relu")
    _close(got, dense_forward(u, K, b, h, "smooth_relu"), np.float64)
    for got, want in zip(dense_adjoint_and_gradient(*_on_fake_gpu(w, u, K, b), h, "relu"),
                         dense_adjoint_and_gradient(w, u, K, b, h, "relu")):
        _close(got, want, np.float64)
    W, U, Ks, bs, hs = _data(np.float64, m=3)
    G = _on_fake_gpu(W, U, Ks, bs)
    _close(dense_forward_batched(*G[1:], hs, "tanh", out=G[1]),
           dense_forward_batched(U, Ks, bs, hs, "tanh"), np.float64)
    assert [c[0] for c in twin.calls] == ["dense_step", "dense_slope", "dense_step"]
    assert twin.calls[-1][2] == "U"  # out=U advanced in place
    twin.calls.clear()
    dense_forward(u, K, b, h, "relu")  # NumPy arrays: the host code, never the dispatch
    dense_forward_batched(U, Ks, bs, hs, "relu")
    assert twin.calls == []


def test_the_environment_variable_forces_the_array_api_code(twin, monkeypatch):
    w, u, K, b, h = _data(np.float64)
    monkeypatch.setenv(dense.ENV, "array-api")
    assert dense.gpu_choice() == ("array-api", "chosen by BRAIDPY_DENSE_BACKEND=array-api")
    got = dense_adjoint(*_on_fake_gpu(w, u, K, b), h, "smooth_relu")
    _close(got, dense_adjoint(w, u, K, b, h, "smooth_relu"), np.float64)
    assert twin.calls == []
    monkeypatch.setenv(dense.ENV, "cuda-fused")
    assert dense.gpu_choice() == ("cuda-fused", "chosen by BRAIDPY_DENSE_BACKEND=cuda-fused")
    dense_gradient(*_on_fake_gpu(w, u, K, b), h, "smooth_relu")
    assert [c[0] for c in twin.calls] == ["dense_slope"]


def test_a_bad_environment_value_is_an_error_naming_it(twin, monkeypatch):
    _, u, K, b, h = _data(np.float64)
    monkeypatch.setenv(dense.ENV, "cudnn")
    with pytest.raises(ValueError, match=r"BRAIDPY_DENSE_BACKEND='cudnn': choose one of "
                                         r"'cuda-fused', 'array-api'"):
        dense_forward(*_on_fake_gpu(u, K, b), h, "relu")
    dense_forward(u, K, b, h, "relu")  # NumPy arrays never read it


@pytest.mark.parametrize("problem,why", [
    ("no module", "braidpy._cuda was not compiled"),
    ("old module", "braidpy._cuda predates the fused dense kernels"),
    ("no GPU", "no usable GPU (cudaErrorNoDevice"),
])
def test_without_the_fused_kernels_cupy_arrays_take_the_array_api_code(monkeypatch, problem,
                                                                        why):
    def missing():
        raise ImportError("No module named 'braidpy._cuda'")

    module = {"no module": missing,
              "old module": lambda: types.SimpleNamespace(info=HostTwin().info),
              "no GPU": lambda: HostTwin(devices=0)}[problem]
    monkeypatch.setattr(dense, "_cuda", module)
    monkeypatch.setattr(dense, "_CHOICES", {})
    monkeypatch.delenv(dense.ENV, raising=False)
    assert dense.fused_unavailable().startswith(why)
    name, reason = dense.gpu_choice()
    assert name == "array-api" and why in reason and "array-API arithmetic" in reason
    _, u, K, b, h = _data(np.float64)
    _close(dense_forward(*_on_fake_gpu(u, K, b), h, "tanh"), dense_forward(u, K, b, h, "tanh"),
           np.float64)
    monkeypatch.setenv(dense.ENV, "cuda-fused")
    with pytest.raises(ValueError, match="BRAIDPY_DENSE_BACKEND='cuda-fused': the fused dense "
                                         "kernels cannot run here: " + re.escape(why)):
        dense.gpu_choice()


# ------------------------------------------------------------------ as a layer's kernels

def test_fused_kernel_set_drives_a_layer_and_a_resnet_gradient(twin):
    kernels = dense.fused_kernels()
    layer = DenseLayer(5, "smooth_relu", backend=kernels)
    assert layer.backend == "cuda-fused" and layer.backend_choice == "given as a kernel set"
    W, U, Ks, bs, hs = _data(np.float64, m=3)
    ref = DenseLayer(5, "smooth_relu")
    Ucopy = U.copy()
    assert layer.forward_batched(Ucopy, Ks, bs, hs, out=Ucopy) is Ucopy
    _close(Ucopy, ref.forward_batched(U, Ks, bs, hs), np.float64)
    # a layer-parallel ResNet's loss and gradient through the fused set = NumPy's
    rng = np.random.default_rng(SEED)
    X, C = rng.standard_normal((7, 2)), np.eye(3)[rng.integers(0, 3, 7)]
    net = ResNet((2,), 3, width=5, nlayers=8, activation="smooth_relu")
    fused = ResNet((2,), 3, width=5, nlayers=8, activation="smooth_relu", backend=kernels)
    p = net.init_params(seed=SEED)
    (loss, grad), (floss, fgrad) = net.loss_and_gradient(p, X, C), fused.loss_and_gradient(p, X, C)
    assert floss == pytest.approx(loss, rel=1e-13)
    np.testing.assert_allclose(fgrad, grad, rtol=1e-12, atol=1e-14)
    assert {c[0] for c in twin.calls} == {"dense_step", "dense_slope"}
    # MGRIT's batched steps (strided weight views, stacked states advanced in place)
    ev = LayerParallelEvaluator(fused, p.copy(), X, C,
                                mgrit=dict(cfactor=4, max_levels=2, abs_tol=1e-13))
    twin.calls.clear()
    mloss, mgrad, stats = ev.gradient(p, X, C)
    assert stats["primal_iterations"] > 1 and ("dense_step", 3, "U") in twin.calls
    assert mloss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(mgrad, grad, rtol=1e-10, atol=1e-10 * np.max(np.abs(grad)))


def test_dense_layers_on_cupy_take_the_fused_kernels_by_default(twin, monkeypatch):
    from braidpy.nn.kernels import choose_kernels
    kernels, why = choose_kernels("dense", None, xp=FAKE_CUPY)
    assert (kernels.name, why) == ("cuda-fused", dense.gpu_choice()[1])
    monkeypatch.setenv(dense.ENV, "array-api")
    kernels, why = choose_kernels("dense", None, xp=FAKE_CUPY)
    assert (kernels.name, why) == ("array-api", "chosen by BRAIDPY_DENSE_BACKEND=array-api")
    assert choose_kernels("dense", None, xp=np)[0].name == "numpy"
