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

The convolution is im2col plus ONE matmul: the padded batch is laid out channels first with
the images and their padded pixels folded into one axis, so the window of each kernel offset
(p, q) is a contiguous slice of it; the k * k windows stacked are the im2col matrix, and the
kernel as a (Cout, k * k * Cin) matrix multiplies it (see "layout" below). The input VJP is
the same correlation with the flipped, channel-swapped kernel; the weight VJP multiplies g
with the transposed im2col matrix of u (the one the step has just built for z). The
``*_batched`` variants do m independent steps along a leading interval axis, row by row bit
for bit equal to the single-interval functions. On NumPy the batch is processed in
cache-sized chunks, with matmuls small enough for OpenBLAS to run them on one thread.

All functions are pure and written against the array namespace of their inputs
(``u.__array_namespace__()``, NumPy otherwise), so NumPy and CuPy arrays both work. The
public step functions are the "numpy" kernels of :mod:`braidpy.nn.kernels` (NumPy arrays
chunked, any other array in one go); the ``_api_*`` functions, the "array-api" kernels,
run the same code without chunks for every namespace. :class:`braidpy.nn.ConvLayer` holds
one of the two sets.
"""

from __future__ import annotations

import operator
from typing import Any, Optional, Tuple

from ._common import (_as_steps, _concat, _is_numpy, _mT, _namespace, _permute, _same, _shape,
                      _zeros)
from .activations import Activation, ActivationLike, get_activation

__all__ = ["conv2d", "conv2d_input_vjp", "conv2d_weight_vjp", "conv_forward", "conv_adjoint",
           "conv_gradient", "conv_forward_batched", "conv_adjoint_batched",
           "conv_gradient_batched"]


# ---------------------------------------------------------------- layout
#
# An image batch x (..., N, C, H, W) is laid out channels first with the batch and the
# zero-padded pixels folded into one axis: xf[..., c, n * B + a * Wp + e] = xpad[..., n, c, a, e]
# with Hp = H + 2r, Wp = W + 2r, B = Hp * Wp, plus one zero image at the end (_padded). The
# output pixel (n, i, j) sits at column n * B + i * Wp + j of a (..., Cout, N * B) result,
# and its input xpad[n, c, i + p, j + q] at column n * B + i * Wp + j + (p * Wp + q) of xf:
# the window of kernel offset (p, q) is the contiguous slice xf[..., s:s + N * B] with
# s = p * Wp + q (the columns of the other positions of each block are junk, dropped by
# _crop). Stacking the k * k windows gives the im2col matrix (..., k * k * C, N * B), and
# the convolution is ONE matmul with the kernel as a (..., Cout, k * k * Cin) matrix.
#
# NumPy runs the batch in chunks of images whose columns fit in cache (_chunk); every other
# namespace (GPUs) takes the batch in one go. Leading axes (the m intervals of the batched
# steps) are matmul batch axes: the product of interval i is the same (Cout, k*k*Cin) x
# (k*k*Cin, nb*B) matrix product as for that interval alone, so batched results equal the
# single-interval ones bit for bit. The NumPy batched steps go further and run the very
# same single-interval code interval by interval (their cost is per interval anyway).

#: NumPy path: im2col columns of about this many bytes per chunk of the batch.
_CHUNK_BYTES = 1 << 20
#: NumPy path: column blocks of at most this many multiply-adds per matmul, below the size
#: where OpenBLAS goes multithreaded (its threads stall badly on a loaded machine, and the
#: chunks are small); the blocks of a chunk are one stacked matmul.
_BLOCK_MNK = 200_000
#: Use the chunked NumPy path for NumPy arrays (False: the generic path, for tests). Read
#: by the "numpy" kernels (the public functions) at every call; the "array-api" kernels
#: never chunk.
_NUMPY_FAST_PATH = True


def _chunked(xp: Any) -> bool:
    """Whether the "numpy" kernels take the chunked path for arrays of namespace xp."""
    return _NUMPY_FAST_PATH and _is_numpy(xp)


class _Plan:
    """How to cut a batch x (..., N, C, H, W) for a k x k kernel with Cout output channels.

    nb images per chunk; each chunk's nb * B grid columns as nsub blocks of L columns.
    chunked False: the whole batch in one chunk of one block (any namespace).
    """

    def __init__(self, x: Any, k: int, cout: int, xp: Any, chunked: bool) -> None:
        N, C, H, W = _shape(x)[-4:]
        self.N, self.H, self.W, self.k = N, H, W, k
        self.Wp = W + k - 1
        self.B = (H + k - 1) * self.Wp
        self.nb: int
        self.L: Optional[int]
        if chunked:
            self.nb = max(1, min(N, _CHUNK_BYTES // (k * k * C * self.B * x.dtype.itemsize)))
            self.L = max(1, _BLOCK_MNK // (k * k * max(C, cout) * max(C, cout)))
        else:
            self.nb, self.L = max(N, 1), None

    def ranges(self) -> list:
        return [(n0, min(self.N, n0 + self.nb)) for n0 in range(0, self.N, self.nb)] or [(0, 0)]

    def blocks(self, n: int) -> Tuple[int, int]:
        """(nsub, L) for a chunk of n images: nsub * L >= n * B grid columns."""
        cols = n * self.B
        if self.L is None or cols <= self.L:
            return 1, cols
        nsub = -(-cols // self.L)
        return nsub, -(-cols // nsub)


def _images(x: Any, n0: int, n1: int) -> Any:
    """Images n0:n1 of x (..., N, C, H, W)."""
    return x[..., n0:n1, :, :, :]


def _join(parts: list, xp: Any) -> Any:
    """The chunks' images (..., nb, C, H, W) back in one batch."""
    return parts[0] if len(parts) == 1 else _concat(parts, -4, xp)


