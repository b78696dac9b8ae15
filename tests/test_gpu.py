"""The GPU suite (``pytest -m gpu``): CuPy states on a real device. Every test here is
skipped, with the reason, where CuPy or a CUDA device is missing (any exception while
probing counts as missing); CuPy is imported only by the probe. The cuDNN tests also
need braidpy._cuda and cuDNN 9 (braidpy.cuda_info()['cudnn']); the 2-rank test needs
mpi4py. Run on one NVIDIA H200; what has and has not run there: docs/gpu.md."""

import importlib
import importlib.util
import warnings

import numpy as np
import pytest

import braidpy

pytestmark = pytest.mark.gpu

_PROBED = {}


def _probe():
    """(cupy, "") when CuPy and a device work, else (None, why)."""
    if not _PROBED:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cupy = importlib.import_module("cupy")
                if cupy.cuda.runtime.getDeviceCount() < 1:
                    raise RuntimeError("no CUDA device")
                float(cupy.arange(4.0).sum())  # a kernel and a copy back
            _PROBED["result"] = (cupy, "")
        except Exception as exc:  # noqa: BLE001 - whatever the probe hits means "no GPU"
            _PROBED["result"] = (None, f"CuPy or a CUDA device is missing: "
                                       f"{type(exc).__name__}: {exc}")
    return _PROBED["result"]


@pytest.fixture(scope="module")
def cp():
    cupy, why = _probe()
    if cupy is None:
        pytest.skip(why)
    return cupy


@pytest.fixture(scope="module")
def cuda(cp):
    if importlib.util.find_spec("braidpy._cuda") is None:
        pytest.skip("braidpy._cuda was not compiled (BRAIDPY_CUDA=OFF or no nvcc at build time)")
    from braidpy import _cuda

    return _cuda


class Heat(braidpy.App):
    """u' = -u + 0.1 sin(u) + c, elementwise, forward Euler (no matmul: a row of a
    stacked step is the same arithmetic as one state's, bitwise, on any device)."""

    def __init__(self, xp, dtype, n=257, batched=True):
        self.xp, self.dtype, self.n = xp, dtype, n
        self.c = xp.asarray(np.cos(np.arange(n) * 0.37), dtype=dtype)
        if not batched:
            self.step_stacked = None

    def init(self, t):
        value = 1.0 if t == self.tstart else 0.25
        return self.xp.asarray(np.linspace(value, -value, self.n), dtype=self.dtype)

    def _f(self, u, h):
        return u + h * (-u + self.dtype(0.1) * self.xp.sin(u) + self.c)

    def step(self, u, t0, t1, status):
        u[...] = self._f(u, self.dtype(t1 - t0))

    def step_stacked(self, U, t0s, t1s, status):
        h = self.xp.asarray(t1s - t0s, dtype=self.dtype).reshape(-1, 1)
        U[...] = self._f(U, h)


OPTIONS = dict(max_levels=3, cfactor=4, max_iter=30, abs_tol=1e-9, nrelax=1)


def solve(xp, dtype, batch=True, **kw):
    app = Heat(xp, dtype, batched=batch)
    tol = dict(abs_tol=1e-5) if dtype == np.float32 else {}  # reachable in float32
    return braidpy.solve(app, 0.0, 4.0, 256, batch=batch, **dict(OPTIONS, **tol, **kw))


def to_host(u):
    return u.get() if hasattr(u, "get") else np.asarray(u)


def test_the_device_is_found(cp):
    info = braidpy.cuda_info()
    assert info["devices"] >= 1 or not info["compiled"], info


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_cupy_solves_like_numpy(cp, dtype, rtol):
    ref = solve(np, dtype)
    got = solve(cp, dtype)
    assert got.iterations == ref.iterations
    assert isinstance(got.final, cp.ndarray) and got.final.dtype == dtype
    np.testing.assert_allclose(to_host(got.final), ref.final, rtol=rtol, atol=rtol)
    # CUDA's sin and NumPy's differ in the last bit, so a residual (a difference of
    # nearly equal states) matches only down to the states' rounding level, first seen
    # on an H200 (2026-11-26: 9e-11 vs 9e-11 + 2e-17 in float64, 5.321e-6 vs 5.332e-6
    # in float32): compare to that level, not relatively.
    rounding = 10 * np.finfo(dtype).eps * np.sqrt(Heat(np, dtype).n)
    np.testing.assert_allclose(got.residuals, ref.residuals, rtol=max(rtol * 100, 1e-10),
                               atol=rounding)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batched_equals_unbatched_bitwise_on_the_gpu(cp, dtype):
    on, off = solve(cp, dtype, batch=True), solve(cp, dtype, batch=False)
    assert on.counts["step_batch"] > 0 and off.counts["step_batch"] == 0
    assert on.iterations == off.iterations
    assert on.residuals == off.residuals
    assert np.array_equal(to_host(on.final), to_host(off.final))


