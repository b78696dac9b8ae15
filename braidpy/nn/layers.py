"""The layers before and after layer time: opening layers and the softmax classifier.

A layer-parallel ResNet (Günther et al., "Layer-parallel training of deep residual neural
networks", SIAM J. Math. Data Sci. 2 (2020), Sec. 2) maps the data y to the initial state

    u0 = act(y @ L.T + b)             (dense opening, u0 of shape (batch, width)), or
    u0 = act(conv2d(y, K) + b)        (convolutional opening, (batch, C, H, W)),

or, parameter-free, copies y over the channels (:func:`replicate_opening`) or pads it with
zeros (:func:`zero_pad_opening`). After layer time the final state u (batch, q), or an
image state (batch, C, H, W) flattened to q = C * H * W features, is classified by

    z = u @ W.T + mu,        loss = mean over the batch of -sum_j c_j log softmax(z)_j,

with c (batch, nc) one-hot or probability rows. The ``*_gradient`` functions return the
vector-Jacobian products needed to close the adjoint: the classifier gives the terminal
adjoint du and the gradients for W and mu; the openings turn the adjoint at t = 0 into
gradients for their parameters.

All functions are pure and written against the array namespace of their inputs
(``y.__array_namespace__()``, NumPy otherwise), so NumPy and CuPy arrays both work.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ._common import _concat, _mT, _namespace, _same, _shape, _zeros_along
from .activations import ActivationLike, get_activation
from .conv import _check_image, _check_kernel, _check_vector, _correlate, _flat_padded, _weight_vjp

__all__ = ["dense_opening", "dense_opening_gradient", "conv_opening", "conv_opening_gradient",
           "replicate_opening", "zero_pad_opening", "classifier_logits", "classifier_loss",
           "classifier_gradient", "classifier_predict", "classifier_probabilities",
           "classifier_sums", "accuracy"]


def _activate(z: Any, act: Optional[ActivationLike]) -> Any:
    return z if act is None else get_activation(act).value(z)


def _pull_back(w: Any, z: Any, act: Optional[ActivationLike]) -> Any:
    """w * act'(z) (w itself for the identity)."""
    return w if act is None else w * get_activation(act).derivative(z)


# ---------------------------------------------------------------- opening layers


def _check_dense_opening(fn: str, y: Any, L: Any, b: Any, w: Any = None) -> None:
    sy = _shape(y)
    if len(sy) != 2:
        raise ValueError(f"{fn}: y must be 2-D (batch, nf), got shape {sy}")
    sL = _shape(L)
    if len(sL) != 2 or sL[1] != sy[1]:
        raise ValueError(f"{fn}: L has shape {sL} but y has shape {sy}; L must be "
                         f"(width, nf) = (width, {sy[1]})")
    _check_vector(fn, "b", b, (sL[0],), "width,", "L", sL)
    if w is not None:
        _same(fn, "w", w, "the opening's output", (sy[0], sL[0]))


def _dense_pre(y: Any, L: Any, b: Any) -> Any:
    xp = _namespace(y)
    return xp.matmul(y, _mT(L, xp)) + b


def dense_opening(y: Any, L: Any, b: Any, act: Optional[ActivationLike] = None) -> Any:
    """Dense opening layer: u0 = act(y @ L.T + b) (the identity where act is None).

    Parameters
    ----------
    y : array, shape (batch, nf)
        Data, one example per row.
    L : array, shape (width, nf)
        Weights.
    b : array, shape (width,)
        Bias.
    act : str or Activation, optional
        Activation, by name or object; None (default) for none.

    Returns
    -------
    array, shape (batch, width)

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[1.0, -2.0]])
    >>> L = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> dense_opening(y, L, np.zeros(3)).tolist()
    [[1.0, -2.0, -1.0]]
    >>> dense_opening(y, L, np.zeros(3), "relu").tolist()
    [[1.0, 0.0, 0.0]]
    """
    _check_dense_opening("dense_opening", y, L, b)
    return _activate(_dense_pre(y, L, b), act)


def dense_opening_gradient(w: Any, y: Any, L: Any, b: Any,
                           act: Optional[ActivationLike] = None) -> Tuple[Any, Any]:
    """Parameter gradient of :func:`dense_opening` for the adjoint w (batch, width): (dL, db).

    With g = w * act'(y @ L.T + b) (g = w for act None): dL = g.T @ y (width, nf) and
    db = g summed over the batch (width,).

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[1.0, -2.0]])
    >>> dL, db = dense_opening_gradient(np.ones((1, 2)), y, np.eye(2), np.zeros(2), "relu")
    >>> dL.tolist(), db.tolist()
    ([[1.0, -2.0], [0.0, 0.0]], [1.0, 0.0])
    """
    _check_dense_opening("dense_opening_gradient", y, L, b, w)
    xp = _namespace(y)
    g = _pull_back(w, _dense_pre(y, L, b) if act is not None else None, act)
    return xp.matmul(_mT(g, xp), y), xp.sum(g, axis=0)


