"""The optional CUDA module without a GPU: it is compiled where CUDA was expected, imports
with no driver, reports what it found, and every GPU entry point raises NoGPUError. The
core's device paths for CUDA arrays run here on fake arrays whose
``__cuda_array_interface__`` points at host memory, with the kernels' host twins
(``braidpy._core._host_device_ops``): the same wiring the GPU takes, minus the launches.
The suite on a real GPU is tests/test_gpu.py (``pytest -m gpu``)."""

import importlib.util
import os
import shutil
import sys
import types

import numpy as np
import pytest

import braidpy
from braidpy import _core


def cuda_expected():
    """Whether the install under test should have compiled braidpy._cuda. Source builds
    leave it out by default (CMakeLists.txt), but the developer and CI install asks for
    BRAIDPY_CUDA=AUTO (README.md, .ci/run): built wherever nvcc is found. BRAIDPY_CUDA
    in the test run's environment overrides that: OFF tests a build without the module,
    ON requires it."""
    mode = (os.environ.get("BRAIDPY_CUDA") or "AUTO").upper()
    if mode == "OFF":
        return False
    return mode == "ON" or bool(shutil.which("nvcc") or os.environ.get("CUDACXX"))


def cuda_module():
    if importlib.util.find_spec("braidpy._cuda") is None:
        pytest.skip("braidpy._cuda was not compiled (BRAIDPY_CUDA=OFF or no nvcc)")
    from braidpy import _cuda

    return _cuda


# ------------------------------------------------------------------ fake CUDA arrays

class FakeNamespace:
    """What braidpy.backends.cupy.new_array (and App.clone's default) ask of a namespace."""

    @staticmethod
    def empty(shape, dtype):
        return FakeDeviceArray(np.empty(shape, dtype))

    @staticmethod
    def asarray(u, copy=None):  # App.clone's default (the Core's final value)
        return FakeDeviceArray(np.array(u.host, copy=True))


class FakeDeviceArray:
    """Host memory presented as a CUDA array (the protocol only; no GPU involved)."""

    def __init__(self, host, **interface):
        self.host = host
        self.extra = interface

    @property
    def __cuda_array_interface__(self):
        d = {"shape": self.host.shape, "typestr": self.host.dtype.str, "strides": None,
             "data": (self.host.ctypes.data, not self.host.flags.writeable), "version": 3,
             "stream": 1}
        if not self.host.flags.c_contiguous:
            d["strides"] = self.host.strides
        d.update(self.extra)
        return d

    shape = property(lambda self: self.host.shape)
    dtype = property(lambda self: self.host.dtype)

    def __len__(self):
        return len(self.host)

    def __getitem__(self, key):
        return FakeDeviceArray(self.host[key])

    def __setitem__(self, key, value):
        self.host[key] = value.host if isinstance(value, FakeDeviceArray) else value

    def __array_namespace__(self, api_version=None):
        return FakeNamespace

    device = "fake-gpu"


class Decay(braidpy.App):
    """u' = -u on a vector of `n` entries; states are `wrap(ndarray)`."""

    def __init__(self, wrap, dtype, n=5, batched=True):
        self.wrap, self.dtype, self.n = wrap, np.dtype(dtype), n
        if not batched:
            self.step_stacked = None  # no batched hook: one step call per state

    def init(self, t):
        value = 1.0 if t == self.tstart else 0.3
        return self.wrap(np.linspace(value, 2 * value, self.n).astype(self.dtype))

    def step(self, u, t0, t1, status):
        host = u.host if isinstance(u, FakeDeviceArray) else u
        host /= host.dtype.type(1.0 + (t1 - t0))

    def step_stacked(self, U, t0s, t1s, status):
        host = U.host if isinstance(U, FakeDeviceArray) else U
        host /= (1.0 + (t1s - t0s)).astype(host.dtype).reshape((-1,) + (1,) * (host.ndim - 1))


def host_of(u):
    return u.host if isinstance(u, FakeDeviceArray) else u


OPTIONS = dict(max_levels=3, cfactor=4, max_iter=4, abs_tol=1e-300)


class CopiedInjection(Decay):
    """Decay whose own sum keeps the core from sharing the injected values (Ops::share
    needs App's sum; the device paths do not share them either): they are copied."""

    def sum(self, a, x, b, y):
        super().sum(a, x, b, y)


