"""The "cuda-direct" conv backend without a GPU: its kernels' element functions and
reductions (csrc/cuda/conv_direct.hpp) run on the host as braidpy._core._host_conv, with
braidpy._cuda's argument names and checks. Swapped in for braidpy._cuda, they run the
backend's whole wiring on NumPy arrays, checked against braidpy's NumPy conv kernels
(an independent im2col implementation) and finite differences. The GPU runs the same
functions in tests/test_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from braidpy import _core
from braidpy.nn import ConvLayer, backend_names
from braidpy.nn.activations import SMOOTH_RELU_EPS, Activation
from braidpy.nn import conv_direct as cd

SEED = 20261126
HOST = _core._host_conv


class HostCuda:
    """braidpy._cuda as the backend sees it: the host twins, and one "device"."""

    conv_direct_step = staticmethod(HOST.conv_direct_step)
    conv_direct_g = staticmethod(HOST.conv_direct_g)
    conv_direct_transpose_add = staticmethod(HOST.conv_direct_transpose_add)
    conv_direct_param_grads = staticmethod(HOST.conv_direct_param_grads)

    @staticmethod
    def info():
        return {"devices": 1, "error": None}


@pytest.fixture
def host_cuda(monkeypatch):
    monkeypatch.setattr(cd, "_cuda", lambda: HostCuda)
    monkeypatch.delenv("BRAIDPY_CONV_BACKEND", raising=False)


def data(m, N, C, H, W, k, dtype=np.float64, seed=SEED):
    rng = np.random.default_rng(seed)
    U, Wa = (rng.standard_normal((m, N, C, H, W)).astype(dtype) for _ in range(2))
    Ks = (rng.standard_normal((m, C, C, k, k)) / (C * k)).astype(dtype)
    bs = rng.standard_normal((m, C)).astype(dtype)
    hs = rng.uniform(0.1, 0.5, m).astype(dtype)
    return Wa, U, Ks, bs, hs


def close(got, want, rtol):
    scale = float(np.max(np.abs(want))) or 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("act", ["tanh", "relu", "smooth_relu"])
@pytest.mark.parametrize("shape", [(4, 2, 3, 7, 5, 3), (3, 1, 2, 6, 6, 5), (2, 3, 4, 5, 9, 1),
                                   (1, 2, 3, 4, 4, 7), (2, 1, 3, 20, 33, 3),
                                   (2, 1, 17, 3, 4, 3), (1, 1, 16, 5, 6, 7)])
def test_direct_kernels_equal_the_numpy_kernels(host_cuda, act, shape):
    """forward, adjoint and parameter gradients, batched and single, float64 to 1e-12
    (odd sizes, H != W, k from 1 to 7, one interval; planes over several tiles with
    partial ones; C = 17 and a 16-channel 7x7 kernel take the wide kernels, the others
    the tiled ones)."""
    layer, ref = ConvLayer(shape[2], shape[5], act, backend="cuda-direct"), \
        ConvLayer(shape[2], shape[5], act, backend="numpy")
    assert layer.backend == "cuda-direct"
    Wa, U, Ks, bs, hs = data(*shape)
    close(layer.forward_batched(U, Ks, bs, hs), ref.forward_batched(U, Ks, bs, hs), 1e-12)
    close(layer.adjoint_batched(Wa, U, Ks, bs, hs), ref.adjoint_batched(Wa, U, Ks, bs, hs),
          1e-12)
    for got, want in zip(layer.gradient_batched(Wa, U, Ks, bs, hs),
                         ref.gradient_batched(Wa, U, Ks, bs, hs)):
        assert got.shape == want.shape
        close(got, want, 1e-12)
    i, h = shape[0] - 1, float(hs[-1])
    close(layer.forward(U[i], Ks[i], bs[i], h), ref.forward(U[i], Ks[i], bs[i], h), 1e-12)
    close(layer.adjoint(Wa[i], U[i], Ks[i], bs[i], h),
          ref.adjoint(Wa[i], U[i], Ks[i], bs[i], h), 1e-12)
    for got, want in zip(layer.gradient(Wa[i], U[i], Ks[i], bs[i], h),
                         ref.gradient(Wa[i], U[i], Ks[i], bs[i], h)):
        assert got.shape == want.shape
        close(got, want, 1e-12)


#: Wide layers, (m, N, C, H, W, k): C = 16 (float64: over the tiled
#: kernels' 48 KiB), 24, 32, 33, 64 (C not a multiple of the chunk of 4 or the group of
#: 16 channels), k 3 and 5, planes not multiples of 16 (one over two tiles of rows).
WIDE = [(2, 1, 16, 5, 6, 3), (1, 2, 24, 17, 9, 3), (1, 1, 32, 6, 5, 5), (2, 1, 33, 4, 6, 5),
        (1, 1, 64, 7, 5, 3), (1, 1, 64, 5, 4, 5)]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("shape", WIDE)
def test_wide_layers_equal_the_numpy_kernels(host_cuda, shape, dtype, rtol):
    """forward, adjoint and parameter gradients of the wide layers, in the dtype, against
    the NumPy kernels in float64 (the wide kernels take them: C = 16 in float32 the tiled)."""
    m, N, C, H, W, k = shape
    want_family = "tiled" if C == 16 and dtype == np.float32 else "wide"
    assert cd.kernel_family((m, N, C, H, W), (m, C, C, k, k), dtype) == want_family
    layer = ConvLayer(C, k, "tanh", backend="cuda-direct")
    ref = ConvLayer(C, k, "tanh", backend="numpy")
    args = data(*shape, dtype)
    args64 = [a.astype(np.float64) for a in args]
    got = layer.forward_batched(*args[1:])
    assert got.dtype == dtype
    close(got, ref.forward_batched(*args64[1:]), rtol)
    close(layer.adjoint_batched(*args), ref.adjoint_batched(*args64), rtol)
    for g, w in zip(layer.gradient_batched(*args), ref.gradient_batched(*args64)):
        assert g.dtype == dtype
        close(g, w, rtol)


def families_of(shape, dtype):
    """The kernel families that can take a shape: element and wide always here, tiled
    where the GPU would pick it."""
    m, N, C, H, W, k = shape
    tiled = cd.kernel_family((m, N, C, H, W), (m, C, C, k, k), dtype) == "tiled"
    return ["element", "wide"] + (["tiled"] if tiled else [])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", WIDE + [(2, 1, 8, 17, 5, 3), (1, 1, 5, 6, 7, 5)])
def test_kernel_families_give_the_same_bits(shape, dtype):
    """Every family that can take a shape gives the element functions' bits in every mode
    (forward step, the adjoint's G, its transpose; the parameter gradients' reductions
    then read the same G), each activation."""
    Wa, U, Ks, bs, hs = data(*shape, dtype)
    results = {}
    for family in families_of(shape, dtype):
        out = []
        for act in (1, 2, 3):
            F, G, A = (np.empty_like(U) for _ in range(3))
            HOST.conv_direct_step(U, Ks, bs, hs, F, act, kernels=family)
            HOST.conv_direct_g(Wa, U, Ks, bs, hs, G, act, kernels=family)
            HOST.conv_direct_transpose_add(Wa, G, Ks, A, kernels=family)
            dK, db = np.empty_like(Ks), np.empty_like(bs)
            HOST.conv_direct_param_grads(G, U, dK, db)
            out += [F, G, A, dK, db]
        results[family] = out
    for family, out in results.items():
        for got, want in zip(out, results["element"]):
            assert np.array_equal(got, want), family


def documented_family(shape, itemsize):
    """conv_direct.py's rule: tiled where C <= 16 and C halo planes of (16 + k - 1)^2
    and the C*C*k*k kernel fit 48 KiB, else wide (grids under 2^31 blocks)."""
    m, N, C, H, W, k = shape
    halo = 16 + k - 1
    if C <= 16 and (C * halo * halo + C * C * k * k) * itemsize <= 48 * 1024:
        return "tiled"
    return "wide"


def test_kernel_family_is_the_documented_rule():
    for dtype in (np.float64, np.float32):
        itemsize = np.dtype(dtype).itemsize
        for C in range(1, 81):
            for k in (1, 3, 5, 7):
                got = cd.kernel_family((2, 32, C, 28, 28), (2, C, C, k, k), dtype)
                assert got == documented_family((2, 32, C, 28, 28, k), itemsize), (C, k, dtype)


@pytest.mark.parametrize("U, k, dtype, family", [
    ((64, 32, 8, 28, 28), 3, "float64", "tiled"),
    ((64, 32, 16, 28, 28), 3, "float32", "tiled"),
    ((64, 32, 16, 28, 28), 3, "float64", "wide"),
    ((64, 128, 32, 32, 32), 5, "float32", "wide"),
    ((64, 128, 64, 32, 32), 7, "float64", "wide"),
    ((2 ** 29, 1, 8, 16, 16), 3, "float64", "tiled"),    # 2^29 tiles: a grid of 2^29
    ((2 ** 29, 1, 64, 16, 16), 3, "float64", "element"),  # 4 groups each: 2^31 blocks
])
def test_kernel_family_of_the_wide_shapes_and_grid_limits(U, k, dtype, family):
    assert cd.kernel_family(U, (U[0], U[2], U[2], k, k), dtype) == family


def test_kernel_family_and_forced_families_refuse_what_does_not_fit():
    _, U, Ks, bs, hs = data(1, 1, 16, 4, 4, 3)
    out = np.empty_like(U)
    with pytest.raises(ValueError, match="dtype must be float32 or float64, got int64"):
        cd.kernel_family(U.shape, Ks.shape, np.int64)
    with pytest.raises(ValueError, match="itemsize must be 4 or 8, got 2"):
        HOST.conv_direct_family(U.shape, Ks.shape, 2)
    with pytest.raises(ValueError, match=r"K must be \(m, C, C, k, k\)"):
        cd.kernel_family(U.shape, (1, 16, 16, 2, 2), np.float64)
    with pytest.raises(ValueError, match="the 'tiled' kernels cannot take C = 16, k = 3 in "
                                         "8-byte floats"):
        HOST.conv_direct_step(U, Ks, bs, hs, out, 1, kernels="tiled")
    with pytest.raises(ValueError, match="kernels must be 'auto', 'element', 'tiled' or "
                                         "'wide', got 'fast'"):
        HOST.conv_direct_transpose_add(U, U, Ks, out, kernels="fast")


#: Weight-gradient shapes (m, N, C, H, W): C from 1 to 64, multiples of the groups (4
#: output channels; 4, 2, 1 input channels for k 1, 3, 5-7) or not, odd planes, N 1 and
#: several; the last has 780 positions, 3 or more per thread of 256 (a changed sum order
#: changes bits).
WGRAD = [(2, 2, 1, 5, 7), (2, 1, 3, 7, 5), (2, 3, 8, 5, 3), (1, 2, 16, 3, 7),
         (2, 1, 17, 5, 5), (1, 1, 32, 3, 5), (1, 2, 64, 3, 3), (1, 4, 9, 15, 13)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("shape", WGRAD)
def test_grouped_weight_gradient_equals_the_row_kernels_bits(shape, k, dtype):
    """The grouped weight-gradient kernel (a block per group of output and input channels
    and dy) and the row kernel (a block per row of dK) give the same bits: the same sums in
    the same order; "auto" is the GPU's pick (grouped where C >= 16), and db is the same
    reduction either way."""
    m, N, C, H, W = shape
    Wa, U, Ks, bs, hs = data(m, N, C, H, W, k, dtype)
    G = np.empty_like(U)
    HOST.conv_direct_g(Wa, U, Ks, bs, hs, G, 1)
    out = {}
    for kernels in ("rows", "grouped", "auto"):
        # dK the head of a longer buffer: a write past dK's end lands in the tail
        buf = np.full(Ks.size + 4 * (C + 4) * k * k, np.nan, dtype=dtype)
        dK, db = buf[:Ks.size].reshape(Ks.shape), np.full_like(bs, np.nan)
        HOST.conv_direct_param_grads(G, U, dK, db, kernels=kernels)
        assert np.isnan(buf[Ks.size:]).all(), kernels
        out[kernels] = dK, db
    for kernels in ("grouped", "auto"):
        for got, want in zip(out[kernels], out["rows"]):
            assert np.array_equal(got, want), kernels
    assert not np.isnan(out["rows"][0]).any()
    want_family = "grouped" if C >= 16 else "rows"
    assert HOST.conv_direct_wgrad_family(U.shape, Ks.shape) == want_family


@pytest.mark.parametrize("shape", [(2, 2, 18, 7, 5, 1), (1, 2, 32, 6, 5, 3), (2, 1, 17, 5, 6, 5),
                                   (1, 1, 33, 5, 3, 7)])
def test_wide_weight_gradients_equal_numpys_and_finite_differences(host_cuda, shape):
    """The grouped kernel's dK (every k, C not a multiple of a group) against the NumPy
    kernels, and one entry of each against a finite difference of <W, forward>."""
    m, N, C, H, W, k = shape
    assert HOST.conv_direct_wgrad_family((m, N, C, H, W), (m, C, C, k, k)) == "grouped"
    layer = ConvLayer(C, k, "tanh", backend="cuda-direct")
    ref = ConvLayer(C, k, "tanh", backend="numpy")
    Wa, U, Ks, bs, hs = data(*shape, seed=SEED + 2)
    dK, db = layer.gradient_batched(Wa, U, Ks, bs, hs)
    want_K, want_b = ref.gradient_batched(Wa, U, Ks, bs, hs)
    close(dK, want_K, 1e-12)
    close(db, want_b, 1e-12)
    index = (m - 1, C - 1, C // 2, k - 1, k // 2)  # the last output channel's group
    eps, h = 1e-6, hs[-1:]

    def f(K):
        return float(np.sum(Wa[-1:] * layer.forward_batched(U[-1:], K, bs[-1:], h)))

    plus, minus = Ks[-1:].copy(), Ks[-1:].copy()
    plus[(0,) + index[1:]] += eps
    minus[(0,) + index[1:]] -= eps
    assert dK[index] == pytest.approx((f(plus) - f(minus)) / (2 * eps), rel=1e-6, abs=1e-9)


def test_weight_gradient_kernels_option_is_checked():
    Wa, U, Ks, bs, hs = data(1, 1, 8, 4, 4, 3)
    with pytest.raises(ValueError, match="kernels must be 'auto', 'rows' or 'grouped', "
                                         "got 'tiled'"):
        HOST.conv_direct_param_grads(U, U, np.empty_like(Ks), np.empty_like(bs),
                                     kernels="tiled")
    with pytest.raises(ValueError, match=r"K must be \(m, C, C, k, k\)"):
        HOST.conv_direct_wgrad_family(U.shape, (1, 8, 8, 4, 4))


def test_float32_kernels_are_float32_and_close(host_cuda):
    layer, ref = ConvLayer(3, 3, "tanh", backend="cuda-direct"), \
        ConvLayer(3, 3, "tanh", backend="numpy")
    args32 = data(3, 2, 3, 6, 5, 3, np.float32)
    args64 = [a.astype(np.float64) for a in args32]
    got = layer.forward_batched(*args32[1:])
    assert got.dtype == np.float32
    close(got, ref.forward_batched(*args64[1:]), 1e-5)
    close(layer.adjoint_batched(*args32), ref.adjoint_batched(*args64), 1e-5)
    for g, w in zip(layer.gradient_batched(*args32), ref.gradient_batched(*args64)):
        assert g.dtype == np.float32
        close(g, w, 1e-5)


def test_batched_rows_equal_single_interval_calls_bitwise(host_cuda):
    """Each interval's rows come from the same element functions whatever m is."""
    layer = ConvLayer(3, 3, "tanh", backend="cuda-direct")
    Wa, U, Ks, bs, hs = data(5, 2, 3, 6, 7, 3)
    F = layer.forward_batched(U, Ks, bs, hs)
    A = layer.adjoint_batched(Wa, U, Ks, bs, hs)
    dK, db = layer.gradient_batched(Wa, U, Ks, bs, hs)
    for i in range(5):
        h = float(hs[i])
        assert np.array_equal(F[i], layer.forward(U[i], Ks[i], bs[i], h))
        assert np.array_equal(A[i], layer.adjoint(Wa[i], U[i], Ks[i], bs[i], h))
        gK, gb = layer.gradient(Wa[i], U[i], Ks[i], bs[i], h)
        assert np.array_equal(dK[i], gK) and np.array_equal(db[i], gb)