def _check_conv_opening(fn: str, y: Any, K: Any, b: Any, w: Any = None) -> int:
    sy = _check_image(fn, "y", y, "batch, Cin, H, W")
    k = _check_kernel(fn, "K", K, None, sy[1], "y", sy)
    C = _shape(K)[0]
    _check_vector(fn, "b", b, (C,), "C,", "K", _shape(K))
    if w is not None:
        _same(fn, "w", w, "the opening's output", (sy[0], C) + sy[2:])
    return k


def _conv_pre(y: Any, K: Any, b: Any) -> Any:
    xp = _namespace(y)
    return _correlate(y, K, xp) + xp.reshape(b, (_shape(b)[0], 1, 1))


def conv_opening(y: Any, K: Any, b: Any, act: Optional[ActivationLike] = None) -> Any:
    """Convolutional opening layer: u0 = act(conv2d(y, K) + b) (identity where act is None).

    Parameters
    ----------
    y : array, shape (batch, Cin, H, W)
        Image data.
    K : array, shape (C, Cin, k, k)
        Kernel, k odd; see :func:`braidpy.nn.conv2d`.
    b : array, shape (C,)
        Bias, one per output channel.
    act : str or Activation, optional

    Returns
    -------
    array, shape (batch, C, H, W)

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[[[1.0, -2.0]]]])          # one 1 x 2 single-channel image
    >>> K = np.array([1.0, -1.0]).reshape(2, 1, 1, 1)
    >>> conv_opening(y, K, np.zeros(2), "relu").tolist()
    [[[[1.0, 0.0]], [[0.0, 2.0]]]]
    """
    _check_conv_opening("conv_opening", y, K, b)
    return _activate(_conv_pre(y, K, b), act)