def solve(wrap, dtype, batch=True, app_class=Decay, **kw):
    app = app_class(wrap, dtype, batched=batch)
    return braidpy.solve(app, 0.0, 2.0, 64, batch=batch, **dict(OPTIONS, **kw))


@pytest.fixture
def host_ops():
    """The core's device paths on host memory (kernels.hpp on the CPU)."""
    _core._use_device_ops(_core._host_device_ops())
    yield
    _core._use_device_ops(None)


# ------------------------------------------------------------------ the module

def test_the_cuda_module_is_compiled_where_cuda_was_expected():
    found = importlib.util.find_spec("braidpy._cuda") is not None
    if cuda_expected():
        assert found, ("nvcc was found (or BRAIDPY_CUDA=ON) but braidpy._cuda was not built: "
                       "install as README.md says, BRAIDPY_CUDA=AUTO pip install -e "
                       "'.[test]' (source builds leave it out by default), or run the tests "
                       "with BRAIDPY_CUDA=OFF to test a build without it")
    assert braidpy.cuda_info()["compiled"] is found


def test_cuda_info_reports_what_was_compiled_and_found():
    info = braidpy.cuda_info()
    assert {"compiled", "cuda_runtime", "driver", "devices", "cudnn"} <= set(info)
    assert isinstance(info["devices"], int) and info["devices"] >= 0
    assert info["cudnn"] is None or isinstance(info["cudnn"], int)
    if info["compiled"]:
        assert info["cuda_runtime"] >= 12000
        assert info["architectures"] == "80,90"
        if info["devices"] == 0:
            assert "cudaErrorInsufficientDriver" in info["error"] or \
                "cudaErrorNoDevice" in info["error"]


def no_gpu_here():
    if braidpy.cuda_info()["devices"] > 0:
        pytest.skip("a GPU is present: the no-GPU behaviour cannot be seen")


@pytest.mark.parametrize("call", ["check_device", "sum", "copy", "gather", "row_norms",
                                  "conv_direct_step", "conv_direct_param_grads", "dense_step",
                                  "dense_slope"])
def test_every_entry_point_raises_no_gpu_error_without_a_gpu(call):
    cuda = cuda_module()
    no_gpu_here()
    x, y = FakeDeviceArray(np.ones(4)), FakeDeviceArray(np.zeros((2, 4)))
    conv = [FakeDeviceArray(np.ones(shape)) for shape in ((1, 1, 2, 3, 3), (1, 2, 2, 3, 3),
                                                          (1, 2), (1,))]
    calls = {"check_device": lambda: cuda.check_device(),
             "sum": lambda: cuda.sum(2.0, x, 1.0, x),
             "copy": lambda: cuda.copy(x, y[0]),
             "gather": lambda: cuda.gather([x, None], y),
             "row_norms": lambda: cuda.row_norms([y[0], y[1]]),
             "conv_direct_step": lambda: cuda.conv_direct_step(
                 *conv, FakeDeviceArray(np.zeros((1, 1, 2, 3, 3))), 1),
             "conv_direct_param_grads": lambda: cuda.conv_direct_param_grads(
                 conv[0], conv[0], FakeDeviceArray(np.zeros((1, 2, 2, 3, 3))),
                 FakeDeviceArray(np.zeros((1, 2)))),
             "dense_step": lambda: cuda.dense_step(y, y, x[:4], 0.5, y, 3),
             "dense_slope": lambda: cuda.dense_slope(
                 FakeDeviceArray(np.ones((2, 2, 4))), FakeDeviceArray(np.ones((2, 2, 4))),
                 y, FakeDeviceArray(np.ones(2)), FakeDeviceArray(np.zeros((2, 2, 4))), 1)}
    with pytest.raises(braidpy.NoGPUError, match=r"no usable GPU \(cudaError") as info:
        calls[call]()
    assert info.value.code in (35, 100)  # no driver / no device
    assert isinstance(info.value, braidpy.CudaError) and isinstance(info.value, braidpy.BraidError)


def test_entry_points_refuse_what_is_not_a_cuda_array():
    cuda = cuda_module()
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        cuda.sum(1.0, np.ones(3), 1.0, np.ones(3))
    with pytest.raises(TypeError, match="float64 or float32"):
        cuda.row_norms([FakeDeviceArray(np.ones(3, dtype=np.int64))])


