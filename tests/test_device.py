"""The device path (braidpy._device, ResNet(device=...), braidpy.train on the device), tested
honestly on CPU: array-api-strict's Device("device1") refuses conversion to NumPy and
operations mixing devices, so a hidden host copy or a parameter, gradient or optimizer
state left on the host fails here. Every result must equal the NumPy run to rounding."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import braidpy
from braidpy import _device
from braidpy.nn import ResNet, ResNetApp, backend_names
from braidpy.nn.kernels import KINDS
from braidpy.train import LayerParallelEvaluator, Regularizer, SerialEvaluator

xp = pytest.importorskip("array_api_strict")
if tuple(int(p) for p in xp.__version__.split(".")[:2]) < (2, 1):
    pytest.skip("array-api-strict >= 2.1 (its second device)", allow_module_level=True)

from backend_cases import strict_training  # noqa: E402

SEED = 20261215
DEVICE1 = xp.Device("device1")
ON_DEVICE1 = dict(xp=xp, device=DEVICE1)
CLOSE = dict(rtol=1e-12, atol=1e-14)  # float64 rounding


def on1(a):
    """Host data copied to device1 (the explicit host-to-device copy)."""
    return xp.asarray(np.asarray(a, dtype=np.float64), device=DEVICE1, copy=True)


def host(a):
    """Explicit host copy of a device1 array, after checking it is on device1."""
    assert a.device == DEVICE1, a.device
    return np.from_dlpack(a).copy()


def close(got, want):
    np.testing.assert_allclose(host(got), want, **CLOSE)


def nets(kind):
    """The same network on the host and on device1, and data for it."""
    rng = np.random.default_rng(SEED)
    if kind == "dense":
        args, kw = ((2,), 3), dict(width=4, nlayers=16, tstop=2.0)
        X = rng.uniform(-3, 3, (8, 2))
    else:
        args, kw = ((1, 5, 4), 3), dict(width=2, nlayers=8, activation="tanh")
        X = rng.standard_normal((3, 1, 5, 4))
    C = np.eye(3)[rng.integers(0, 3, X.shape[0])]
    return ResNet(*args, **kw), ResNet(*args, **kw, **ON_DEVICE1), X, C


# ---------------------------------------------------------------- placements


def test_placements():
    assert _device.placement() is _device.HOST is _device.placement("cpu")
    where = _device.placement(DEVICE1, xp)
    assert where.device == DEVICE1 and not where.is_host
    a = where.from_host(np.arange(3.0))
    assert a.device == DEVICE1 and where.to_host(a).tolist() == [0.0, 1.0, 2.0]
    assert _device.placement_of(a).device == DEVICE1
    with pytest.raises(ValueError, match="unknown device 'gpu'; choose 'cpu', 'cuda'"):
        _device.placement("gpu")
    with pytest.raises(ValueError, match="xp= must be an array namespace"):
        _device.placement("no such device", xp)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_cuda_without_cupy_names_the_extra():
    with pytest.raises(ImportError, match=r"pip install 'cupy.*\[gpu\] extra"):
        ResNet((2,), 3, width=4, nlayers=4, device="cuda")
    proc = subprocess.run([sys.executable, "-m", "braidpy", "train", "peaks", "--samples",
                           "20", "--device", "cuda"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--device cuda" in proc.stderr and "[gpu] extra" in proc.stderr


def test_bad_device_option_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "braidpy", "train", "peaks", "--device",
                           "tpu"], capture_output=True, text=True)
    assert proc.returncode == 2 and "expected cpu, cuda or cuda:N, got 'tpu'" in proc.stderr


# ---------------------------------------------------------------- kernels and the network


@pytest.mark.parametrize("kind,name", [(k, n) for k in KINDS for n in backend_names(k)])
def test_layer_kernels_on_device1(kind, name):
    net = nets(kind)[0]
    layer = type(net.layer)(*((net.width,) if kind == "dense" else (net.width, 3)),
                            backend=name)
    rng = np.random.default_rng(SEED + 1)
    state = (3, net.width) if kind == "dense" else (3, net.width, 5, 4)
    m = 3
    U, W = rng.standard_normal((m,) + state), rng.standard_normal((m,) + state)
    Ks = rng.standard_normal((m,) + layer.weight_shape) / np.sqrt(layer.fan_in)
    bs, hs = rng.standard_normal((m,) + layer.bias_shape), rng.uniform(0.1, 0.5, m)
    d = [on1(a) for a in (U, Ks, bs)]
    close(layer.forward_batched(*d, hs), layer.forward_batched(U, Ks, bs, hs))
    close(layer.adjoint_batched(on1(W), *d, hs), layer.adjoint_batched(W, U, Ks, bs, hs))
    for got, want in zip(layer.gradient_batched(on1(W), *d, on1(hs)),
                         layer.gradient_batched(W, U, Ks, bs, hs)):
        close(got, want)
    single = [on1(a[0]) for a in (W, U, Ks, bs)]
    close(layer.adjoint(*single, 0.25), layer.adjoint(W[0], U[0], Ks[0], bs[0], 0.25))


@pytest.mark.parametrize("kind", KINDS)
def test_network_reference_on_device1(kind):
    net, dnet, X, C = nets(kind)
    p, dp = net.init_params(seed=SEED), dnet.init_params(seed=SEED)
    assert dnet.backend == "array-api" and dnet.placement.device == DEVICE1
    close(dp, p)
    loss, grad = net.loss_and_gradient(p, X, C)
    dloss, dgrad = dnet.loss_and_gradient(dp, on1(X), on1(C))
    assert dloss == pytest.approx(loss, rel=1e-13)
    close(dgrad, grad)
    close(dnet.predict(dp, on1(X)), net.predict(p, X))
    reg = Regularizer(net, tikhonov=1e-3, ddt=1e-2, classifier=1e-4)
    (value, rgrad), (dvalue, drgrad) = reg(p), Regularizer(dnet, 1e-3, 1e-2, 1e-4)(dp)
    assert dvalue == pytest.approx(value, rel=1e-13)
    close(drgrad, rgrad)


# ---------------------------------------------------------------- MGRIT on device1


@pytest.mark.parametrize("kind", KINDS)
def test_resnet_app_solve_on_device1(kind):
    net, dnet, X, C = nets(kind)
    p, dp = net.init_params(seed=SEED), dnet.init_params(seed=SEED)
    opts = dict(cfactor=4 if kind == "dense" else 2, max_levels=2, abs_tol=1e-12)
    ref = braidpy.solve(ResNetApp(net, p, X, C), 0.0, net.tstop, net.nlayers, **opts)
    app = ResNetApp(dnet, dp, on1(X), on1(C))
    assert app.array_namespace is not None and app.array_device == DEVICE1
    got = braidpy.solve(app, 0.0, net.tstop, net.nlayers, **opts)
    assert got.counts["step_batch"] > 0 and got.iterations == ref.iterations
    np.testing.assert_allclose(got.residuals, ref.residuals, rtol=1e-10, atol=1e-15)
    close(got.final, ref.final)


def test_batched_step_sizes_go_to_the_device_once_per_distinct_set(monkeypatch):
    """A solve's batched calls reuse the step sizes already on the device: a sweep
    repeats a few sets, and a host-to-device copy per call cost more than the kernels
    on a GPU. Same answer as without the cache (the copies counted)."""
    import braidpy.nn.resnet as resnet

    copies = []
    original = resnet._on_device_of

    def counted(U, a, xp_):
        copies.append(np.asarray(a).tobytes())
        return original(U, a, xp_)

    monkeypatch.setattr(resnet, "_on_device_of", counted)
    net, dnet, X, C = nets("dense")
    p, dp = net.init_params(seed=SEED), dnet.init_params(seed=SEED)
    opts = dict(cfactor=4, max_levels=2, abs_tol=1e-12)
    ref = braidpy.solve(ResNetApp(net, p, X, C), 0.0, net.tstop, net.nlayers, **opts)
    got = braidpy.solve(ResNetApp(dnet, dp, on1(X), on1(C)), 0.0, net.tstop, net.nlayers, **opts)
    assert got.counts["step_batch"] > len(copies) > 0
    assert len(set(copies)) == len(copies)  # each distinct set copied once
    close(got.final, ref.final)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [True, False])
def test_gradient_on_device1(kind, batch):
    net, dnet, X, C = nets(kind)
    p, dp = net.init_params(seed=SEED), dnet.init_params(seed=SEED)
    mgrit = dict(cfactor=2, max_levels=2, abs_tol=1e-12, batch=batch)
    loss, grad, stats = LayerParallelEvaluator(net, p, X, C, mgrit=mgrit).gradient(p, X, C)
    ev = LayerParallelEvaluator(dnet, dp, on1(X), on1(C), mgrit=mgrit)
    dloss, dgrad, dstats = ev.gradient(dp, on1(X), on1(C))
    assert dloss == pytest.approx(loss, rel=1e-13)
    assert dstats["primal_iterations"] == stats["primal_iterations"]
    close(dgrad, grad)
    assert ev.accuracy(dp, on1(X), on1(C)) == net.accuracy(p, X, C)
    sloss, sgrad, _ = SerialEvaluator(dnet).gradient(dp, on1(X), on1(C))
    assert sloss == pytest.approx(loss, rel=1e-9)


# ---------------------------------------------------------------- training on device1


@pytest.mark.parametrize("mode,optimizer", [("serial", "adam"), ("exact", "lbfgs"),
                                            ("oneshot", "sgd"), ("oneshot", "lbfgs")])
def test_three_training_steps_on_device1_equal_numpy(mode, optimizer):
    dev = strict_training(None, device=True, mode=mode, optimizer=optimizer)
    ref = strict_training(None, device=False, mode=mode, optimizer=optimizer)
    assert len(dev.history) == len(ref.history) == 3
    for got, want in zip(dev.history, ref.history):
        for key in ("loss", "objective", "gradient_norm", "step_size", "val_accuracy"):
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    # Parameters, the best parameters and every optimizer array stay on device1.
    close(dev.params, ref.params)
    close(dev.best["params"], ref.best["params"])
    opt, ref_opt = dev.optimizer.state_dict(), ref.optimizer.state_dict()
    arrays = [(k, v) for k, v in opt.items() if v is not None and not isinstance(v, int)]
    assert arrays
    for key, value in arrays:
        for got, want in zip(value if isinstance(value, list) else [value],
                             ref_opt[key] if isinstance(value, list) else [ref_opt[key]]):
            close(got, want)


def test_short_peaks_training_on_device1_equals_numpy():
    """The GPU suite's Peaks training (tests/test_gpu.py) on device1: equal to rounding
    (the array API's product is a matmul, NumPy's dense layers sum their product in
    braidpy's own order: the last bits differ), as on the GPU."""
    from backend_cases import peaks_training

    host_losses, host_params = peaks_training()
    losses, params = peaks_training(ON_DEVICE1)
    np.testing.assert_allclose(losses, host_losses, rtol=1e-12)
    np.testing.assert_allclose(params, host_params, rtol=1e-10, atol=1e-12)
    # The tolerance is tight: one step fewer is far outside it.
    fewer = peaks_training(iterations=4)[1]
    assert not np.allclose(fewer, host_params, rtol=1e-10, atol=1e-12)


def test_checkpoint_of_a_device_run_resumes_on_the_device(tmp_path):
    # The state comes back to the host (a NumPy checkpoint) and goes to the device again:
    # 2 steps, saved, then 2 more equal 4 uninterrupted steps.
    path = str(tmp_path / "run.ckpt")
    run = dict(mode="oneshot", optimizer="adam")
    strict_training(None, iterations=2, checkpoint=path, **run)
    whole = strict_training(None, iterations=4, **run)
    resumed = strict_training(None, iterations=2, **run)
    resumed.resume(path)
    resumed.config.iterations = 4
    resumed.run()
    assert resumed.params.device == DEVICE1
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history]
    close(resumed.params, host(whole.params))
