"""Convolutional ResNet layer as a forward Euler step: forward, state adjoint and gradient.

The state u has shape (batch, C, H, W). One step of layer time from t0 to t0 + h maps it to

    z = conv2d(u, K) + b,        u_new = u + h * act(z),

with K (C, C, k, k) an odd-sized kernel, ``conv2d`` the cross-correlation with "same"
zero padding r = (k - 1) // 2,

    conv2d(x, K)[n, o, i, j] = sum_{c, p, q} K[o, c, p, q] * xpad[n, c, i + p, j + q],

and b (C,) one bias per channel. For an adjoint w of u's shape and g = h * w * act'(z),

    (dPhi/du)^T w = w + conv2d_input_vjp(g, K),
    (dPhi/dK)^T w = conv2d_weight_vjp(g, u, k),        (dPhi/db)^T w = g summed over (n, i, j),

which is what braidpy's adjoint contract (``step_adjoint``/``step_gradient``) asks for; see
Günther et al., "Layer-parallel training of deep residual neural networks", SIAM J. Math.
Data Sci. 2 (2020), Sec. 2 and the convolutional MNIST network of Sec. 5.

The convolution is a sum over the k * k kernel offsets (p, q) of one matmul each: the
padded input is flattened row after row, so the window shifted by (p, q) is a contiguous
slice of it (no copy), with k - 1 junk columns per image row that are dropped at the end.
The only Python loop is over the k * k offsets; the batch and the pixels are inside the
matmuls. The input VJP is the same correlation with the flipped, channel-swapped kernel;
the weight VJP contracts each window with g. The ``*_batched`` variants do m independent
steps along a leading interval axis, folded into the same batched matmuls.

All functions are pure and written against the array namespace of their inputs
(``u.__array_namespace__()``, NumPy otherwise), so NumPy and CuPy arrays both work.
"""

from __future__ import annotations

import operator
from typing import Any, Tuple

from .activations import Activation, _namespace, get_activation
from .dense import ActivationLike, _as_steps, _mT, _same, _shape

__all__ = ["conv2d", "conv2d_input_vjp", "conv2d_weight_vjp", "conv_forward", "conv_adjoint",
           "conv_gradient", "conv_forward_batched", "conv_adjoint_batched",
           "conv_gradient_batched"]


# ---------------------------------------------------------------- namespace helpers


def _concat(arrays: list, axis: int, xp: Any) -> Any:
    """xp.concat (array API), or xp.concatenate where the namespace predates it."""
    fn = getattr(xp, "concat", None)
    if fn is None:
        fn = xp.concatenate
    return fn(arrays, axis=axis)


def _permute(x: Any, axes: tuple, xp: Any) -> Any:
    """xp.permute_dims (array API), or xp.transpose where the namespace predates it."""
    fn = getattr(xp, "permute_dims", None)
    if fn is None:
        fn = xp.transpose
    return fn(x, axes)


def _zeros_along(x: Any, axis: int, n: int, xp: Any) -> Any:
    """Zeros shaped like x but with n entries along axis (negative), on x's device."""
    s = _shape(x)
    one = x[(Ellipsis, slice(0, 1)) + (slice(None),) * (-1 - axis)]
    return xp.broadcast_to(xp.zeros_like(one), s[:axis] + (n,) + s[len(s) + axis + 1:])


def _flat_padded(x: Any, r: int, xp: Any) -> Any:
    """x (..., C, H, W) zero-padded by r around H and W, rows laid end to end.

    Shape (..., C, (H + 2r + 1) * (W + 2r)) for r > 0 (one extra zero row so that every
    window of :func:`_windows` fits), (..., C, H * W) for r = 0.
    """
    s = _shape(x)
    if r == 0:
        return xp.reshape(x, s[:-2] + (s[-2] * s[-1],))
    zc = _zeros_along(x, -1, r, xp)
    x = _concat([zc, x, zc], -1, xp)
    x = _concat([_zeros_along(x, -2, r, xp), x, _zeros_along(x, -2, r + 1, xp)], -2, xp)
    return xp.reshape(x, s[:-2] + ((s[-2] + 2 * r + 1) * (s[-1] + 2 * r),))


def _windows(xf: Any, H: int, W: int, k: int):
    """Yield (p, q, window) for the k * k kernel offsets; xf from :func:`_flat_padded`.

    window[..., c, i * Wp + j] = xpad[..., c, i + p, j + q] for i < H, j < Wp = W + k - 1:
    a contiguous slice of the flattened padded image (no copy). Columns j >= W of each row
    run into the next row and are junk; callers drop them (:func:`_crop`) or multiply them
    by zeros (:func:`_widen`).
    """
    Wp = W + k - 1
    L = H * Wp
    for p in range(k):
        for q in range(k):
            s = p * Wp + q
            yield p, q, xf[..., s:s + L]