def test_dense_entry_points_check_their_arguments_before_the_device():
    """braidpy._cuda.dense_step/dense_slope (the fused dense steps' kernels) refuse bad
    arguments with a ValueError or TypeError naming what is wrong, GPU or not."""
    cuda = cuda_module()
    Z, U, out = (FakeDeviceArray(np.ones((3, 2, 4))) for _ in range(3))
    b, h = FakeDeviceArray(np.ones((3, 4))), FakeDeviceArray(np.ones(3))
    cases = [
        (lambda: cuda.dense_step(Z, U, b, h, out, 4), ValueError, r"act must be .*, got 4"),
        (lambda: cuda.dense_slope(Z, U, b, h, FakeDeviceArray(np.ones((3, 2, 5))), 1),
         ValueError, "W and out must have Z's shape"),
        (lambda: cuda.dense_step(Z, U, FakeDeviceArray(np.ones(4)), h, out, 1), ValueError,
         r"b must be \(m, width\)"),
        (lambda: cuda.dense_step(Z, U, b, FakeDeviceArray(np.ones(2)), out, 1), ValueError,
         r"h must be Z's dtype, shaped \(m,\)"),
        (lambda: cuda.dense_step(Z, U, b, h, FakeDeviceArray(np.ones((3, 2, 4), np.float32)), 1),
         ValueError, "dtypes differ"),
        (lambda: cuda.dense_step(Z[0], U[0], b[0], "0.5", out[0], 1), TypeError,
         "h must be a number for a 2-D Z, got str"),
        (lambda: cuda.dense_step(Z, U, b, h, np.ones((3, 2, 4)), 1), TypeError,
         "__cuda_array_interface__"),
    ]
    whole = np.ones(30)  # out overlapping U one element along: refused
    parts = [FakeDeviceArray(whole[k:k + 24].reshape(3, 2, 4)) for k in (0, 1)]
    cases.append((lambda: cuda.dense_step(Z, parts[0], b, h, parts[1], 1), ValueError,
                  "must be the same array or not overlap"))
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


def test_tf32_is_opt_in_for_float32_and_reaches_the_convolution_descriptor(monkeypatch):
    """BRAIDPY_TF32=1 lets float32 cuDNN convolutions use TF32 tensor cores (never
    float64); conv_backends then passes tf32=True to every call of the problem (its own
    plan), otherwise the calls are the ones braidpy always made; braidpy._cuda's
    descriptor plan says which cudnnMathType_t results."""
    from braidpy.nn import conv_backends as cb

    monkeypatch.delenv(cb.TF32_ENV, raising=False)
    assert not cb.tf32_allowed("float32") and not cb.tf32_allowed("float64")
    monkeypatch.setenv(cb.TF32_ENV, "1")
    assert cb.tf32_allowed("float32") and not cb.tf32_allowed("float64")
    monkeypatch.setenv(cb.TF32_ENV, "yes")
    with pytest.raises(ValueError, match="BRAIDPY_TF32 must be 0 or 1, got 'yes'"):
        cb.tf32_allowed("float32")

    class Recorder:
        calls = []

        def conv_workspace(self, *args, **kw):
            self.calls.append(("workspace", kw))
            return {"request": 0}

        def conv_forward(self, x, K, y, groups, ws, nbytes, **kw):
            self.calls.append(("forward", kw))

    monkeypatch.setattr(cb, "_cuda", Recorder)
    x, K = np.ones((2, 4, 5, 5), np.float32), np.ones((4, 4, 3, 3), np.float32)
    for flag, kw in (("1", {"tf32": True}), ("0", {})):
        monkeypatch.setenv(cb.TF32_ENV, flag)
        Recorder.calls.clear()
        cb.conv2d_cudnn(x, K)
        assert Recorder.calls == [("workspace", kw), ("forward", kw)]
    monkeypatch.setenv(cb.TF32_ENV, "1")
    Recorder.calls.clear()
    cb.conv2d_cudnn(x.astype(np.float64), K.astype(np.float64))
    assert Recorder.calls == [("workspace", {}), ("forward", {})]

    cuda = cuda_module()

    def plan(dtype, **kw):
        return cuda.conv_plan(2, 8, 8, 28, 28, 3, 1, dtype, **kw)["math_type"]

    assert (plan("float32"), plan("float32", tf32=True)) == (3, 1)  # FMA; tensor-op math
    assert plan("float64") == plan("float64", tf32=True) == 0        # the default