def test_cupy_states_take_the_device_paths(cp, cuda):
    from braidpy import _core

    assert _core._default_path(cp.zeros(3)) == "device-f64"
    assert _core._default_path(cp.zeros(3, dtype=cp.float32)) == "device-f32"
    assert _core._default_path(cp.zeros(3, dtype=cp.int32)) == "python"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernels_match_cupy(cp, cuda, dtype):
    rows = cp.asarray(np.sin(np.arange(5 * 1001) * 1.3).reshape(5, 1001), dtype=dtype)
    norms = cuda.row_norms([rows[k] for k in range(5)])
    want = np.linalg.norm(to_host(rows).astype(np.float64), axis=1)
    np.testing.assert_allclose(norms, want, rtol=1e-13)
    assert cuda.row_norms([rows[3]]) == [norms[3]]  # a row's norm ignores the others
    def axpby(a, x, b, y):  # NumPy's operators in the kernels' cases and order
        return y if a == 0.0 and b == 1.0 else b * y if a == 0.0 else \
            y + a * x if b == 1.0 else b * y + a * x

    for a, b in [(0.0, 1.0), (0.0, -2.0), (0.5, 1.0), (-1.5, 0.25), (1.0, 0.0)]:
        x, y = rows[0].copy(), rows[1].copy()
        want = axpby(a, x, b, y)
        cuda.sum(a, x, b, y)
        assert y.dtype == dtype and cp.array_equal(y, want), (a, b)
        want = axpby(a, x, b, x)
        cuda.sum(a, x, b, x)  # x is y
        assert cp.array_equal(x, want), (a, b)
    block = cp.full((3, 1001), 7.0, dtype=dtype)
    cuda.gather([rows[2], None, rows[4]], block)
    assert cp.array_equal(block[0], rows[2]) and not block[1].any()
    assert cp.array_equal(block[2], rows[4])
    dst = cp.empty_like(rows[0])
    cuda.copy(rows[1], dst)
    assert cp.array_equal(dst, rows[1])


def test_xbraid_golden_cases_with_cupy_states(cp):
    xbraid_cases = pytest.importorskip("xbraid_cases")

    class Ex01(xbraid_cases.Ex01):
        def init(self, t):
            return cp.asarray(super().init(t))

        def step(self, u, t0, t1, status):
            u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

        def norm(self, u):
            return float(cp.sqrt(u[0] * u[0]))

    ran = 0
    for case in xbraid_cases.distinct():
        if not case["example"].startswith("ex-01") or case["options"]["nprocs"] != 1:
            continue
        o = case["options"]
        app = Ex01(0.4560000002384186 if "init_other_note" in o else o.get("init_other", 0.456))
        r = braidpy.solve(app, o["tstart"], o["tstop"], o["ntime"], **xbraid_cases._options(o))
        assert r.levels == case["nlevels"], case["id"]
        assert r.iterations == case["iterations"], case["id"]
        final = f"{r.residuals[-1] if r.residuals else -1.0:e}"  # as xbraid_cases.run
        assert final == case["final_residual_norm_printed"], case["id"]
        ran += 1
    assert ran > 0


def test_error_contract_with_cupy_states(cp):
    class Boom(ValueError):
        pass

    class Failing(Heat):
        def step(self, u, t0, t1, status):
            if status.iteration == 1 and status.level == 1:
                raise Boom("step failed on purpose")
            super().step(u, t0, t1, status)

    app = Failing(cp, np.float64, batched=False)
    with pytest.raises(Boom, match="on purpose"):
        braidpy.solve(app, 0.0, 4.0, 256, **OPTIONS)

    class Diverging(Heat):
        def step(self, u, t0, t1, status):
            u[...] = cp.inf

    with pytest.raises(braidpy.DivergenceError):
        braidpy.solve(Diverging(cp, np.float64, batched=False), 0.0, 4.0, 256, **OPTIONS)


# ------------------------------------------------------------------ rank messages


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(), (0,), (1001,), (3, 257), (2, 3, 4)])
def test_cupy_backend_round_trip_through_pinned_memory(cp, dtype, shape):
    from braidpy.backends import backend_for, wire
    from braidpy.backends.cupy import CupyBackend

    rng = np.random.default_rng(20261130)
    u0 = np.asarray(rng.standard_normal(shape)).astype(dtype)
    u = cp.asarray(u0)
    backend = backend_for(u)
    assert isinstance(backend, CupyBackend) and backend.device_kind == wire.CUDA
    buf = backend.pack(u)
    assert buf[6] == wire.CUDA
    attrs = cp.cuda.runtime.pointerGetAttributes(buf.ctypes.data)
    assert attrs.type == 1  # cudaMemoryTypeHost: page-locked host memory
    with cp.cuda.Stream():  # unpack on a non-default current stream
        back = backend.unpack(bytearray(buf))
        cp.cuda.get_current_stream().synchronize()
    assert isinstance(back, cp.ndarray) and back.dtype == dtype and back.shape == shape
    assert back.device == u.device and to_host(back).tobytes() == u0.tobytes()
    view = cp.asarray(np.arange(24.0)).reshape(4, 6)[:, ::2]  # strided on the device
    assert np.array_equal(to_host(backend.unpack(backend.pack(view))), to_host(view))


def test_two_ranks_with_cupy_states_send_through_the_cupy_backend(cp, tmp_path):
    """A 2-rank MGRIT solve with CuPy states: the messages between ranks are packed by
    CupyBackend into pinned blocks; the results equal the serial run's."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("mpi4py")
    from backend_cases import run_cupy
    from test_mpi import MPIEXEC, TIMEOUT

    out = tmp_path / "cupy.json"
    driver = Path(__file__).resolve().parent / "mpi_cupy_driver.py"
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(driver), str(out), "2", "real"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    par, ser = json.loads(out.read_text())["solve"], run_cupy(None, cp)
    assert par["kinds"] == ser["kinds"] == ["cupy"]
    assert all(n >= 1 for n in par["pinned_blocks"])
    assert par["iterations"] == ser["iterations"] > 1
    np.testing.assert_allclose(par["residuals"], ser["residuals"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(par["values"], ser["values"], rtol=1e-14, atol=0)


# ------------------------------------------------------------------ cuDNN convolutions


@pytest.fixture(scope="module")
def cudnn(cuda):
    info = cuda.cudnn_info()
    if info["version"] is None:
        pytest.skip(f"cuDNN was not found: {info['error']}")
    return cuda


def assert_exact_mgrit_gradient(net, p, X, C, loss, grad):
    """An exact two-level MGRIT gradient (several iterations each way) equals serial
    backprop's ``loss``, ``grad`` to 1e-10; returns ``grad`` on the host."""
    from braidpy.train.evaluate import LayerParallelEvaluator

    ev = LayerParallelEvaluator(net, p.copy(), X, C,
                                mgrit=dict(cfactor=4, max_levels=2, abs_tol=1e-13))
    mloss, mgrad, stats = ev.gradient(p, X, C)
    assert stats["primal_iterations"] > 1 and stats["adjoint_iterations"] > 1
    assert float(mloss) == pytest.approx(float(loss), rel=1e-10)
    g = to_host(grad)
    np.testing.assert_allclose(to_host(mgrad), g, rtol=1e-10, atol=1e-10 * np.max(np.abs(g)))
    return g