def _crop(y: Any, H: int, W: int, k: int, xp: Any) -> Any:
    """(..., H * Wp) with junk columns -> (..., H, W)."""
    s = _shape(y)
    return xp.reshape(y, s[:-1] + (H, W + k - 1))[..., :W]


def _widen(g: Any, k: int, xp: Any) -> Any:
    """(..., H, W) -> (..., H * Wp) with zeros in the k - 1 junk columns of each row."""
    s = _shape(g)
    if k > 1:
        g = _concat([g, _zeros_along(g, -1, k - 1, xp)], -1, xp)
    return xp.reshape(g, s[:-2] + (s[-2] * (s[-1] + k - 1),))


def _correlate_flat(xf: Any, K: Any, H: int, W: int, xp: Any) -> Any:
    """conv2d from xf = _flat_padded(x): (..., batch, Cout, H, W).

    One matmul of the kernel slice K[..., :, :, p, q] (batched over the leading axes and
    broadcast over the batch) with each window, accumulated in a fresh local array.
    """
    k = _shape(K)[-1]
    out = None
    for p, q, window in _windows(xf, H, W, k):
        term = xp.matmul(xp.expand_dims(K[..., p, q], axis=-3), window)
        if out is None:
            out = term
        else:
            out += term
    return _crop(out, H, W, k, xp)