def test_a_solve_with_cuda_states_and_no_gpu_raises_no_gpu_error():
    cuda_module()
    no_gpu_here()
    _core._use_device_ops(None)  # braidpy._cuda's kernels
    with pytest.raises(braidpy.NoGPUError, match=r"^clone: no usable GPU") as info:
        solve(FakeDeviceArray, np.float64)
    assert info.value.code in (35, 100)


# ------------------------------------------------------------------ which path a state takes

def test_which_path_app_defaults_take():
    _core._use_device_ops(_core._host_device_ops())
    try:
        f64, f32 = np.ones((2, 3)), np.ones(3, dtype=np.float32)
        assert _core._default_path(f64) == "numpy"
        assert _core._default_path(FakeDeviceArray(f64)) == "device-f64"
        assert _core._default_path(FakeDeviceArray(f32)) == "device-f32"
        # the Python defaults (braidpy.backends) for everything the kernels do not cover
        for other in [FakeDeviceArray(np.ones(3, dtype=np.int32)),
                      FakeDeviceArray(np.ones(3, dtype=np.complex128)),
                      FakeDeviceArray(np.ones((3, 4))[:, ::2]),      # not C-contiguous
                      FakeDeviceArray(f64, mask=object()),            # masked
                      FakeDeviceArray(f64, typestr=">f8"),            # big-endian
                      FakeDeviceArray(f64, stream=0),                 # forbidden stream 0
                      [1.0, 2.0], 3.0]:
            assert _core._default_path(other) == "python", other
        # C-contiguous strides spelled out are fine
        assert _core._default_path(FakeDeviceArray(f64, strides=(24, 8))) == "device-f64"
        _core._use_device_ops(False)  # no provider (braidpy._cuda absent): Python defaults
        assert _core._default_path(FakeDeviceArray(f64)) == "python"
    finally:
        _core._use_device_ops(None)
    with pytest.raises(TypeError, match="capsule"):
        _core._use_device_ops(object())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_paths_give_numpys_values(host_ops, dtype):
    """The whole device wiring (clone blocks with row views, copies, sums, batched row
    norms) on host memory: bitwise NumPy's values and counts; norms to rounding."""
    fake = solve(FakeDeviceArray, dtype)
    ref = solve(lambda a: a, dtype)
    assert fake.iterations == ref.iterations == OPTIONS["max_iter"]
    assert host_of(fake.final).dtype == dtype
    assert np.array_equal(host_of(fake.final), ref.final)
    np.testing.assert_allclose(fake.residuals, ref.residuals, rtol=1e-12 if dtype == np.float64
                               else 1e-5)
    assert fake.counts == solve(lambda a: a, dtype, app_class=CopiedInjection).counts


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_paths_batched_equals_unbatched_bitwise(host_ops, dtype):
    on = solve(FakeDeviceArray, dtype, batch=True)
    off = solve(FakeDeviceArray, dtype, batch=False)
    assert on.counts["step_batch"] > 0 and off.counts["step_batch"] == 0
    assert on.residuals == off.residuals
    assert np.array_equal(host_of(on.final), host_of(off.final))


