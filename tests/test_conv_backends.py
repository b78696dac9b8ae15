"""braidpy.nn.conv_backends without a GPU: the backend choice per conv layer (argument,
BRAIDPY_CONV_BACKEND, namespace default, the fallback from cuDNN with its reason), the
grouped-over-intervals packing against per-interval references (NumPy and
array-api-strict's second device), and the "cudnn" kernels' Python wiring run on the host
against a stand-in for braidpy._cuda's entry points that computes with braidpy's NumPy
convolutions (so what is checked is the packing, the grouped filter, the bias layout and
the one call per batched step; cuDNN's numerics are checked on a GPU in
tests/test_gpu.py), and the measured choice of cuDNN's algorithms
(BRAIDPY_CUDNN_BENCHMARK): its switch, its wiring on the stand-in, and a cuDNN that lacks
the functions it needs."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from fake_cuda_array import FAKE_CUDA_ARRAY

from braidpy.nn import ConvLayer, DenseLayer, choose_kernels, conv2d, conv2d_input_vjp, \
    conv2d_weight_vjp
from braidpy.nn import conv_backends as cb
from braidpy.nn import conv_direct as cd
from braidpy.nn import kernels as kn

SEED = 20261125
CUPY = types.SimpleNamespace(__name__="cupy")  # what the choice looks at


# ------------------------------------------------------------------ the choice


def test_numpy_layers_take_numpy_and_say_why(monkeypatch):
    monkeypatch.delenv(cb.ENV, raising=False)
    layer = ConvLayer(2, 3)
    assert layer.backend == "numpy" and layer.backend_choice == "the default for NumPy"


def no_direct_kernels(monkeypatch):
    """As on a machine without braidpy._cuda or a GPU (the direct kernels' default)."""
    monkeypatch.setattr(cd, "direct_unavailable", lambda: "no usable GPU (test)")


def test_cupy_prefers_the_direct_kernels(monkeypatch):
    """braidpy's direct conv kernels are the CuPy default where they can run (they beat
    grouped cuDNN on the GPU benchmark), with or without cuDNN."""
    monkeypatch.delenv(cb.ENV, raising=False)
    monkeypatch.setattr(cd, "direct_unavailable", lambda: None)
    for why in ("cuDNN is not available (test)", None):
        monkeypatch.setattr(cb, "cudnn_unavailable", lambda why=why: why)
        layer = ConvLayer(2, 3, xp=CUPY)
        assert layer.backend == "cuda-direct"
        assert layer.backend_choice == ("the default for CuPy: braidpy._cuda and a GPU are "
                                        "usable")
    assert "cuda-direct" in kn.backend_names("conv", optional=True)
    assert ConvLayer(2, 3, xp=CUPY, backend="cudnn").backend == "cudnn"


def test_cupy_without_cudnn_falls_back_to_im2col_with_the_reason(monkeypatch):
    monkeypatch.delenv(cb.ENV, raising=False)
    no_direct_kernels(monkeypatch)
    monkeypatch.setattr(cb, "cudnn_unavailable", lambda: "cuDNN is not available (test)")
    layer = ConvLayer(2, 3, xp=CUPY)
    assert layer.backend == "array-api"
    assert layer.backend_choice == ("cuDNN not used (cuDNN is not available (test)); im2col "
                                    "on CuPy instead")
    with pytest.raises(ValueError, match=r"conv kernel backend 'cudnn' is not available: "
                                         r"cuDNN is not available \(test\)"):
        ConvLayer(2, 3, backend="cudnn")
    assert DenseLayer(2, xp=CUPY).backend == "array-api"


def test_cupy_with_cudnn_and_without_the_direct_kernels_takes_cudnn(monkeypatch):
    monkeypatch.delenv(cb.ENV, raising=False)
    no_direct_kernels(monkeypatch)
    monkeypatch.setattr(cb, "cudnn_unavailable", lambda: None)
    layer = ConvLayer(2, 3, xp=CUPY)
    assert layer.backend == "cudnn"
    assert layer.backend_choice == "the default for CuPy without braidpy's direct kernels"
    assert "cudnn" in kn.backend_names("conv", optional=True)
    assert "cudnn" not in kn.backend_names("dense", optional=True)


def test_the_environment_variable_overrides_the_default_not_the_argument(monkeypatch):
    monkeypatch.setenv(cb.ENV, "array-api")
    layer = ConvLayer(2, 3)
    assert layer.backend == "array-api"
    assert layer.backend_choice == "chosen by BRAIDPY_CONV_BACKEND=array-api"
    assert ConvLayer(2, 3, backend="numpy").backend == "numpy"
    assert DenseLayer(2).backend == "numpy"  # conv layers only
    monkeypatch.setenv(cb.ENV, "cuda")
    with pytest.raises(ValueError, match=r"BRAIDPY_CONV_BACKEND='cuda': unknown conv kernel "
                                         r"backend 'cuda'; choose one of 'array-api', 'cuda-direct', "
                                         r"'cudnn', 'cudnn-streams', 'numpy'"):
        ConvLayer(2, 3)
    monkeypatch.setattr(cb, "cudnn_unavailable", lambda: "no usable GPU (test)")
    monkeypatch.setenv(cb.ENV, "cudnn")
    with pytest.raises(ValueError, match=r"BRAIDPY_CONV_BACKEND='cudnn': .* not available: "
                                         r"no usable GPU \(test\)"):
        ConvLayer(2, 3)


def test_the_real_availability_check_names_what_is_missing():
    why = cb.cudnn_unavailable()
    if why is None:
        pytest.skip("cuDNN and a GPU are usable here")
    assert ("braidpy._cuda was not compiled" in why or "cuDNN is not available" in why
            or "no usable GPU" in why), why


def test_kernel_sets_report_why():
    kernels, why = choose_kernels("conv", "array-api")
    assert kernels.name == "array-api" and why == "chosen by the backend argument"


# ------------------------------------------------------------------ grouped layout


def test_pack_by_hand_and_round_trip():
    U = np.arange(2 * 3 * 2 * 1 * 1, dtype=float).reshape(2, 3, 2, 1, 1)  # (m, N, C, 1, 1)
    X = cb.pack_intervals(U)
    assert X.shape == (3, 4, 1, 1)
    # image n: interval 0's two channels, then interval 1's
    assert X[:, :, 0, 0].tolist() == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    assert np.array_equal(cb.unpack_intervals(X, 2), U)


def grouped_conv(x, K, groups):
    """A grouped convolution from braidpy's NumPy conv2d, group by group."""
    cin, cout = x.shape[1] // groups, K.shape[0] // groups
    return np.concatenate([conv2d(x[:, g * cin:(g + 1) * cin], K[g * cout:(g + 1) * cout])
                           for g in range(groups)], axis=1)


def test_packed_grouped_convolution_equals_per_interval_convolutions():
    rng = np.random.default_rng(SEED)
    m, N, C, k = 3, 2, 4, 3
    U, Ks = rng.standard_normal((m, N, C, 5, 6)), rng.standard_normal((m, C, C, k, k))
    Y = cb.unpack_intervals(grouped_conv(cb.pack_intervals(U), Ks.reshape(m * C, C, k, k), m),
                            m)
    for i in range(m):
        np.testing.assert_array_equal(Y[i], conv2d(U[i], Ks[i]))


def test_packing_on_array_api_strict_device1_equals_numpy():
    xp = pytest.importorskip("array_api_strict")
    dev = xp.Device("device1")
    U = np.random.default_rng(SEED + 1).standard_normal((3, 2, 2, 4, 5))
    d = xp.asarray(U, device=dev)
    X = cb.pack_intervals(d)
    assert X.device == dev
    np.testing.assert_array_equal(np.from_dlpack(X).copy(), cb.pack_intervals(U))
    back = cb.unpack_intervals(X, 3)
    assert back.device == dev
    np.testing.assert_array_equal(np.from_dlpack(back).copy(), U)


def test_im2col_on_array_api_strict_device1_equals_numpy():
    """The fallback's path: the "array-api" conv layer on device1 equals the NumPy layer."""
    xp = pytest.importorskip("array_api_strict")
    dev = xp.Device("device1")
    rng = np.random.default_rng(SEED + 2)
    m = 3
    U, W = rng.standard_normal((m, 2, 3, 5, 4)), rng.standard_normal((m, 2, 3, 5, 4))
    Ks, bs = rng.standard_normal((m, 3, 3, 3, 3)) / 5, rng.standard_normal((m, 3))
    hs = np.array([0.25, 0.5, 0.125])
    ref = ConvLayer(3, 3, backend="numpy")
    lay = ConvLayer(3, 3, xp=xp)
    assert lay.backend == "array-api"
    on = [xp.asarray(a, device=dev) for a in (W, U, Ks, bs, hs)]

    def host(a):
        assert a.device == dev
        return np.from_dlpack(a).copy()

    close = dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(host(lay.forward_batched(*on[1:])),
                               ref.forward_batched(U, Ks, bs, hs), **close)
    np.testing.assert_allclose(host(lay.adjoint_batched(*on)),
                               ref.adjoint_batched(W, U, Ks, bs, hs), **close)
    for got, want in zip(lay.gradient_batched(*on), ref.gradient_batched(W, U, Ks, bs, hs)):
        np.testing.assert_allclose(host(got), want, **close)


# ------------------------------------------------------------------ the cudnn wiring on the host


class StandIn:
    """braidpy._cuda's conv entry points computed with braidpy's NumPy convolutions; it
    checks what the C++ checks (shapes, workspace size) and records the calls."""

    WORKSPACE = 512

    def __init__(self):
        self.calls = []

    def cudnn_info(self):
        return {"version": 92801, "library": "stand-in", "error": None}

    def info(self):
        return {"devices": 1, "error": None}

    def conv_workspace(self, n, c_in, c_out, h, w, k, groups, dtype):
        assert dtype in ("float64", "float32")
        return {"request": self.WORKSPACE}

    def _check(self, name, x, K, y, groups, ws, nbytes):
        assert x.flags.c_contiguous and K.flags.c_contiguous and y.flags.c_contiguous
        assert K.shape[1] * groups == x.shape[1] and y.shape[0] == x.shape[0]
        assert ws != 0 and nbytes == self.WORKSPACE
        self.calls.append((name, groups))

    def conv_forward(self, x, K, y, groups, ws, nbytes):
        self._check("forward", x, K, y, groups, ws, nbytes)
        y[...] = grouped_conv(x, K, groups)

    def conv_backward_data(self, K, dy, dx, groups, ws, nbytes):
        self._check("backward_data", dx, K, dy, groups, ws, nbytes)
        cin, cout = dx.shape[1] // groups, dy.shape[1] // groups
        dx[...] = np.concatenate([conv2d_input_vjp(dy[:, g * cout:(g + 1) * cout],
                                                   K[g * cout:(g + 1) * cout])
                                  for g in range(groups)], axis=1)
        assert dx.shape[1] == cin * groups

    def conv_backward_filter(self, x, dy, dK, groups, ws, nbytes):
        self._check("backward_filter", x, dK, dy, groups, ws, nbytes)
        cin, cout, k = x.shape[1] // groups, dy.shape[1] // groups, dK.shape[-1]
        dK[...] = np.concatenate([conv2d_weight_vjp(dy[:, g * cout:(g + 1) * cout],
                                                    x[:, g * cin:(g + 1) * cin], k)
                                  for g in range(groups)], axis=0)

    def step_epilogue(self, U, Y, b, h, out, act):
        """The fused kernel's contract: out = U + h * act(unpack(Y) + b)."""
        assert all(a.flags.c_contiguous for a in (U, Y, b, h, out)) and act in (1, 2)
        self.calls.append(("epilogue", act))
        Z = cb.unpack_intervals(Y, U.shape[0]) + b.reshape(U.shape[0], 1, -1, 1, 1)
        a = np.tanh(Z) if act == 1 else np.where(Z > 0, Z, 0.0)
        out[...] = U + h.reshape(-1, 1, 1, 1, 1) * a

    def conv_backward_bias(self, dy, db):
        assert db.shape == (1, dy.shape[1], 1, 1)
        self.calls.append(("backward_bias", 1))
        db[...] = dy.sum(axis=(0, 2, 3), keepdims=True)


@pytest.fixture
def stand_in(monkeypatch):
    fake = StandIn()
    monkeypatch.setattr(cb, "_cuda", lambda: fake)
    monkeypatch.delenv(cb.ENV, raising=False)
    no_direct_kernels(monkeypatch)
    return fake


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_cudnn_kernels_wiring_equals_the_numpy_kernels(stand_in, act):
    layer = ConvLayer(3, 3, act, xp=CUPY)  # cuDNN "usable": the stand-in answers
    assert layer.backend == "cudnn"
    ref = ConvLayer(3, 3, act, backend="numpy")
    rng = np.random.default_rng(SEED + 3)
    m = 4
    U, W = rng.standard_normal((m, 2, 3, 5, 4)), rng.standard_normal((m, 2, 3, 5, 4))
    Ks, bs = rng.standard_normal((m, 3, 3, 3, 3)) / 5, rng.standard_normal((m, 3))
    hs = np.array([0.25, 0.5, 0.125, 1.0])
    close = dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(layer.forward(U[1], Ks[1], bs[1], 0.5),
                               ref.forward(U[1], Ks[1], bs[1], 0.5), **close)
    np.testing.assert_allclose(layer.adjoint(W[1], U[1], Ks[1], bs[1], 0.5),
                               ref.adjoint(W[1], U[1], Ks[1], bs[1], 0.5), **close)
    for got, want in zip(layer.gradient(W[1], U[1], Ks[1], bs[1], 0.5),
                         ref.gradient(W[1], U[1], Ks[1], bs[1], 0.5)):
        np.testing.assert_allclose(got, want, **close)
    stand_in.calls.clear()
    np.testing.assert_allclose(layer.forward_batched(U, Ks, bs, hs),
                               ref.forward_batched(U, Ks, bs, hs), **close)
    # one grouped call for all m intervals, then one fused epilogue
    assert stand_in.calls == [("forward", m), ("epilogue", {"tanh": 1, "relu": 2}[act])]
    stand_in.calls.clear()
    np.testing.assert_allclose(layer.adjoint_batched(W, U, Ks, bs, hs),
                               ref.adjoint_batched(W, U, Ks, bs, hs), **close)
    assert stand_in.calls == [("forward", m), ("backward_data", m)]
    stand_in.calls.clear()
    got = layer.gradient_batched(W, U, Ks, bs, hs)
    for g, w in zip(got, ref.gradient_batched(W, U, Ks, bs, hs)):
        np.testing.assert_allclose(g, w, **close)
    assert got[0].shape == Ks.shape and got[1].shape == bs.shape
    assert stand_in.calls == [("forward", m), ("backward_filter", m), ("backward_bias", 1)]


def test_the_fused_epilogue_is_only_for_braidpys_own_activations(stand_in):
    """A user activation named like braidpy's runs the array code (its own function);
    braidpy's tanh with a bias of another dtype too."""
    from braidpy.nn.activations import Activation, tanh_derivative

    def my_tanh(x):
        return np.tanh(x) * 1.0

    mine = Activation("tanh", my_tanh, tanh_derivative)
    rng = np.random.default_rng(SEED + 4)
    U, Ks = rng.standard_normal((2, 1, 3, 4, 4)), rng.standard_normal((2, 3, 3, 3, 3)) / 5
    bs, hs = rng.standard_normal((2, 3)), np.array([0.5, 0.25])
    want = ConvLayer(3, 3, "tanh", backend="numpy").forward_batched(U, Ks, bs, hs)
    got = ConvLayer(3, 3, mine, xp=CUPY).forward_batched(U, Ks, bs, hs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert stand_in.calls == [("forward", 2)]
    stand_in.calls.clear()
    got = ConvLayer(3, 3, "tanh", xp=CUPY).forward_batched(U, Ks, bs.astype(np.float32), hs)
    assert stand_in.calls == [("forward", 2)]


def test_cudnn_kernels_check_shapes_first(stand_in):
    layer = ConvLayer(3, 3, xp=CUPY)
    with pytest.raises(ValueError, match="conv_forward_batched: Ks has shape"):
        layer.forward_batched(np.zeros((2, 1, 3, 4, 4)), np.zeros((2, 3, 3, 5, 4)),
                              np.zeros((2, 3)), [0.1, 0.1])
    with pytest.raises(ValueError, match="float64 or float32, got int64"):
        cb.conv2d_cudnn(np.zeros((1, 3, 4, 4), np.int64), np.zeros((3, 3, 3, 3), np.int64))
    assert stand_in.calls == []


def test_cudnn_streams_runs_interval_by_interval_and_equals_numpy(stand_in):
    layer = ConvLayer(3, 3, "tanh", backend="cudnn-streams")
    ref = ConvLayer(3, 3, "tanh", backend="numpy")
    rng = np.random.default_rng(SEED + 4)
    m = 5
    U, W = rng.standard_normal((m, 2, 3, 4, 4)), rng.standard_normal((m, 2, 3, 4, 4))
    Ks, bs = rng.standard_normal((m, 3, 3, 3, 3)) / 5, rng.standard_normal((m, 3))
    hs = rng.uniform(0.1, 0.5, m)
    close = dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(layer.forward_batched(U, Ks, bs, hs),
                               ref.forward_batched(U, Ks, bs, hs), **close)
    assert stand_in.calls == [("forward", 1)] * m  # one call per interval
    np.testing.assert_allclose(layer.adjoint_batched(W, U, Ks, bs, hs),
                               ref.adjoint_batched(W, U, Ks, bs, hs), **close)
    for got, want in zip(layer.gradient_batched(W, U, Ks, bs, hs),
                         ref.gradient_batched(W, U, Ks, bs, hs)):
        np.testing.assert_allclose(got, want, **close)


def test_stream_count_is_checked(monkeypatch):
    monkeypatch.delenv(cb.STREAMS_ENV, raising=False)
    assert cb.stream_count() == 4
    monkeypatch.setenv(cb.STREAMS_ENV, "3")
    assert cb.stream_count() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(cb.STREAMS_ENV, bad)
        with pytest.raises(ValueError, match=f"BRAIDPY_CUDNN_STREAMS must be a positive "
                                             f"integer, got '{bad}'"):
            cb.stream_count()


# ------------------------------------------------------------------ measured algorithms


def test_benchmark_is_opt_in_and_checked(monkeypatch):
    monkeypatch.delenv(cb.BENCHMARK_ENV, raising=False)
    assert cb.BENCHMARK_ENV == "BRAIDPY_CUDNN_BENCHMARK" and not cb.benchmark_enabled()
    for flag, on in (("0", False), ("1", True), (" 1 ", True), ("", False)):
        monkeypatch.setenv(cb.BENCHMARK_ENV, flag)
        assert cb.benchmark_enabled() is on
    for bad in ("yes", "2", "true", "on"):
        monkeypatch.setenv(cb.BENCHMARK_ENV, bad)
        with pytest.raises(ValueError, match=f"BRAIDPY_CUDNN_BENCHMARK must be 0 or 1, got "
                                             f"'{bad}'"):
            cb.benchmark_enabled()


class MeasuringStandIn(StandIn):
    """The stand-in with braidpy._cuda's measuring entry points and the benchmark keyword:
    a problem's plan is measured at most once, on zeroed scratch arrays of its shapes (not
    the caller's) with the workspace the measurement offers; the keywords of every conv
    call are recorded."""

    OFFER = 4096

    def __init__(self):
        super().__init__()
        self.plans = set()      # measured problems (the C++ cache's keys)
        self.keywords = []      # the keywords of each workspace and conv call

    def conv_measured(self, *problem, **kw):
        return (problem, tuple(sorted(kw))) in self.plans

    def conv_measure_workspace(self, *problem, **kw):
        assert not self.conv_measured(*problem, **kw), f"{problem} measured twice"
        return self.OFFER

    def conv_measure(self, x, w, y, groups, ws, nbytes, **kw):
        assert ws != 0 and nbytes == self.OFFER
        assert not (x.any() or w.any() or y.any()), "scratch arrays, not the caller's"
        (N, cin, H, W), (cout, _, k, _) = x.shape, w.shape
        assert y.shape == (N, cout, H, W) and w.shape[1] * groups == cin
        problem = (N, cin, cout, H, W, k, groups, str(x.dtype))
        self.plans.add((problem, tuple(sorted(kw))))
        self.calls.append(("measure", problem))
        return {"algorithms": (1, 1, 1), "measured": (True, True, True)}

    def conv_workspace(self, *problem, benchmark=False, **kw):
        if benchmark:  # the C++ refuses a measured plan that is not cached
            assert self.conv_measured(*problem, **kw), f"{problem} not measured"
        self.keywords.append(dict(kw, **({"benchmark": True} if benchmark else {})))
        return {"request": self.WORKSPACE}

    def conv_forward(self, x, K, y, groups, ws, nbytes, **kw):
        self.keywords.append(kw)
        super().conv_forward(x, K, y, groups, ws, nbytes)

    def conv_backward_data(self, K, dy, dx, groups, ws, nbytes, **kw):
        self.keywords.append(kw)
        super().conv_backward_data(K, dy, dx, groups, ws, nbytes)

    def conv_backward_filter(self, x, dy, dK, groups, ws, nbytes, **kw):
        self.keywords.append(kw)
        super().conv_backward_filter(x, dy, dK, groups, ws, nbytes)


@pytest.fixture
def measuring(monkeypatch):
    fake = MeasuringStandIn()
    monkeypatch.setattr(cb, "_cuda", lambda: fake)
    monkeypatch.delenv(cb.ENV, raising=False)
    monkeypatch.delenv(cb.TF32_ENV, raising=False)
    no_direct_kernels(monkeypatch)
    return fake


def test_measured_plans_are_made_once_per_problem_on_scratch_arrays(measuring, monkeypatch):
    """BRAIDPY_CUDNN_BENCHMARK=1: the first call of each problem (the single step's and
    the grouped batched step's) measures it once, whatever calls follow; every workspace
    and conv call then asks for the measured plan; the results are the kernels' own."""
    monkeypatch.setenv(cb.BENCHMARK_ENV, "1")
    layer, ref = ConvLayer(3, 3, "tanh", xp=CUPY), ConvLayer(3, 3, "tanh", backend="numpy")
    assert layer.backend == "cudnn"
    rng = np.random.default_rng(SEED + 5)
    m = 4
    U, W = rng.standard_normal((m, 2, 3, 5, 4)), rng.standard_normal((m, 2, 3, 5, 4))
    Ks, bs = rng.standard_normal((m, 3, 3, 3, 3)) / 5, rng.standard_normal((m, 3))
    hs = np.array([0.25, 0.5, 0.125, 1.0])
    close = dict(rtol=1e-12, atol=1e-14)
    for _ in range(2):
        np.testing.assert_allclose(layer.forward(U[1], Ks[1], bs[1], 0.5),
                                   ref.forward(U[1], Ks[1], bs[1], 0.5), **close)
        np.testing.assert_allclose(layer.adjoint_batched(W, U, Ks, bs, hs),
                                   ref.adjoint_batched(W, U, Ks, bs, hs), **close)
        for got, want in zip(layer.gradient_batched(W, U, Ks, bs, hs),
                             ref.gradient_batched(W, U, Ks, bs, hs)):
            np.testing.assert_allclose(got, want, **close)
    measured = [c for c in measuring.calls if c[0] == "measure"]
    assert measured == [("measure", (2, 3, 3, 5, 4, 3, 1, "float64")),      # one step
                        ("measure", (2, 12, 12, 5, 4, 3, m, "float64"))]   # grouped over m
    assert len(measuring.keywords) == 20  # 10 workspaces and 10 conv calls
    assert all(kw == {"benchmark": True} for kw in measuring.keywords), measuring.keywords


def test_without_benchmark_nothing_is_measured_and_the_calls_are_unchanged(measuring,
                                                                           monkeypatch):
    monkeypatch.setenv(cb.BENCHMARK_ENV, "0")
    rng = np.random.default_rng(SEED + 6)
    U, Ks = rng.standard_normal((2, 1, 3, 4, 4)), rng.standard_normal((2, 3, 3, 3, 3)) / 5
    ConvLayer(3, 3, "tanh", xp=CUPY).forward_batched(U, Ks, np.zeros((2, 3)), [0.5, 0.5])
    assert [c for c in measuring.calls if c[0] == "measure"] == []
    assert measuring.keywords == [{}, {}]


#: A stand-in libcudnn.so.9: every function braidpy requires (the names of
#: cudnn_loader.cpp's BRAIDPY_RESOLVE) as a stub that succeeds, version 9.28.1, and of the
#: three functions measuring needs, all but cudnnFindConvolutionBackwardFilterAlgorithmEx.
STUB_HEADER = """#include <stddef.h>
size_t cudnnGetVersion(void) { return 92801; }
const char* cudnnGetErrorString(int s) { (void)s; return "stub"; }
int cudnnFindConvolutionForwardAlgorithmEx(void) { return 0; }
int cudnnFindConvolutionBackwardDataAlgorithmEx(void) { return 0; }
"""

LACKING = """
import numpy as np, braidpy
from braidpy import _cuda
assert _cuda.cudnn_info()["version"] == 92801, _cuda.cudnn_info()
""" + FAKE_CUDA_ARRAY + """x, w = Fake(np.zeros((1, 2, 3, 3))), Fake(np.zeros((2, 2, 3, 3)))
y = Fake(np.zeros((1, 2, 3, 3)))
for name, call in (("conv_measure_workspace",
                    lambda: _cuda.conv_measure_workspace(1, 2, 2, 3, 3, 3, 1, "float64")),
                   ("conv_measure", lambda: _cuda.conv_measure(x, w, y, 1, 0, 0))):
    try:
        call()
    except braidpy.CudnnError as e:
        assert e.code is None, name
        print(e)
    else:
        raise AssertionError(name + " did not raise")
try:  # the heuristic choice gets past cuDNN to the device
    _cuda.conv_workspace(1, 2, 2, 3, 3, 3, 1, "float64")
    print("heuristic: planned")
except braidpy.NoGPUError:
    print("heuristic: no GPU")
"""


def test_a_cudnn_lacking_a_find_function_refuses_only_the_measured_choice(tmp_path):
    if importlib.util.find_spec("braidpy._cuda") is None:
        pytest.skip("braidpy._cuda was not compiled (BRAIDPY_CUDA=OFF or no nvcc)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in libcudnn.so.9")
    root = Path(__file__).resolve().parents[1]
    loader = (root / "csrc" / "cuda" / "cudnn_loader.cpp").read_text()
    required = sorted(set(re.findall(r"BRAIDPY_RESOLVE\((\w+)\)", loader)) - {"name"})
    assert "ConvolutionForward" in required and "GetErrorString" in required
    stubs = [f"int cudnn{n}(void) {{ return 0; }}" for n in required
             if n not in ("GetVersion", "GetErrorString")]
    (tmp_path / "stub.c").write_text(STUB_HEADER + "\n".join(stubs) + "\n")
    lib = tmp_path / "libcudnn.so.9"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "stub.c")],
                   check=True, capture_output=True)
    env = dict(os.environ, BRAIDPY_CUDNN_LIBRARY=str(lib), PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", LACKING], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for line, name in zip(lines, ("conv_measure_workspace", "conv_measure")):
        assert line.startswith(f"{name}: choosing cuDNN's algorithms by measurement "
                               f"(BRAIDPY_CUDNN_BENCHMARK=1) needs "
                               f"cudnnFindConvolutionBackwardFilterAlgorithmEx, which {lib} "
                               f"lacks;"), line
        assert "ForwardAlgorithmEx" not in line and "DataAlgorithmEx" not in line, line
    assert lines[2] in ("heuristic: planned", "heuristic: no GPU"), lines
