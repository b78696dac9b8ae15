"""Which code computes a conv layer's convolutions: cuDNN on CuPy, im2col elsewhere.

Three conv kernel backends exist (:mod:`braidpy.nn.kernels`): ``"numpy"`` (im2col in
cache-sized chunks, on the host), ``"array-api"`` (im2col plus one matmul in any array
namespace) and, from this module, ``"cudnn"``: cuDNN's legacy convolution API called from
braidpy's own C++ (``braidpy._cuda``; cuDNN loaded at first use, see
:mod:`braidpy._cudnn`), float64 and float32, on CuPy's current stream, workspace from
CuPy's memory pool, descriptors and algorithms cached per shape in C++. float32
convolutions use FMA math, no TF32 tensor cores, unless ``BRAIDPY_TF32=1``
(:func:`tf32_allowed` says why that is opt-in). cuDNN's heuristics choose the algorithms,
unless ``BRAIDPY_CUDNN_BENCHMARK=1`` asks for the fastest by measurement, as PyTorch's
``torch.backends.cudnn.benchmark`` does (:func:`benchmark_enabled` says what it costs).

The choice is made once per layer object (:func:`braidpy.nn.kernels.choose_kernels`): an
explicit ``backend`` argument wins, then the environment variable ``BRAIDPY_CONV_BACKEND``,
then the default for the layer's namespace: "numpy" for NumPy; for CuPy braidpy's own
direct kernels ("cuda-direct", :mod:`braidpy.nn.conv_direct`: faster than grouped cuDNN
on the GPU benchmark) where a GPU is usable, else "cudnn" when cuDNN is, else
"array-api" (with the reason kept in the layer's ``backend_choice``); "array-api" for any
other namespace.

A second backend, ``"cudnn-streams"``, runs the batched steps interval by interval
instead, the intervals split into blocks with one CUDA stream per block (the
concurrency across layer blocks of Kirby et al., "Layer-parallel training with GPU
concurrency of deep residual neural networks via nonlinear multigrid", IEEE HPEC 2020;
``BRAIDPY_CUDNN_STREAMS`` streams, default 4): for
layers that cannot be batched into one call. It is never the default until a GPU
benchmark (``benchmarks/bench_gpu.py --conv``) says it wins.

Batched steps over m intervals are ONE grouped convolution (group count m): the stacked
states (m, N, C, H, W) are packed to (N, m C, H, W), the stacked kernels (m, C, C, k, k)
are the grouped filter (m C, C, k, k) as they are, the stacked biases (m, C) the bias
tensor (1, m C, 1, 1); csrc/cuda/conv_plan.hpp states and tests this layout. Whether
cuDNN's grouped rows equal its single-interval results bit for bit depends on the
algorithms it runs; tests/test_gpu.py checks them to 1e-12 (float64) on a GPU.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._common import _as_steps, _namespace, _permute, _shape, cuda_module_problem, no_gpu_reason
from .activations import Activation, ActivationLike, get_activation, relu, tanh
from .conv import check_step, check_steps

__all__ = ["ENV", "STREAMS_ENV", "TF32_ENV", "BENCHMARK_ENV", "tf32_allowed",
           "benchmark_enabled", "cudnn_plan", "cudnn_unavailable", "is_cupy", "pack_intervals",
           "unpack_intervals", "fused_epilogue", "conv2d_cudnn", "conv2d_input_vjp_cudnn",
           "conv2d_weight_vjp_cudnn", "bias_grad_cudnn", "stream_count"]

#: The environment variable that overrides the default conv backend of new layers.
ENV = "BRAIDPY_CONV_BACKEND"
#: The environment variable with the number of CUDA streams of "cudnn-streams" (default 4).
STREAMS_ENV = "BRAIDPY_CUDNN_STREAMS"
#: The environment variable that lets float32 cuDNN convolutions use TF32 tensor cores ("1").
TF32_ENV = "BRAIDPY_TF32"
#: The environment variable that makes cuDNN choose its algorithms by measurement ("1").
BENCHMARK_ENV = "BRAIDPY_CUDNN_BENCHMARK"


def is_cupy(xp: Any) -> bool:
    """Whether the array namespace xp is CuPy's (or array-api-compat's wrapper of it)."""
    name = getattr(xp, "__name__", "") or ""
    return name == "cupy" or name.endswith(".cupy")


def _cuda() -> Any:
    return importlib.import_module("braidpy._cuda")


def cudnn_unavailable() -> Optional[str]:
    """Why the "cudnn" backend cannot run here, or None when it can.

    It can when braidpy._cuda was compiled, cuDNN 9 loads and a GPU is usable.

    Examples
    --------
    >>> reason = cudnn_unavailable()
    >>> reason is None or isinstance(reason, str)
    True
    """
    cuda, why = cuda_module_problem(_cuda)
    if cuda is None:
        return why
    info = cuda.cudnn_info()
    if info["version"] is None:
        return str(info["error"])
    return no_gpu_reason(cuda)


# ---------------------------------------------------------------- grouped layout


def pack_intervals(U: Any) -> Any:
    """Stacked states (m, N, C, H, W) as one grouped input (N, m * C, H, W).

    Channel block i of the result is interval i (csrc/cuda/conv_plan.hpp's layout).

    Examples
    --------
    >>> import numpy as np
    >>> U = np.arange(4.0).reshape(2, 2, 1, 1, 1)     # (interval, image) = value
    >>> pack_intervals(U)[:, :, 0, 0].tolist()        # image n: (interval 0, interval 1)
    [[0.0, 2.0], [1.0, 3.0]]
    """
    xp = _namespace(U)
    m, N, C, H, W = _shape(U)
    return xp.reshape(_permute(U, (1, 0, 2, 3, 4), xp), (N, m * C, H, W))


def unpack_intervals(X: Any, m: int) -> Any:
    """The inverse of :func:`pack_intervals`: (N, m * C, H, W) -> (m, N, C, H, W).

    Examples
    --------
    >>> import numpy as np
    >>> U = np.random.default_rng(7).normal(size=(3, 2, 2, 4, 5))
    >>> bool((unpack_intervals(pack_intervals(U), 3) == U).all())
    True
    """
    xp = _namespace(X)
    N, mC, H, W = _shape(X)
    X5 = xp.reshape(X, (N, m, mC // m, H, W))
    return xp.reshape(_permute(X5, (1, 0, 2, 3, 4), xp), (m, N, mC // m, H, W))


# ---------------------------------------------------------------- cuDNN calls


def _contiguous(x: Any, xp: Any) -> Any:
    """x as a C-contiguous array, copied only if it is not (the descriptors are packed
    NCHW); CuPy's (and NumPy's) ascontiguousarray."""
    return xp.ascontiguousarray(x)


def _address(buf: Any) -> int:
    """The data pointer of a buffer, by the CUDA array interface (host arrays, for the
    host tests of this wiring: the array interface)."""
    face = getattr(buf, "__cuda_array_interface__", None) or buf.__array_interface__
    return int(face["data"][0])


def tf32_allowed(dtype: Any) -> bool:
    """Whether cuDNN convolutions of ``dtype`` may use TF32 tensor cores: float32 with
    ``BRAIDPY_TF32=1``; never float64; off by default.

    TF32 rounds the inputs of each product to a 10-bit mantissa (unit roundoff about
    5e-4) and accumulates in float32: several times faster on tensor cores, but a
    convolution's relative error grows from float32's ~1e-7 to ~1e-3. PyTorch allows it
    for convolutions by default; braidpy does not, exactness first: MGRIT's residual
    stalls near the error of one step, so with TF32 the float32 residual floor rises to
    about 1e-3 relative (an estimate, not yet measured on a GPU) and a tolerance below it
    is never reached, and float32 results would no longer match NumPy's to the 1e-5 the
    tests hold them to.

    Raises
    ------
    ValueError
        If ``BRAIDPY_TF32`` is set to something other than 0 or 1 (the message names it).

    Examples
    --------
    >>> tf32_allowed("float64")
    False
    """
    return _env_flag(TF32_ENV) and _dtype_name(dtype) == "float32"


def benchmark_enabled() -> bool:
    """Whether cuDNN convolutions choose their algorithms by measurement:
    ``BRAIDPY_CUDNN_BENCHMARK=1``; off by default (cuDNN's heuristics choose).

    On, the first call of each problem (shape, dtype, groups, TF32 setting) times every
    algorithm of its forward, backward data and backward filter convolutions
    (``cudnnFind*AlgorithmEx``, on scratch arrays and a workspace of at most 1 GiB from
    CuPy's pool) and keeps, per operation, the fastest that ran, fits that workspace and
    is deterministic, for the rest of the process. Measuring costs time at first use,
    and timings differ from run to run, so two runs may choose different algorithms and
    their results differ in the last bits (within a run every call of a problem runs
    the same algorithm, so results repeat there). PyTorch's
    ``torch.backends.cudnn.benchmark`` has the same trade.

    Raises
    ------
    ValueError
        If ``BRAIDPY_CUDNN_BENCHMARK`` is set to something other than 0 or 1 (the message
        names it).

    Examples
    --------
    >>> benchmark_enabled() if BENCHMARK_ENV not in os.environ else False
    False
    """
    return _env_flag(BENCHMARK_ENV)


def _env_flag(name: str) -> bool:
    """The 0/1 environment variable ``name`` (unset or empty: 0), else ValueError."""
    raw = os.environ.get(name, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _plan_keywords(dtype: Any) -> Dict[str, bool]:
    """The tf32 and benchmark keywords of braidpy._cuda's conv calls, each given only
    when on (the plans and calls without them are the ones braidpy always made)."""
    kw = {"tf32": True} if tf32_allowed(dtype) else {}
    if benchmark_enabled():
        kw["benchmark"] = True
    return kw


def _problem(shape: Tuple[int, ...], cout: int, k: int, groups: int,
             dtype: Any) -> Tuple[Any, ...]:
    """braidpy._cuda's problem arguments (n, c_in, c_out, h, w, k, groups, dtype) of an
    input of ``shape`` (N, Cin, H, W)."""
    N, cin, H, W = shape
    return (N, cin, cout, H, W, k, groups, _dtype_name(dtype))


def _measure_once(xp: Any, args: Tuple[Any, ...], tf32: Dict[str, bool]) -> None:
    """Measures the problem's algorithms unless its measured plan is cached: scratch
    input, filter and output arrays (cuDNN overwrites all three while timing, so never
    the caller's) and the workspace the measurement offers, from the array library's
    allocator, freed once braidpy._cuda has cached the plan."""
    cuda = _cuda()
    if cuda.conv_measured(*args, **tf32):
        return
    N, cin, cout, H, W, k, groups, dtype = args
    offer = cuda.conv_measure_workspace(*args, **tf32)
    x = xp.zeros((N, cin, H, W), dtype=dtype)
    w = xp.zeros((cout, cin // groups, k, k), dtype=dtype)
    y = xp.zeros((N, cout, H, W), dtype=dtype)
    buf = xp.empty((offer,), dtype=xp.uint8) if offer else None
    cuda.conv_measure(x, w, y, groups, _address(buf) if offer else 0, offer, **tf32)


def _workspace(xp: Any, shape: Tuple[int, ...], cout: int, k: int, groups: int,
               dtype: Any) -> Tuple[Any, int, int]:
    """(buffer, pointer, bytes) of the workspace the problem's plan asks for, from the
    array library's allocator (CuPy's memory pool); the buffer must outlive the call.
    Under ``BRAIDPY_CUDNN_BENCHMARK=1`` the plan is measured first, once per problem."""
    args, kw = _problem(shape, cout, k, groups, dtype), _plan_keywords(dtype)
    if kw.get("benchmark"):
        _measure_once(xp, args, {"tf32": True} if "tf32" in kw else {})
    need = _cuda().conv_workspace(*args, **kw)["request"]
    if need == 0:
        return None, 0, 0
    buf = xp.empty((need,), dtype=xp.uint8)
    return buf, _address(buf), need


def cudnn_plan(shape: Tuple[int, ...], cout: int, k: int, groups: int = 1,
               dtype: Any = "float64") -> Dict[str, Any]:
    """The cuDNN plan the current settings give the convolution of an input of
    ``shape`` (N, Cin, H, W) with a (cout, Cin / groups, k, k) filter: ``algorithms``
    (forward, backward data, backward filter: cudnnConvolution*Algo_t values),
    ``measured`` (whether each was chosen by measurement), the workspace bytes per
    operation and the one ``request``. Needs a GPU; under ``BRAIDPY_CUDNN_BENCHMARK=1``
    the problem must have run once (ValueError otherwise: its plan is not measured)."""
    return dict(_cuda().conv_workspace(*_problem(shape, cout, k, groups, dtype),
                                       **_plan_keywords(dtype)))


def _dtype_name(dtype: Any) -> str:
    name = str(getattr(dtype, "name", dtype))
    if name not in ("float64", "float32"):
        raise ValueError(f"the cudnn conv backend computes in float64 or float32, got {name}")
    return name


def conv2d_cudnn(x: Any, K: Any, groups: int = 1) -> Any:
    """conv2d(x, K) by cudnnConvolutionForward: x (N, Cin, H, W), K (Cout, Cin/groups, k, k)."""
    xp = _namespace(x)
    x, K = _contiguous(x, xp), _contiguous(K, xp)
    N, _, H, W = _shape(x)
    cout, k = _shape(K)[0], _shape(K)[-1]
    y = xp.empty((N, cout, H, W), dtype=x.dtype)
    buf, ptr, nbytes = _workspace(xp, _shape(x), cout, k, groups, x.dtype)
    _cuda().conv_forward(x, K, y, groups, ptr, nbytes, **_plan_keywords(x.dtype))
    del buf  # returned to the pool; CuPy's pool orders reuse on the stream
    return y


def conv2d_input_vjp_cudnn(g: Any, K: Any, groups: int = 1) -> Any:
    """The input VJP by cudnnConvolutionBackwardData: g (N, Cout, H, W) -> (N, Cin, H, W)."""
    xp = _namespace(g)
    g, K = _contiguous(g, xp), _contiguous(K, xp)
    N, cout, H, W = _shape(g)
    cin, k = _shape(K)[1] * groups, _shape(K)[-1]
    dx = xp.empty((N, cin, H, W), dtype=g.dtype)
    buf, ptr, nbytes = _workspace(xp, (N, cin, H, W), cout, k, groups, g.dtype)
    _cuda().conv_backward_data(K, g, dx, groups, ptr, nbytes, **_plan_keywords(g.dtype))
    del buf
    return dx


def conv2d_weight_vjp_cudnn(g: Any, x: Any, k: int, groups: int = 1) -> Any:
    """The weight VJP by cudnnConvolutionBackwardFilter: (Cout, Cin/groups, k, k)."""
    xp = _namespace(g)
    g, x = _contiguous(g, xp), _contiguous(x, xp)
    cout, cin = _shape(g)[1], _shape(x)[1]
    dK = xp.empty((cout, cin // groups, k, k), dtype=g.dtype)
    buf, ptr, nbytes = _workspace(xp, _shape(x), cout, k, groups, g.dtype)
    _cuda().conv_backward_filter(x, g, dK, groups, ptr, nbytes, **_plan_keywords(g.dtype))
    del buf
    return dK


def bias_grad_cudnn(g: Any) -> Any:
    """g (N, C, H, W) summed over N, H, W by cudnnConvolutionBackwardBias: shape (C,)."""
    xp = _namespace(g)
    g = _contiguous(g, xp)
    C = _shape(g)[1]
    db = xp.empty((1, C, 1, 1), dtype=g.dtype)
    _cuda().conv_backward_bias(g, db)
    return xp.reshape(db, (C,))


# ---------------------------------------------------------------- the six step kernels


def _z(u: Any, K: Any, b: Any, xp: Any) -> Any:
    return conv2d_cudnn(u, K) + xp.reshape(b, (1, _shape(b)[0], 1, 1))


def _forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    check_step("conv_forward", u, K, b)
    a: Activation = get_activation(act)
    return u + h * a.value(_z(u, K, b, _namespace(u)))


def _g(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    a = get_activation(act)
    return h * (w * a.derivative(_z(u, K, b, _namespace(u))))


def _adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    check_step("conv_adjoint", u, K, b, w)
    return w + conv2d_input_vjp_cudnn(_g(w, u, K, b, h, act), K)


def _gradient(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Tuple[Any, Any]:
    check_step("conv_gradient", u, K, b, w)
    g = _g(w, u, K, b, h, act)
    return conv2d_weight_vjp_cudnn(g, u, _shape(K)[-1]), bias_grad_cudnn(g)


def _grouped(Ks: Any, xp: Any) -> Any:
    """Stacked kernels (m, C, C, k, k) as the grouped filter (m C, C, k, k): no copy."""
    m, C, _, k, _ = _shape(Ks)
    return xp.reshape(Ks, (m * C, C, k, k))


def _G(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike, xp: Any) -> Tuple[Any, Any]:
    """(packed U, packed G) with G = hs * W * act'(Z), Z the grouped forward's output."""
    m, _, C = _shape(U)[:3]
    X = pack_intervals(U)
    Z = unpack_intervals(conv2d_cudnn(X, _grouped(Ks, xp), m), m) \
        + xp.reshape(bs, (m, 1, C, 1, 1))
    G = xp.reshape(hs, (m, 1, 1, 1, 1)) * (W * get_activation(act).derivative(Z))
    return X, pack_intervals(G)


def _forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_forward_batched", U, Ks, bs, _as_steps(hs, U))
    xp = _namespace(U)
    m, _, C = _shape(U)[:3]
    Y = conv2d_cudnn(pack_intervals(U), _grouped(Ks, xp), m)
    a = get_activation(act)
    fused = fused_epilogue(U, Y, bs, hs, a)
    if fused is not None:
        return fused
    Z = unpack_intervals(Y, m) + xp.reshape(bs, (m, 1, C, 1, 1))
    return U + xp.reshape(hs, (m, 1, 1, 1, 1)) * a.value(Z)


#: braidpy._cuda's codes of the activation functions its fused step epilogue computes.
_FUSED: Dict[Callable[[Any], Any], int] = {tanh: 1, relu: 2}


def fused_epilogue(U: Any, Y: Any, bs: Any, hs: Any, act: Activation) -> Optional[Any]:
    """U + hs * act(unpack(Y) + bs) of a batched forward step in ONE kernel of
    braidpy._cuda (the same operations, so the same bits, as the array code: the pack's
    unpacking, bias, activation, step size and residual update would each be a pass
    over the states), or None where it does not apply (an activation other than
    braidpy's own tanh and relu, mixed dtypes): then the caller runs the array code.

    Y is the grouped convolution's output (N, m C, H, W), U the stacked states
    (m, N, C, H, W), bs (m, C), hs (m,), all CuPy arrays on one device.
    """
    code = _FUSED.get(act.value)  # braidpy's own functions, not look-alikes
    if code is None:
        return None
    xp = _namespace(U)
    if len({str(x.dtype) for x in (U, Y, bs, hs)}) != 1:
        return None
    U, Y, bs, hs = (_contiguous(x, xp) for x in (U, Y, bs, hs))
    out = xp.empty(_shape(U), dtype=U.dtype)
    _cuda().step_epilogue(U, Y, bs, hs, out, code)
    return out


def _adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_adjoint_batched", U, Ks, bs, _as_steps(hs, U), W)
    xp = _namespace(U)
    m = _shape(U)[0]
    _, Gp = _G(W, U, Ks, bs, hs, act, xp)
    return W + unpack_intervals(conv2d_input_vjp_cudnn(Gp, _grouped(Ks, xp), m), m)


def _gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                      act: ActivationLike) -> Tuple[Any, Any]:
    hs = check_steps("conv_gradient_batched", U, Ks, bs, _as_steps(hs, U), W)
    xp = _namespace(U)
    m, _, C, _, _ = _shape(U)
    k = _shape(Ks)[-1]
    X, Gp = _G(W, U, Ks, bs, hs, act, xp)
    dK = conv2d_weight_vjp_cudnn(Gp, X, k, m)           # (m C, C, k, k): one call
    return xp.reshape(dK, (m, C, C, k, k)), xp.reshape(bias_grad_cudnn(Gp), (m, C))


#: The "cudnn" kernel set's functions, for braidpy.nn.kernels.
STEPS = (_forward, _adjoint, _gradient, _forward_batched, _adjoint_batched, _gradient_batched)


# ---------------------------------------------------------------- streams per layer block


def stream_count() -> int:
    """The number of CUDA streams of "cudnn-streams": ``BRAIDPY_CUDNN_STREAMS`` or 4.

    Examples
    --------
    >>> stream_count() if STREAMS_ENV not in os.environ else 4
    4
    """
    raw = os.environ.get(STREAMS_ENV, "").strip()
    if not raw:
        return 4
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{STREAMS_ENV} must be a positive integer, got {raw!r}")
    return count


#: Side streams per (device, count), made once and reused (creating streams per call
#: would cost more than the launches they overlap).
_STREAMS: Dict[Tuple[int, int], List[Any]] = {}


def _side_streams(xp: Any, count: int) -> Optional[List[Any]]:
    """count CuPy streams of the current device, or None off CuPy (then in order)."""
    if not is_cupy(xp):
        return None
    cuda = importlib.import_module("cupy").cuda
    key = (cuda.Device().id, count)
    if key not in _STREAMS:
        _STREAMS[key] = [cuda.Stream(non_blocking=True) for _ in range(count)]
    return _STREAMS[key]


def _over_blocks(xp: Any, m: int, run: Callable[[int], Any]) -> List[Any]:
    """[run(i) for i < m], the intervals in blocks, one side stream per block.

    Every side stream first waits for the work queued so far on the current stream (the
    inputs), and the current stream then waits for every side stream (the results).
    """
    streams = _side_streams(xp, min(max(m, 1), stream_count()))
    if not streams:
        return [run(i) for i in range(m)]
    cupy = importlib.import_module("cupy")
    main = cupy.cuda.get_current_stream()
    ready = main.record()
    out: List[Any] = [None] * m
    block = -(-m // len(streams))
    for j, s in enumerate(streams):
        s.wait_event(ready)
        with s:
            for i in range(j * block, min(m, (j + 1) * block)):
                out[i] = run(i)
    for s in streams:
        main.wait_event(s.record())
    return out


def _forward_streams(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_forward_batched", U, Ks, bs, _as_steps(hs, U))
    xp = _namespace(U)
    rows = _over_blocks(xp, _shape(U)[0], lambda i: _forward(U[i], Ks[i], bs[i], hs[i], act))
    return xp.stack(rows)


def _adjoint_streams(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_adjoint_batched", U, Ks, bs, _as_steps(hs, U), W)
    xp = _namespace(U)
    rows = _over_blocks(xp, _shape(U)[0],
                        lambda i: _adjoint(W[i], U[i], Ks[i], bs[i], hs[i], act))
    return xp.stack(rows)


def _gradient_streams(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                      act: ActivationLike) -> Tuple[Any, Any]:
    hs = check_steps("conv_gradient_batched", U, Ks, bs, _as_steps(hs, U), W)
    xp = _namespace(U)
    rows = _over_blocks(xp, _shape(U)[0],
                        lambda i: _gradient(W[i], U[i], Ks[i], bs[i], hs[i], act))
    return xp.stack([d for d, _ in rows]), xp.stack([e for _, e in rows])


#: The "cudnn-streams" kernel set's functions: the single steps of "cudnn", the batched
#: ones interval by interval over streams per block.
STREAM_STEPS = (_forward, _adjoint, _gradient, _forward_streams, _adjoint_streams,
                _gradient_streams)


def env_backend() -> Optional[str]:
    """The conv backend named by ``BRAIDPY_CONV_BACKEND``, or None when unset or empty."""
    value = os.environ.get(ENV, "").strip()
    return value or None