def test_adjoint_and_gradient_are_the_forward_steps_derivatives(host_cuda):
    """Finite differences of <W, forward(U, K, b)> in U, K and b (an independent check of
    the transposed convolution's indices and the reductions)."""
    layer = ConvLayer(2, 3, "tanh", backend="cuda-direct")
    Wa, U, Ks, bs, hs = data(1, 2, 2, 5, 4, 3, seed=SEED + 1)
    u, w, K, b, h = U[0], Wa[0], Ks[0], bs[0], float(hs[0])

    def f(u_, K_, b_):
        return float(np.sum(w * layer.forward(u_, K_, b_, h)))

    adj = layer.adjoint(w, u, K, b, h)
    dK, db = layer.gradient(w, u, K, b, h)
    eps = 1e-6
    for arr, grad, index in [(u, adj, (1, 0, 4, 3)), (u, adj, (0, 1, 0, 0)),
                             (K, dK, (1, 0, 0, 2)), (K, dK, (0, 1, 2, 1)), (b, db, (1,))]:
        plus, minus = arr.copy(), arr.copy()
        plus[index] += eps
        minus[index] -= eps
        args = {id(u): 0, id(K): 1, id(b): 2}[id(arr)]
        fp = f(*[plus if k == args else x for k, x in enumerate((u, K, b))])
        fm = f(*[minus if k == args else x for k, x in enumerate((u, K, b))])
        assert grad[index] == pytest.approx((fp - fm) / (2 * eps), rel=1e-7, abs=1e-9), index