def test_device_paths_converge_like_numpy(host_ops):
    kw = dict(max_iter=30, abs_tol=1e-12)
    fake, ref = solve(FakeDeviceArray, np.float64, **kw), solve(lambda a: a, np.float64, **kw)
    assert fake.iterations == ref.iterations < 30
    np.testing.assert_allclose(host_of(fake.final), ref.final, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stored_block_of_device_states_is_one_device_array(host_ops, dtype):
    """Core.stored_block stacks CUDA states on the device (one gather kernel into a new
    array of their kind): NumPy's stacked values, any stride; None where one is missing."""
    def core(wrap, storage="all"):
        c = braidpy.Core(Decay(wrap, dtype), 0.0, 2.0, 64, storage=storage,
                         **dict(OPTIONS, max_iter=2))
        c.solve()
        return c

    fake, ref = core(FakeDeviceArray), core(lambda a: a)
    for args in ((0, 65), (64, 0, -3), (5, 9)):
        block = fake.stored_block(*args)
        assert isinstance(block, FakeDeviceArray) and block.host.dtype == dtype
        assert np.array_equal(block.host, np.stack([ref.stored(i)
                                                    for i in range(*args)])), args
    assert core(FakeDeviceArray, storage="C").stored_block(0, 65) is None


def test_device_paths_batch_the_cores_vector_operations(host_ops):
    """What a GPU would launch (the host provider counts its calls): the values a sweep
    keeps, the injected C-values, the FAS right-hand sides, the residuals at the chain
    ends, tau after a batched step and the coarse-grid corrections go in one kernel per
    batch, so far fewer launches than clone/sum operations. Only the coarsest level's
    sequential solve sums point by point: at most two sums (tau, the error) per step it
    takes alone. Values: the tests above (NumPy's, batched = unbatched)."""
    app = Decay(FakeDeviceArray, np.float64)
    r = braidpy.solve(app, 0.0, 2.0, 256, max_levels=3, cfactor=4, min_coarse=2,
                      max_iter=3, abs_tol=0.0, access_level=0)
    calls = _core._host_device_op_calls()
    assert calls["sum_rows"] > 0 and calls["gather"] > 0
    assert calls["sum"] <= 2 * r.counts["step"], (calls, r.counts)
    assert calls["sum_rows"] <= 1.1 * r.counts["step_batch"], (calls, r.counts)
    assert calls["sum"] + calls["sum_rows"] <= 0.1 * r.counts["sum"], (calls, r.counts)
    assert calls["copy"] + calls["gather"] <= 0.05 * r.counts["clone"], (calls, r.counts)


class ForeignDeviceArray(FakeDeviceArray):
    """A CUDA array braidpy cannot allocate more of (no __array_namespace__, not CuPy):
    PyTorch's CUDA tensors are such arrays."""

    __array_namespace__ = None

    def __getattribute__(self, name):
        if name == "__array_namespace__":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_stored_block_of_arrays_braidpy_cannot_allocate_is_none(host_ops):
    """The device path stacks only arrays it can allocate like (CuPy, array API); others
    get None (gather them with stored), never an error (a GPU run of braidpy.torch once
    raised here)."""
    def wrap(a):
        return ForeignDeviceArray(a)

    assert not hasattr(wrap(np.ones(2)), "__array_namespace__")
    app = Decay(wrap, np.float64, batched=False)
    app.clone = lambda u: ForeignDeviceArray(u.host.copy())  # as braidpy.torch's apps do
    app.sum = lambda a, x, b, y: y.host.__setitem__(..., a * x.host + b * y.host)
    app.norm = lambda u: float(np.linalg.norm(u.host))
    core = braidpy.Core(app, 0.0, 2.0, 16, storage="all", batch=False,
                        **dict(OPTIONS, max_iter=2))
    core.solve()
    assert isinstance(core.stored(3), ForeignDeviceArray)
    assert core.stored_block(0, 17) is None


class CupyLikeArray(ForeignDeviceArray):
    """What CuPy's arrays look like to the device paths: a Python-level class (its
    tp_name is the bare "ndarray"), of module cupy, without __array_namespace__."""

    __module__ = "cupy._core.core"
    device = types.SimpleNamespace(id=0)  # CuPy's Device (the backend's key)

    def __getitem__(self, key):
        return CupyLikeArray(self.host[key])

    def copy(self):
        return CupyLikeArray(self.host.copy())


CupyLikeArray.__name__ = CupyLikeArray.__qualname__ = "ndarray"


def test_cupy_arrays_take_the_device_paths(host_ops, monkeypatch):
    """CuPy's own arrays (recognised by their type's module, as new_array does) take the
    device paths: one H200 run took the Python defaults for every clone (140 ms of a
    60 ms solve) when the check looked for a "cupy." type name."""
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.empty = lambda shape, dtype: CupyLikeArray(np.empty(shape, dtype))
    fake_cupy.ndarray = CupyLikeArray
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    assert not hasattr(CupyLikeArray(np.ones(2)), "__array_namespace__")
    got = solve(CupyLikeArray, np.float64)
    ref = solve(lambda a: a, np.float64, app_class=CopiedInjection)
    calls = _core._host_device_op_calls()
    assert calls["gather"] > 0 and calls["sum"] > 0
    assert np.array_equal(host_of(got.final), ref.final)
    assert got.counts == ref.counts


def test_without_a_provider_cuda_states_take_the_python_defaults():
    """What the device paths above replace: braidpy.backends' defaults, which the fake
    arrays do not support (so the passing runs above did take the device paths)."""
    _core._use_device_ops(False)
    try:
        with pytest.raises(TypeError, match="FakeDeviceArray"):
            solve(FakeDeviceArray, np.float64)
    finally:
        _core._use_device_ops(None)