CONV_RTOL = {np.float64: 1e-12, np.float32: 1e-5}


def conv_close(got, want, dtype):
    """Relative to the largest entry (cancellation makes small entries meaningless)."""
    want = np.asarray(want)
    scale = float(np.max(np.abs(want))) or 1.0
    np.testing.assert_allclose(to_host(got), want, rtol=CONV_RTOL[dtype],
                               atol=CONV_RTOL[dtype] * scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_cudnn_convolutions_equal_numpys(cp, cudnn, dtype, k):
    from braidpy.nn import conv2d, conv2d_input_vjp, conv2d_weight_vjp
    from braidpy.nn import conv_backends as cb

    rng = np.random.default_rng(20261125 + k)
    x, K = rng.standard_normal((4, 3, 9, 7)), rng.standard_normal((5, 3, k, k))
    g = rng.standard_normal((4, 5, 9, 7))
    # the reference from the data the GPU sees (float32 inputs rounded first)
    x, K, g = (a.astype(dtype).astype(np.float64) for a in (x, K, g))
    dx_, dK_, dg_ = (cp.asarray(a, dtype=dtype) for a in (x, K, g))
    conv_close(cb.conv2d_cudnn(dx_, dK_), conv2d(x, K), dtype)
    conv_close(cb.conv2d_input_vjp_cudnn(dg_, dK_), conv2d_input_vjp(g, K), dtype)
    conv_close(cb.conv2d_weight_vjp_cudnn(dg_, dx_, k), conv2d_weight_vjp(g, x, k), dtype)
    conv_close(cb.bias_grad_cudnn(dg_), g.sum(axis=(0, 2, 3)), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cudnn_grouped_over_intervals_equals_per_interval_calls(cp, cudnn, dtype):
    from braidpy.nn import conv_backends as cb

    rng = np.random.default_rng(20261126)
    m, N, C, k = 5, 3, 4, 3
    U = cp.asarray(rng.standard_normal((m, N, C, 8, 6)), dtype=dtype)
    G = cp.asarray(rng.standard_normal((m, N, C, 8, 6)), dtype=dtype)
    Ks = cp.asarray(rng.standard_normal((m, C, C, k, k)), dtype=dtype)
    F = Ks.reshape(m * C, C, k, k)
    X, Gp = cb.pack_intervals(U), cb.pack_intervals(G)
    Y = cb.unpack_intervals(cb.conv2d_cudnn(X, F, m), m)
    dX = cb.unpack_intervals(cb.conv2d_input_vjp_cudnn(Gp, F, m), m)
    dK = cb.conv2d_weight_vjp_cudnn(Gp, X, k, m).reshape(m, C, C, k, k)
    db = cb.bias_grad_cudnn(Gp).reshape(m, C)
    bitwise = True
    for i in range(m):
        pairs = [(Y[i], cb.conv2d_cudnn(U[i], Ks[i])),
                 (dX[i], cb.conv2d_input_vjp_cudnn(G[i], Ks[i])),
                 (dK[i], cb.conv2d_weight_vjp_cudnn(G[i], U[i], k)),
                 (db[i], cb.bias_grad_cudnn(G[i]))]
        for got, want in pairs:
            conv_close(got, to_host(want), dtype)
            bitwise = bitwise and bool(cp.array_equal(got, want))
    print(f"grouped rows bitwise equal to per-interval calls ({np.dtype(dtype)}): {bitwise}")


def test_cudnn_measured_algorithms_give_the_heuristic_plans_results(cp, cudnn, monkeypatch):
    """BRAIDPY_CUDNN_BENCHMARK=1: a grouped convolution's forward, backward data and
    backward filter run the algorithms chosen by measurement (each operation measured,
    once per shape) and equal the heuristic plan's results to 1e-12 (float64)."""
    from braidpy.nn import conv_backends as cb

    rng = np.random.default_rng(20261203)
    m, N, C, k = 6, 3, 4, 3
    X = cb.pack_intervals(cp.asarray(rng.standard_normal((m, N, C, 9, 7))))
    Gp = cb.pack_intervals(cp.asarray(rng.standard_normal((m, N, C, 9, 7))))
    F = cp.asarray(rng.standard_normal((m * C, C, k, k)))

    def run():
        return (cb.conv2d_cudnn(X, F, m), cb.conv2d_input_vjp_cudnn(Gp, F, m),
                cb.conv2d_weight_vjp_cudnn(Gp, X, k, m))

    monkeypatch.delenv(cb.BENCHMARK_ENV, raising=False)
    heuristic = [to_host(a) for a in run()]
    plan = cb.cudnn_plan(X.shape, m * C, k, m)
    monkeypatch.setenv(cb.BENCHMARK_ENV, "1")
    measured = run()
    chosen = cb.cudnn_plan(X.shape, m * C, k, m)
    print(f"heuristic algorithms {plan['algorithms']}, measured {chosen['algorithms']} "
          f"(workspace {plan['request']} -> {chosen['request']} bytes)")
    assert plan["measured"] == (False, False, False)
    assert chosen["measured"] == (True, True, True), chosen
    for got, want in zip(measured, heuristic):
        conv_close(got, want, np.float64)
    plans = cudnn.cudnn_cache()["plans"]
    for got, want in zip(run(), heuristic):  # the cached measured plan: no new plan
        conv_close(got, want, np.float64)
    assert cudnn.cudnn_cache()["plans"] == plans


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_fused_step_epilogue_equals_the_array_code_bitwise(cp, cudnn, dtype, act):
    """braidpy._cuda's one-kernel epilogue of a batched conv step gives the bits of the
    unfused CuPy operations (unpack + bias, activation, step size, residual update), on
    strided bias rows (a coarse level's parameter slice) too."""
    from braidpy.nn import conv_backends as cb
    from braidpy.nn.activations import get_activation

    rng = np.random.default_rng(20261127)
    m, N, C = 6, 3, 4
    U = cp.asarray(rng.standard_normal((m, N, C, 7, 5)), dtype=dtype)
    Y = cp.asarray(rng.standard_normal((N, m * C, 7, 5)), dtype=dtype)
    bs = cp.asarray(rng.standard_normal((2 * m, C)), dtype=dtype)[::2]
    hs = cp.asarray(rng.uniform(0.1, 0.5, m), dtype=dtype)
    a = get_activation(act)
    want = U + hs.reshape(m, 1, 1, 1, 1) * a.value(cb.unpack_intervals(Y, m)
                                                   + bs.reshape(m, 1, C, 1, 1))
    got = cb.fused_epilogue(U, Y, bs, hs, a)
    assert got is not None and got.dtype == dtype
    assert bool(cp.array_equal(got, want))


def test_cuda_conv_layers_default_to_the_direct_kernels_and_cudnn_matches_numpy(cp, cudnn):
    from braidpy.nn import ConvLayer

    default = ConvLayer(4, 3, "tanh", xp=cp)
    assert default.backend == "cuda-direct", default.backend_choice
    layer = ConvLayer(4, 3, "tanh", xp=cp, backend="cudnn")
    ref = ConvLayer(4, 3, "tanh", backend="numpy")
    rng = np.random.default_rng(20261127)
    m = 6
    U, W = rng.standard_normal((m, 2, 4, 7, 5)), rng.standard_normal((m, 2, 4, 7, 5))
    Ks, bs = rng.standard_normal((m, 4, 4, 3, 3)) / 6, rng.standard_normal((m, 4))
    hs = rng.uniform(0.1, 0.5, m)
    d = [cp.asarray(a) for a in (W, U, Ks, bs, hs)]
    conv_close(layer.forward_batched(*d[1:]), ref.forward_batched(U, Ks, bs, hs), np.float64)
    conv_close(layer.adjoint_batched(*d), ref.adjoint_batched(W, U, Ks, bs, hs), np.float64)
    for got, want in zip(layer.gradient_batched(*d), ref.gradient_batched(W, U, Ks, bs, hs)):
        conv_close(got, want, np.float64)
    assert cudnn.cudnn_cache()["plans"] >= 1


@pytest.mark.parametrize("backend", ["cudnn", "cuda-direct"])
def test_conv_resnet_gradient_on_the_gpu_equals_numpy(cp, cuda, request, backend):
    """Loss and gradient of a small conv ResNet on the GPU (cuDNN layers, braidpy's
    direct kernels) equal the NumPy network's to 1e-10."""
    from braidpy.nn import ResNet

    if backend == "cudnn":
        request.getfixturevalue("cudnn")  # skips without cuDNN
    rng = np.random.default_rng(20261128)
    args, kw = ((1, 8, 8), 3), dict(width=4, nlayers=8, activation="tanh")
    net, dnet = ResNet(*args, **kw), ResNet(*args, **kw, device="cuda", backend=backend)
    assert dnet.layer.backend == backend, dnet.layer.backend_choice
    X = rng.standard_normal((5, 1, 8, 8))
    C = np.eye(3)[rng.integers(0, 3, 5)]
    p, dp = net.init_params(seed=20261128), dnet.init_params(seed=20261128)
    loss, grad = net.loss_and_gradient(p, X, C)
    dloss, dgrad = dnet.loss_and_gradient(dp, cp.asarray(X), cp.asarray(C))
    assert float(dloss) == pytest.approx(loss, rel=1e-10)
    np.testing.assert_allclose(to_host(dgrad), grad, rtol=1e-10,
                               atol=1e-10 * float(np.max(np.abs(grad))))


@pytest.mark.parametrize("backend", ["cuda-direct", "cudnn"])
def test_exact_mgrit_conv_gradient_on_the_gpu_equals_serial_backprop(cp, cuda, request,
                                                                   backend):
    """A conv ResNet's layer-parallel gradient on the GPU, both MGRIT solves to 1e-13,
    equals serial backprop on the GPU to 1e-10; and serial backprop agrees with a central
    finite difference of the GPU loss (one random direction)."""
    from braidpy.nn import ResNet

    if backend == "cudnn":
        request.getfixturevalue("cudnn")  # skips without cuDNN
    rng = np.random.default_rng(20261132)
    net = ResNet((1, 8, 8), 3, width=4, nlayers=16, activation="tanh", device="cuda",
                 backend=backend)
    assert net.layer.backend == backend
    p = net.init_params(seed=20261132)
    X = cp.asarray(rng.standard_normal((5, 1, 8, 8)))
    C = cp.asarray(np.eye(3)[rng.integers(0, 3, 5)])
    loss, grad = net.loss_and_gradient(p, X, C)
    g = assert_exact_mgrit_gradient(net, p, X, C, loss, grad)
    d = cp.asarray(rng.standard_normal(g.size))
    eps = 1e-6
    fd = (float(net.loss(p + eps * d, X, C)) - float(net.loss(p - eps * d, X, C))) / (2 * eps)
    assert abs(fd - float(grad @ d)) <= 1e-6 * max(1.0, abs(fd))


def test_cudnn_streams_equals_grouped_cudnn(cp, cudnn):
    """The streams-per-layer-block alternative gives the grouped batching's results."""
    from braidpy.nn import ConvLayer

    grouped = ConvLayer(4, 3, "tanh", backend="cudnn")
    streams = ConvLayer(4, 3, "tanh", backend="cudnn-streams")
    rng = np.random.default_rng(20261129)
    m = 7
    d = [cp.asarray(a) for a in (rng.standard_normal((m, 2, 4, 6, 6)),
                                 rng.standard_normal((m, 2, 4, 6, 6)),
                                 rng.standard_normal((m, 4, 4, 3, 3)) / 6,
                                 rng.standard_normal((m, 4)), rng.uniform(0.1, 0.5, m))]
    conv_close(streams.forward_batched(*d[1:]), to_host(grouped.forward_batched(*d[1:])),
               np.float64)
    conv_close(streams.adjoint_batched(*d), to_host(grouped.adjoint_batched(*d)), np.float64)
    for got, want in zip(streams.gradient_batched(*d), grouped.gradient_batched(*d)):
        conv_close(got, to_host(want), np.float64)


def assert_batched_is_single(cp, layer, batched, operands):
    """Each interval's rows of a batched (forward, adjoint, dK, db) equal the layer's
    single-interval calls bit for bit; operands (W, U, Ks, bs, hs) on the device."""
    F, A, dK, db = batched
    W, U, Ks, bs, hs = operands
    for i in range(hs.shape[0]):
        h = hs[i:i + 1].reshape(())
        assert bool(cp.array_equal(F[i], layer.forward(U[i], Ks[i], bs[i], h)))
        assert bool(cp.array_equal(A[i], layer.adjoint(W[i], U[i], Ks[i], bs[i], h)))
        gK, gb = layer.gradient(W[i], U[i], Ks[i], bs[i], h)
        assert bool(cp.array_equal(dK[i], gK)) and bool(cp.array_equal(db[i], gb))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", ["tanh", "relu", "smooth_relu"])
def test_direct_conv_kernels_equal_numpy_and_their_host_twins(cp, cuda, dtype, act):
    """The "cuda-direct" backend (braidpy's own conv kernels): forward, adjoint and
    parameter gradients equal the NumPy kernels (float64 1e-12, float32 1e-5) and the
    host twins the CPU tests check (to rounding: CUDA's tanh is not glibc's); batched
    rows equal single-interval calls bit for bit on the GPU."""
    from braidpy import _core
    from braidpy.nn import ConvLayer

    layer = ConvLayer(4, 3, act, backend="cuda-direct")
    ref = ConvLayer(4, 3, act, backend="numpy")
    rng = np.random.default_rng(20261130)
    m = 5
    host = [rng.standard_normal((m, 3, 4, 7, 6)), rng.standard_normal((m, 3, 4, 7, 6)),
            rng.standard_normal((m, 4, 4, 3, 3)) / 6, rng.standard_normal((m, 4)),
            rng.uniform(0.1, 0.5, m)]
    host = [a.astype(dtype) for a in host]
    ref_args = [a.astype(np.float64) for a in host]
    W, U, Ks, bs, hs = (cp.asarray(a) for a in host)
    F = layer.forward_batched(U, Ks, bs, hs)
    A = layer.adjoint_batched(W, U, Ks, bs, hs)
    dK, db = layer.gradient_batched(W, U, Ks, bs, hs)
    assert F.dtype == dtype and dK.dtype == dtype
    conv_close(F, ref.forward_batched(*ref_args[1:]), dtype)
    conv_close(A, ref.adjoint_batched(*ref_args), dtype)
    conv_close(dK, ref.gradient_batched(*ref_args)[0], dtype)
    conv_close(db, ref.gradient_batched(*ref_args)[1], dtype)
    twin = np.empty_like(host[1])
    _core._host_conv.conv_direct_step(host[1], host[2], host[3], host[4], twin,
                                      {"tanh": 1, "relu": 2, "smooth_relu": 3}[act])
    conv_close(F, twin.astype(np.float64), dtype)
    assert_batched_is_single(cp, layer, (F, A, dK, db), (W, U, Ks, bs, hs))


#: Wide conv layers, (m, N, C, H, W, k): 16, 32 and 64 channels (as benchmarked)
#: on 28x28 and 32x32 planes, and C = 24 on planes over partial tiles; k 3 and 5.
WIDE_CONV = [(4, 8, 16, 28, 28, 3), (2, 4, 32, 28, 28, 5), (2, 2, 64, 32, 32, 3),
             (3, 2, 24, 17, 20, 5)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", WIDE_CONV)
def test_wide_direct_conv_kernels_on_the_gpu(cp, cuda, dtype, shape):
    """The wide direct kernels (the tiled ones for 16 channels in float32): forward,
    adjoint and parameter gradients equal the NumPy kernels (CONV_RTOL) with tanh and
    relu; with relu (no libm call) they are the host twin's element functions bit for bit
    (the same sums in the same order, no contraction); batched rows equal single calls."""
    from braidpy import _core
    from braidpy.nn import ConvLayer
    from braidpy.nn.conv_direct import kernel_family

    m, N, C, H, W, k = shape
    family = "tiled" if C == 16 and dtype == np.float32 else "wide"
    assert kernel_family((m, N, C, H, W), (m, C, C, k, k), dtype) == family
    rng = np.random.default_rng(20261201)
    host = [rng.standard_normal((m, N, C, H, W)), rng.standard_normal((m, N, C, H, W)),
            rng.standard_normal((m, C, C, k, k)) / (C * k), rng.standard_normal((m, C)),
            rng.uniform(0.1, 0.5, m)]
    host = [a.astype(dtype) for a in host]
    ref_args = [a.astype(np.float64) for a in host]
    dev = [cp.asarray(a) for a in host]
    for act in ("tanh", "relu"):
        layer = ConvLayer(C, k, act, backend="cuda-direct")
        ref = ConvLayer(C, k, act, backend="numpy")
        F = layer.forward_batched(*dev[1:])
        A = layer.adjoint_batched(*dev)
        dK, db = layer.gradient_batched(*dev)
        assert F.dtype == dtype and A.dtype == dtype and dK.dtype == dtype
        conv_close(F, ref.forward_batched(*ref_args[1:]), dtype)
        conv_close(A, ref.adjoint_batched(*ref_args), dtype)
        for got, want in zip((dK, db), ref.gradient_batched(*ref_args)):
            conv_close(got, want, dtype)
    twin = _core._host_conv
    Wh, Uh, Kh, bh, hh = host
    F_h, G_h, A_h = (np.empty_like(Uh) for _ in range(3))
    dK_h, db_h = np.empty_like(Kh), np.empty_like(bh)
    twin.conv_direct_step(Uh, Kh, bh, hh, F_h, 2, kernels="element")
    twin.conv_direct_g(Wh, Uh, Kh, bh, hh, G_h, 2, kernels="element")
    twin.conv_direct_transpose_add(Wh, G_h, Kh, A_h, kernels="element")
    twin.conv_direct_param_grads(G_h, Uh, dK_h, db_h)
    for got, want in zip((F, A, dK, db), (F_h, A_h, dK_h, db_h)):  # relu: the last layer's
        assert np.array_equal(to_host(got), want)
    assert_batched_is_single(cp, layer, (F, A, dK, db), dev)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(2, 4, 32, 28, 28, 3), (2, 3, 32, 17, 20, 5),
                                   (1, 2, 33, 9, 11, 3)])
def test_grouped_weight_gradient_on_the_gpu_equals_its_host_twin(cp, cuda, dtype, shape):
    """The grouped weight-gradient kernel (C >= 16: a block per group of output and input
    channels and dy, the trees pass by pass through shared memory) on the device gives its
    host twin's bits, and the row kernel's (the same sums in the same order); db too. G is
    given, so no activation (libm) is involved. 33 channels: partial groups."""
    from braidpy import _core

    m, N, C, H, W, k = shape
    twin = _core._host_conv
    assert twin.conv_direct_wgrad_family((m, N, C, H, W), (m, C, C, k, k)) == "grouped"
    rng = np.random.default_rng(20261202)
    G, U = (rng.standard_normal((m, N, C, H, W)).astype(dtype) for _ in range(2))
    dK, db = cp.empty((m, C, C, k, k), dtype=dtype), cp.empty((m, C), dtype=dtype)
    cuda.conv_direct_param_grads(cp.asarray(G), cp.asarray(U), dK, db)
    for kernels in ("grouped", "rows"):
        dK_h, db_h = np.empty((m, C, C, k, k), dtype=dtype), np.empty((m, C), dtype=dtype)
        twin.conv_direct_param_grads(G, U, dK_h, db_h, kernels=kernels)
        assert np.array_equal(to_host(dK), dK_h), kernels
        assert np.array_equal(to_host(db), db_h), kernels


def test_short_peaks_training_on_the_gpu_equals_numpy(cp):
    """Five one-shot Adam steps on Peaks with the network on CUDA: the same losses and
    parameters as on the host, to rounding (test_device runs the same on
    array-api-strict's second device)."""
    from backend_cases import peaks_training

    host_losses, host_params = peaks_training()
    losses, params = peaks_training(dict(device="cuda"))
    np.testing.assert_allclose(losses, host_losses, rtol=1e-10)
    np.testing.assert_allclose(params, host_params, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("mode", ["serial", "oneshot"])
def test_batched_validation_and_evaluation_on_the_gpu_equal_numpy(cp, mode, monkeypatch):
    """Validation inside Trainer.step in batches of 3 (3, 3, 1: a remainder) and
    ResNet.evaluate/predict/probabilities in batches of 1, 4 and the default on CuPy:
    NumPy's accuracies and class ids, loss and probabilities to
    rounding, the ids left on the GPU. test_device_evaluation.py runs the same on
    array-api-strict's second device."""
    import braidpy.nn.network as network
    from evaluation_cases import network as make_network
    from evaluation_cases import validating_trainer

    ref = validating_trainer(mode)
    ref.run()
    dev = validating_trainer(mode, dict(device="cuda"))
    monkeypatch.setattr(network, "EVALUATION_STATE_BYTES", 8 * dev.net.features * 3)
    dev.run()
    assert [r["val_accuracy"] for r in dev.history] == [r["val_accuracy"] for r in ref.history]
    for kind in ("dense", "conv"):
        net, p, X, C = make_network(kind)
        dnet, dp = make_network(kind, dict(device="cuda"))[:2]
        loss, acc = net.evaluate(p, X, C)
        for batch in (1, 4, None):
            dloss, dacc = dnet.evaluate(dp, X, C, batch)
            assert dacc == acc and dloss == pytest.approx(loss, rel=1e-10)
            ids = dnet.predict(dp, X, batch)
            assert isinstance(ids, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(ids), net.predict(p, X))
            np.testing.assert_allclose(cp.asnumpy(dnet.probabilities(dp, X, batch)),
                                       net.probabilities(p, X), rtol=1e-10, atol=1e-15)


def test_evaluate_and_predict_with_device_cuda_equal_device_cpu(cp, tmp_path, capsys):
    """``braidpy evaluate``/``predict --device cuda --batch-size 4`` on a checkpoint:
    the accuracy and class ids of --device cpu, loss and probabilities to rounding."""
    import json

    from cli_runner import in_process
    from evaluation_cases import tiny_checkpoint

    ckpt, samples = tiny_checkpoint(tmp_path, lambda *args: in_process(capsys, *args))
    data = ("peaks", "--samples", "40", "--validation-samples", "9", "--json")
    results, outputs = {}, {}
    for device in ("cpu", "cuda"):
        status, out, err = in_process(capsys, "evaluate", ckpt, *data, "--device", device,
                                      "--batch-size", "4")
        assert status == 0, err
        results[device] = json.loads(out)
        for name in ("ids", "p"):
            outputs[device, name] = tmp_path / f"{device}-{name}.npy"
            status, _, err = in_process(capsys, "predict", ckpt, samples, "-o",
                                        outputs[device, name], "--device", device,
                                        "--batch-size", "4",
                                        *(["--probabilities"] if name == "p" else []))
            assert status == 0, err
    assert results["cuda"]["device"] == "cuda:0"
    assert results["cuda"]["accuracy"] == results["cpu"]["accuracy"]
    assert results["cuda"]["loss"] == pytest.approx(results["cpu"]["loss"], rel=1e-10)
    np.testing.assert_array_equal(np.load(outputs["cuda", "ids"]), np.load(outputs["cpu", "ids"]))
    np.testing.assert_allclose(np.load(outputs["cuda", "p"]), np.load(outputs["cpu", "p"]),
                               rtol=1e-10, atol=1e-15)


# ------------------------------------------------------------ braidpy.torch on CUDA

@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("oneshot", [None, (2, 2)])
def test_torch_layer_parallel_on_the_gpu_equals_serial_autograd(torch_cuda, kind, oneshot):
    """CUDA tensors end to end: exact mode equals plain autograd to 1e-10; one-shot
    equals the same one-shot on the CPU (the GPU changes rounding, not the algorithm)."""
    torch = torch_cuda
    from torch_cases import conv_blocks, dense_blocks, loss_weights, rel, serial_reference

    from braidpy.torch import LayerParallel

    gen = torch.Generator().manual_seed(5)
    if kind == "dense":
        make, shape = (lambda: dense_blocks(16, 4)), (3, 4)
    else:
        make, shape = (lambda: conv_blocks(16, 2)), (2, 2, 5, 5)
    x = torch.randn(shape, dtype=torch.float64, generator=gen)
    results = {}
    for device in ("cpu", "cuda"):
        blocks = [b.to(device) for b in make()]
        xd = x.to(device, copy=True).requires_grad_()  # a leaf of its own per device
        net = LayerParallel(blocks, 1.0, abs_tol=1e-13, cfactor=4, oneshot=oneshot)
        y = net(xd)
        assert y.device.type == device
        (y * loss_weights(y)).sum().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).cpu()
        results[device] = (y.detach().cpu(), xd.grad.cpu(), grads, net.batch_path)
        if device == "cuda" and oneshot is None:
            ref_out, ref_dx, ref_dp = serial_reference(blocks, 1.0, x.to(device))
            ref_grads = torch.cat([g.reshape(-1) for per in ref_dp for g in per]).cpu()
            assert rel(results[device][0], ref_out.cpu()) < 1e-12
            assert rel(results[device][1], ref_dx.cpu()) < 1e-10
            assert rel(grads, ref_grads) < 1e-10
        net.close()
    assert results["cuda"][3] == results["cpu"][3] == "grouped"
    for a, b in zip(results["cuda"][:3], results["cpu"][:3]):
        assert rel(a, b) < 1e-12


def test_calibrate_on_the_gpu_writes_device_costs(cp, tmp_path):
    """braidpy calibrate --device cuda: layer costs timed on the GPU (wall clock,
    synchronized) and a file naming the device that braidpy plan reads."""
    from braidpy.perf import load_calibration, save_calibration
    from braidpy.perf.calibrate import calibrate

    cal = calibrate(["dense:8"], samples=(16, 256), rows=(1, 4), repeats=2, device="cuda")
    assert cal.device == "cuda:0"
    fwd = cal.layers[0].costs["fwd"]
    assert fwd.a > 0 or fwd.b > 0
    assert 0.25 <= cal.layers[0].sweep <= 8.0
    save_calibration(cal, str(tmp_path / "gpu.json"))
    assert load_calibration(str(tmp_path / "gpu.json")).device == "cuda:0"


# ----------------------------------------------------------------------- fused dense steps

@pytest.fixture(scope="module")
def fused_dense(cuda):
    from braidpy.nn import dense

    why = dense.fused_unavailable()
    if why is not None:
        pytest.skip(f"fused dense kernels: {why}")
    return dense


# cuBLAS's products and the device's tanh against NumPy's (OpenBLAS, glibc): rounding
# differences only, relative to the largest entry of the result, as for cuDNN's.
dense_close = conv_close


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("act", ["tanh", "relu", "smooth_relu"])
def test_fused_dense_steps_on_the_gpu_equal_numpys(cp, fused_dense, act, dtype):
    """One kernel after cuBLAS's product: forward, adjoint, gradient (single and stacked
    over intervals, out=U in place) equal NumPy's kernels to CONV_RTOL; CuPy arrays
    take them through braidpy.nn.dense's public functions by default."""
    dense = fused_dense
    rng = np.random.default_rng(20261205)
    m, batch, width = 6, 96, 16
    W, U = (rng.standard_normal((m, batch, width)).astype(dtype) for _ in range(2))
    Ks = (rng.standard_normal((m, width, width)) / 4).astype(dtype)
    bs = (rng.standard_normal((m, width)) / 4).astype(dtype)
    hs = rng.uniform(0.1, 0.5, m).astype(dtype)
    dW, dU, dKs, dbs, dhs = (cp.asarray(a) for a in (W, U, Ks, bs, hs))
    assert dense.gpu_choice()[0] == "cuda-fused"
    h = float(hs[0])
    dense_close(dense.dense_forward(dU[0], dKs[0], dbs[0], h, act),
                dense.dense_forward(U[0], Ks[0], bs[0], h, act), dtype)
    dense_close(dense.dense_adjoint(dW[0], dU[0], dKs[0], dbs[0], h, act),
                dense.dense_adjoint(W[0], U[0], Ks[0], bs[0], h, act), dtype)
    for got, want in zip(dense.dense_adjoint_and_gradient(dW[0], dU[0], dKs[0], dbs[0], h, act),
                         dense.dense_adjoint_and_gradient(W[0], U[0], Ks[0], bs[0], h, act)):
        dense_close(got, want, dtype)
    dense_close(dense.dense_forward_batched(dU, dKs, dbs, dhs, act),
                dense.dense_forward_batched(U, Ks, bs, hs, act), dtype)
    dense_close(dense.dense_adjoint_batched(dW, dU, dKs, dbs, dhs, act),
                dense.dense_adjoint_batched(W, U, Ks, bs, hs, act), dtype)
    for got, want in zip(dense.dense_gradient_batched(dW, dU, dKs, dbs, dhs, act),
                         dense.dense_gradient_batched(W, U, Ks, bs, hs, act)):
        dense_close(got, want, dtype)
    inplace = dU.copy()
    assert dense.dense_forward_batched(inplace, dKs, dbs, dhs, act, out=inplace) is inplace
    dense_close(inplace, dense.dense_forward_batched(U, Ks, bs, hs, act), dtype)
    # each stacked row is the single step's result (the same element functions)
    single = dense._gpu_forward(dU[2], dKs[2], dbs[2], dhs[2], act)
    dense_close(single, to_host(dense._gpu_forward_batched(dU, dKs, dbs, dhs, act))[2], dtype)


def test_fused_dense_layer_parallel_gradient_on_the_gpu_equals_serial_backprop(cp, fused_dense):
    """A dense ResNet on CuPy with the "cuda-fused" kernels: its exact layer-parallel
    gradient (both MGRIT solves to 1e-13) equals serial backprop on the GPU to 1e-10, and
    serial backprop with the fused kernels equals the NumPy network's to 1e-10."""
    from braidpy.nn import ResNet

    rng = np.random.default_rng(20261206)
    kw = dict(width=8, nlayers=32, activation="smooth_relu")
    net = ResNet((2,), 3, **kw, device="cuda", backend=fused_dense.fused_kernels())
    assert net.layer.backend == "cuda-fused"
    p = net.init_params(seed=20261206)
    Xh, Ch = rng.standard_normal((50, 2)), np.eye(3)[rng.integers(0, 3, 50)]
    X, C = cp.asarray(Xh), cp.asarray(Ch)
    loss, grad = net.loss_and_gradient(p, X, C)
    host = ResNet((2,), 3, **kw)
    hloss, hgrad = host.loss_and_gradient(to_host(p), Xh, Ch)
    assert float(loss) == pytest.approx(hloss, rel=1e-10)
    np.testing.assert_allclose(to_host(grad), hgrad, rtol=1e-10,
                               atol=1e-10 * np.max(np.abs(hgrad)))
    assert_exact_mgrit_gradient(net, p, X, C, loss, grad)


# ----------------------------------------------------------------------- TF32 cuDNN convolutions

def test_tf32_one_shot_conv_gradient_stays_near_float32s(cp, cudnn, monkeypatch):
    """BRAIDPY_TF32=1: a float32 conv ResNet's one-shot (2, 2) gradient with cuDNN's TF32
    tensor-core math is within 2e-2 (relative, in norm) of the same gradient with FMA
    math. TF32 rounds each product's inputs to a 10-bit mantissa (about 5e-4 relative);
    2e-2 leaves room for 16 layers and the loss's cancellation. Prints both gradients'
    difference (the floor docs/gpu.md estimates)."""
    from braidpy.nn import ResNet
    from braidpy.nn.conv_backends import TF32_ENV
    from braidpy.train.evaluate import LayerParallelEvaluator

    rng = np.random.default_rng(20261207)
    net = ResNet((1, 8, 8), 3, width=8, nlayers=16, activation="tanh", device="cuda",
                 backend="cudnn")
    p = net.init_params(seed=20261207).astype(cp.float32)
    X = cp.asarray(rng.standard_normal((32, 1, 8, 8)), dtype=cp.float32)
    C = cp.asarray(np.eye(3)[rng.integers(0, 3, 32)], dtype=cp.float32)
    grads = {}
    for flag in ("0", "1"):
        monkeypatch.setenv(TF32_ENV, flag)
        ev = LayerParallelEvaluator(net, p.copy(), X, C, oneshot=(2, 2),
                                    mgrit=dict(cfactor=4, max_levels=2))
        _, grad, _ = ev.gradient(p, X, C)
        assert grad.dtype == cp.float32
        grads[flag] = to_host(grad).astype(np.float64)
    diff = np.linalg.norm(grads["1"] - grads["0"]) / np.linalg.norm(grads["0"])
    print(f"TF32 vs FMA float32 one-shot gradient: relative difference {diff:.2e}")
    assert diff <= 2e-2