def conv_opening_gradient(w: Any, y: Any, K: Any, b: Any,
                          act: Optional[ActivationLike] = None) -> Tuple[Any, Any]:
    """Parameter gradient of :func:`conv_opening` for the adjoint w (batch, C, H, W): (dK, db).

    With g = w * act'(conv2d(y, K) + b) (g = w for act None): dK =
    conv2d_weight_vjp(g, y, k) (C, Cin, k, k) and db = g summed over batch, H, W (C,).

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[[[1.0, -2.0]]]])
    >>> K = np.array([1.0, -1.0]).reshape(2, 1, 1, 1)
    >>> dK, db = conv_opening_gradient(np.ones((1, 2, 1, 2)), y, K, np.zeros(2), "relu")
    >>> dK.ravel().tolist(), db.tolist()
    ([1.0, -2.0], [1.0, 1.0])
    """
    k = _check_conv_opening("conv_opening_gradient", y, K, b, w)
    xp = _namespace(y)
    g = _pull_back(w, _conv_pre(y, K, b) if act is not None else None, act)
    dK = _weight_vjp(g, _flat_padded(y, (k - 1) // 2, xp), k, xp)
    return dK, xp.sum(g, axis=(0, 2, 3))


def _check_width(fn: str, y: Any, width: int) -> Tuple[tuple, int]:
    sy = _shape(y)
    if len(sy) not in (2, 4):
        raise ValueError(f"{fn}: y must be 2-D (batch, nf) or 4-D (batch, Cin, H, W), "
                         f"got shape {sy}")
    what = "nf" if len(sy) == 2 else "Cin"
    if sy[1] > width:
        raise ValueError(f"{fn}: y has {what} = {sy[1]} features/channels (shape {sy}), more "
                         f"than width = {width}; the opening cannot drop data")
    return sy, sy[1]


def replicate_opening(y: Any, width: int) -> Any:
    """Parameter-free opening: y copied over the features/channels, cyclically.

    Dense data y (batch, nf) gives (batch, width) with column j equal to y[:, j % nf];
    image data y (batch, Cin, H, W) gives (batch, width, H, W) with channel j equal to
    y[:, j % Cin] (the identity copied over the channels, as for MNIST in Günther et al.).

    Raises
    ------
    ValueError
        If nf (or Cin) exceeds width.

    Examples
    --------
    >>> import numpy as np
    >>> replicate_opening(np.array([[1.0, 2.0]]), 5).tolist()
    [[1.0, 2.0, 1.0, 2.0, 1.0]]
    >>> replicate_opening(np.ones((3, 1, 28, 28)), 4).shape
    (3, 4, 28, 28)
    """
    _, nf = _check_width("replicate_opening", y, width)
    xp = _namespace(y)
    copies = -(-width // nf)  # ceil(width / nf)
    out = _concat([y] * copies, 1, xp)  # always a new array
    return out if copies * nf == width else out[:, :width, ...]


def zero_pad_opening(y: Any, width: int) -> Any:
    """Parameter-free opening: y in the first nf features (or Cin channels), zeros after.

    Dense data y (batch, nf) gives (batch, width); image data y (batch, Cin, H, W) gives
    (batch, width, H, W).

    Raises
    ------
    ValueError
        If nf (or Cin) exceeds width.

    Examples
    --------
    >>> import numpy as np
    >>> zero_pad_opening(np.array([[1.0, 2.0]]), 4).tolist()
    [[1.0, 2.0, 0.0, 0.0]]
    """
    _, nf = _check_width("zero_pad_opening", y, width)
    xp = _namespace(y)
    if nf == width:
        return _concat([y], 1, xp)  # a copy, like the other cases
    return _concat([y, _zeros_along(y, 1 - len(_shape(y)), width - nf, xp)], 1, xp)


# ---------------------------------------------------------------- classifier


def _flatten(u: Any, xp: Any) -> Any:
    s = _shape(u)
    if len(s) == 2:
        return u
    q = 1
    for d in s[1:]:
        q *= d
    return xp.reshape(u, (s[0], q))


def _check_classifier(fn: str, u: Any, W: Any, mu: Any, c: Any = None) -> None:
    su = _shape(u)
    if len(su) not in (2, 4):
        raise ValueError(f"{fn}: u must be 2-D (batch, q) or 4-D (batch, C, H, W), "
                         f"got shape {su}")
    q = 1
    for d in su[1:]:
        q *= d
    sW = _shape(W)
    if len(sW) != 2 or sW[1] != q:
        raise ValueError(f"{fn}: W has shape {sW} but the state has q = {q} features "
                         f"(u has shape {su}); W must be (nc, q) = (nc, {q})")
    nc = sW[0]
    if _shape(mu) != (nc,):
        raise ValueError(f"{fn}: mu has shape {_shape(mu)} but W has shape {sW} with "
                         f"nc = {nc} classes; mu must be (nc,) = ({nc},)")
    if c is not None and _shape(c) != (su[0], nc):
        raise ValueError(f"{fn}: c has shape {_shape(c)} but W has nc = {nc} classes and u "
                         f"has batch = {su[0]}; c must be (batch, nc) = ({su[0]}, {nc})")


def _logits(u: Any, W: Any, mu: Any, xp: Any) -> Any:
    return xp.matmul(_flatten(u, xp), _mT(W, xp)) + mu


def _log_softmax(z: Any, xp: Any) -> Any:
    """Row-wise log softmax with the row maximum subtracted first (no overflow)."""
    zs = z - xp.max(z, axis=1, keepdims=True)
    return zs - xp.log(xp.sum(xp.exp(zs), axis=1, keepdims=True))


def classifier_logits(u: Any, W: Any, mu: Any) -> Any:
    """Class scores z = u_flat @ W.T + mu, u_flat being u flattened to (batch, q).

    Parameters
    ----------
    u : array, shape (batch, q) or (batch, C, H, W)
        Final state; image states are flattened to q = C * H * W features (C-order).
    W : array, shape (nc, q)
    mu : array, shape (nc,)

    Returns
    -------
    array, shape (batch, nc)

    Examples
    --------
    >>> import numpy as np
    >>> classifier_logits(np.array([[1.0, 2.0]]), np.eye(2), np.array([0.5, 0.0])).tolist()
    [[1.5, 2.0]]
    """
    _check_classifier("classifier_logits", u, W, mu)
    return _logits(u, W, mu, _namespace(u))


def classifier_loss(u: Any, c: Any, W: Any, mu: Any) -> Any:
    """Mean cross entropy over the batch: mean_n -sum_j c[n, j] log softmax(z[n])_j.

    ``z`` is :func:`classifier_logits`; c (batch, nc) holds one-hot or probability rows.
    The log-sum-exp subtracts each row's maximum, so large logits do not overflow.
    Returns a 0-D array of u's namespace.

    Examples
    --------
    >>> import numpy as np
    >>> u, W, mu = np.zeros((1, 2)), np.eye(2), np.zeros(2)
    >>> round(float(classifier_loss(u, np.array([[1.0, 0.0]]), W, mu)), 12)   # log 2
    0.69314718056
    """
    _check_classifier("classifier_loss", u, W, mu, c)
    xp = _namespace(u)
    return -xp.sum(c * _log_softmax(_logits(u, W, mu, xp), xp)) / _shape(u)[0]


def classifier_gradient(u: Any, c: Any, W: Any, mu: Any) -> Tuple[Any, Any, Any, Any]:
    """Loss and its gradients: (loss, du, dW, dmu) of :func:`classifier_loss`.

    With p = softmax(z) and s = c summed over each row (1 for probability rows),
    dz = (p * s - c) / batch, du = dz @ W reshaped to u's shape (the terminal adjoint),
    dW = dz.T @ u_flat (nc, q) and dmu = dz summed over the batch (nc,).

    Examples
    --------
    >>> import numpy as np
    >>> u, W, mu = np.zeros((1, 2)), np.eye(2), np.zeros(2)
    >>> loss, du, dW, dmu = classifier_gradient(u, np.array([[1.0, 0.0]]), W, mu)
    >>> du.tolist(), dmu.tolist()
    ([[-0.5, 0.5]], [-0.5, 0.5])
    """
    _check_classifier("classifier_gradient", u, W, mu, c)
    xp = _namespace(u)
    batch = _shape(u)[0]
    uf = _flatten(u, xp)
    logp = _log_softmax(xp.matmul(uf, _mT(W, xp)) + mu, xp)
    loss = -xp.sum(c * logp) / batch
    dz = (xp.exp(logp) * xp.sum(c, axis=1, keepdims=True) - c) / batch
    du = xp.reshape(xp.matmul(dz, W), _shape(u))
    return loss, du, xp.matmul(_mT(dz, xp), uf), xp.sum(dz, axis=0)


def classifier_predict(u: Any, W: Any, mu: Any) -> Any:
    """Predicted class per example: argmax of :func:`classifier_logits`, shape (batch,).

    Examples
    --------
    >>> import numpy as np
    >>> classifier_predict(np.array([[1.0, 2.0], [3.0, 0.0]]), np.eye(2), np.zeros(2)).tolist()
    [1, 0]
    """
    _check_classifier("classifier_predict", u, W, mu)
    xp = _namespace(u)
    return xp.argmax(_logits(u, W, mu, xp), axis=1)


def classifier_probabilities(u: Any, W: Any, mu: Any) -> Any:
    """Softmax rows of :func:`classifier_logits`, shape (batch, nc), on u's device.

    Each row's maximum is subtracted before ``exp``; every row is that sample's own
    arithmetic, so a batch's rows equal the samples' rows computed alone.

    Examples
    --------
    >>> import numpy as np
    >>> classifier_probabilities(np.zeros((1, 2)), np.eye(2), np.zeros(2)).tolist()
    [[0.5, 0.5]]
    """
    _check_classifier("classifier_probabilities", u, W, mu)
    xp = _namespace(u)
    z = _logits(u, W, mu, xp)
    e = xp.exp(z - xp.max(z, axis=1, keepdims=True))
    return e / xp.sum(e, axis=1, keepdims=True)


def classifier_sums(u: Any, c: Any, W: Any, mu: Any, loss: bool = True) -> Tuple[Any, Any]:
    """(cross entropy summed over the batch, samples classified correctly) from ONE
    logits computation, both as numbers on u's device (0-D arrays; nothing is copied to
    the host): what batched evaluation adds up batch by batch.

    The sum is :func:`classifier_loss` times the batch size (the same operations before
    its division); the count is :func:`accuracy`'s numerator. ``loss`` False skips the
    log-softmax (None in its place) where only the count is wanted.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, 2.0], [3.0, 0.0]])
    >>> total, correct = classifier_sums(u, np.array([[0.0, 1.0], [0.0, 1.0]]), np.eye(2),
    ...                                  np.zeros(2))
    >>> round(float(total), 6), int(correct)
    (3.361849, 1)
    """
    _check_classifier("classifier_sums", u, W, mu, c)
    xp = _namespace(u)
    z = _logits(u, W, mu, xp)
    correct = xp.count_nonzero(xp.argmax(z, axis=1) == xp.argmax(c, axis=1))
    return (-xp.sum(c * _log_softmax(z, xp)) if loss else None), correct


def accuracy(u: Any, c: Any, W: Any, mu: Any) -> float:
    """Fraction of examples whose predicted class is the argmax of their row of c.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, 2.0], [3.0, 0.0]])
    >>> accuracy(u, np.array([[0.0, 1.0], [0.0, 1.0]]), np.eye(2), np.zeros(2))
    0.5
    """
    _check_classifier("accuracy", u, W, mu, c)
    xp = _namespace(u)
    hits = xp.argmax(_logits(u, W, mu, xp), axis=1) == xp.argmax(c, axis=1)
    return int(xp.count_nonzero(hits)) / _shape(u)[0]