@pytest.mark.parametrize("act, k", [(Activation("softsign", lambda x: x / (1 + abs(x)),
                                                 lambda x: 1 / (1 + abs(x)) ** 2), 3),
                                      ("tanh", 9)])
def test_other_activations_and_large_kernels_take_the_array_api_kernels(host_cuda, act, k):
    """An activation the kernels do not know (even one that looks like theirs) and
    kernels over 7x7 are computed by the "array-api" kernels, never mistaken."""
    layer = ConvLayer(2, k, act, backend="cuda-direct")
    ref = ConvLayer(2, k, act, backend="array-api")
    W, U, Ks, bs, hs = data(2, 1, 2, 5, 5, k)
    assert np.array_equal(layer.forward_batched(U, Ks, bs, hs), ref.forward_batched(U, Ks, bs, hs))
    assert np.array_equal(layer.adjoint_batched(W, U, Ks, bs, hs),
                          ref.adjoint_batched(W, U, Ks, bs, hs))


def test_smooth_relu_constant_is_the_kernels():
    """The kernels' smooth_relu has braidpy's eps compiled in (kSmoothReluEps = 0.1)."""
    assert SMOOTH_RELU_EPS == 0.1


def test_bad_operands_are_named():
    _, U, Ks, bs, hs = data(2, 1, 3, 4, 4, 3)
    out = np.empty_like(U)
    with pytest.raises(ValueError, match=r"K must be \(m, C, C, k, k\).*got \(2, 3, 3, 2, 2\)"):
        HOST.conv_direct_step(U, np.zeros((2, 3, 3, 2, 2)), bs, hs, out, 1)
    with pytest.raises(ValueError, match=r"b must have shape \(2, 3\), got \(3, 3\)"):
        HOST.conv_direct_step(U, Ks, np.zeros((3, 3)), hs, out, 1)
    with pytest.raises(ValueError, match=r"h must have shape \(2,\), got \(3,\)"):
        HOST.conv_direct_step(U, Ks, bs, np.zeros(3), out, 1)
    with pytest.raises(ValueError, match=r"act must be 1 .tanh., 2 .relu. or 3 .smooth_relu., "
                                         r"got 4"):
        HOST.conv_direct_step(U, Ks, bs, hs, out, 4)
    with pytest.raises(ValueError, match=r"U must be \(m, N, C, H, W\), got \(1, 3, 4, 4\)"):
        HOST.conv_direct_step(U[0], Ks, bs, hs, out, 1)
    with pytest.raises(ValueError, match="db must have shape"):
        HOST.conv_direct_param_grads(U, U, np.empty_like(Ks), np.empty(3), )
    with pytest.raises(ValueError, match="dtypes differ"):
        HOST.conv_direct_step(U, Ks.astype(np.float32), bs, hs, out, 1)


def test_without_a_gpu_the_backend_says_why():
    reason = cd.direct_unavailable()
    if reason is None:
        pytest.skip("a GPU is present")
    assert "cuda-direct" not in backend_names("conv", optional=True)
    with pytest.raises(ValueError, match="'cuda-direct' is not available: " +
                       reason.split(" (")[0]):
        ConvLayer(2, 3, backend="cuda-direct")