def _correlate(x: Any, K: Any, xp: Any) -> Any:
    """conv2d over optional leading axes: x (..., batch, Cin, H, W), K (..., Cout, Cin, k, k)."""
    k = _shape(K)[-1]
    H, W = _shape(x)[-2:]
    return _correlate_flat(_flat_padded(x, (k - 1) // 2, xp), K, H, W, xp)


def _input_vjp(g: Any, K: Any, xp: Any) -> Any:
    """Transpose of x -> conv2d(x, K): correlation with the flipped, channel-swapped kernel."""
    n = len(_shape(K))
    axes = tuple(range(n - 4)) + (n - 3, n - 4, n - 2, n - 1)
    return _correlate(g, xp.flip(_permute(K, axes, xp), axis=(-2, -1)), xp)


def _weight_vjp(g: Any, xf: Any, k: int, xp: Any) -> Any:
    """Transpose of K -> conv2d(x, K) from xf = _flat_padded(x): (..., Cout, Cin, k, k).

    dK[..., :, :, p, q] = sum over the batch of g @ window^T, with g's junk columns zero.
    """
    H, W = _shape(g)[-2:]
    gw = _widen(g, k, xp)                                     # (..., batch, Cout, H * Wp)
    parts = [xp.sum(xp.matmul(gw, _mT(window, xp)), axis=-3)  # (..., Cout, Cin)
             for _, _, window in _windows(xf, H, W, k)]
    dK = xp.stack(parts, axis=-1)                             # (..., Cout, Cin, k * k)
    s = _shape(dK)
    return xp.reshape(dK, s[:-1] + (k, k))


# ---------------------------------------------------------------- shape checks


def _check_kernel_size(fn: str, name: str, k: Any, shape: tuple) -> None:
    if k % 2 != 1:
        where = f" (shape {shape})" if shape else ""
        raise ValueError(f"{fn}: kernel size k = {k} of {name}{where} must be odd; 'same' "
                         f"zero padding needs a centred kernel")


def _check_kernel(fn: str, name: str, K: Any, cout: Any, cin: int, ref: str,
                  ref_shape: tuple, lead: tuple = ()) -> int:
    """K must be (*lead, cout, cin, k, k) with k odd (cout None: any); returns k."""
    sK = _shape(K)
    n = len(lead)
    dims = ("m, " if n else "") + ("Cout" if cout is None else "C") + ", Cin, k, k"
    ok = (len(sK) == n + 4 and sK[:n] == lead and sK[n + 1] == cin and sK[n + 2] == sK[n + 3]
          and (cout is None or sK[n] == cout))
    if not ok:
        want = lead + ("Cout" if cout is None else cout, cin, "k", "k")
        want_s = "(" + ", ".join(str(d) for d in want) + ")"
        raise ValueError(f"{fn}: {name} has shape {sK} but {ref} has shape {ref_shape}; "
                         f"{name} must be ({dims}) = {want_s} with k odd")
    _check_kernel_size(fn, name, sK[-1], sK)
    return sK[-1]


def _check_image(fn: str, name: str, x: Any, dims: str, ndim: int = 4) -> tuple:
    sx = _shape(x)
    if len(sx) != ndim:
        raise ValueError(f"{fn}: {name} must be {ndim}-D ({dims}), got shape {sx}")
    return sx


def _check_vector(fn: str, name: str, v: Any, want: tuple, dims: str, ref: str,
                  ref_shape: tuple) -> None:
    if _shape(v) != want:
        raise ValueError(f"{fn}: {name} has shape {_shape(v)} but {ref} has shape {ref_shape}; "
                         f"{name} must be ({dims}) = {want}")


def _check_single(fn: str, u: Any, K: Any, b: Any, w: Any = None) -> None:
    su = _check_image(fn, "u", u, "batch, C, H, W")
    C = su[1]
    _check_kernel(fn, "K", K, C, C, "u", su)
    _check_vector(fn, "b", b, (C,), "C,", "u", su)
    _same(fn, "w", w, "u", su)


def _check_batched(fn: str, U: Any, Ks: Any, bs: Any, hs: Any, W: Any = None) -> None:
    sU = _check_image(fn, "U", U, "m, batch, C, H, W", 5)
    m, C = sU[0], sU[2]
    _check_kernel(fn, "Ks", Ks, C, C, "U", sU, (m,))
    _check_vector(fn, "bs", bs, (m, C), "m, C", "U", sU)
    _check_vector(fn, "hs", hs, (m,), "m,", "U", sU)
    _same(fn, "W", W, "U", sU)


# ---------------------------------------------------------------- the convolution


def conv2d(x: Any, K: Any) -> Any:
    """Cross-correlation with "same" zero padding: (batch, Cin, H, W) -> (batch, Cout, H, W).

    out[n, o, i, j] = sum_{c, p, q} K[o, c, p, q] * xpad[n, c, i + p, j + q], where xpad is
    x zero-padded by r = (k - 1) // 2 on each side of H and W.

    Parameters
    ----------
    x : array, shape (batch, Cin, H, W)
    K : array, shape (Cout, Cin, k, k)
        Kernel; k must be odd.

    Returns
    -------
    array, shape (batch, Cout, H, W)

    Raises
    ------
    ValueError
        If the shapes do not fit or k is even.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
    >>> conv2d(x, np.ones((1, 1, 3, 3)))[0, 0].tolist()   # sums over 3x3 neighbourhoods
    [[8.0, 15.0, 12.0], [21.0, 36.0, 27.0], [20.0, 33.0, 24.0]]
    """
    sx = _check_image("conv2d", "x", x, "batch, Cin, H, W")
    _check_kernel("conv2d", "K", K, None, sx[1], "x", sx)
    return _correlate(x, K, _namespace(x))


def conv2d_input_vjp(g: Any, K: Any) -> Any:
    """Transpose of x -> conv2d(x, K) applied to g (batch, Cout, H, W): shape (batch, Cin, H, W).

    This is the correlation of g with the kernel flipped in both spatial axes and with its
    channel axes swapped, so <conv2d(x, K), g> = <x, conv2d_input_vjp(g, K)>.

    Examples
    --------
    >>> import numpy as np
    >>> g = np.zeros((1, 1, 3, 3)); g[0, 0, 1, 1] = 1.0
    >>> K = np.arange(9.0).reshape(1, 1, 3, 3)
    >>> conv2d_input_vjp(g, K)[0, 0].tolist()   # the kernel, read around the centre
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    """
    sg = _check_image("conv2d_input_vjp", "g", g, "batch, Cout, H, W")
    sK = _shape(K)
    if len(sK) != 4 or sK[0] != sg[1] or sK[2] != sK[3]:
        raise ValueError(f"conv2d_input_vjp: K has shape {sK} but g has shape {sg}; K must be "
                         f"(Cout, Cin, k, k) with Cout = {sg[1]} and k odd")
    _check_kernel_size("conv2d_input_vjp", "K", sK[-1], sK)
    return _input_vjp(g, K, _namespace(g))


def conv2d_weight_vjp(g: Any, x: Any, k: int) -> Any:
    """Transpose of K -> conv2d(x, K) applied to g (batch, Cout, H, W): shape (Cout, Cin, k, k).

    dK[o, c, p, q] = sum_{n, i, j} g[n, o, i, j] * xpad[n, c, i + p, j + q], so
    <conv2d(x, K), g> = <K, conv2d_weight_vjp(g, x, k)>.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
    >>> g = np.zeros((1, 1, 3, 3)); g[0, 0, 1, 1] = 1.0
    >>> conv2d_weight_vjp(g, x, 3)[0, 0].tolist()   # the window of x around the centre
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    """
    fn = "conv2d_weight_vjp"
    sx = _check_image(fn, "x", x, "batch, Cin, H, W")
    sg = _check_image(fn, "g", g, "batch, Cout, H, W")
    if sg[0] != sx[0] or sg[2:] != sx[2:]:
        raise ValueError(f"{fn}: g has shape {sg} but x has shape {sx}; g must be "
                         f"(batch, Cout, H, W) = ({sx[0]}, Cout, {sx[2]}, {sx[3]})")
    try:
        k_int = operator.index(k)
    except TypeError:
        k_int = 0
    if isinstance(k, bool) or k_int < 1:
        raise ValueError(f"{fn}: kernel size k must be a positive odd integer, got {k!r}")
    k = k_int
    _check_kernel_size(fn, "the kernel", k, ())
    xp = _namespace(x)
    return _weight_vjp(g, _flat_padded(x, (k - 1) // 2, xp), k, xp)


# ---------------------------------------------------------------- one step


def _bias(b: Any, xp: Any) -> Any:
    """b (C,) or bs (m, C) shaped to broadcast over (batch, C, H, W) or (m, batch, C, H, W)."""
    s = _shape(b)
    return xp.reshape(b, s[:-1] + (1, s[-1], 1, 1) if len(s) == 2 else (s[0], 1, 1))


def _scaled_slope(w: Any, u: Any, K: Any, b: Any, h: Any, act: Activation, xp: Any,
                  uf: Any = None) -> Any:
    """g = h * w * act'(z), z = conv2d(u, K) + b (uf: _flat_padded(u), if at hand)."""
    if uf is None:
        uf = _flat_padded(u, (_shape(K)[-1] - 1) // 2, xp)
    H, W = _shape(u)[-2:]
    z = _correlate_flat(uf, K, H, W, xp) + _bias(b, xp)
    return h * (w * act.derivative(z))


def _steps(hs: Any, xp: Any) -> Any:
    """hs (m,) shaped (m, 1, 1, 1, 1) for broadcasting over (m, batch, C, H, W)."""
    return xp.reshape(hs, (_shape(hs)[0], 1, 1, 1, 1))


def conv_forward(u: Any, K: Any, b: Any, h: float, act: ActivationLike) -> Any:
    """One convolutional ResNet step: u + h * act(conv2d(u, K) + b), as a new array.

    Parameters
    ----------
    u : array, shape (batch, C, H, W)
        State at t0.
    K : array, shape (C, C, k, k)
        Kernel, k odd; see :func:`conv2d`.
    b : array, shape (C,)
        Bias, one per channel.
    h : float
        Step size t1 - t0.
    act : str or Activation
        Activation, by name (see :func:`braidpy.nn.get_activation`) or object.

    Returns
    -------
    array, shape (batch, C, H, W)

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[[[1.0, -1.0]]]])           # batch 1, one channel, 1 x 2 image
    >>> K = np.zeros((1, 1, 3, 3)); K[0, 0, 1, 1] = 1.0   # identity kernel
    >>> conv_forward(u, K, np.zeros(1), 0.5, "relu").tolist()
    [[[[1.5, -1.0]]]]
    """
    _check_single("conv_forward", u, K, b)
    a = get_activation(act)
    xp = _namespace(u)
    return u + h * a.value(_correlate(u, K, xp) + _bias(b, xp))


def conv_adjoint(w: Any, u: Any, K: Any, b: Any, h: float, act: ActivationLike) -> Any:
    """State adjoint of one conv step: w + conv2d_input_vjp(h w act'(z), K), a new array.

    ``u`` is the primal state at t0 and ``z = conv2d(u, K) + b``; other arguments as in
    :func:`conv_forward`. ``w`` has the shape of ``u``.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[[[1.0, -1.0]]]])
    >>> K = np.zeros((1, 1, 3, 3)); K[0, 0, 1, 1] = 1.0
    >>> conv_adjoint(np.ones_like(u), u, K, np.zeros(1), 0.5, "relu").tolist()
    [[[[1.5, 1.0]]]]
    """
    _check_single("conv_adjoint", u, K, b, w)
    a = get_activation(act)
    xp = _namespace(u)
    return w + _input_vjp(_scaled_slope(w, u, K, b, h, a, xp), K, xp)


def conv_gradient(w: Any, u: Any, K: Any, b: Any, h: float,
                  act: ActivationLike) -> Tuple[Any, Any]:
    """Parameter gradient of one conv step: ((dPhi/dK)^T w, (dPhi/db)^T w).

    With g = h * w * act'(conv2d(u, K) + b): dK = conv2d_weight_vjp(g, u, k) (C, C, k, k)
    and db = g summed over batch, H and W (C,). Arguments as in :func:`conv_adjoint`.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[[[1.0, -1.0]]]])
    >>> K = np.zeros((1, 1, 3, 3)); K[0, 0, 1, 1] = 1.0
    >>> dK, db = conv_gradient(np.ones_like(u), u, K, np.zeros(1), 0.5, "relu")
    >>> dK[0, 0].tolist(), db.tolist()
    ([[0.0, 0.0, 0.0], [0.0, 0.5, -0.5], [0.0, 0.0, 0.0]], [0.5])
    """
    _check_single("conv_gradient", u, K, b, w)
    a = get_activation(act)
    xp = _namespace(u)
    k = _shape(K)[-1]
    uf = _flat_padded(u, (k - 1) // 2, xp)
    g = _scaled_slope(w, u, K, b, h, a, xp, uf)
    return _weight_vjp(g, uf, k, xp), xp.sum(g, axis=(0, 2, 3))


# ---------------------------------------------------------------- m steps at once


def conv_forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    """m independent conv steps at once: U[i] + hs[i] * act(conv2d(U[i], Ks[i]) + bs[i]).

    Parameters
    ----------
    U : array, shape (m, batch, C, H, W)
        States at the start of each of m intervals.
    Ks : array, shape (m, C, C, k, k)
    bs : array, shape (m, C)
    hs : array or sequence, shape (m,)
        Step sizes.
    act : str or Activation

    Returns
    -------
    array, shape (m, batch, C, H, W); equal to :func:`conv_forward` interval by interval.

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 1, 1, 2))
    >>> Ks = np.zeros((2, 1, 1, 1, 1)); Ks[:, 0, 0, 0, 0] = [1.0, -1.0]
    >>> conv_forward_batched(U, Ks, np.zeros((2, 1)), [0.5, 0.5], "relu").tolist()
    [[[[[1.5, 1.5]]]], [[[[1.0, 1.0]]]]]
    """
    hs = _as_steps(hs, U)
    _check_batched("conv_forward_batched", U, Ks, bs, hs)
    a = get_activation(act)
    xp = _namespace(U)
    return U + _steps(hs, xp) * a.value(_correlate(U, Ks, xp) + _bias(bs, xp))


def conv_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                         act: ActivationLike) -> Any:
    """m independent state adjoints at once; :func:`conv_adjoint` interval by interval.

    ``W`` has the shape (m, batch, C, H, W) of ``U``; see :func:`conv_forward_batched`.

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 1, 1, 2))
    >>> Ks = np.zeros((2, 1, 1, 1, 1)); Ks[:, 0, 0, 0, 0] = [1.0, -1.0]
    >>> conv_adjoint_batched(U, U, Ks, np.zeros((2, 1)), [0.5, 0.5], "relu").tolist()
    [[[[[1.5, 1.5]]]], [[[[1.0, 1.0]]]]]
    """
    hs = _as_steps(hs, U)
    _check_batched("conv_adjoint_batched", U, Ks, bs, hs, W)
    a = get_activation(act)
    xp = _namespace(U)
    return W + _input_vjp(_scaled_slope(W, U, Ks, bs, _steps(hs, xp), a, xp), Ks, xp)


def conv_gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                          act: ActivationLike) -> Tuple[Any, Any]:
    """m independent parameter gradients at once: (dKs (m, C, C, k, k), dbs (m, C)).

    Interval by interval equal to :func:`conv_gradient`; arguments as in
    :func:`conv_adjoint_batched`.

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 1, 1, 2))
    >>> Ks = np.zeros((2, 1, 1, 1, 1)); Ks[:, 0, 0, 0, 0] = [1.0, -1.0]
    >>> dKs, dbs = conv_gradient_batched(U, U, Ks, np.zeros((2, 1)), [0.5, 0.5], "relu")
    >>> dKs.shape, dbs.tolist()
    ((2, 1, 1, 1, 1), [[1.0], [0.0]])
    """
    hs = _as_steps(hs, U)
    _check_batched("conv_gradient_batched", U, Ks, bs, hs, W)
    a = get_activation(act)
    xp = _namespace(U)
    k = _shape(Ks)[-1]
    uf = _flat_padded(U, (k - 1) // 2, xp)
    g = _scaled_slope(W, U, Ks, bs, _steps(hs, xp), a, xp, uf)
    return _weight_vjp(g, uf, k, xp), xp.sum(g, axis=(1, 3, 4))