def _padded(x: Any, r: int, xp: Any, ncols: int = 0) -> Any:
    """x (..., N, C, H, W) -> xf (..., C, M * Hp * Wp), M > N images; see the layout above.

    At least one zero image follows the N images, and M * Hp * Wp >= ncols.
    """
    s = _shape(x)
    n = len(s)
    N, C, H, W = s[-4:]
    Hp, Wp = H + 2 * r, W + 2 * r
    M = max(N + 1, -(-ncols // (Hp * Wp)))
    buf = _zeros(s[:-4] + (C, M, Hp, Wp), x, xp)
    buf[..., :N, r:r + H, r:r + W] = _permute(x, tuple(range(n - 4)) + (n - 3, n - 4, n - 2,
                                                                          n - 1), xp)
    return xp.reshape(buf, s[:-4] + (C, M * Hp * Wp))


def _split(x: Any, s: int, nsub: int, L: int, xp: Any) -> Any:
    """Columns s:s + nsub * L of x (..., C, cols) as nsub blocks: (..., nsub, C, L)."""
    v = x[..., s:s + nsub * L]
    if nsub == 1:
        return xp.expand_dims(v, axis=-3)
    sv = _shape(v)
    n = len(sv) + 1
    v = xp.reshape(v, sv[:-1] + (nsub, L))
    return _permute(v, tuple(range(n - 3)) + (n - 2, n - 3, n - 1), xp)


def _merge(y: Any, ncols: int, xp: Any) -> Any:
    """Blocks (..., nsub, Cout, L) -> the first ncols columns of (..., Cout, nsub * L)."""
    s = _shape(y)
    if s[-3] == 1:
        return y[..., 0, :, :ncols]
    n = len(s)
    y = _permute(y, tuple(range(n - 3)) + (n - 2, n - 3, n - 1), xp)
    return xp.reshape(y, s[:-3] + (s[-2], s[-3] * s[-1]))[..., :ncols]


def _columns(xf: Any, plan: _Plan, nsub: int, L: int, xp: Any) -> Any:
    """im2col of xf = _padded(x) in blocks: (..., nsub, k * k * C, L), rows (p, q, c)."""
    k, Wp = plan.k, plan.Wp
    n = nsub * L
    if k > 1:  # long contiguous copies; the blocks are then strided views of the result
        xf = _concat([xf[..., p * Wp + q:p * Wp + q + n] for p in range(k) for q in range(k)],
                     -2, xp)
    return _split(xf, 0, nsub, L, xp)


def _kernel_matrix(K: Any, xp: Any, transpose: bool = False) -> Any:
    """K (..., Cout, Cin, k, k) as the (..., 1, Cout, k * k * Cin) matrix, columns (p, q, c).

    transpose: the kernel of the input VJP instead, flipped in (p, q) and with the channel
    axes swapped: (..., 1, Cin, k * k * Cout). The 1 broadcasts over the column blocks.
    """
    n = len(_shape(K))
    lead = tuple(range(n - 4))
    if transpose:
        K = xp.flip(K, axis=(-2, -1))
        axes = lead + (n - 3, n - 2, n - 1, n - 4)
    else:
        axes = lead + (n - 4, n - 2, n - 1, n - 3)
    Kp = _permute(K, axes, xp)
    s = _shape(Kp)
    return xp.reshape(Kp, s[:-4] + (1, s[-4], s[-3] * s[-2] * s[-1]))


def _kernel_from_matrix(dK: Any, k: int, xp: Any) -> Any:
    """(..., Cout, k * k * Cin), columns (p, q, c) -> (..., Cout, Cin, k, k)."""
    s = _shape(dK)
    n = len(s) + 2
    d = xp.reshape(dK, s[:-1] + (k, k, s[-1] // (k * k)))
    return _permute(d, tuple(range(n - 4)) + (n - 4, n - 1, n - 3, n - 2), xp)


def _crop(y: Any, plan: _Plan, n: int, xp: Any) -> Any:
    """(..., Cout, n * B) on the padded grid -> the images (..., n, Cout, H, W)."""
    s = _shape(y)
    lead = s[:-2]
    H, W, k = plan.H, plan.W, plan.k
    y = xp.reshape(y, lead + (s[-2], n, H + k - 1, W + k - 1))[..., :H, :W]
    m = len(lead)
    return _permute(y, tuple(range(m)) + (m + 1, m, m + 2, m + 3), xp)


def _chunk_columns(x: Any, plan: _Plan, xp: Any) -> Tuple[Any, int, int]:
    """(im2col blocks of the images x (..., n, C, H, W), nsub, L)."""
    n = _shape(x)[-4]
    nsub, L = plan.blocks(n)
    k = plan.k
    xf = _padded(x, (k - 1) // 2, xp, nsub * L + (k - 1) * (plan.Wp + 1))
    return _columns(xf, plan, nsub, L, xp), nsub, L


def _product(Km: Any, cols: Any, plan: _Plan, n: int, xp: Any) -> Any:
    """Km @ cols, cropped to the images (..., n, Cout, H, W)."""
    return _crop(_merge(xp.matmul(Km, cols), n * plan.B, xp), plan, n, xp)


def _apply(Km: Any, x: Any, plan: _Plan, xp: Any) -> Any:
    """conv2d of the images x (..., n, Cin, H, W) with the kernel matrix Km."""
    cols, _, _ = _chunk_columns(x, plan, xp)
    return _product(Km, cols, plan, _shape(x)[-4], xp)


def _correlate(x: Any, K: Any, xp: Any) -> Any:
    """conv2d over optional leading axes: x (..., batch, Cin, H, W), K (..., Cout, Cin, k, k)."""
    sK = _shape(K)
    plan = _Plan(x, sK[-1], sK[-4], xp, _chunked(xp))
    Km = _kernel_matrix(K, xp)
    return _join([_apply(Km, _images(x, n0, n1), plan, xp) for n0, n1 in plan.ranges()], xp)


def _input_vjp(g: Any, K: Any, xp: Any) -> Any:
    """Transpose of x -> conv2d(x, K): correlation with the flipped, channel-swapped kernel."""
    sK = _shape(K)
    plan = _Plan(g, sK[-1], sK[-3], xp, _chunked(xp))
    Kt = _kernel_matrix(K, xp, transpose=True)
    return _join([_apply(Kt, _images(g, n0, n1), plan, xp) for n0, n1 in plan.ranges()], xp)


def _flat_padded(x: Any, r: int, xp: Any) -> Any:
    """x prepared for :func:`_weight_vjp` (which pads it chunk by chunk itself: x as is)."""
    return x


def _weight_terms(g: Any, cols: Any, nsub: int, L: int, plan: _Plan,
                  xp: Any) -> Tuple[Any, Any]:
    """(dK matrix (..., Cout, k * k * Cin), g summed over images and pixels (..., Cout)).

    g (..., n, Cout, H, W) and cols, the im2col blocks of the n images of x. g padded the
    same way puts g[n, o, i, j] at column n * B + i * Wp + j + r * Wp + r, so the columns
    from r * Wp + r are g on the output grid, with zeros in the junk columns.
    """
    r = (plan.k - 1) // 2
    o = r * plan.Wp + r
    G = _split(_padded(g, r, xp, o + nsub * L), o, nsub, L, xp)   # (..., nsub, Cout, L)
    dK = xp.sum(xp.matmul(G, _mT(cols, xp)), axis=-3)
    return dK, xp.sum(xp.sum(G, axis=-1), axis=-2)


def _weight_vjp(g: Any, x: Any, k: int, xp: Any) -> Any:
    """Transpose of K -> conv2d(x, K), x from :func:`_flat_padded`: (..., Cout, Cin, k, k)."""
    plan = _Plan(x, k, _shape(g)[-3], xp, _chunked(xp))
    dK = None
    for n0, n1 in plan.ranges():
        cols, nsub, L = _chunk_columns(_images(x, n0, n1), plan, xp)
        d, _ = _weight_terms(_images(g, n0, n1), cols, nsub, L, plan, xp)
        dK = d if dK is None else dK + d
    return _kernel_from_matrix(dK, k, xp)


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


def check_step(fn: str, u: Any, K: Any, b: Any, w: Any = None) -> None:
    """The shape checks of one conv step, for other conv backends (conv_backends.py)."""
    _check_single(fn, u, K, b, w)


def check_steps(fn: str, U: Any, Ks: Any, bs: Any, hs: Any, W: Any = None) -> Any:
    """The shape checks of m conv steps (hs from _as_steps); returns hs."""
    _check_batched(fn, U, Ks, bs, hs, W)
    return hs


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


def _steps(hs: Any, xp: Any) -> Any:
    """hs (m,) shaped (m, 1, 1, 1, 1) for broadcasting over (m, batch, C, H, W)."""
    return xp.reshape(hs, (_shape(hs)[0], 1, 1, 1, 1))


def _forward(u: Any, K: Any, b: Any, h: Any, act: Activation, xp: Any, chunked: bool) -> Any:
    """u + h * act(conv2d(u, K) + b) over optional leading axes, chunk by chunk."""
    plan = _Plan(u, _shape(K)[-1], _shape(K)[-4], xp, chunked)
    Km, bias = _kernel_matrix(K, xp), _bias(b, xp)
    parts = []
    for n0, n1 in plan.ranges():
        uc = _images(u, n0, n1)
        parts.append(uc + h * act.value(_apply(Km, uc, plan, xp) + bias))
    return _join(parts, xp)


def _backward(w: Any, u: Any, K: Any, b: Any, h: Any, act: Activation, xp: Any,
              chunked: bool, gradient: bool) -> Any:
    """State adjoint (gradient False) or (dK, db) (gradient True), chunk by chunk.

    Per chunk g = h * w * act'(z), z = conv2d(u, K) + b; the adjoint is w +
    conv2d_input_vjp(g, K), the gradient sums the chunks' g x (u's im2col columns)^T and g.
    """
    k = _shape(K)[-1]
    plan = _Plan(u, k, _shape(K)[-4], xp, chunked)
    Km, bias = _kernel_matrix(K, xp), _bias(b, xp)
    Kt = None if gradient else _kernel_matrix(K, xp, transpose=True)
    parts, dK, db = [], None, None
    for n0, n1 in plan.ranges():
        uc, wc = _images(u, n0, n1), _images(w, n0, n1)
        cols, nsub, L = _chunk_columns(uc, plan, xp)
        g = h * (wc * act.derivative(_product(Km, cols, plan, n1 - n0, xp) + bias))
        if not gradient:
            parts.append(wc + _apply(Kt, g, plan, xp))
            continue
        d, e = _weight_terms(g, cols, nsub, L, plan, xp)
        dK, db = (d, e) if dK is None else (dK + d, db + e)
    if not gradient:
        return _join(parts, xp)
    return _kernel_from_matrix(dK, k, xp), db


# The six step kernels, for both backends of braidpy.nn.kernels: numpy True is the "numpy"
# backend (NumPy arrays chunked, the batched steps interval by interval; any other array as
# below), numpy False the "array-api" backend (the whole batch and all intervals in one
# matmul per kernel offset block, any namespace, NumPy included).


def _step_forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike, numpy: bool) -> Any:
    _check_single("conv_forward", u, K, b)
    a = get_activation(act)
    xp = _namespace(u)
    return _forward(u, K, b, h, a, xp, numpy and _chunked(xp))


def _step_adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike,
                  numpy: bool) -> Any:
    _check_single("conv_adjoint", u, K, b, w)
    a = get_activation(act)
    xp = _namespace(u)
    return _backward(w, u, K, b, h, a, xp, numpy and _chunked(xp), False)


def _step_gradient(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike,
                   numpy: bool) -> Tuple[Any, Any]:
    _check_single("conv_gradient", u, K, b, w)
    a = get_activation(act)
    xp = _namespace(u)
    return _backward(w, u, K, b, h, a, xp, numpy and _chunked(xp), True)


def _steps_forward(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike, numpy: bool) -> Any:
    hs = _as_steps(hs, U)
    _check_batched("conv_forward_batched", U, Ks, bs, hs)
    a = get_activation(act)
    xp = _namespace(U)
    if numpy and _chunked(xp) and _shape(U)[0] > 0:  # interval by interval
        return xp.stack([_forward(U[i], Ks[i], bs[i], hs[i], a, xp, True)
                         for i in range(_shape(U)[0])])
    return _forward(U, Ks, bs, _steps(hs, xp), a, xp, False)


def _steps_adjoint(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike,
                   numpy: bool) -> Any:
    hs = _as_steps(hs, U)
    _check_batched("conv_adjoint_batched", U, Ks, bs, hs, W)
    a = get_activation(act)
    xp = _namespace(U)
    if numpy and _chunked(xp) and _shape(U)[0] > 0:
        return xp.stack([_backward(W[i], U[i], Ks[i], bs[i], hs[i], a, xp, True, False)
                         for i in range(_shape(U)[0])])
    return _backward(W, U, Ks, bs, _steps(hs, xp), a, xp, False, False)


def _steps_gradient(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike,
                    numpy: bool) -> Tuple[Any, Any]:
    hs = _as_steps(hs, U)
    _check_batched("conv_gradient_batched", U, Ks, bs, hs, W)
    a = get_activation(act)
    xp = _namespace(U)
    if numpy and _chunked(xp) and _shape(U)[0] > 0:
        grads = [_backward(W[i], U[i], Ks[i], bs[i], hs[i], a, xp, True, True)
                 for i in range(_shape(U)[0])]
        return xp.stack([d for d, _ in grads]), xp.stack([e for _, e in grads])
    return _backward(W, U, Ks, bs, _steps(hs, xp), a, xp, False, True)


def _api_forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`conv_forward` of the "array-api" kernels."""
    return _step_forward(u, K, b, h, act, False)


def _api_adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`conv_adjoint` of the "array-api" kernels."""
    return _step_adjoint(w, u, K, b, h, act, False)


def _api_gradient(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`conv_gradient` of the "array-api" kernels."""
    return _step_gradient(w, u, K, b, h, act, False)


def _api_forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    """:func:`conv_forward_batched` of the "array-api" kernels."""
    return _steps_forward(U, Ks, bs, hs, act, False)


def _api_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    """:func:`conv_adjoint_batched` of the "array-api" kernels."""
    return _steps_adjoint(W, U, Ks, bs, hs, act, False)


def _api_gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                          act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`conv_gradient_batched` of the "array-api" kernels."""
    return _steps_gradient(W, U, Ks, bs, hs, act, False)


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
    return _step_forward(u, K, b, h, act, True)


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
    return _step_adjoint(w, u, K, b, h, act, True)


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
    return _step_gradient(w, u, K, b, h, act, True)


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
    return _steps_forward(U, Ks, bs, hs, act, True)


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
    return _steps_adjoint(W, U, Ks, bs, hs, act, True)


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
    return _steps_gradient(W, U, Ks, bs, hs, act, True)
